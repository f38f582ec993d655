"""Launching worlds: ``run_world`` (entries written for the harness) and
``spawn`` (programs that call ``init_rpc`` and ``rpc.shutdown`` themselves).

Ranks are forked from a multiprocessing forkserver that has torch imported
already (~0.1 s a world instead of ~2 s of ``import torch`` per rank). The
rendezvous is a FileStore in the world's private temporary folder, so no port
is chosen by anyone but the kernel and parallel worlds (``pytest -n auto``)
cannot collide. ``_supervisor`` watches the world once it is forked.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import io
import json
import multiprocessing
import os
import shutil
import socket
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from multiprocessing import forkserver, popen_forkserver, util
from multiprocessing import spawn as mp_spawn
from multiprocessing.context import ForkServerProcess, reduction, set_spawning_popen
from typing import TYPE_CHECKING, Any

from .. import _cuda_fork
from ..errors import WorldFailed, WorldSpecError, WorldTimeout, clip
from ..faults import uses_faulty_agent
from ..options import WorldArgs, takes_world_options
from ..progress import Progress
from ..repro import python_call, replaying
from ..result import WorldResult
from ..rpc import stores as _stores
from ..spec import WorldSpec, make_spec
from . import limits as _limits
from . import netns as _netns
from . import torch_check as _torch_check
from . import workdirs as _workdirs
from .supervisor import Supervisor

if TYPE_CHECKING:
    from typing_extensions import Unpack

# Imported once in the forkserver instead of once per rank: the rank's own
# code first (it wraps torch's RPC API before anything binds it),
# numpy.random (a rank seeds it; numpy imports it lazily, ~13 ms),
# torch._dynamo (the first optimizer a rank builds imports it, ~1 s) and
# torch.distributed.optim (DistributedOptimizer; it pulls in fsdp/dtensor, ~1.5 s).
_PRELOAD = ["rpc_harness._rank.rank", "numpy.random", "torch._dynamo", "torch.distributed.optim"]
# The harness's own: imported before the forkserver installs pytest's
# assertion rewriting, which is for the modules after them (see _asserts).
BASE_PRELOAD = tuple(_PRELOAD)
# How the parent hands the forkserver its sys.path and module list (see
# rpc_harness._parent.preload, which must not be imported here: importing it in the
# forkserver has to finish this package first).
PRELOAD_ENV = "_RPC_HARNESS_FORKSERVER"


def preload(*modules: str) -> None:
    """Import ``modules`` once in the forkserver instead of once per rank.

    Takes effect for a forkserver that has not started yet (the first world
    of a process starts it). A module that cannot be found here is named in
    a warning and left out: only speed is lost (a rank that needs it imports
    it itself, and says why it cannot), but a typo must not pass unseen.
    """
    for module in modules:
        if (problem := unimportable(module)) is not None:
            _warn_once("rpc_harness.preload", problem)
        elif module not in _PRELOAD:
            _PRELOAD.append(module)


def unimportable(name: str) -> str | None:
    """Why module ``name`` cannot be found here (None: it can), found
    without importing it (its parent packages are imported)."""
    try:
        found = importlib.util.find_spec(name)
    except Exception as error:  # noqa: BLE001 - a parent package that fails to import, a bad name
        return f"{name!r} cannot be imported: {type(error).__name__}: {error}"
    return None if found is not None else f"no module named {name!r}"


_warned_preloads: set[tuple[str, str]] = set()


def _warn_once(source: str, problem: str) -> None:
    if (source, problem) not in _warned_preloads:
        _warned_preloads.add((source, problem))
        warnings.warn(f"{source}: {problem}; worlds start without it (a rank that needs it imports it itself)",
                      UserWarning, stacklevel=3)


# How the ranks rewrite asserts (rpc_harness._rank.asserts.session_rewriting): set by the
# pytest plugin for its session, None outside pytest.
_asserts: dict[str, Any] | None = None


def rewrite_asserts(settings: dict[str, Any] | None) -> dict[str, Any] | None:
    """Have ranks rewrite asserts as ``settings`` say (a session's
    :func:`rpc_harness._rank.asserts.session_rewriting`; None: not at all); returns the
    previous setting. A forkserver not started yet takes it too."""
    global _asserts
    previous, _asserts = _asserts, settings
    return previous


# An AF_UNIX socket path holds at most this many bytes (108 with its NUL).
UNIX_PATH_MAX = 107


def check_socket_folder(folder: str) -> None:
    """Refuse a temp folder too deep for the forkserver's unix socket
    (``listener-XXXXXXXX`` in it), which multiprocessing would only report as
    ``OSError: AF_UNIX path too long`` from inside its forkserver."""
    path = os.path.join(folder, "listener-xxxxxxxx")
    if len(os.fsencode(path)) > UNIX_PATH_MAX:
        raise WorldSpecError(
            f"the temp folder {folder!r} is too deep for the forkserver's unix socket ({len(os.fsencode(path))} "
            f"bytes with its name; AF_UNIX paths hold {UNIX_PATH_MAX}): set TMPDIR to a shorter folder"
        )


def cuda_report() -> str:
    """Where this process's forkserver names the modules it refused to
    preload because they asked for CUDA (``rpc_harness._cuda_fork``)."""
    return os.path.join(util.get_temp_dir(), "forkserver-cuda.json")


def _mp_context() -> Any:
    check_socket_folder(util.get_temp_dir())
    _workdirs.stamp_multiprocessing_folder()  # where the forkserver's socket goes; see _workdirs
    ctx = multiprocessing.get_context("forkserver")
    extra = [m.strip() for m in os.environ.get("RPC_HARNESS_PRELOAD", "").split(",") if m.strip()]
    for module in extra:
        if (problem := unimportable(module)) is not None:
            _warn_once("RPC_HARNESS_PRELOAD", problem)
    # Read by rpc_harness._parent.preload in the forkserver, which inherits this
    # environment when the first world of the process starts it.
    os.environ[PRELOAD_ENV] = json.dumps({"parent": os.getpid(), "sys_path": list(sys.path),
                                          "modules": _PRELOAD + extra, "base": list(BASE_PRELOAD),
                                          "asserts": _asserts, "cuda_report": cuda_report()})
    ctx.set_forkserver_preload(["rpc_harness._parent.preload"])
    return ctx


class _RankPopen(popen_forkserver.Popen):
    """multiprocessing's forkserver launch, minus re-running the parent's
    ``__main__`` in the child: ranks load their entry by name, and re-running
    a script (or pytest's entry point) in every rank is slow at best and, for
    a script without a ``__main__`` guard, starts worlds inside worlds."""

    def _launch(self, process_obj: Any) -> None:
        self._poll_lock = threading.Lock()
        prep_data = mp_spawn.get_preparation_data(process_obj._name)
        prep_data.pop("init_main_from_path", None)
        prep_data.pop("init_main_from_name", None)
        buf = io.BytesIO()
        set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            set_spawning_popen(None)
        self.sentinel, w = forkserver.connect_to_new_process(self._fds)
        # The child watches this duplicate of the write end: EOF means we died.
        parent_w = os.dup(w)
        self.finalizer = util.Finalize(self, util.close_fds, (parent_w, self.sentinel))
        with open(w, "wb", closefd=True) as file:
            file.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)

    def poll(self, flag: int = os.WNOHANG) -> int | None:
        # Two threads may poll a rank at once: its supervisor, and
        # multiprocessing's clean-up of finished children that every
        # Process.start() runs (another world starting in another thread).
        # Reading the exit status off the forkserver's pipe is not atomic:
        # the thread that lost the race read None ("exited with code None")
        # or EOF (255). One at a time, the second sees what the first read.
        with self._poll_lock:
            return super().poll(flag)


class _RankProcess(ForkServerProcess):
    @staticmethod
    def _Popen(process_obj: Any) -> _RankPopen:
        return _RankPopen(process_obj)


@takes_world_options
def run_world(
    entry: Callable[..., Any] | str,
    world_size: int | None = None,
    *,
    names: Sequence[str] | str | None = None,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    repro: str = "",
    check: bool = True,
    on_progress: Callable[[Progress], None] | None = None,
    **options: Unpack[WorldArgs],
) -> WorldResult:
    """Run ``entry(ctx, *args, **kwargs)`` in every rank of a fresh RPC world.

    Every input is validated before any process starts. With ``check=True``
    an unexpected failure of any rank raises :class:`WorldFailed` (or
    :class:`WorldTimeout` when a budget runs out) listing every failed rank;
    otherwise the :class:`WorldResult` is returned as it is.
    ``on_progress`` is called in this process with every
    :class:`~rpc_harness.progress.Progress` the ranks report, as they report it.
    ``isolate`` puts the ranks in a network namespace of their own: None
    (the default) where the machine allows it, True or error, False never
    (for ranks that must reach a service on the host). ``rendezvous``:
    ``"store"`` (the default) has the ranks meet in ``init_rpc`` through the
    world's store where torch would build a Gloo group for it, ``"gloo"`` is
    torch's own way (``rpc_harness.rpc.rendezvous`` says what is replaced).
    """
    __tracebackhide__ = True  # a failed world's report is the message; this frame is noise
    spec = make_spec(entry, world_size, names=names, args=args, kwargs=kwargs, repro=repro, **options)
    result = launch(spec, on_progress=on_progress)
    if check:
        raise_for_failures(result)
    return result


@takes_world_options
def spawn(
    fn: Callable[..., Any] | str,
    args: Sequence[Any] = (),
    nprocs: int = 1,
    *,
    kwargs: Mapping[str, Any] | None = None,
    names: Sequence[str] | None = None,
    repro: str = "",
    check: bool = True,
    on_progress: Callable[[Progress], None] | None = None,
    **options: Unpack[WorldArgs],
) -> WorldResult:
    """Run ``fn(rank, *args, **kwargs)`` in ``nprocs`` processes, shaped like
    ``torch.multiprocessing.spawn``, for a program that calls
    ``rpc.init_rpc(name, rank=..., world_size=...)`` and ``rpc.shutdown()``
    itself. The program's own names are its workers' names, which the fault
    plan aims at (``names`` says them in advance, so that the plan is checked
    before any process starts). A planned kill that no surviving rank ran its
    own part of the program past (``rpc_harness.result.UNFINISHED`` says how)
    fails the world unless ``expect="unfinished"``. Everything else is as
    :func:`run_world`.
    """
    __tracebackhide__ = True  # a failed world's report is the message; this frame is noise
    spec = make_spec(fn, nprocs, names=names, args=args, kwargs=kwargs, repro=repro, spawned=True,
                     where="spawn()", **options)
    result = launch(spec, on_progress=on_progress)
    if check:
        raise_for_failures(result)
    return result


def raise_for_failures(result: WorldResult) -> None:
    """Raise :class:`WorldTimeout` or :class:`WorldFailed` for a failed world."""
    __tracebackhide__ = True  # a failed world's report is the message; this frame is noise
    if result.timed_out:
        raise WorldTimeout(result)
    if result.failures or result.problems:
        raise WorldFailed(result)


# The worlds this process is running now (any thread), for stacks_of_running_worlds.
_running: set[Supervisor] = set()


@contextlib.contextmanager
def running(supervisor: Supervisor) -> Iterator[None]:
    """While the block runs, ``supervisor``'s world is one of this process's
    running worlds (``stacks_of_running_worlds``): a reused world's entry."""
    _running.add(supervisor)
    try:
        yield
    finally:
        _running.discard(supervisor)


def forkserver_context() -> Any:
    """The multiprocessing context every world's ranks are forked from (its
    forkserver starts with the first world of the process)."""
    return _mp_context()


def rank_starter(mp: Any, *, controlled: bool = False) -> Callable[[Any], tuple[Any, Any, Any]]:
    """What a :class:`Supervisor` calls to start one rank from ``mp``."""
    return lambda boot: _start_rank(mp, boot, controlled)


def stacks_of_running_worlds() -> list[str]:
    """Each world running in this process: every rank's stacks, now, and the
    replay line. For a caller about to end the process from another thread
    (pytest-timeout's thread method), which no world's result will reach."""
    return [supervisor.stacks_now() for supervisor in list(_running)]


def launch(
    spec: WorldSpec,
    *,
    keep_workdir: bool = False,
    on_progress: Callable[[Progress], None] | None = None,
    on_interrupted: Callable[[WorldResult], None] | None = None,
) -> WorldResult:
    """Run one world described by a validated spec; always returns a result
    (unless something from outside the world raises inside it: ``on_progress``,
    a test timeout's signal handler; then every rank is killed and the error
    goes on). The world's folder is removed whatever happens.

    ``on_interrupted`` is then called first with the world's result: every
    rank's stacks when it was stopped, and its replay line, for a report the
    error alone would not give (pytest-timeout's shows the parent's stacks
    only). Not for KeyboardInterrupt (Ctrl-C, SIGTERM): that one wants out now."""
    if multiprocessing.current_process().daemon:
        # Every rank imports the script that started the world, as any
        # multiprocessing child does; unguarded, the script starts a world
        # inside each rank, which multiprocessing refuses obscurely.
        raise WorldSpecError(
            "a world cannot be started from a daemonic process (a rank, or a multiprocessing pool worker); if a "
            "script starts worlds at its top level, put that under `if __name__ == '__main__':` (its ranks "
            "import the script, as multiprocessing's children do)"
        )
    # The torch private names the harness hooks, checked once per process.
    _torch_check.require(faulty_agent=uses_faulty_agent(spec.options.faults, spec.options.fuzz),
                         retry_log=any(fault.kind == "msgfail" for fault in spec.options.faults),
                         store_rendezvous=spec.options.rendezvous == "store")
    if len(spec.names) >= _limits.BIG_WORLD:
        _limits.raise_open_files()  # the supervisor's pipes; the forkserver raised the ranks' own
    workdir = _workdirs.make()
    netns = None
    try:
        netns, isolation = world_namespace(spec.options.isolate)
        mp = _mp_context()
        controlled = spec.options.schedule_spec.controlled
        supervisor = Supervisor(spec, workdir, lambda boot: _start_rank(mp, boot, controlled), on_progress,
                                master_port=_free_port() if spec.spawned else 0, netns=netns, isolation=isolation)
        _running.add(supervisor)
        try:
            supervisor.run()
        except BaseException as error:
            if on_interrupted is None or isinstance(error, KeyboardInterrupt):
                raise
            supervisor.interrupted(error)
            supervisor.kill_all()
            on_interrupted(supervisor.collect(spec.repro or python_call(spec)))
            raise
        finally:
            _running.discard(supervisor)
            supervisor.kill_all()
            _stores.remove_made(workdir)
        result = supervisor.collect(spec.repro or python_call(spec))
        if result.schedule and not spec.repro:  # a controlled world's line takes its steps exactly
            result.repro = python_call(replaying(spec, result.schedule))
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    finally:
        if netns is not None:
            netns.close()
    if keep_workdir:
        result.workdir = workdir
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    _cuda_fork.warn_about_culprits(cuda_report())
    return result


ISOLATION_ENV = "RPC_HARNESS_ISOLATION"  # auto (the default), off, require


def isolation_mode() -> str:
    """The session's isolation setting, from ``RPC_HARNESS_ISOLATION``."""
    mode = os.environ.get(ISOLATION_ENV, "auto").strip().lower() or "auto"
    if mode not in ("auto", "off", "require"):
        raise WorldSpecError(f"{ISOLATION_ENV}={clip(mode)}: use auto, off or require")
    return mode


def world_namespace(isolate: bool | None) -> tuple[Any, str]:
    """The world's network namespace (or None) and a sentence saying how it
    is isolated, or why it is not. ``isolate`` (the world's own setting)
    overrides the session's ``RPC_HARNESS_ISOLATION``."""
    mode = isolation_mode() if isolate is None else ("require" if isolate else "off")
    if mode == "off":
        return None, "none: the world shares the host's loopback (isolation turned off)"
    try:
        namespace = _netns.create()
    except (_netns.IsolationUnavailable, OSError) as error:
        if mode == "require":
            raise WorldSpecError(f"a network namespace for the world cannot be made here: {error}") from None
        return None, f"none: the world shares the host's loopback ({error})"
    how = "root" if namespace.kind == "net" else "an unprivileged user namespace"
    return namespace, f"a network namespace of its own ({how})"


def _start_rank(mp: Any, boot: Any, controlled: bool) -> tuple[Any, Any, Any]:
    from .._rank.boot import main

    if _asserts is not None:  # the rank rewrites the modules the forkserver did not preload
        boot = dataclasses.replace(boot, asserts=_asserts)
    ours, theirs = mp.Pipe(duplex=True)
    schedule_ours, schedule_theirs = mp.Pipe(duplex=True) if controlled else (None, None)
    proc = _RankProcess(target=main, args=(theirs, boot, schedule_theirs), name=f"rpc-rank{boot.rank}",
                        daemon=True)
    proc.start()
    theirs.close()
    if schedule_theirs is not None:
        schedule_theirs.close()
    return proc, ours, schedule_ours


def _free_port() -> int:
    """A port the kernel says is free on loopback, for the MASTER_PORT a
    spawned program may read (the harness's own rendezvous needs none)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
