"""What a rank process sets up, whoever started it: the harness's own
launcher (``_rank.py``) or torchrun (``rpc_harness.apps.torchrun``).

- :func:`die_with_parent`: a rank never outlives the process that started it;
- :func:`pin_loopback`: TensorPipe and Gloo listen on loopback only;
- :func:`intra_op_threads`: the cores shared out among the ranks;
- :func:`rpc_backend`: plain TensorPipe, or torch's faulty agent for message faults;
- :func:`tensorpipe_options`: TCP and the basic channel (CUDA channels for a
  program's device maps where CUDA is available);
- :func:`widen_listen_backlogs`: listeners that hold a whole world's connections;
- :func:`warm_math_kernels`: oneMKL's math kernels chosen on one thread, before
  any RPC thread can race to choose them.

Imports torch: for rank processes only, never for ``import rpc_harness``.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import threading
from multiprocessing import parent_process
from multiprocessing.connection import wait
from typing import Any

import torch
import torch.distributed.rpc as rpc

from . import _devices
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


# The float unary ops torch hands to oneMKL's VML, for float32 and float64
# (IMPLEMENT_VML_MKL in torch's aten/src/ATen/cpu/vml.h; a unit test reads
# the installed header and holds this list to it).
MKL_MATH_OPS = ("acos", "asin", "atan", "cos", "erf", "erfc", "erfinv", "exp", "log", "log10", "log2", "sin",
                "sqrt", "tan", "tanh", "trunc")
_math_kernels_warm = False


def warm_math_kernels() -> None:
    """Call each of torch's oneMKL math kernels once, on this thread.

    oneMKL 2024.2 (in torch's x86 wheels) chooses a VML function's kernel at
    its first call, and first calls made at once on several threads can run
    a low-accuracy kernel for one of them, silently (pytorch/pytorch#188792).
    In a rank those threads are RPC handlers: two peers' first requests each
    running ``tanh`` on the owner. Measured here (torch 2.13, oneMKL 2024.2,
    a Xeon with AVX-512): the test suite's tiny scenario failed its gradient
    comparison in 1 world of 12, a 5e-5 error in step 0's forward; a fresh
    process whose four threads made their first ``torch.acos`` calls at once
    got a different answer from the same call made again in 6 of 30 runs, 0
    of 30 after this warm-up. Called once in the forkserver, at the import of
    the ranks' module, so that every rank inherits the chosen kernels (about
    2 ms there; the forks after it are slower, about 1.5 s in all at 512
    ranks and nothing measurable up to 64: docs/benchmarks.md), and by
    torchrun's ranks before ``init_rpc``."""
    global _math_kernels_warm
    for dtype in (torch.float32, torch.float64):
        one = torch.full((1,), 0.5, dtype=dtype)  # in every op's domain
        for name in MKL_MATH_OPS:
            getattr(torch, name)(one)
    _math_kernels_warm = True


def math_kernels_warm() -> bool:
    """Whether :func:`warm_math_kernels` ran in this process (or in the
    forkserver it was forked from)."""
    return _math_kernels_warm


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
    _widen_backlogs_once_started()
    mine = ctx.faults.for_target(name or ctx.name or "")
    to_fail = sorted({f.point for f in mine if f.kind == "msgfail"})
    to_delay = {f.point: f.seconds for f in mine if f.kind == "msgdelay"}
    if ctx.fuzz:
        # Schedule fuzzing also slows this rank's sends of each user message
        # type by a seeded amount: the same seed, the same delays.
        for kind in ("PYTHON_CALL", "PYTHON_REMOTE_CALL", "SCRIPT_CALL", "SCRIPT_REMOTE_CALL"):
            rng_seed = derive_seed(ctx.world_seed, "fuzz-msg", ctx.rank, kind)
            to_delay.setdefault(kind, (rng_seed % 1000) / 1000.0 * ctx.fuzz)
    # One backend per world: plain TensorPipe's init meets its peers in a group
    # (Gloo's, or the world's store in its place: _rendezvous) that the faulty
    # backend never joins, so a world that mixed them would deadlock in
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
    device = str(getattr(ctx, "device", "cpu"))
    if device.startswith("cuda") and ctx.names:
        # A run world's rank on a GPU: device maps to every peer, so that an
        # entry can rpc_sync CUDA tensors to any rank (world option devices).
        devices = ctx.world_devices
        maps = _devices.world_device_maps(devices, ctx.names, ctx.rank, _cuda_device_count())
        options = tensorpipe_options(init_method, rpc_timeout, num_worker_threads or 16, cuda_world=True,
                                     device_maps=maps, devices=[device])
    else:
        options = tensorpipe_options(init_method, rpc_timeout, num_worker_threads or 16)
    return rpc.backend_registry.BackendType.TENSORPIPE, options


def _cuda_device_count() -> int:
    import torch

    return torch.cuda.device_count()


def tensorpipe_options(init_method: str, rpc_timeout: float, num_worker_threads: int = 16, *,
                       cuda_world: bool = False, **more: Any) -> Any:
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
    rank. The cost: a tiny round trip in a 2-rank world is ~2x slower.

    A spawned program's own ``device_maps``/``devices`` (in ``more``) are
    refused where CUDA is not available (``_devices``: this is the program's
    ``init_rpc``). Where it is, every rank of a world that may move CUDA
    tensors (``cuda_world``: a spawned program's, whose peers name their
    maps in code this rank cannot see) offers TensorPipe's CUDA channels."""
    device_maps, devices = more.get("device_maps"), more.get("devices")
    _devices.check(f"init_rpc with TensorPipe options of device_maps={device_maps!r}, devices={devices!r}",
                   device_maps, devices)
    return rpc.TensorPipeRpcBackendOptions(
        init_method=init_method, rpc_timeout=rpc_timeout, num_worker_threads=num_worker_threads,
        _transports=["uv"], _channels=_devices.channels(device_maps, devices, world=cuda_world), **more,
    )


# -- listen backlogs ---------------------------------------------------------------------

SOMAXCONN = "/proc/sys/net/core/somaxconn"
_widening = False


def widen_listen_backlogs() -> int:
    """Give every listening TCP socket of this process the largest backlog
    its network namespace allows (``net.core.somaxconn``); how many it found.

    TensorPipe's TCP listener asks for a backlog of 128 (``kBacklog`` in
    tensorpipe/transport/uv/uv.h), and init_rpc's all-gather has every
    follower open a pipe and its channel's connection to the leader at once:
    2 x 255 connections in a 256-rank world. Measured in a world's own
    namespace: 180 to 415 listen-queue overflows each time a 256-rank world
    came up. Each overflow costs its connection a SYN retry (a second or
    more); a handshake whose last ACK found the queue full leaves a client
    that thinks it is connected while the leader holds only a request, which
    the kernel drops when the queue stays full (a request queue over half
    full keeps old requests for 2 SYN-ACK retries, about 3 s); that client
    then gets RST: ``ECONNRESET`` in init_rpc, as 3 ranks of a 256-rank world
    did on a loaded machine. ``listen()`` on a listening socket only changes
    its backlog; Gloo's own listeners already ask for somaxconn."""
    backlog = _somaxconn()
    libc = ctypes.CDLL(None, use_errno=True)
    widened = 0
    for fd in map(int, os.listdir("/proc/self/fd")):
        try:
            if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:["):
                continue
        except OSError:
            continue
        if (_sockopt(libc, fd, socket.SO_ACCEPTCONN) == 1 and _sockopt(libc, fd, socket.SO_TYPE) == socket.SOCK_STREAM
                and _sockopt(libc, fd, socket.SO_DOMAIN) in (socket.AF_INET, socket.AF_INET6)
                and libc.listen(fd, backlog) == 0):
            widened += 1
    return widened


def _sockopt(libc: Any, fd: int, option: int) -> int | None:
    """An int socket option of ``fd`` (read through libc: a socket object
    made on someone else's fd may change its blocking mode)."""
    value, size = ctypes.c_int(0), ctypes.c_uint32(ctypes.sizeof(ctypes.c_int))
    if libc.getsockopt(fd, socket.SOL_SOCKET, option, ctypes.byref(value), ctypes.byref(size)) != 0:
        return None
    return value.value


def _somaxconn() -> int:
    try:
        with open(SOMAXCONN) as file:
            return int(file.read())
    except (OSError, ValueError):
        return socket.SOMAXCONN


def _widen_backlogs_once_started() -> None:
    """Widen this process's listeners as soon as its RPC agent has started
    (torch's ``api._init_rpc_states`` starts it, listener and all), before
    init_rpc's own all-gather sends every follower to the leader."""
    global _widening
    from torch.distributed.rpc import api

    if _widening:
        return
    _widening = True
    original = api._init_rpc_states

    def _init_rpc_states(agent: Any) -> None:
        original(agent)
        widen_listen_backlogs()

    _init_rpc_states.__wrapped__ = original  # type: ignore[attr-defined]
    api._init_rpc_states = _init_rpc_states
