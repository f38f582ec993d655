"""The parameter server: holds the model, serves forwards and gradients,
grants the step lease, and reaps trainers that died."""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
import torch.nn as nn

import rpc_harness

from .._device import here
from .._rpc import FailureDetector
from .config import PS_NAME, Config
from .data import eval_batches, get_accuracy
from .model import build_net

_POLL = 0.1  # seconds between the server's checks on unfinished trainers


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
        # The model on the server's device, as the tutorial puts it on
        # cuda:0; initialised on the CPU first, from the baseline's numbers.
        self.device = here()
        self.model = build_net(config, world_seed).to(self.device)
        self.config = config
        self.world_seed = world_seed
        self.trainers = trainers
        self._by_param = {p: n for n, p in self.model.named_parameters()}
        # A plain lock, not Condition()'s RLock: on CUDA worlds TensorPipe's agent
        # pickles this object to find its tensors (the owner RRef's value), and
        # torch's extractor skips plain locks only. Nothing here re-enters it.
        self._cv = threading.Condition(threading.Lock())
        self._holder: _Lease | None = None
        self._queue: deque[_Lease] = deque()
        self._version = 0
        self._log: list[dict[str, Any]] = []
        self._dropped: list[dict[str, Any]] = []
        self._done: set[str] = set()
        self._dead: set[str] = set()
        self._barrier: list[Any] = []
        self.liveness = FailureDetector(attempts=config.ping_attempts, timeout=config.ping_timeout)

    # -- the tutorial's methods --------------------------------------------
    def forward(self, inp: torch.Tensor, dropout_seed: int | None = None) -> torch.Tensor:
        """The model's forward. Inside a dist-autograd context (a training step)
        it must hold the step lease; outside one it is an evaluation."""
        rpc_harness.failpoint("ps.forward")
        cid = _caller_context_id()
        if cid is None:
            with torch.no_grad():
                return self._evaluate(inp)
        with self._cv:
            holder = self._holder
        if holder is None or holder.cid != cid:
            raise RuntimeError(
                f"{PS_NAME}: training forward in dist-autograd context {cid} without the step lease "
                f"(held by {holder.trainer + ' batch ' + str(holder.batch) if holder else 'nobody'})"
            )
        # As the tutorial: the input to the model's device, the output back to
        # the CPU before it crosses RPC (autograd follows both moves).
        return self.model(inp.to(self.device), dropout_seed).cpu()

    def _evaluate(self, inp: torch.Tensor) -> torch.Tensor:
        return self.model(inp.to(self.device)).cpu()

    def get_dist_gradients(self, cid: int) -> dict[str, torch.Tensor]:
        """This context's gradients by parameter name; recorded for the lease."""
        grads = dist_autograd.get_gradients(cid)
        named = {
            # On the CPU: they go to the trainer and into the log the judge reads.
            self._by_param[p]: g.detach().to("cpu", copy=True) for p, g in grads.items() if p in self._by_param
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
        self.liveness.heard_from(trainer)
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
        self.liveness.heard_from(trainer)
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
                param.add_(grads[name].to(param.device), alpha=alpha)

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
                if self.liveness.check(trainer):
                    ctx = rpc_harness.current_context()
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
                "final": {n: p.detach().to("cpu", copy=True) for n, p in self.model.named_parameters()},
                "accuracy": get_accuracy(batches, self._evaluate),
                "device": str(self.device),
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

