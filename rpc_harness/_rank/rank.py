"""The life of one rank, inside its own process (stdlib + torch, no pytest).

The supervisor forks this from a forkserver that has torch imported already.
A rank captures its own output, arms its stack dump (``_stackdump``), dies
with its parent, arms the faults that need no code (RPC hooks, ``call:`` patches,
torch's retry log for message faults), and then either joins the RPC world
and runs the entry (``run`` worlds) or runs the program, which joins and
leaves by itself (``spawn`` worlds). Either way it leaves through its
supervisor (``_lifecycle``): gracefully only when no peer has died.
"""

from __future__ import annotations

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
from multiprocessing.connection import Connection

import torch  # preloaded in the forkserver: this is the point
import torch.distributed.autograd  # noqa: F401
import torch.distributed.rpc as rpc

from .. import _cuda_fork, _devices
from .. import _messages as msg
from ..c10d import clean as c10d_clean
from ..c10d import group as c10d_group
from ..c10d import hooks as c10d_hooks
from ..c10d.history import HISTORY
from ..context import EventLog, RankContext, activate
from ..errors import one_line
from ..faults import FaultPlan
from ..options import DEFAULT_RPC_TIMEOUT
from ..rank_setup import die_with_parent, intra_op_threads, pin_loopback, warm_math_kernels
from ..rpc import hooks as _rpc_hooks
from ..rpc import msgfaults as _msgfaults
from ..rpc import rendezvous as _rendezvous
from ..seeds import seed_everything
from . import asserts as _asserts
from . import callpoints as _callpoints
from . import clean as _clean
from . import gate as _gate
from . import lifecycle as _lifecycle
from . import stackdump as _stackdump
from .boot import Boot, rank_file

# In the forkserver, before it imports anything else: modules imported from
# here on (preloaded test modules, the program's) bind the wrapped RPC API.
_rpc_hooks.install()
c10d_hooks.install()  # failpoints and history at every collective, from Python or C++ (DDP, FSDP)
_lifecycle.install()
c10d_group.install()  # a spawned program's own init_process_group goes through its lifecycle
_rendezvous.install()  # off until the rank chooses (rpc_harness.rpc.rendezvous)
_devices.install()  # a spawned program's device maps: CUDA channels, or refused where there is no CUDA
warm_math_kernels()  # before any rank's RPC threads can race to choose oneMKL's kernels (rank_setup)
# A rank arms its stack dump on SIGUSR1 as it starts (main). Asked for its
# stacks before that, because a peer failed while it was still starting, it
# would die of the signal's default action and be reported as killed by
# SIGUSR1 rather than stopped: until then, the signal is ignored.
signal.signal(signal.SIGUSR1, signal.SIG_IGN)


