"""The same training in one process, replaying the server's log of steps."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from .._threads import threads
from .config import DEFAULT_WORLD_SIZE, Config, trainer_names
from .data import eval_batches, get_accuracy, trainer_batches
from .model import build_net, dropout_seed


@dataclass
class BaselineStep:
    """One step of the baseline: the gradient of ``trainer``'s ``batch`` at
    parameter version ``version``, and its loss."""

    index: int
    trainer: str
    batch: int
    version: int
    grads: dict[str, torch.Tensor]
    loss: float


@dataclass
class BaselineRun:
    """The baseline's steps, final parameters and held-out accuracy."""

    steps: list[BaselineStep] = field(default_factory=list)
    final: dict[str, torch.Tensor] = field(default_factory=dict)
    accuracy: float = 0.0


def default_order(config: Config, world_size: int) -> list[tuple[str, int]]:
    """Round-robin over the trainers, batch by batch: a lockstep schedule."""
    return [(t, i) for i in range(config.batches) for t in trainer_names(world_size)]


def baseline(
    config: Config,
    world_size: int = DEFAULT_WORLD_SIZE,
    seed: int = 0,
    order: list[tuple[str, int]] | None = None,
    applied: list[dict[str, torch.Tensor]] | None = None,
) -> BaselineRun:
    """The same training in one process, with plain autograd and optim.SGD.

    Steps run in ``order`` (``(trainer, batch)`` pairs; default: round-robin).
    Step k's gradient is taken at parameter version k, i.e. after the k
    earlier updates. With ``applied`` (the distributed run's recorded
    gradients), version k is rebuilt by replaying those recorded updates from
    the seeded initial weights -- so each distributed gradient is checked on
    its own, without drift from earlier steps -- otherwise the baseline's own
    gradients are applied.
    """
    with threads(1):  # as in the ranks
        return _baseline(config, world_size, seed, order, applied)


def _baseline(
    config: Config,
    world_size: int,
    seed: int,
    order: list[tuple[str, int]] | None,
    applied: list[dict[str, torch.Tensor]] | None,
) -> BaselineRun:
    order = default_order(config, world_size) if order is None else list(order)
    model = build_net(config, seed)
    params = dict(model.named_parameters())
    shards: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {}
    run = BaselineRun()
    for k, (trainer, batch) in enumerate(order):
        if trainer not in shards:
            shards[trainer] = trainer_batches(config, seed, trainer)
        data, target = shards[trainer][batch]
        model.zero_grad(set_to_none=True)
        loss = F.nll_loss(model(data, dropout_seed(seed, trainer, batch)), target)
        loss.backward()
        grads = {n: p.grad.detach().clone() for n, p in params.items()}
        run.steps.append(BaselineStep(k, trainer, batch, k, grads, loss.item()))
        update = grads if applied is None else applied[k]
        # optim.SGD's update without momentum or weight decay, as the server's
        # DistributedOptimizer(optim.SGD, lr=...) applies it: p -= lr * g
        # (written out: constructing optim.SGD costs seconds of imports).
        with torch.no_grad():
            for n, p in params.items():
                if n in update:
                    p.add_(update[n].to(p.dtype), alpha=-config.lr)
    run.final = {n: p.detach().clone() for n, p in params.items()}
    run.accuracy = get_accuracy(eval_batches(config, seed), model)
    return run


