"""The parameter-server scenario of PyTorch's RPC tutorials, run in full and
checked gradient for gradient against a single-process baseline.

Shape of "Implementing a Parameter Server Using Distributed RPC Framework":
rank 0 is ``parameter_server`` and holds the MNIST ``Net`` inside a
``ParameterServer`` created once behind a global lock; ranks 1.. are
``trainer{k}``. Each trainer builds a ``TrainerNet`` whose forward runs on the
server through the server's RRef, a ``DistributedOptimizer(optim.SGD, ...)``
over the server's parameter RRefs, and trains with ``dist_autograd.context``,
``dist_autograd.backward``, ``get_dist_gradients(cid)`` and ``opt.step(cid)``;
at the end each trainer measures accuracy on a held-out set (calling
``net(data)``, not the tutorial's ``model(data, -1)``).

The tutorial races with more than one trainer (pytorch/examples#780): trainer
A's forward saves the parameters for its backward, trainer B's optimizer step
updates them in place in between, and A's backward fails with "modified by an
inplace operation" -- or, worse, silently applies a gradient taken at one
parameter version to another. Here each training step holds a *step lease* on
the server from before its forward until after its optimizer step (see
:class:`ParameterServer`), so the parameters cannot change between a step's
forward, backward and update, and the server logs every applied step (trainer,
batch, parameter version before it, the gradients applied, the loss). The
baseline replays that log in one process: it rebuilds the parameters of every
version from the seeded initial weights and the recorded updates, recomputes
each step's gradient on the same batch with the same dropout masks, and
compares every tensor; the replayed final parameters must equal the server's.

Data: real MNIST through torchvision when torchvision imports *and*
``Config.mnist_root`` points at local files (nothing is downloaded);
otherwise seeded, learnable MNIST-shaped digits (28x28, 10 classes: smoothed
random class prototypes, shifted, scaled and noised per sample). Every random
stream -- weights, data shards, dropout masks -- derives from the world seed.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
import torch.nn as nn
import torch.nn.functional as F
from torch import optim
from torch.distributed.optim import DistributedOptimizer

import harness
from harness import FaultPlan
from harness.gradcheck import Mismatch, compare
from harness.result import KILLED, OK, RAISED, WorldResult
from scenarios._common import ScenarioReport

NAME = "ps"
PS_NAME = "parameter_server"
# Every failpoint this module reaches: trainer.step (a trainer, before each
# batch), ps.forward (the server, in every forward), optimizer.step (a
# trainer, holding the step lease, right before opt.step(cid)).
FAILPOINTS = ("trainer.step", "ps.forward", "optimizer.step")
MIN_WORLD_SIZE = 2
DEFAULT_WORLD_SIZE = 3
STEPS_FIELD = "batches"  # the training budget the CLI's --steps sets

_POLL = 0.1  # seconds between the server's checks on unfinished trainers
_PING_TIMEOUT = 5.0  # a live but busy trainer answers long before this
# A dead parameter server must be named by the trainers this fast (seconds
# from the kill to the first trainer's error) for the contract to hold; a
# dead peer's pipe reports EOF within milliseconds, so this is pure margin.
_ATTRIBUTION_BOUND = 10.0


@dataclass(frozen=True)
class Config:
    """One parameter-server run. Defaults are small for CI (a world ~1-2 s);
    :data:`TUTORIAL` has the tutorial's widths."""

    batches: int = 24  # training batches per trainer
    batch_size: int = 32
    lr: float = 0.1  # the tutorial uses 0.03 on real MNIST
    conv1: int = 8  # tutorial: 32
    conv2: int = 16  # tutorial: 64
    hidden: int = 64  # tutorial: 128
    # The tutorial's dropout rates; masks are drawn from a generator seeded per
    # (trainer, batch), so the baseline reproduces them exactly. 0 disables.
    dropout1: float = 0.25
    dropout2: float = 0.5
    test_size: int = 256  # held-out samples for the accuracy check
    noise: float = 0.6  # synthetic digits: per-pixel noise (prototypes have std 1)
    mnist_root: str | None = None  # local MNIST for torchvision; None: synthetic digits
    # Outcome check: held-out accuracy above this (chance: 0.1). Measured with
    # these defaults on seeds 0..39: one trainer alone (the weakest case: 24
    # steps) reached 0.81 at worst, 0.94 on average; more trainers do better.
    min_accuracy: float = 0.5
    rtol: float = 1e-5
    atol: float = 1e-6
    # torch's intra-op threads per rank (0: torch's default). Several ranks
    # share a few cores, and each op here is small: extra threads only contend
    # (2 threads ran a step ~7x slower than 1 on a loaded 2-core machine).
    intra_op_threads: int = 1
    wait_timeout: float = 120.0  # the server waits at most this for trainers to finish
    # Test hook: after committing the applied step with this index, the server
    # nudges every parameter by perturb_scale * lr * grad without recording it --
    # what an unrecorded concurrent update does. The check must catch it.
    perturb_step: int | None = None
    perturb_scale: float = 0.5


