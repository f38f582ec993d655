"""What a rank process sets up, whoever started it: the harness's own
launcher (``_rank.py``) or torchrun (``rpc_harness.torchrun``).

- :func:`die_with_parent`: a rank never outlives the process that started it;
- :func:`pin_loopback`: TensorPipe and Gloo listen on loopback only;
- :func:`intra_op_threads`: the cores shared out among the ranks;
- :func:`rpc_backend`: plain TensorPipe, or torch's faulty agent for message faults.

Imports torch: for rank processes only, never for ``import harness``.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
from multiprocessing import parent_process
from multiprocessing.connection import wait
from typing import Any

import torch.distributed.rpc as rpc

from .context import RankContext
from .faults import uses_faulty_agent
from .seeds import derive_seed

_PR_SET_PDEATHSIG = 1
WATCH_THREAD = "rpc-harness-parent-watch"


def die_with_parent() -> None:
    """A rank must never outlive its parent, even one killed by SIGKILL.

    Two ways, because either alone leaves a gap: the kernel's
    ``PR_SET_PDEATHSIG`` fires when the thread that forked us exits (for a
    forkserver child, the forkserver); and a thread that waits on the
    multiprocessing parent's sentinel, whose other end the supervisor holds.
    """
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    parent = parent_process()
    if parent is None:
        return

    def watch() -> None:
        wait([parent.sentinel])
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name=WATCH_THREAD, daemon=True).start()


def pin_loopback() -> None:
    """TensorPipe and Gloo bind to whatever the host name resolves to unless
    told; RPC runs pickled code from any peer, so only loopback is acceptable."""
    os.environ["TP_SOCKET_IFNAME"] = "lo"
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"


def intra_op_threads(env: dict[str, str], world_size: int) -> int:
    """Torch's intra-op threads for one rank: the cores shared out among the
    ranks (at least one), unless the world's env sets OMP_NUM_THREADS.

    Each rank would otherwise start a thread per core, and N ranks on fewer
    cores make every small op wait on spinning peers (10-50x slower); torchrun
    defaults to OMP_NUM_THREADS=1 for the same reason. The forkserver imported
    torch before any env was set, so the count is set here, not read by torch."""
    if "OMP_NUM_THREADS" in env:  # validated by make_spec
        return int(env["OMP_NUM_THREADS"])
    return max(len(os.sched_getaffinity(0)) // world_size, 1)


def rpc_backend(
    ctx: RankContext,
    init_method: str,
    rpc_timeout: float,
    *,
    name: str | None = None,
    num_worker_threads: int | None = None,
) -> tuple[Any, Any]:
    """``(backend, options)`` for ``rpc.init_rpc``: plain TensorPipe, or torch's
    FaultyTensorPipe agent when the plan (or schedule fuzzing) delays or fails
    this rank's messages. ``name`` is the rank's worker name when its context
    does not know it yet (a spawned program names itself in init_rpc)."""
    mine = ctx.faults.for_target(name or ctx.name or "")
    to_fail = sorted({f.point for f in mine if f.kind == "msgfail"})
    to_delay = {f.point: f.seconds for f in mine if f.kind == "msgdelay"}
    if ctx.fuzz:
        # Schedule fuzzing also slows this rank's sends of each user message
        # type by a seeded amount: the same seed, the same delays.
        for kind in ("PYTHON_CALL", "PYTHON_REMOTE_CALL", "SCRIPT_CALL", "SCRIPT_REMOTE_CALL"):
            rng_seed = derive_seed(ctx.world_seed, "fuzz-msg", ctx.rank, kind)
            to_delay.setdefault(kind, (rng_seed % 1000) / 1000.0 * ctx.fuzz)
    # One backend per world: plain TensorPipe's init joins a Gloo group that the
    # faulty backend never creates, so a world that mixed them would deadlock in
    # init_rpc. Ranks without message faults get the faulty agent with nothing armed.
    # Its options cannot choose TensorPipe's transports: such worlds keep shared
    # memory, and with it a limit of 33 ranks (options.MAX_FAULTY_WORLD_SIZE).
    if uses_faulty_agent(ctx.faults, ctx.fuzz):
        import torch.distributed.rpc._testing as faulty  # registers FAULTY_TENSORPIPE

        options = faulty.FaultyTensorPipeRpcBackendOptions(
            num_worker_threads=num_worker_threads or 8,
            rpc_timeout=rpc_timeout,
            init_method=init_method,
            messages_to_fail=to_fail,
            messages_to_delay=to_delay,
            num_fail_sends=max([int(f.arg) for f in mine if f.kind == "msgfail"] or [0]),
        )
        return rpc.backend_registry.BackendType.FAULTY_TENSORPIPE, options
    options = tensorpipe_options(init_method, rpc_timeout, num_worker_threads or 16)
    return rpc.backend_registry.BackendType.TENSORPIPE, options


def tensorpipe_options(init_method: str, rpc_timeout: float, num_worker_threads: int = 16, **more: Any) -> Any:
    """TensorPipe restricted to TCP and its basic channel, as every plain
    world runs. Measured on torch 2.13 (TensorPipe's sources cited):

    - its shared-memory transport listens on an AF_UNIX socket with a
      hard-coded backlog of 128 (shm/listener_impl.cc) and treats the EAGAIN
      a full backlog gives a non-blocking connect as fatal (socket.cc:114);
      init_rpc's all-gather opens 4 such connections per follower to rank 0
      at once, so worlds of 34 ranks and more failed to start. A full TCP
      queue only delays a connection (the SYN is resent);
    - a rank SIGKILLed while it holds the spin flag of a peer's shared-memory
      ring leaves every other writer to that peer spinning forever: live
      ranks stop answering (the parameter server's intermittent hang);
    - shm busy-polls a core per rank and maps 16 MiB per pipe; TCP idles.

    The basic channel needs one connection per pipe and no ptrace; dropping
    mpt_uv (never chosen for CPU tensors) saves 16 threads and listeners per
    rank. The cost: a tiny round trip in a 2-rank world is ~2x slower."""
    return rpc.TensorPipeRpcBackendOptions(
        init_method=init_method, rpc_timeout=rpc_timeout, num_worker_threads=num_worker_threads,
        _transports=["uv"], _channels=["basic"], **more,
    )
