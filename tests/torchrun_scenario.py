"""A tiny scenario for the torchrun and registry tests: ``SCENARIO`` has
the shape :class:`rpc_harness.scenario.Scenario` asks for, as anyone's would.

Rank 0 (``owner``) holds a weight matrix; every other rank (``worker{k}``)
runs a few steps of real RPC and distributed autograd against it: it sends
its input to the owner, which multiplies it by the weight, and backpropagates
through the RPC with ``dist_autograd.backward``. The gradients of the weight
(fetched from the owner) and of the input (local) come back as records, and
:func:`baseline` computes the same numbers with plain autograd in one process.
The weight never changes, so the gradients do not depend on how the workers'
RPCs interleave.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

import rpc_harness
from rpc_harness.gradcheck import compare as compare_tensors
from rpc_harness.scenario import Comparison, Outcome, Verdict, require_world_size

NAME = "tiny"
FAILPOINTS = ("tiny.step",)
MIN_WORLD_SIZE = 2
OWNER = "owner"


@dataclass(frozen=True)
class Config:
    steps: int = 3
    dim: int = 4
    scale: float = 1.0  # multiplies the loss: a knob for the --set tests
    rtol: float = 1e-5
    atol: float = 1e-6

    def __post_init__(self) -> None:
        if self.steps < 1 or self.dim < 1:
            raise ValueError(f"steps and dim must be >= 1, got {self.steps} and {self.dim}")


def names(world_size: int) -> tuple[str, ...]:
    """``owner``, then ``worker1`` .. ``worker{world_size-1}``."""
    require_world_size(NAME, world_size, MIN_WORLD_SIZE, "an owner and a worker")
    return (OWNER, *(f"worker{k}" for k in range(1, world_size)))


def initial_weight(seed: int, dim: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(rpc_harness.derive_seed(seed, "weight"))
    return torch.randn(dim, dim, generator=gen)


def inputs(seed: int, worker: str, step: int, dim: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(rpc_harness.derive_seed(seed, "input", worker, step))
    return torch.randn(2, dim, generator=gen)


_weight: torch.Tensor | None = None
_lock = threading.Lock()


def _owner_weight(dim: int) -> torch.Tensor:
    # Created on first use, from the world seed: a worker's first RPC may
    # arrive before the owner's entry has even started.
    global _weight
    with _lock:
        if _weight is None:
            ctx = rpc_harness.current_context()
            _weight = initial_weight(ctx.world_seed, dim).requires_grad_()
        return _weight


def _forward(x: torch.Tensor, dim: int) -> torch.Tensor:
    rpc_harness.failpoint("tiny.step")
    return torch.tanh(x @ _owner_weight(dim))


def _weight_grad(context_id: int, dim: int) -> torch.Tensor:
    return dist_autograd.get_gradients(context_id)[_owner_weight(dim)]


def entry(ctx, config: Config) -> dict:
    """Owner: report its seeded RNG draw. Workers: train-free steps of
    forward over RPC, distributed backward, gradients back."""
    record = {"name": ctx.name, "seed": ctx.seed, "rand": torch.rand(3)}
    if ctx.name == OWNER:
        return record
    steps = []
    for step in range(config.steps):
        x = inputs(ctx.world_seed, ctx.name, step, config.dim).requires_grad_()
        with dist_autograd.context() as cid:
            y = rpc.rpc_sync(OWNER, _forward, args=(x, config.dim))
            loss = config.scale * (y**2).sum()
            dist_autograd.backward(cid, [loss])
            grads = {
                "weight": rpc.rpc_sync(OWNER, _weight_grad, args=(cid, config.dim)),
                "input": dist_autograd.get_gradients(cid)[x],
            }
        steps.append({"loss": loss.item(), "grads": grads})
    record["steps"] = steps
    return record


def baseline(config: Config, world_size: int, seed: int) -> dict[str, list[dict]]:
    """Every worker's steps, computed in one process with plain autograd."""
    out = {}
    for worker in names(world_size)[1:]:
        steps = []
        for step in range(config.steps):
            weight = initial_weight(seed, config.dim).requires_grad_()
            x = inputs(seed, worker, step, config.dim).requires_grad_()
            loss = config.scale * (torch.tanh(x @ weight) ** 2).sum()
            loss.backward()
            steps.append({"loss": loss.item(), "grads": {"weight": weight.grad, "input": x.grad}})
        out[worker] = steps
    return out