TUTORIAL = Config(lr=0.03, conv1=32, conv2=64, hidden=128, batch_size=32)


def names(world_size: int) -> tuple[str, ...]:
    """Worker names: ``parameter_server``, then ``trainer1`` .. ``trainer{n-1}``."""
    if world_size < MIN_WORLD_SIZE:
        raise ValueError(
            f"ps needs world_size >= {MIN_WORLD_SIZE} (a server and a trainer), got {world_size}"
        )
    return (PS_NAME, *trainer_names(world_size))


def trainer_names(world_size: int) -> tuple[str, ...]:
    """The trainers of a world of ``world_size`` ranks."""
    return tuple(f"trainer{k}" for k in range(1, world_size))


# --------------------------------------------------------------------------- model
class Net(nn.Module):
    """The tutorial's MNIST network (from pytorch/examples), widths from Config.

    conv1 -> relu -> conv2 -> max_pool2d(2) -> dropout1 (channel-wise, as the
    tutorial's Dropout2d) -> flatten -> fc1 -> relu -> dropout2 -> fc2 ->
    log_softmax. Dropout draws its masks from a generator seeded by
    ``dropout_seed`` instead of the global RNG: the server runs several
    trainers' forwards on its RPC threads, and the baseline must redraw the
    same masks. ``dropout_seed=None`` means evaluation: no dropout.
    """

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.p1 = config.dropout1
        self.p2 = config.dropout2
        self.conv1 = nn.Conv2d(1, config.conv1, 3, 1)
        self.conv2 = nn.Conv2d(config.conv1, config.conv2, 3, 1)
        self.fc1 = nn.Linear(config.conv2 * 12 * 12, config.hidden)
        self.fc2 = nn.Linear(config.hidden, 10)

    def forward(self, x: torch.Tensor, dropout_seed: int | None = None) -> torch.Tensor:
        gen = None
        if dropout_seed is not None:
            gen = torch.Generator().manual_seed(dropout_seed)
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.max_pool2d(x, 2)
        x = _dropout(x, self.p1, gen, channel_wise=True)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = _dropout(x, self.p2, gen, channel_wise=False)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def _dropout(
    x: torch.Tensor, p: float, gen: torch.Generator | None, *, channel_wise: bool
) -> torch.Tensor:
    if gen is None or p <= 0.0:
        return x
    shape = (x.shape[0], x.shape[1], 1, 1) if channel_wise else x.shape
    keep = (torch.rand(shape, generator=gen) >= p).to(x.dtype)
    return x * keep / (1.0 - p)


def build_net(config: Config, world_seed: int) -> Net:
    """The initial model, seeded from the world seed (same on server and baseline)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(harness.derive_seed(world_seed, NAME, "init"))
        return Net(config)


def dropout_seed(world_seed: int, trainer: str, batch: int) -> int:
    """The seed of the dropout masks of ``trainer``'s batch ``batch``."""
    return harness.derive_seed(world_seed, NAME, "dropout", trainer, batch) % 2**62


# ---------------------------------------------------------------------------- data
def _torchvision_datasets() -> tuple[Any, str]:
    """torchvision.datasets, or None and why not. The CPU torch wheel here
    makes ``import torchvision`` (a CUDA build) raise all sorts of errors."""
    try:
        from torchvision import datasets
    except Exception as error:  # noqa: BLE001 - any failure means "not available"
        return None, f"torchvision unavailable ({type(error).__name__}: {str(error)[:120]})"
    return datasets, "torchvision"


def _gaussian_kernel(size: int, sigma: float) -> torch.Tensor:
    axis = torch.arange(size, dtype=torch.float32) - (size - 1) / 2
    g = torch.exp(-(axis**2) / (2 * sigma**2))
    k = torch.outer(g, g)
    return (k / k.sum()).view(1, 1, size, size)


def digit_prototypes(world_seed: int) -> torch.Tensor:
    """Ten 28x28 class prototypes: seeded noise, smoothed, thresholded into
    sparse blobby strokes (so that classes differ more than their shared
    background), confined to the central 20x20 box like MNIST digits,
    normalised to zero mean and unit std."""
    gen = torch.Generator().manual_seed(harness.derive_seed(world_seed, NAME, "prototypes") % 2**62)
    raw = torch.rand(10, 1, 28, 28, generator=gen)
    smooth = F.conv2d(raw, _gaussian_kernel(9, 1.5), padding=4)
    smooth = (smooth - smooth.mean(dim=(2, 3), keepdim=True)) / smooth.std(dim=(2, 3), keepdim=True)
    ink = (smooth - 0.5).clamp(min=0.0)
    window = torch.zeros(1, 1, 28, 28)
    window[..., 4:24, 4:24] = 1.0
    protos = (ink * window).squeeze(1)
    return (protos - protos.mean(dim=(1, 2), keepdim=True)) / protos.std(dim=(1, 2), keepdim=True)


