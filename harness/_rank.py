"""The life of one rank, inside its own process (stdlib + torch, no pytest).

The supervisor forks this from a forkserver that has torch imported already.
A rank captures its own output, arms a stack dump on SIGUSR1, dies with its
parent, joins the RPC world, runs the entry, reports, and shuts down when the
supervisor says how (gracefully only when no peer has died: a graceful
shutdown waits for every peer, and a dead one never answers).
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
import pickle
import resource
import signal
import sys
import threading
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import parent_process
from multiprocessing.connection import Connection, wait
from typing import Any

import torch  # preloaded in the forkserver: this is the point
import torch.distributed.autograd  # noqa: F401
import torch.distributed.rpc as rpc

from . import _rpc_record, context
from .context import EventLog, RankContext
from .faults import MESSAGE_KINDS, FaultPlan
from .seeds import derive_seed, seed_everything
from .spec import EntryRef

_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Boot:
    """What a rank needs to know, sent from the supervisor."""

    rank: int
    names: tuple[str, ...]
    seed: int
    workdir: str
    entry: EntryRef
    payload: bytes
    faults: FaultPlan
    fuzz: float
    rpc_timeout: float
    sys_path: tuple[str, ...]
    env: tuple[tuple[str, str], ...]


def rank_file(workdir: str, rank: int, what: str) -> str:
    """Where rank files live: log, events, stacks."""
    return os.path.join(workdir, f"rank{rank}.{what}")


def main(conn: Connection, boot: Boot) -> None:
    """Process target: run one rank and exit through ``os._exit``, never returning
    into multiprocessing's clean-up (which can wait on torch's threads)."""
    _die_with_parent()
    _capture_output(rank_file(boot.workdir, boot.rank, "log"))
    stacks = open(rank_file(boot.workdir, boot.rank, "stacks"), "w")  # noqa: SIM115 (kept open for the handler)
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True, chain=False)
    events = EventLog(rank_file(boot.workdir, boot.rank, "events"), boot.rank)
    events.write("start", pid=os.getpid())
    code = 1
    try:
        code = _run(conn, boot, events)
    except BaseException:  # a report that cannot be sent: the supervisor sees the exit code
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _run(conn: Connection, boot: Boot, events: EventLog) -> int:
    os.environ.update(boot.env)
    # TensorPipe and Gloo bind to whatever the host name resolves to unless told;
    # RPC runs pickled code from any peer, so only loopback is acceptable.
    os.environ["TP_SOCKET_IFNAME"] = "lo"
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    # init_rpc's own device-map exchange trips a torch deprecation warning that
    # would otherwise open every rank's output.
    warnings.filterwarnings("ignore", message="You are using a Backend")
    sys.path[:] = list(boot.sys_path)
    ctx = RankContext(
        rank=boot.rank,
        names=boot.names,
        world_seed=boot.seed,
        workdir=boot.workdir,
        faults=boot.faults,
        fuzz=boot.fuzz,
        events=events,
    )
    context._current = ctx
    seed_everything(ctx.seed)
    torch.set_num_threads(intra_op_threads(dict(boot.env), ctx.world_size))
    # Progress may be reported from RPC handler threads while the main thread
    # sends its own messages: one lock keeps the pipe's messages whole.
    send = _locked_sender(conn)
    ctx.progress_sink = _best_effort(send)
    _rpc_record.install(events, ctx.names, ctx.rank)  # before the entry's module binds the names

    phase = "starting"
    try:
        entry = boot.entry.load(where=f"rank {boot.rank}")
        args, kwargs = pickle.loads(boot.payload)
        _init_rpc(boot, ctx)
        events.write("init_rpc")
        send(("ready",))
        phase = "entry"
        events.write("entry_start")
        value = entry(ctx, *args, **kwargs)
        ctx.flush_progress()
        events.write("entry_done", maxrss_kb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    except BaseException as error:  # noqa: BLE001 - every failure is reported, skips too
        ctx.flush_progress()
        events.write("raised", error=_one_line(error), phase=phase)
        send(_failure_message(error, phase))
        _shutdown_quietly()
        return 1
    try:
        # Plain pickle, sent as bytes: the pipe's own pickler would move every
        # tensor through a shared-memory segment of its own, ~0.3 ms each --
        # a tenth of a second for a parameter server's log of gradients.
        pickled = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as error:  # an unpicklable return value
        send(("raised", "result", f"TypeError: the entry's return value cannot be sent back: {error}", "", None))
        _shutdown_quietly()
        return 1
    send(("done", pickled))
    return _shutdown_when_told(conn, send, events, ctx)


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


def rpc_backend(ctx: RankContext, init_method: str, rpc_timeout: float) -> tuple[Any, Any]:
    """``(backend, options)`` for ``rpc.init_rpc``: plain TensorPipe, or torch's
    FaultyTensorPipe agent when the plan (or schedule fuzzing) delays or fails
    this rank's messages. Shared by the harness's ranks and harness.torchrun."""
    mine = ctx.faults.for_target(ctx.name)
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
    if ctx.fuzz or any(f.kind in MESSAGE_KINDS for f in ctx.faults):
        import torch.distributed.rpc._testing as faulty  # registers FAULTY_TENSORPIPE

        options = faulty.FaultyTensorPipeRpcBackendOptions(
            num_worker_threads=8,
            rpc_timeout=rpc_timeout,
            init_method=init_method,
            messages_to_fail=to_fail,
            messages_to_delay=to_delay,
            num_fail_sends=max([int(f.arg) for f in mine if f.kind == "msgfail"] or [0]),
        )
        return rpc.backend_registry.BackendType.FAULTY_TENSORPIPE, options
    options = rpc.TensorPipeRpcBackendOptions(
        init_method=init_method, rpc_timeout=rpc_timeout, num_worker_threads=16
    )
    return rpc.backend_registry.BackendType.TENSORPIPE, options


def _init_rpc(boot: Boot, ctx: RankContext) -> None:
    init_method = "file://" + os.path.join(boot.workdir, "store")
    backend, options = rpc_backend(ctx, init_method, boot.rpc_timeout)
    rpc.init_rpc(ctx.name, backend=backend, rank=ctx.rank, world_size=ctx.world_size, rpc_backend_options=options)


def _shutdown_when_told(
    conn: Connection, send: Callable[[tuple], None], events: EventLog, ctx: RankContext
) -> int:
    message = conn.recv()  # ("shutdown", graceful)
    graceful = bool(message[1])
    ctx.flush_progress()  # what its RPC handlers reported since the entry returned
    events.write("shutdown_start", graceful=graceful)
    try:
        rpc.shutdown(graceful=graceful)
    except BaseException as error:  # noqa: BLE001
        events.write("raised", error=_one_line(error), phase="shutdown")
        send(_failure_message(error, "shutdown"))
        return 1
    events.write("shutdown_done")
    send(("shut",))
    return 0


def _locked_sender(conn: Connection) -> Callable[[tuple], None]:
    lock = threading.Lock()

    def send(message: tuple) -> None:
        with lock:
            conn.send(message)

    return send


def _best_effort(send: Callable[[tuple], None]) -> Callable[[tuple], None]:
    # Progress is not worth failing an RPC handler for: once the supervisor
    # stopped listening (the world is being torn down) it is dropped.
    def send_progress(message: tuple) -> None:
        try:
            send(message)
        except (OSError, EOFError):
            pass

    return send_progress


def _failure_message(error: BaseException, phase: str) -> tuple:
    text = "".join(traceback.format_exception(error))
    kind = type(error)
    # pytest's Skipped claims to live in builtins; its base class gives it away.
    if kind.__name__ == "Skipped" and any(c.__name__ == "OutcomeException" for c in kind.__mro__):
        return ("skipped", phase, str(getattr(error, "msg", error)), text, None)
    try:
        pickled = pickle.dumps(error)
    except Exception:  # many exceptions do not pickle; the text is what matters
        pickled = None
    return ("raised", phase, _one_line(error), text, pickled)


def _one_line(error: BaseException) -> str:
    message = str(error).strip().splitlines()
    return f"{type(error).__name__}: {message[0]}" if message else type(error).__name__


def _shutdown_quietly() -> None:
    try:
        if rpc.api._is_current_rpc_agent_set():
            rpc.shutdown(graceful=False)
    except BaseException:  # noqa: BLE001 - the failure being reported matters more
        pass


def _capture_output(path: str) -> None:
    # fd-level, so that torch's C++ logging is captured with Python's prints.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout.reconfigure(line_buffering=True)
    sys.stderr.reconfigure(line_buffering=True)


def _die_with_parent() -> None:
    """A rank must never outlive its supervisor, even one killed by SIGKILL."""
    try:  # the kernel's way, for the forkserver that forked us
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    parent = parent_process()
    if parent is None:
        return
    # The supervisor holds the other end of this sentinel: EOF means it is gone.
    def watch() -> None:
        wait([parent.sentinel])
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="rpc-harness-parent-watch", daemon=True).start()