def main(conn: Connection, boot: Boot, schedule: Connection | None = None) -> None:
    """Process target: run one rank and exit through ``os._exit``, never returning
    into multiprocessing's clean-up (which can wait on torch's threads)."""
    _capture_output(rank_file(boot.workdir, boot.rank, "log"))
    if boot.netns is not None:
        boot.netns.enter()  # while this process has one thread: before die_with_parent starts one
    die_with_parent()
    stacks = open(rank_file(boot.workdir, boot.rank, "stacks"), "w")  # noqa: SIM115 (kept open for the handler)
    # Stacks are asked for through a FIFO and read holding the GIL; SIGUSR1
    # (faulthandler) is the fallback for a rank that cannot answer so.
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True, chain=False)
    _stackdump.arm(stacks, rank_file(boot.workdir, boot.rank, "dump"))
    events = EventLog(rank_file(boot.workdir, boot.rank, "events"), boot.rank)
    events.write("start", pid=os.getpid())
    code = 1
    try:
        code = _run(conn, boot, events, schedule)
    except BaseException:  # a report that cannot be sent: the supervisor sees the exit code
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _run(conn: Connection, boot: Boot, events: EventLog, schedule: Connection | None = None) -> int:
    _prepare_process(boot)
    options = boot.options
    world_size = len(boot.names)
    ctx = RankContext(
        rank=boot.rank,
        names=() if boot.spawned else boot.names,
        world_size=world_size,
        world_seed=boot.seed,
        workdir=boot.workdir,
        faults=options.faults,
        fuzz=options.fuzz,
        events=events,
        deadline=options.deadline,
    )
    activate(ctx)
    _rendezvous.choose(options.rendezvous)  # torch's Gloo group, or the world's store in its place
    # Before anything touches CUDA (seeding may); raised where failures are reported.
    fork_error = _cuda_fork.rank_fork_error(wants_cuda=bool(options.placed_devices))  # devices are CUDA ones
    if fork_error is None:
        ctx.device, ctx.world_devices = _take_device(options.placed_devices, boot.rank), options.devices
        seed_everything(ctx.seed)
    torch.set_num_threads(intra_op_threads(dict(options.env), world_size))
    # Progress may be reported from RPC handler threads while the main thread
    # sends its own messages: one lock keeps the pipe's messages whole.
    send = _locked_sender(conn)
    ctx.progress_sink = _best_effort(send)
    life = _lifecycle.Lifecycle(
        ctx=ctx, events=events, send=send, conn=conn, init_method="file://" + os.path.join(boot.workdir, "store"),
        rpc_timeout=options.rpc_timeout or DEFAULT_RPC_TIMEOUT, spawned=boot.spawned,
        program_timeout=options.rpc_timeout, process_group=options.process_group, rpc=options.rpc,
        given_names=boot.names if boot.spawned else (),
    )
    _rpc_hooks.start(ctx, events)
    c10d_hooks.open_history(rank_file(boot.workdir, boot.rank, HISTORY), boot.rank)
    c10d_hooks.start(ctx)
    if schedule is not None and not boot.live:  # a controlled schedule: this rank's tasks wait for their turn
        ctx.schedule_point = _gate.start(schedule, boot.rank).point
    try:
        if fork_error is not None:
            raise fork_error
        if options.setup is not None:  # before the plan's patches: a call: fault aims at what the program calls
            options.setup.load(where=f"rank {boot.rank}: setup")()
        _arm_faults_without_code(options.faults, ctx)
        program = boot.entry.load(where=f"rank {boot.rank}")
        args, kwargs = pickle.loads(boot.payload)
        if boot.spawned:
            value = program(boot.rank, *args, **kwargs)
            if not life.announced:
                raise RuntimeError(
                    f"{boot.entry} returned without calling rpc.init_rpc or dist.init_process_group: every process "
                    "of a spawned world must join it (the others wait for it there)"
                )
        elif boot.live:  # a reused world: entries come one by one, each with a context of its own
            life.join()
            life.reused = True
            return _serve_entries(conn, boot, ctx, events, send, schedule)
        else:
            life.join()
            value = program(ctx, *args, **kwargs)
        if _gate._gate is not None:
            _gate._gate.end()  # the entry's task (a spawned program's ended in its shutdown)
        c10d_hooks.flush()
        ctx.flush_progress()
        events.write("entry_done", maxrss_kb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        ctx.record_hits()
    except BaseException as error:  # noqa: BLE001 - every failure is reported, skips too
        if _gate._gate is not None:
            _gate._gate.end(failed=True)  # before the failure is reported: the schedule ends here
        c10d_hooks.flush()
        ctx.flush_progress()
        ctx.record_hits()
        events.write("raised", error=one_line(error), phase=life.phase)
        send(_failure_message(error, life.phase))
        _shutdown_quietly()
        return 1
    try:
        # Plain pickle, sent as bytes: the pipe's own pickler would move every
        # tensor through a shared-memory segment of its own, ~0.3 ms each --
        # a tenth of a second for a parameter server's log of gradients.
        pickled = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as error:  # an unpicklable return value
        send(msg.Failed("result", f"TypeError: the entry's return value cannot be sent back: {error}", ""))
        _shutdown_quietly()
        return 1
    if life.left:  # the program shut RPC down itself, through its supervisor
        send(msg.Value(pickled))
    else:
        try:
            life.leave(value=pickled, after_entry=True)
        except BaseException as error:  # noqa: BLE001
            events.write("raised", error=one_line(error), phase="shutdown")
            send(_failure_message(error, "shutdown"))
            return 1
    life.wait_for_exit()
    return 0


def _serve_entries(conn: Connection, boot: Boot, world: RankContext, events: EventLog,
                   send: Callable[[msg.ToSupervisor], None], schedule: Connection | None) -> int:
    """A reused world's rank, joined: run each entry the supervisor sends
    (``msg.RunEntry``; under a controlled schedule through ``schedule``, its
    pipe to the scheduler) and check, when asked, that it left nothing
    behind (``_clean``). Ends when the supervisor does (it kills a world it ends)."""
    label = f"rank {boot.rank} ({world.name})"
    before = _clean.threads_now()
    groups = c10d_clean.before_entry()

    def look(thorough: bool) -> msg.Checked:
        return msg.Checked(*_clean.check(label, before, thorough=thorough,
                                         collective=None if world.group is None else groups))

    while True:
        try:
            word = conn.recv()
        except (EOFError, OSError):  # the supervisor is gone
            return 0
        match word:
            case msg.RunEntry():
                before, groups = _clean.threads_now(), c10d_clean.before_entry()
                said = _run_entry(word, boot, world, events, schedule)
                if word.check and isinstance(said, msg.EntryDone):
                    said = msg.EntryDone(said.value, checked=look(thorough=False))
                send(said)
                if word.check and not isinstance(said, msg.EntryDone):
                    send(look(thorough=False))
            case msg.Check(thorough):
                # The entry's gate: control given up (the supervisor heard
                # its Released before asking), its reader ended or ending.
                _gate.close()
                send(look(thorough))
            case msg.TryGroup():  # every rank clean, the default group not yet shown usable
                send(msg.Checked(tuple(f"group: {label} {text}"
                                       for text in c10d_clean.try_default_group(world.world_size))))
            case _:
                raise RuntimeError(f"the supervisor said {word!r} to a reused world's rank")


def _run_entry(order: msg.RunEntry, boot: Boot, world: RankContext, events: EventLog,
               schedule: Connection | None) -> msg.EntryDone | msg.Failed:
    """One entry of a reused world, in a context of its own: its seed (RNGs
    seeded again), its fault plan (armed now, its hit counts from zero), its
    deadline, its schedule (under control, the entry's task begins at its
    start, as a fresh world's does once it has joined: bring-up and
    teardown are no steps of it); ``world`` is the context the rank joined
    with. Returns what the supervisor is to hear of it."""
    ctx = RankContext(rank=boot.rank, names=world.names, world_seed=order.seed, workdir=boot.workdir,
                      faults=order.faults, events=events, deadline=order.deadline)
    ctx.device, ctx.world_devices, ctx.progress_sink = world.device, world.world_devices, world.progress_sink
    ctx.group = world.group
    activate(ctx)
    seed_everything(ctx.seed)
    _rpc_hooks.start(ctx, events)
    c10d_hooks.start(ctx)
    gate = None
    if order.controlled:
        if not _gate.close() or schedule is None:  # (the last entry's was closed at its check)
            raise RuntimeError("a reused world's rank cannot open a controlled schedule's gate: the last entry's "
                               "is still open, or the rank has no pipe to a scheduler")
        gate = _gate.start(schedule, boot.rank)
        ctx.schedule_point = gate.point
    patched = _arm_faults_without_code(order.faults, ctx)
    try:
        program = order.entry.load(where=f"rank {boot.rank}")
        args, kwargs = pickle.loads(order.payload)
        events.write("entry_start")
        if gate is not None:  # the entry is a task from here on
            gate.begin(ctx.name or str(ctx.rank), "main", "start")
        value = program(ctx, *args, **kwargs)
        if gate is not None:
            gate.end()
        c10d_hooks.flush()
        ctx.flush_progress()
        events.write("entry_done", maxrss_kb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        ctx.record_hits()
        pickled = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException as error:  # noqa: BLE001 - every failure is reported, skips too
        if gate is not None:
            gate.end(failed=True)  # before the failure is reported: the schedule ends here
        c10d_hooks.flush()
        ctx.flush_progress()
        ctx.record_hits()
        events.write("raised", error=one_line(error), phase="entry")
        return _failure_message(error, "entry")
    finally:
        for point in patched:
            _callpoints.undo(point)
        activate(world)
    del value
    return msg.EntryDone(pickled)


def _take_device(devices: tuple[str, ...], rank: int) -> torch.device:
    """This rank's device under the world option ``devices``, made current
    before anything of the program runs."""
    device = torch.device(_devices.rank_device(devices, rank, torch.cuda.device_count() if devices else 0))
    if device.type == "cuda":
        torch.cuda.set_device(device)
    return device


def _prepare_process(boot: Boot) -> None:
    os.environ.update(boot.options.env)
    pin_loopback()
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    if boot.spawned:
        # What the tutorials' programs read or set before init_rpc(name, rank, world_size).
        _lifecycle.set_spawn_environment(boot.rank, len(boot.names), boot.master_port)
    # init_rpc's own device-map exchange trips a torch deprecation warning that
    # would otherwise open every rank's output.
    warnings.filterwarnings("ignore", message="You are using a Backend")
    sys.path[:] = list(boot.sys_path)
    # Before the program loads: its modules rewritten as its pytest session
    # rewrites them, where the forkserver did not preload them so.
    _asserts.apply(boot.asserts)


def _arm_faults_without_code(plan: FaultPlan, ctx: RankContext) -> list[str]:
    """Before the program runs: every ``call:`` target of the plan becomes a
    failpoint in every rank (it fires only where a fault is aimed), and a
    plan with message failures turns on torch's log of failed sends.
    Returns the targets patched (a reused world's entry undoes them)."""
    targets = [point.removeprefix("call:") for point in sorted({f.point for f in plan if f.point.startswith("call:")})]
    for target in targets:
        _callpoints.patch(target, ctx.failpoint)
    if any(f.kind == "msgfail" for f in plan):
        _msgfaults.enable_retry_log()
    return targets


def _locked_sender(conn: Connection) -> Callable[[msg.ToSupervisor], None]:
    lock = threading.Lock()

    def send(message: msg.ToSupervisor) -> None:
        with lock:
            conn.send(message)

    return send


def _best_effort(send: Callable[[msg.ToSupervisor], None]) -> Callable[[msg.ToSupervisor], None]:
    # Progress is not worth failing an RPC handler for: once the supervisor
    # stopped listening (the world is being torn down) it is dropped.
    def send_progress(message: msg.ToSupervisor) -> None:
        try:
            send(message)
        except (OSError, EOFError):
            pass

    return send_progress


def _failure_message(error: BaseException, phase: str) -> msg.Failed:
    text = "".join(traceback.format_exception(error))
    kind = type(error)
    # pytest's Skipped claims to live in builtins; its base class gives it away.
    if kind.__name__ == "Skipped" and any(c.__name__ == "OutcomeException" for c in kind.__mro__):
        return msg.Failed(phase, str(getattr(error, "msg", error)), text, skipped=True)
    try:
        pickled = pickle.dumps(error)
    except Exception:  # many exceptions do not pickle; the text is what matters
        pickled = None
    return msg.Failed(phase, one_line(error), text, pickled)


def _shutdown_quietly() -> None:
    try:
        if rpc.api._is_current_rpc_agent_set():
            _lifecycle.original_shutdown(graceful=False)
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