def synthetic_digits(
    n: int, world_seed: int, label: str, noise: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` seeded digits ``(x [n,1,28,28], y [n])``: each a class prototype
    rolled by up to 2 pixels each way, scaled by 0.7..1.3, plus pixel noise.
    ``label`` names the stream (a trainer's shard, the held-out set)."""
    protos = digit_prototypes(world_seed)
    gen = torch.Generator().manual_seed(
        harness.derive_seed(world_seed, NAME, "digits", label) % 2**62
    )
    y = torch.randint(0, 10, (n,), generator=gen)
    shifts = torch.randint(-2, 3, (n, 2), generator=gen).tolist()
    scale = 0.7 + 0.6 * torch.rand(n, 1, 1, generator=gen)
    pixels = noise * torch.randn(n, 28, 28, generator=gen)
    x = torch.stack(
        [
            torch.roll(protos[c], shifts=(dy, dx), dims=(0, 1))
            for c, (dy, dx) in zip(y.tolist(), shifts, strict=True)
        ]
    )
    return (x * scale + pixels).unsqueeze(1), y


def _mnist(
    root: str, train: bool, n: int, world_seed: int, label: str, datasets: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    # No download and no transform objects: read the tensors and normalise
    # with MNIST's usual mean/std, so this needs torchvision.datasets only.
    ds = datasets.MNIST(root, train=train, download=False)
    data = ds.data if isinstance(ds.data, torch.Tensor) else torch.as_tensor(ds.data)
    targets = ds.targets if isinstance(ds.targets, torch.Tensor) else torch.as_tensor(ds.targets)
    gen = torch.Generator().manual_seed(
        harness.derive_seed(world_seed, NAME, "mnist", label) % 2**62
    )
    index = torch.randperm(len(data), generator=gen)[:n]
    x = (data[index].float() / 255.0 - 0.1307) / 0.3081
    return x.unsqueeze(1), targets[index].long()


def data_source(config: Config) -> str:
    """Where this config's data comes from: ``mnist:<root>`` or ``synthetic (...)``."""
    if config.mnist_root is None:
        return "synthetic"
    datasets, why = _torchvision_datasets()
    if datasets is None:
        return f"synthetic ({why}; mnist_root={config.mnist_root!r} ignored)"
    return f"mnist:{config.mnist_root}"


def _samples(
    config: Config, world_seed: int, label: str, n: int, train: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    if config.mnist_root is not None:
        datasets, _ = _torchvision_datasets()
        if datasets is not None:
            return _mnist(config.mnist_root, train, n, world_seed, label, datasets)
    return synthetic_digits(n, world_seed, label, config.noise)


def trainer_batches(
    config: Config, world_seed: int, trainer: str
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``trainer``'s own shard, as ``config.batches`` batches (from the world seed)."""
    x, y = _samples(
        config, world_seed, f"train:{trainer}", config.batches * config.batch_size, train=True
    )
    return list(zip(x.split(config.batch_size), y.split(config.batch_size), strict=True))


def held_out_set(config: Config, world_seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The held-out set the accuracy is measured on."""
    return _samples(config, world_seed, "test", config.test_size, train=False)


EVAL_BATCH = 128


def eval_batches(config: Config, world_seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The held-out set in the batches every evaluation uses (trainers through
    RPC, the server locally, the baseline), so that all three compute alike."""
    x, y = held_out_set(config, world_seed)
    return list(zip(x.split(EVAL_BATCH), y.split(EVAL_BATCH), strict=True))


def get_accuracy(test_loader: list[tuple[torch.Tensor, torch.Tensor]], model: Any) -> float:
    """Fraction of the samples that ``model`` (a Net or a TrainerNet)
    classifies right, without dropout: the tutorial's ``get_accuracy``,
    calling ``model(data)`` -- not its ``model(data, -1)``."""
    correct = total = 0
    with torch.no_grad():
        for data, target in test_loader:
            pred = model(data).argmax(dim=1)
            correct += int((pred == target).sum())
            total += len(target)
    return correct / total


# ---------------------------------------------------------------- RPC helpers
def call_method(method: Any, rref: rpc.RRef, *args: Any, **kwargs: Any) -> Any:
    """Run ``method`` on the object ``rref`` holds, on its owner (tutorial helper)."""
    return method(rref.local_value(), *args, **kwargs)


@rpc.functions.async_execution
def call_method_async(method: Any, rref: rpc.RRef, *args: Any, **kwargs: Any) -> Any:
    """Like :func:`call_method` for methods that return a Future: the server
    answers when the future completes, holding none of its RPC threads meanwhile."""
    return method(rref.local_value(), *args, **kwargs)


def remote_method(method: Any, rref: rpc.RRef, *args: Any, **kwargs: Any) -> Any:
    """``method(obj, *args)`` on the owner of ``rref`` (tutorial helper)."""
    return rpc.rpc_sync(rref.owner(), call_method, args=[method, rref, *args], kwargs=kwargs)


def remote_method_async(method: Any, rref: rpc.RRef, *args: Any, **kwargs: Any) -> Any:
    """:func:`remote_method` for a method that returns a Future."""
    return rpc.rpc_sync(rref.owner(), call_method_async, args=[method, rref, *args], kwargs=kwargs)


def _ping() -> bool:
    return True


def _is_dead(name: str) -> bool:
    """Whether worker ``name`` is gone: a dead peer's pipe fails at once with
    EOF or a refused connection; a timeout means alive but busy."""
    try:
        rpc.rpc_sync(name, _ping, timeout=_PING_TIMEOUT)
    except Exception as error:  # noqa: BLE001 - any RPC failure but a timeout
        text = str(error).lower()
        return not ("timeout" in text or "timed out" in text)
    return False


def _caller_context_id() -> int | None:
    """The dist-autograd context of the RPC being served, if it carries one."""
    try:
        return dist_autograd._current_context()._context_id()
    except RuntimeError:
        return None


# ----------------------------------------------------------- parameter server
@dataclass
class _Lease:
    trainer: str
    batch: int
    cid: int
    future: Any
    version: int = -1
    param_versions: tuple[int, ...] = ()
    grads: dict[str, torch.Tensor] | None = None


class ParameterServer(nn.Module):
    """Holds the model; serves forwards, gradients and the step lease.

    Why the lease removes the race of pytorch/examples#780: a trainer calls
    :meth:`begin_step` before its forward and :meth:`end_step` after its
    ``opt.step(cid)``; the server grants one lease at a time (FIFO), and a
    training forward is refused unless its dist-autograd context holds the
    lease. So between a step's forward and its update no other step can update
    the parameters in place: the tensors its backward saved are untouched, and
    the gradient it applies is the gradient at exactly the version it began
    at. Trainers stay concurrent everywhere else (data, loss, evaluation,
    queuing); a waiting trainer's ``begin_step`` is an async RPC, so waiting
    holds no server thread, whatever the world size.

    A trainer that dies holding the lease cannot hold it forever: the
    server's main thread pings unfinished trainers and reaps dead ones
    (:meth:`reap`). Whether the dead holder's update reached the parameters
    is read from their version counters (in-place updates bump them), and the
    step is committed (its gradients were recorded by
    :meth:`get_dist_gradients`) or dropped. An update still in flight when
    its sender is reaped would land unrecorded -- no failpoint stops a trainer
    there, and the final-parameter check would flag it.
    """

    def __init__(self, config: Config, world_seed: int, trainers: tuple[str, ...]) -> None:
        super().__init__()
        self.model = build_net(config, world_seed)
        self.config = config
        self.world_seed = world_seed
        self.trainers = trainers
        self._by_param = {p: n for n, p in self.model.named_parameters()}
        self._cv = threading.Condition()
        self._holder: _Lease | None = None
        self._queue: deque[_Lease] = deque()
        self._version = 0
        self._log: list[dict[str, Any]] = []
        self._dropped: list[dict[str, Any]] = []
        self._done: set[str] = set()
        self._dead: set[str] = set()
        self._barrier: list[Any] = []

    # -- the tutorial's methods --------------------------------------------
    def forward(self, inp: torch.Tensor, dropout_seed: int | None = None) -> torch.Tensor:
        """The model's forward. Inside a dist-autograd context (a training step)
        it must hold the step lease; outside one it is an evaluation."""
        harness.failpoint("ps.forward")
        cid = _caller_context_id()
        if cid is None:
            with torch.no_grad():
                return self.model(inp)
        with self._cv:
            holder = self._holder
        if holder is None or holder.cid != cid:
            raise RuntimeError(
                f"{PS_NAME}: training forward in dist-autograd context {cid} without the step lease "
                f"(held by {holder.trainer + ' batch ' + str(holder.batch) if holder else 'nobody'})"
            )
        return self.model(inp, dropout_seed)

    def get_dist_gradients(self, cid: int) -> dict[str, torch.Tensor]:
        """This context's gradients by parameter name; recorded for the lease."""
        grads = dist_autograd.get_gradients(cid)
        named = {
            self._by_param[p]: g.detach().clone() for p, g in grads.items() if p in self._by_param
        }
        with self._cv:
            if self._holder is None or self._holder.cid != cid:
                raise RuntimeError(f"{PS_NAME}: get_dist_gradients({cid}) outside the step lease")
            self._holder.grads = named
        return named

    def get_param_rrefs(self) -> list[rpc.RRef]:
        """RRefs of the model's parameters, for DistributedOptimizer."""
        return [rpc.RRef(param) for param in self.model.parameters()]

    # -- the step lease -----------------------------------------------------
    def begin_step(self, trainer: str, batch: int, cid: int) -> Any:
        """A Future of the parameter version the step starts at, completed when
        ``trainer``'s batch ``batch`` (context ``cid``) holds the lease."""
        future: Any = torch.futures.Future()
        lease = _Lease(trainer, batch, cid, future)
        with self._cv:
            if trainer in self._dead:
                raise RuntimeError(f"{PS_NAME}: {trainer} was reaped as dead")
            self._queue.append(lease)
            granted = self._grant_next()
        self._complete(granted)
        return future

    def end_step(self, trainer: str, batch: int, cid: int, loss: float | None) -> dict[str, Any]:
        """Release ``trainer``'s lease: commit the step if its update was
        applied, drop it if not. ``loss=None`` means the trainer gave up."""
        with self._cv:
            holder = self._holder
            if holder is None or holder.cid != cid:
                raise RuntimeError(
                    f"{PS_NAME}: end_step from {trainer} batch {batch} without the step lease"
                )
            record = self._release(holder, loss)
            granted = self._grant_next()
        self._complete(granted)
        return {"applied": record is not None, "version": holder.version}

    def _grant_next(self) -> list[tuple[Any, int]]:
        # Called with the lock held; returns the futures to complete after it.
        if self._holder is not None or not self._queue:
            return []
        lease = self._queue.popleft()
        lease.version = self._version
        lease.param_versions = tuple(p._version for p in self.model.parameters())
        self._holder = lease
        return [(lease.future, lease.version)]

    @staticmethod
    def _complete(granted: list[tuple[Any, Any]]) -> None:
        for future, value in granted:
            future.set_result(value)

    def _release(self, lease: _Lease, loss: float | None) -> dict[str, Any] | None:
        # Called with the lock held. The optimizer updates in place, which
        # bumps each parameter's version counter: that, not the trainer's
        # word, says whether this step's update reached the parameters.
        self._holder = None
        applied = tuple(p._version for p in self.model.parameters()) != lease.param_versions
        entry = {
            "trainer": lease.trainer,
            "batch": lease.batch,
            "version": lease.version,
            "loss": loss,
        }
        if not applied:
            self._dropped.append(entry)
            return None
        entry.update(index=len(self._log), grads=lease.grads or {})
        self._log.append(entry)
        self._version += 1
        if self.config.perturb_step == entry["index"] and lease.grads:
            self._perturb(lease.grads)
        self._cv.notify_all()
        return entry

    def _perturb(self, grads: dict[str, torch.Tensor]) -> None:
        alpha = -self.config.lr * self.config.perturb_scale
        with torch.no_grad():
            for name, param in self.model.named_parameters():
                param.add_(grads[name], alpha=alpha)

    # -- trainers finishing, dying ------------------------------------------
    def trainer_done(self, trainer: str) -> Any:
        """Mark ``trainer`` done; a Future completed once every trainer is done
        or dead, so that accuracy is measured on the final parameters."""
        future: Any = torch.futures.Future()
        with self._cv:
            self._done.add(trainer)
            self._barrier.append(future)
            ready = self._finished_locked()
            self._cv.notify_all()
        if ready:
            self._open_barrier()
        return future

    def _finished_locked(self) -> bool:
        return all(t in self._done or t in self._dead for t in self.trainers)

    def _open_barrier(self) -> None:
        with self._cv:
            waiting, self._barrier = self._barrier, []
        self._complete([(f, None) for f in waiting])

    def reap(self, trainer: str) -> None:
        """``trainer`` is dead: free its lease and queue slots, and let the
        others stop waiting for it."""
        with self._cv:
            self._dead.add(trainer)
            holder = self._holder
            if holder is not None and holder.trainer == trainer:
                self._release(holder, None)
            self._queue = deque(lease for lease in self._queue if lease.trainer != trainer)
            granted = self._grant_next()
            ready = self._finished_locked()
            self._cv.notify_all()
        self._complete(granted)
        if ready:
            self._open_barrier()

    def supervise(self, timeout: float) -> None:
        """Run on the server's main thread until every trainer is done or
        dead; reaps trainers that died. Raises after ``timeout`` seconds."""
        give_up = time.monotonic() + timeout
        while True:
            with self._cv:
                if self._finished_locked():
                    break
                self._cv.wait(_POLL)
                pending = [t for t in self.trainers if t not in self._done and t not in self._dead]
            for trainer in pending:
                if _is_dead(trainer):
                    ctx = harness.current_context()
                    if ctx is not None:
                        ctx.event("ps.reaped", trainer=trainer)
                    self.reap(trainer)
            if time.monotonic() > give_up:
                raise RuntimeError(
                    f"{PS_NAME}: trainers {pending} neither finished nor died within {timeout:g}s"
                )
        self._open_barrier()

    def report(self) -> dict[str, Any]:
        """What the server returns: the applied-step log, the final parameters,
        the held-out accuracy, who finished and who died."""
        batches = eval_batches(self.config, self.world_seed)
        with self._cv:
            return {
                "steps": list(self._log),
                "dropped": list(self._dropped),
                "final": {n: p.detach().clone() for n, p in self.model.named_parameters()},
                "accuracy": get_accuracy(batches, self.model),
                "done": sorted(self._done),
                "dead": sorted(self._dead),
            }


# The global parameter server instance, created once behind a lock (tutorial).
param_server: ParameterServer | None = None
global_lock = threading.Lock()


def get_parameter_server(
    config: Config, world_seed: int, trainers: tuple[str, ...]
) -> ParameterServer:
    """The one ParameterServer of this process, created on first call."""
    global param_server
    with global_lock:
        if param_server is None:
            param_server = ParameterServer(config, world_seed, trainers)
        return param_server


# ------------------------------------------------------------------ trainers
class TrainerNet(nn.Module):
    """A trainer's model: no parameters of its own, forward runs on the server."""

    def __init__(self, config: Config, world_seed: int, trainers: tuple[str, ...]) -> None:
        super().__init__()
        self.param_server_rref = rpc.remote(
            PS_NAME, get_parameter_server, args=(config, world_seed, trainers)
        )

    def get_global_param_rrefs(self) -> list[rpc.RRef]:
        """RRefs of the server's parameters (for DistributedOptimizer)."""
        return remote_method(ParameterServer.get_param_rrefs, self.param_server_rref)

    def forward(self, x: torch.Tensor, dropout_seed: int | None = None) -> torch.Tensor:
        """The server's forward of ``x``, through its RRef."""
        return remote_method(ParameterServer.forward, self.param_server_rref, x, dropout_seed)


def _train(ctx: harness.RankContext, config: Config, where: dict[str, Any]) -> dict[str, Any]:
    trainers = trainer_names(ctx.world_size)
    net = TrainerNet(config, ctx.world_seed, trainers)
    where["phase"] = "building the DistributedOptimizer"
    param_rrefs = net.get_global_param_rrefs()
    opt = DistributedOptimizer(optim.SGD, param_rrefs, lr=config.lr)
    rref = net.param_server_rref
    ctx.event("ps.optimizer_ready")
    losses = []
    ctx.progress(0, config.batches, "batches")
    for i, (data, target) in enumerate(trainer_batches(config, ctx.world_seed, ctx.name)):
        where.update(batch=i, phase="starting the step")
        ctx.failpoint("trainer.step")
        with dist_autograd.context() as cid:
            where["phase"] = "waiting for the step lease"
            remote_method_async(ParameterServer.begin_step, rref, ctx.name, i, cid)
            try:
                where["phase"] = "forward"
                model_output = net(data, dropout_seed(ctx.world_seed, ctx.name, i))
                loss = F.nll_loss(model_output, target)
                where["phase"] = "backward"
                dist_autograd.backward(cid, [loss])
                grads = remote_method(ParameterServer.get_dist_gradients, rref, cid)
                if len(grads) != len(param_rrefs):
                    raise RuntimeError(
                        f"{ctx.name}: batch {i} got gradients for only {sorted(grads)}"
                    )
                where["phase"] = "optimizer step"
                ctx.failpoint("optimizer.step")
                opt.step(cid)
            except BaseException:
                # Give the lease back (dropping or committing, as the server
                # sees the parameters) so the others are not held up; a dead
                # server is not worth a second error.
                try:
                    remote_method(ParameterServer.end_step, rref, ctx.name, i, cid, None)
                except Exception:  # noqa: BLE001
                    pass
                raise
            where["phase"] = "releasing the step lease"
            remote_method(ParameterServer.end_step, rref, ctx.name, i, cid, loss.item())
            losses.append(loss.item())
            ctx.progress(len(losses), config.batches, "batches", loss=losses[-1])
    ctx.event("ps.training_done", batches=len(losses))
    where.update(batch=None, phase="waiting for the other trainers")
    remote_method_async(ParameterServer.trainer_done, rref, ctx.name)
    where["phase"] = "measuring accuracy"
    acc = get_accuracy(eval_batches(config, ctx.world_seed), net)
    return {"trainer": ctx.name, "losses": losses, "accuracy": acc}


def _trainer(ctx: harness.RankContext, config: Config) -> dict[str, Any]:
    where: dict[str, Any] = {"batch": None, "phase": "connecting to the server"}
    try:
        return _train(ctx, config, where)
    except Exception as error:
        # Name the culprit when it is the server: a dead server surfaces as
        # "eof" or "connection refused" from deep inside tensorpipe.
        if not _is_dead(PS_NAME):
            raise
        at = f"batch {where['batch']}, " if where["batch"] is not None else ""
        raise RuntimeError(
            f"{ctx.name}: the parameter server '{PS_NAME}' (rank {ctx.rank_of(PS_NAME)}) is gone "
            f"({at}{where['phase']}): {type(error).__name__}: {str(error).strip()[:200]}"
        ) from error


def _server(ctx: harness.RankContext, config: Config) -> dict[str, Any]:
    ps = get_parameter_server(config, ctx.world_seed, trainer_names(ctx.world_size))
    ps.supervise(config.wait_timeout)
    return ps.report()


def entry(ctx: harness.RankContext, config: Config = Config()) -> dict[str, Any]:
    """The rank entry: rank 0 serves and returns the applied-step log; trainers
    train, then return their losses and held-out accuracy."""
    if config.intra_op_threads:
        torch.set_num_threads(config.intra_op_threads)
    if ctx.name == PS_NAME:
        return _server(ctx, config)
    return _trainer(ctx, config)


# ------------------------------------------------------------------ baseline
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
    config: Config = Config(),
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
    threads = torch.get_num_threads()
    if config.intra_op_threads:
        torch.set_num_threads(config.intra_op_threads)  # as in the ranks; restored below
    try:
        return _baseline(config, world_size, seed, order, applied)
    finally:
        torch.set_num_threads(threads)


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


# ----------------------------------------------------------------------- run
def _default_repro(
    config: Config, world_size: int, seed: int, faults: FaultPlan, fuzz: float
) -> str:
    text = f"scenarios.parameter_server.run(scenarios.parameter_server.{config!r}, world_size={world_size}, seed={seed}"
    if faults:
        text += f", faults={str(faults)!r}"
    if fuzz:
        text += f", fuzz={fuzz!r}"
    return text + ")"


def run(
    config: Config = Config(),
    world_size: int = DEFAULT_WORLD_SIZE,
    seed: int = 0,
    faults: Any = None,
    deadline: float = 60.0,
    fuzz: float = 0.0,
    repro: str = "",
    on_progress: Callable[[harness.Progress], None] | None = None,
) -> ScenarioReport:
    """Run the scenario in a real world, replay it in the baseline, compare.

    Never raises for a failed world: the report says what went wrong
    (``contract_ok``/``contract_note``), and :func:`check` raises on it.
    ``on_progress`` gets every trainer's batches as they are applied.
    """
    started = time.monotonic()
    all_names = names(world_size)
    plan = FaultPlan.coerce(faults, where="ps.run(faults=...)")
    repro = repro or _default_repro(config, world_size, seed, plan, fuzz)
    # torch.distributed.optim costs ~1.5 s of imports; in the forkserver it is
    # paid once, not once per rank (only if no world has started it yet).
    harness.preload(__name__)
    world = harness.run_world(
        entry,
        names=all_names,
        seed=seed,
        deadline=deadline,
        faults=plan,
        failpoints=FAILPOINTS,
        args=(config,),
        fuzz=fuzz,
        repro=repro,
        check=False,
        on_progress=on_progress,
    )
    report = ScenarioReport(
        scenario=NAME,
        world_size=world_size,
        seed=seed,
        steps=0,
        metric_name="accuracy",
        metric=0.0,
        world=world,
    )
    report.details["data"] = data_source(config)
    report.details["repro"] = repro
    if world[PS_NAME].status == KILLED:
        _server_killed_contract(report, world)
    else:
        _check_trained(report, world, config)
    report.duration = time.monotonic() - started
    return report


def _world_note(world: WorldResult) -> str:
    return world.report(output_lines=10)


def _server_killed_contract(report: ScenarioReport, world: WorldResult) -> None:
    """A killed server: trainers must fail fast, naming it."""
    report.outcome_note = "not checked: the parameter server was killed"
    kill_times = [e["t"] for e in world[PS_NAME].fired_faults() if e.get("fault_kind") == "kill"]
    trainers = [r for r in world.ranks if r.name != PS_NAME]
    raised = [r for r in trainers if r.status == RAISED]
    problems = []
    if world.timed_out:
        problems.append(f"the world hung until its deadline of {world.deadline:g}s")
    others = [r for r in trainers if r.failed and r.status != RAISED]
    problems += [r.describe() for r in others]
    if not raised:
        problems.append("no trainer reported the dead parameter server")
    unnamed = [r for r in raised if PS_NAME not in (r.error or "")]
    problems += [f"{r.label} raised without naming {PS_NAME!r}: {r.error}" for r in unnamed]
    raise_times = [e["t"] for r in raised for e in r.events if e.get("kind") == "raised"]
    if kill_times and raise_times:
        latency = min(raise_times) - min(kill_times)
        report.details["attribution_s"] = latency
        if latency > min(_ATTRIBUTION_BOUND, world.deadline / 4):
            problems.append(
                f"the first trainer named the dead server only {latency:.2f}s after the kill"
            )
    elif raised:
        problems.append("the kill or the trainers' errors left no timestamps")
    report.contract_ok = not problems
    report.contract_note = (
        "; ".join(problems) + "\n" + _world_note(world)
        if problems
        else f"server killed; {', '.join(r.name for r in raised)} failed fast naming {PS_NAME!r}"
    )


def _check_trained(report: ScenarioReport, world: WorldResult, config: Config) -> None:
    """The server lived: every survivor finishes, every gradient matches."""
    server = world[PS_NAME]
    trainers = [r for r in world.ranks if r.name != PS_NAME]
    problems = []
    if world.timed_out:
        problems.append(f"the world hung until its deadline of {world.deadline:g}s")
    problems += [r.describe() for r in world.failures]
    if server.status != OK or not isinstance(server.value, dict):
        report.contract_ok = False
        report.outcome_ok = False
        report.outcome_note = "not checked: the server returned no log"
        report.contract_note = (
            "; ".join(problems or [server.describe()]) + "\n" + _world_note(world)
        )
        return
    log = server.value
    killed = {r.name for r in trainers if r.status == KILLED}
    survivors = [r for r in trainers if r.status == OK]
    steps = log["steps"]
    # The log itself must show a serial history: step k began at version k,
    # and every trainer's batches arrive in order (survivors: all of them).
    for k, step in enumerate(steps):
        if step["index"] != k or step["version"] != k:
            problems.append(
                f"step {k} ({step['trainer']} batch {step['batch']}) began at parameter version "
                f"{step['version']} but was applied at version {k}: steps overlapped"
            )
    for r in trainers:
        batches = [s["batch"] for s in steps if s["trainer"] == r.name]
        if batches != list(range(len(batches))):
            problems.append(f"{r.name}'s applied batches are out of order: {batches}")
        if r.status == OK and len(batches) != config.batches:
            problems.append(
                f"{r.name} finished but only {len(batches)} of {config.batches} batches were applied"
            )
    if set(log["dead"]) - killed:
        problems.append(
            f"the server reaped {sorted(set(log['dead']) - killed)}, which the plan did not kill"
        )
    report.contract_ok = not problems
    report.contract_note = (
        "; ".join(problems)
        + ("\n" + _world_note(world) if world.failures or world.timed_out else "")
        if problems
        else f"{len(survivors)} trainer(s) finished"
        + (f"; {', '.join(sorted(killed))} killed as planned" if killed else "")
    )

    # Gradient for gradient: step k's gradient at version k, rebuilt from the
    # seeded weights and the k recorded updates before it.
    order = [(s["trainer"], s["batch"]) for s in steps]
    base = baseline(
        config, len(world.names), world.seed, order=order, applied=[s["grads"] for s in steps]
    )
    worst = 0.0
    mismatches: list[Mismatch] = []
    checked = 0
    # Every comparison of this run shares scenario, seed and tolerances.
    check = functools.partial(compare, scenario=NAME, seed=world.seed, rtol=config.rtol, atol=config.atol)
    for step, expected in zip(steps, base.steps, strict=True):
        where = f"{step['index']} ({step['trainer']} batch {step['batch']}, parameter version {step['version']})"
        diff, bad = check(
            step["grads"],
            expected.grads,
            step=where,
            rank=step["trainer"],
        )
        worst = max(worst, diff)
        checked += len(expected.grads)
        mismatches += bad
        if step["loss"] is not None:
            _, bad = check(
                {"loss": torch.tensor(step["loss"])},
                {"loss": torch.tensor(expected.loss)},
                step=where,
                rank=step["trainer"],
                what="loss",
            )
            mismatches += bad
    diff, bad = check(
        log["final"],
        base.final,
        step=f"final (after {len(steps)} steps)",
        rank=PS_NAME,
        what="parameter",
    )
    worst = max(worst, diff)
    mismatches += bad
    report.mismatches = mismatches
    report.max_grad_diff = worst
    report.grads_checked = checked
    report.steps = len(steps)
    report.history = [s["loss"] for s in steps]
    report.baseline_history = [s.loss for s in base.steps]
    report.metric = log["accuracy"]
    report.details.update(
        baseline_accuracy=base.accuracy,
        trainer_accuracy={r.name: r.value["accuracy"] for r in survivors},
        dropped_steps=log["dropped"],
        reaped=log["dead"],
        order=order,
    )

    notes = []
    if log["accuracy"] <= config.min_accuracy:
        notes.append(
            f"held-out accuracy {log['accuracy']:.3f} is not above {config.min_accuracy:g} "
            f"(chance 0.1) after {len(steps)} steps"
        )
    disagree = {
        r.name: r.value["accuracy"]
        for r in survivors
        if abs(r.value["accuracy"] - log["accuracy"]) > 1e-9
    }
    if disagree:
        notes.append(
            f"trainers measured other accuracies than the server's {log['accuracy']:.4f}: {disagree}"
        )
    report.outcome_ok = not notes
    report.outcome_note = "; ".join(notes) or (
        f"accuracy {log['accuracy']:.3f} > {config.min_accuracy:g} after {len(steps)} steps"
    )


def check(report: ScenarioReport) -> None:
    """Raise if ``report`` is not ok: GradientMismatch when tensors differ
    from the baseline, AssertionError otherwise; the message lists every
    problem and ends with the line that replays the run."""
    __tracebackhide__ = True
    if report.ok:
        return
    head = f"ps scenario (world_size={report.world_size}, seed={report.seed}) failed:"
    lines = [head, *(f"  {p}" for p in report.problems())]
    if len(report.mismatches) > 10:
        lines.append(f"  ... and {len(report.mismatches) - 10} more mismatches")
    lines.append(f"Replay: {report.details.get('repro', '')}")
    if report.mismatches:
        raise harness.GradientMismatch("\n".join(lines))
    raise AssertionError("\n".join(lines))