class Tiny:
    """The scenario: workers' gradients against :func:`baseline`."""

    name = NAME
    summary = "an owner's weight, workers' distributed autograd steps through it"
    min_world_size = MIN_WORLD_SIZE
    default_world_size = 2
    failpoints = FAILPOINTS
    steps_field = "steps"
    min_steps = 1
    metric_name = "loss"
    config_type = Config
    entry = staticmethod(entry)
    names = staticmethod(names)

    @staticmethod
    def validate(config, world_size, seed):
        """Any config runs at any size."""

    @staticmethod
    def fault_checks(world_size, config):
        return {}

    @staticmethod
    def records(world):
        found = {r.name: r.value["steps"] for r in world.ranks if r.name != OWNER and isinstance(r.value, dict)}
        return found if world.ok and found else None

    @staticmethod
    def contract(world, records, config):
        return Verdict(world.ok, "every rank finished" if world.ok else world.report().splitlines()[0])

    @staticmethod
    def baseline(config, world_size, seed, records):
        return baseline(config, world_size, seed)

    @staticmethod
    def compare(records, expected, config, seed):
        result = Comparison()
        for worker, steps in records.items():
            for k, (a, e) in enumerate(zip(steps, expected[worker], strict=True)):
                diff, found = compare_tensors(a["grads"], e["grads"], scenario=NAME, step=k, rank=worker,
                                              seed=seed, rtol=config.rtol, atol=config.atol)
                result.max_diff = max(result.max_diff, diff)
                result.checked += len(set(a["grads"]) & set(e["grads"]))
                result.expected += len(e["grads"])
                result.mismatches += found
        return result

    @staticmethod
    def outcome(records, expected, config):
        losses = [step["loss"] for steps in records.values() for step in steps]
        return Outcome(True, "no outcome to judge", sum(losses) / len(losses), config.steps, losses,
                       [step["loss"] for steps in expected.values() for step in steps])


SCENARIO = Tiny()


# -- a collective world: an all_reduce loop, and one RPC where the world has an agent --------


def collective_entry(ctx, config: Config) -> dict:
    """Every rank all-reduces its seeded input, ``steps`` times, over the
    world's default group; where the world has an RPC agent, it also asks
    the owner for its rank's seed over RPC."""
    import torch.distributed as dist

    sums = []
    for step in range(config.steps):
        x = inputs(ctx.world_seed, ctx.name, step, config.dim)
        dist.all_reduce(x)
        sums.append(x)
    record = {"name": ctx.name, "sums": sums, "owner_seed": None}
    if rpc.is_available() and rpc.api._is_current_rpc_agent_set():
        record["owner_seed"] = rpc.rpc_sync(OWNER, _owner_seed)
    return record


def _owner_seed() -> int:
    return rpc_harness.current_context().seed


def collective_sums(config: Config, world_size: int, seed: int) -> list[torch.Tensor]:
    """What every rank's all-reduces give, computed in one process."""
    return [sum(inputs(seed, name, step, config.dim) for name in names(world_size)) for step in range(config.steps)]


class TinyCollective(Tiny):
    """The same shape, for a world with a default process group (and an RPC agent unless ``--rpc no``)."""

    name = "tiny_collective"
    summary = "an all_reduce loop over the world's gloo group"
    failpoints = ()
    world = {"process_group": "gloo"}
    entry = staticmethod(collective_entry)


COLLECTIVE = TinyCollective()
