"""Run any scenario's ranks under ``torchrun``: the same world across machines.

The harness's own launcher forks every rank on one host. To spread a world
over several hosts, start this module with ``torchrun`` on each of them::

    torchrun --nnodes=2 --nproc-per-node=2 --node-rank=0 \\
        --master-addr=HOST0 --master-port=29500 \\
        -m rpc_harness.apps.torchrun --scenario ps --seed 5 --out result.json
    # and on the second host the same line with --node-rank=1

Each process reads ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and
``MASTER_PORT`` from the environment torchrun gives it, builds the same
:class:`~rpc_harness.context.RankContext` a harness rank gets (names from the
scenario, per-rank seed, fault plan), seeds the global RNGs the same way,
brings up the world's default process group on torchrun's store (the
scenario's own world options, or ``--process-group`` and ``--rpc``), then
its RPC agent, and runs ``scenario.entry(ctx, config)``. Rank 0 writes a JSON
summary to ``--out`` and every rank's return value, as the harness's
``WorldResult.values`` would hold it, to ``--out`` + ``.pt``
(``torch.load(path, weights_only=False)``): a world run here can be compared
gradient for gradient with the same seed run by :func:`rpc_harness.run_world`.

``--scenario`` takes a registered scenario's name (``rpc-harness list``) or
``module:attribute`` naming any object of the scenario shape
(:class:`rpc_harness.scenario.Scenario`).
Without torchrun, set the four variables yourself and start one process per
rank: rank 0 then hosts the store on ``MASTER_PORT``.

How a world ends. Each process forks its rank and watches it, as the
harness's supervisor watches its ranks: torchrun tears a job down when a
worker dies, so the worker must not be the rank a fault plan kills. The
rank writes its report (return value, error) to torchrun's store and waits
for rank 0's word on how to shut down (gracefully only when every rank
reported success, since a graceful shutdown waits for every peer); its
watcher writes what became of the process (exit code or signal, its event
log: the faults that fired; its collective history). Rank 0's watcher
judges the world with the harness's own rules and report
(:class:`~rpc_harness.WorldResult`): a planned kill is expected, a
collective world ends at its first death (a watcher stops its rank once a
peer has left, and a rank whose collective failed of it is stopped, not
failed), a fault that never fires fails the world, and where each rank was
in its collectives is said as the harness says it.

Networking: when ``MASTER_ADDR`` is a loopback address every rank is on this
host, and TensorPipe and Gloo are pinned to ``lo`` as in the harness. Across
hosts, choose the interface yourself (``TP_SOCKET_IFNAME``,
``GLOO_SOCKET_IFNAME``). RPC runs pickled code from any peer that reaches
it: run worlds only on a network you trust.

What torchrun cannot give: ``hang`` and ``freeze`` faults (a rank stopped
without ending is judged from its stacks, which stay on its host); use
:func:`rpc_harness.run_world` or ``rpc-harness run`` for those. Message
faults (``msgfail``, ``msgdelay``) work, but are counted from torch's log in
the ranks' output, which stays with torchrun: a message fault that never
fired is not reported here. Every rank arms its own deadline
(``--deadline``): past it, it dumps every thread's stack to stderr and
exits, so a hung world ends on its own (``kill -USR1 PID`` dumps a rank's
stacks at any time: faulthandler's dump, which can crash a rank whose
threads start or end meanwhile, so a last resort). A rank dies with its
watcher, and its watcher with the torchrun agent that started it, even one
killed by SIGKILL.
"""

from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import ipaddress
import json
import math
import os
import pickle
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.rpc as rpc

from rpc_harness import scenario as registry
from rpc_harness._parent.tally import unfired
from rpc_harness.c10d import group as c10d_group
from rpc_harness.c10d import hooks as c10d_hooks
from rpc_harness.c10d.history import history_path, where_ranks_are
from rpc_harness.context import EventLog, RankContext, activate, read_event_lines
from rpc_harness.errors import (
    FaultPlanError,
    ScenarioError,
    UsageError,
    WorldSpecError,
    clip,
    one_line,
)
from rpc_harness.events import FaultFired, faults_fired
from rpc_harness.faults import FAULT_KINDS, FaultPlan
from rpc_harness.interrupts import terminate_as_interrupt
from rpc_harness.options import COMMAND_LINE_DEADLINE, WorldOptions, add_option, whole_argument
from rpc_harness.rank_setup import die_with_parent, rpc_backend, warm_math_kernels
from rpc_harness.rank_setup import pin_loopback as pin_to_lo
from rpc_harness.repro import Repro, scenario_call
from rpc_harness.result import DIED, HUNG, KILLED, OK, RAISED, STOPPED, RankOutcome, WorldResult
from rpc_harness.scenario import Scenario
from rpc_harness.seeds import seed_everything
from rpc_harness.spec import check_layers

LEADER = 0  # the rank that collects every rank's report and writes the summary
# How ranks find the store. env:// reads MASTER_ADDR/MASTER_PORT, and torch's
# env:// handler connects to it as a *client* when torchrun sets
# TORCHELASTIC_USE_AGENT_STORE=True: torchrun's agent already serves a
# TCPStore on MASTER_PORT (static and c10d rendezvous alike), so a rank must
# not try to start a second server there. Without torchrun, rank 0 hosts it.
INIT_METHOD = "env://"
_MAX_LIST = 1000  # the JSON summary keeps at most this many items of a list
_SMALL_TENSOR = 16  # tensors up to this many elements are written out in full


# -- what torchrun gives --------------------------------------------------------------


@dataclass(frozen=True)
class LaunchEnv:
    """This process's place in the world, from the environment torchrun sets."""

    rank: int
    world_size: int
    master_addr: str
    master_port: int
    local_rank: int = 0
    agent_store: bool = False  # torchrun's agent hosts the store; ranks are its clients

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> LaunchEnv:
        """Read and check RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for var, kind in (("RANK", int), ("WORLD_SIZE", int), ("MASTER_ADDR", str), ("MASTER_PORT", int)):
            text = environ.get(var)
            if not text:
                raise UsageError(
                    f"environment variable {var} is not set; start this module with torchrun "
                    "(or set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT yourself)"
                )
            try:
                values[var] = kind(text)
            except ValueError:
                raise UsageError(f"environment variable {var}={clip(text)} is not an integer") from None
        env = cls(
            rank=values["RANK"],
            world_size=values["WORLD_SIZE"],
            master_addr=values["MASTER_ADDR"],
            master_port=values["MASTER_PORT"],
            local_rank=int(environ.get("LOCAL_RANK", "0") or 0),
            agent_store=environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True",
        )
        if env.world_size < 1 or not 0 <= env.rank < env.world_size:
            raise UsageError(f"RANK={env.rank} does not fit WORLD_SIZE={env.world_size}")
        return env


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name) means this machine only."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)


# -- the scenario ----------------------------------------------------------------------


def load_scenario(name: str) -> Scenario:
    """A registered scenario, or ``module:attribute`` of the scenario shape."""
    try:
        return registry.resolve(name)
    except ScenarioError as error:
        raise UsageError(f"--scenario {clip(name)}: {error}") from None


def build_config(scenario: Scenario, pairs: Sequence[str] = (), steps: int | None = None) -> Any:
    """The scenario's config with ``--set KEY=VALUE`` (and ``--steps``)
    applied, typed and validated exactly as ``rpc-harness run`` does."""
    try:
        return registry.make_config(scenario, registry.parse_overrides(scenario, pairs, steps))
    except WorldSpecError as error:
        raise UsageError(str(error)) from None


def build_plan(text: str | None, names: Sequence[str], failpoints: Sequence[str] | None) -> FaultPlan:
    """Parse and check ``--faults`` for this world; refuse what torchrun cannot judge."""
    plan = FaultPlan.parse(text, where="--faults")
    plan.validate(names, failpoints=failpoints, where="--faults")
    refused = [str(f) for f in plan if not f.traits.under_torchrun]
    if refused:
        *most, last = [name for name, kind in FAULT_KINDS.items() if not kind.under_torchrun]
        kinds = f"{', '.join(most)} and {last}" if most else last
        raise FaultPlanError(
            f"--faults: {', '.join(refused)}: {kinds} faults need the harness's supervisor "
            "(a rank that stops without ending is judged from its stacks, which stay on its host); "
            "run them with rpc_harness.run_world or `rpc-harness run`"
        )
    return plan


# -- joining the RPC world --------------------------------------------------------------


def pin_loopback(master_addr: str) -> bool:
    """Pin TensorPipe and Gloo to ``lo`` when the world is on this host only.

    Otherwise they bind to whatever the host name resolves to, as the harness
    found; across hosts the user picks the interface, so nothing is forced.
    """
    if not is_loopback(master_addr):
        return False
    pin_to_lo()
    return True


# -- what a rank and its watcher leave in the store --------------------------------------
# Every process of the job talks through torchrun's store, under KEYS: a rank
# writes its report there, its watcher what became of its process, the leader
# the verdict on how to shut down. A rank's report cannot go over RPC: a
# world of collectives only has no RPC agent, and a killed rank sends nothing.
KEYS = "rpc_harness/torchrun"
GROUP_KEYS = "rpc_harness/c10d"  # the default process group's keys, beside KEYS
ENDED = "ended"  # (rank, why): the first rank a collective world lost
VERDICT = "verdict"  # b"1": every rank shuts down gracefully; b"0": not
READY = "ready"  # ranks whose report or end is in: the leader decides at world_size
POLL = 0.05  # seconds between a watcher's looks at its rank and the store
END_GRACE = 15.0  # seconds past the deadline a watcher waits for its rank, the leader for the others
ENTRY_START = "entry_start"  # the event a rank writes as its entry starts
ONE_LOST = "and a collective world cannot go on without one of its ranks"  # as the harness's supervisor says


def report_key(rank: int) -> str:
    return f"report/{rank}"


def end_key(rank: int) -> str:
    return f"end/{rank}"


def connect_store(env: LaunchEnv, *, host: bool, timeout: float) -> Any:
    """The job's store, as seen under :data:`KEYS`. ``host``: this process
    serves it (rank 0's watcher, where no torchrun agent does)."""
    store = dist.TCPStore(env.master_addr, env.master_port, None, host, timedelta(seconds=timeout),
                          wait_for_workers=False)
    return dist.PrefixStore(KEYS, store)


def ended_by(store: Any) -> tuple[int, str] | None:
    """The rank a collective world lost first, and what happened to it (None: none yet)."""
    if not store.check([ENDED]):
        return None
    rank, how = pickle.loads(store.get(ENDED))
    return rank, how


def say_ended(store: Any, rank: int, how: str) -> None:
    """Record that ``rank`` left the world (``how``: a sentence), unless another did first."""
    store.compare_set(ENDED, "", pickle.dumps((rank, how)))


@dataclass
class RankReport:
    """What one rank writes to the store after its entry."""

    rank: int
    name: str
    host: str
    pid: int
    status: str  # "ok", "raised", or "stopped" (it raised as a peer's death ended a collective world)
    seconds: float
    value: Any = None
    error: str | None = None
    traceback: str | None = None
    phase: str = "entry"  # where it raised: "start-up" (the group, the RPC agent) or "entry"
    stopped_because: str = ""


@dataclass
class RankEnd:
    """What the watcher of one rank writes once the rank's process has ended."""

    rank: int
    host: str
    pid: int
    exitcode: int | None
    signal: str | None
    events: list[dict]  # the rank's event log: faults fired, failpoints reached
    history: str  # its collectives, as rpc_harness.c10d.record wrote them
    killed_by_plan: bool = False
    stopped_because: str = ""  # its watcher stopped it: the world had lost a rank
    hung: bool = False  # it ran past its deadline
    ended_at: float = 0.0  # time.time() when its watcher saw it end (this host's clock)


class _EndingLog(EventLog):
    """A rank's event log that, as a fault that ends the rank fires, first
    tells the store: its peers' collectives fail as its process dies, and
    each must know the death was the plan's before its failure is judged
    (the harness's supervisor knows it from the same event)."""

    def __init__(self, path: str, rank: int, label: str, store: Any, collective: bool) -> None:
        super().__init__(path, rank)
        self._label, self._store, self._collective = label, store, collective

    def record(self, fired: FaultFired) -> None:
        super().record(fired)
        if self._collective and FAULT_KINDS[fired.kind].ends_rank:
            say_ended(self._store, fired.rank, f"{self._label} was killed by the fault plan, {ONE_LOST}")


# -- one rank ----------------------------------------------------------------------


@dataclass(frozen=True)
class RunArgs:
    """Everything a rank needs besides the environment."""

    scenario: str
    seed: int
    faults: str | None = None
    overrides: tuple[str, ...] = ()
    steps: int | None = None
    fuzz: float = 0.0
    deadline: float = COMMAND_LINE_DEADLINE
    out: str | None = None
    process_group: str | None = None  # None: the scenario's own (its ``world``), else none
    rpc: bool | None = None  # None: the scenario's own, else True


@dataclass(frozen=True)
class World:
    """The world every process of the job checked alike before any rank started."""

    scenario: Scenario
    config: Any
    names: tuple[str, ...]
    plan: FaultPlan
    process_group: str | None
    rpc: bool
    started: float
    deadline: float

    @property
    def until(self) -> float:
        return self.started + self.deadline

    @property
    def collective(self) -> bool:
        return self.process_group is not None


def world_options(scenario: Scenario, args: RunArgs, plan: FaultPlan | None = None) -> tuple[str | None, bool]:
    """``(process_group, rpc)``: the scenario's own world options (its
    ``world``), overridden by ``--process-group`` and ``--rpc``, checked as
    every door checks them (with the fault plan: no RPC fault in a world
    without RPC)."""
    given = {name: value for name, value in (("process_group", args.process_group), ("rpc", args.rpc))
             if value is not None}
    own = {name: value for name, value in getattr(scenario, "world", {}).items()
           if name in ("process_group", "rpc") and name not in given}
    try:
        options = WorldOptions.from_values({**own, **given, "faults": plan}, where="--process-group/--rpc")
        check_layers(options, spawned=False, where=f"--scenario {scenario.name}")
    except WorldSpecError as error:
        raise UsageError(str(error)) from None
    if options.process_group == "nccl":
        raise UsageError("--process-group nccl: not under torchrun yet (each rank's GPU is not chosen here); "
                         "run nccl worlds with rpc_harness.run_world or `rpc-harness run`")
    return options.process_group, options.rpc


def run_rank(args: RunArgs, env: LaunchEnv) -> int:
    """Run this process's rank of the world; the exit status to return.

    The rank runs in a child process; this one watches it, as the harness's
    supervisor watches its ranks: a rank the fault plan kills is expected,
    and torchrun, which would tear the job down at a worker's death, sees
    its worker exit as the world's rules say."""
    started = time.monotonic()
    scenario = load_scenario(args.scenario)
    config = build_config(scenario, args.overrides, args.steps)
    try:
        names = registry.world_names(scenario, env.world_size, where="WORLD_SIZE")
    except WorldSpecError as error:
        raise UsageError(str(error)) from None
    plan = build_plan(args.faults, names, scenario.failpoints)
    process_group, use_rpc = world_options(scenario, args, plan)
    world = World(scenario, config, tuple(names), plan, process_group, use_rpc, started, args.deadline)
    c10d_hooks.install()  # once, before the fork: the rank inherits the kernels
    folder = tempfile.mkdtemp(prefix="rpc-harness-torchrun-")
    try:
        # Before this process starts any thread (the store's): a fork copies only the forking one.
        child = os.fork()
        if child == 0:
            code = 1
            try:
                code = _rank_process(args, env, world, folder)
            except BaseException:  # noqa: BLE001 - the watcher reports the exit code
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        # torchrun stops its workers with SIGTERM: then the rank goes too, and the folder.
        terminate_as_interrupt()
        try:
            return _watch(child, args, env, world, folder)
        except BaseException:
            _end(child)
            raise
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _end(child: int) -> None:
    """Kill the rank and reap it (its watcher is leaving)."""
    try:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def _rank_process(args: RunArgs, env: LaunchEnv, world: World, folder: str) -> int:
    """The rank itself: its context, the default process group, the RPC
    agent, the entry; its report to the store; then the leader's word on how
    to shut down."""
    die_with_parent()  # with its watcher
    # A hung world must end by itself: torchrun has no deadline of its own.
    faulthandler.dump_traceback_later(max(1.0, world.until - time.monotonic()), exit=True)
    faulthandler.register(signal.SIGUSR1, all_threads=True, chain=False)
    if not env.agent_store:  # rank 0's watcher serves the store: torch's env:// must not start another
        os.environ["TORCHELASTIC_USE_AGENT_STORE"] = "True"
    pin_loopback(env.master_addr)
    # init_rpc's device-map exchange trips a torch deprecation warning (as in _rank.py).
    warnings.filterwarnings("ignore", message="You are using a Backend")
    # One store client for each user: a client serves one request at a time,
    # and a wait holds it until its key comes. The main thread's (its report,
    # then the verdict it waits for); the fault's word that the rank is about
    # to be killed, said on whatever thread reaches the fault; the group's.
    # Measured with one client: a ddp_rpc trainer killed inside an all-reduce
    # that its RPC handler ran, its entry long returned and waiting for the
    # verdict, could not say so until the deadline.
    store = connect_store(env, host=False, timeout=args.deadline)
    announcer = connect_store(env, host=False, timeout=args.deadline)
    label = f"rank {env.rank} ({world.names[env.rank]})"
    events = _EndingLog(events_path(folder, env.rank), env.rank, label, announcer, world.collective)
    ctx = RankContext(rank=env.rank, names=world.names, world_seed=args.seed, faults=world.plan, fuzz=args.fuzz,
                      deadline=args.deadline, events=events, workdir=folder)
    activate(ctx)
    seed_everything(ctx.seed)
    warm_math_kernels()  # before init_rpc starts the threads that could race for them (rank_setup)
    c10d_hooks.open_history(history_path(folder, env.rank), env.rank)
    c10d_hooks.start(ctx)

    report = RankReport(ctx.rank, ctx.name, socket.gethostname(), os.getpid(), "ok", 0.0, phase="start-up")
    try:
        if world.process_group is not None:
            c10d_group.install()
            group_store = connect_store(env, host=False, timeout=args.deadline).underlying_store
            ctx.group = c10d_group.bring_up(world.process_group, dist.PrefixStore(GROUP_KEYS, group_store),
                                            ctx.rank, ctx.world_size)
        if world.rpc:
            backend, options = rpc_backend(ctx, INIT_METHOD, rpc_timeout=args.deadline)
            rpc.init_rpc(ctx.name, backend=backend, rank=ctx.rank, world_size=ctx.world_size,
                         rpc_backend_options=options)
        report.phase = "entry"
        events.write(ENTRY_START)  # so that its watcher can say where a rank that died was
        report.value = world.scenario.entry(ctx, world.config)
    except BaseException as error:  # noqa: BLE001 - every failure goes into the report
        report.status = "raised"
        report.error = one_line(error)
        report.traceback = "".join(traceback.format_exception(error))
    c10d_hooks.flush()
    ctx.record_hits()
    report.seconds = time.monotonic() - world.started
    _check_sendable(report)
    lost = ended_by(store) if world.collective and report.status == "raised" else None
    if lost is not None and lost[0] != ctx.rank:
        # Its collective failed because a peer had left: stopped, as the harness says.
        report.status, report.stopped_because = "stopped", f"{lost[1]} (it had raised: {report.error})"
    elif report.traceback:
        print(report.traceback, file=sys.stderr, flush=True)
    store.set(report_key(ctx.rank), pickle.dumps(report))
    if world.collective and report.status != "ok":
        # Out at once: its peers' collectives with it fail as its process
        # ends, rather than wait out the group's timeout.
        if world.rpc:
            rpc.shutdown(graceful=False)
        return 1
    graceful = _verdict(store, world.until)
    if world.rpc:
        rpc.shutdown(graceful=graceful)
    c10d_group.tear_down(graceful=graceful)
    return 0 if report.status == "ok" else 1


def events_path(folder: str, rank: int) -> str:
    return os.path.join(folder, f"rank{rank}.events")


def _verdict(store: Any, until: float) -> bool:
    """The leader's word: a graceful shutdown only when every rank reported
    success, since a graceful shutdown waits for every peer, as in the harness."""
    try:
        store.wait([VERDICT], timedelta(seconds=max(1.0, until - time.monotonic())))
    except (RuntimeError, dist.DistStoreError):  # no word before the deadline: leave without waiting
        return False
    return store.get(VERDICT) == b"1"


def _check_sendable(report: RankReport) -> None:
    """A value that cannot be pickled can neither reach the leader nor be
    saved: report that instead, as the harness does."""
    try:
        pickle.dumps(report.value)
    except Exception as error:  # noqa: BLE001 - whatever pickling raises
        report.status, report.value = "raised", None
        report.error = f"TypeError: the entry's return value cannot be sent back: {error}"


# -- the watcher ----------------------------------------------------------------------


def _watch(child: int, args: RunArgs, env: LaunchEnv, world: World, folder: str) -> int:
    """Watch the rank until its process ends; write its end to the store
    (rank 0: gather the world's, decide how the ranks shut down, write the
    summary). In a collective world a rank still in its entry is stopped
    once a peer has left, as the harness's supervisor stops it."""
    store = connect_store(env, host=env.rank == LEADER and not env.agent_store, timeout=args.deadline)
    leader = _Leader(store, args, world) if env.rank == LEADER else None
    stopped_because, hung, counted = "", False, False
    while True:
        pid, status = os.waitpid(child, os.WNOHANG)
        if pid:
            break
        if not counted and store.check([report_key(env.rank)]):
            store.add(READY, 1)
            counted = True
        lost = ended_by(store) if world.collective and not stopped_because and not counted else None
        if lost is not None and lost[0] != env.rank:
            stopped_because = lost[1]
            os.kill(child, signal.SIGKILL)
        if time.monotonic() > world.until + END_GRACE / 2 and not hung:
            hung = True  # its own deadline should have ended it: its stacks are on its stderr
            os.kill(child, signal.SIGKILL)
        if leader is not None:
            leader.decide()
        time.sleep(POLL)
    code = os.waitstatus_to_exitcode(status)
    events = read_event_lines(events_path(folder, env.rank))
    fired = [e for e in faults_fired(events) if FAULT_KINDS[e.kind].ends_rank]
    end = RankEnd(env.rank, socket.gethostname(), child, code if code >= 0 else None,
                  signal.Signals(-code).name if code < 0 else None, events, _read(history_path(folder, env.rank)),
                  killed_by_plan=code == -signal.SIGKILL and bool(fired) and not stopped_because,
                  stopped_because=stopped_because, hung=hung or time.monotonic() > world.until,
                  ended_at=time.time())
    if world.collective and code < 0 and not end.killed_by_plan and not stopped_because:
        say_ended(store, env.rank, f"rank {env.rank} ({world.names[env.rank]}) died, {ONE_LOST}")
    # Read before the end is written: once every end is in, rank 0's watcher
    # may finish and take the store with it (where no torchrun agent serves it).
    failed = outcome(env.rank, world.names[env.rank], _load(store, report_key(env.rank)), end).failed
    store.set(end_key(env.rank), pickle.dumps(end))
    if not counted:
        store.add(READY, 1)
    if leader is not None:
        return leader.finish()
    return 1 if failed else 0


def _read(path: str) -> str:
    try:
        with open(path, "rb") as file:
            return file.read().split(b"\0", 1)[0].decode(errors="replace")
    except OSError:
        return ""


def _load(store: Any, key: str) -> Any:
    return pickle.loads(store.get(key)) if store.check([key]) else None


class _Leader:
    """Rank 0's watcher: decides how the ranks shut down once each has
    reported or ended, then gathers every end and judges the world."""

    def __init__(self, store: Any, args: RunArgs, world: World) -> None:
        self.store, self.args, self.world = store, args, world
        self.decided = False

    def decide(self) -> None:
        if self.decided or int(self.store.add(READY, 0)) < len(self.world.names):
            return
        reports = [_load(self.store, report_key(rank)) for rank in range(len(self.world.names))]
        graceful = all(r is not None and r.status == "ok" for r in reports)
        self.store.set(VERDICT, b"1" if graceful else b"0")
        self.decided = True

    def finish(self) -> int:
        size = len(self.world.names)
        stop = self.world.until + END_GRACE
        while time.monotonic() < stop:
            self.decide()
            if all(self.store.check([end_key(rank)]) for rank in range(size)):
                break
            time.sleep(POLL)
        if not self.decided:
            self.store.set(VERDICT, b"0")  # whoever still waits: leave without waiting for the rest
        reports = {rank: _load(self.store, report_key(rank)) for rank in range(size)}
        ends = {rank: _load(self.store, end_key(rank)) for rank in range(size)}
        lost = ended_by(self.store) if self.world.collective else None
        result = judge_world(self.world, self.args, reports, ends, lost[1] if lost else "",
                             seconds=time.monotonic() - self.world.started)
        summary = summarise_world(self.world, self.args, result, reports, ends)
        if self.args.out:
            write_outputs(self.args.out, summary, result.values)
        print(summary["headline"], flush=True)
        if not result.ok:
            print(result.report(replay=False), flush=True)
        return 0 if result.ok else 1


# -- judging the world, as the harness's supervisor does ----------------------------------


def outcome(rank: int, name: str, report: RankReport | None, end: RankEnd | None) -> RankOutcome:
    """One rank's outcome, in the harness's terms, from what it and its watcher wrote."""
    result = RankOutcome(rank, name, status=DIED)
    if end is not None:
        result.exitcode, result.signal, result.events = end.exitcode, end.signal, end.events
        if any(event.get("kind") == ENTRY_START for event in end.events):
            result.phase = "entry"
    if report is not None:
        result.phase, result.error, result.traceback = report.phase, report.error, report.traceback
        result.value = report.value if report.status == "ok" else None
    if end is None:
        result.error = "its watcher sent nothing before the deadline (its host or its torchrun agent is gone)"
    elif end.killed_by_plan:
        result.status = KILLED
    elif report is not None and report.status == "ok":
        result.status = OK if end.exitcode == 0 or end.stopped_because else DIED
        result.phase = "done" if result.status == OK else "shutdown"
    elif report is not None and report.status == "stopped":
        result.status, result.stopped_because = STOPPED, report.stopped_because
    elif end.stopped_because:
        result.status, result.stopped_because, result.phase = STOPPED, end.stopped_because, "entry"
    elif report is not None and report.status == "raised":
        result.status = RAISED
    elif end.hung:
        result.status, result.phase = HUNG, "entry"
    return result


def judge_world(world: World, args: RunArgs, reports: Mapping[int, RankReport | None],
                ends: Mapping[int, RankEnd | None], ended: str, *, seconds: float) -> WorldResult:
    """The world as a :class:`~rpc_harness.WorldResult`: the harness's own
    verdict and report (dead ranks only the killed ones, a fault that never
    fired, where each rank was in its collectives)."""
    ranks = [outcome(rank, name, reports.get(rank), ends.get(rank)) for rank, name in enumerate(world.names)]
    stopped_early = any(o.failed for o in ranks)
    problems = []
    if not stopped_early:
        # Counted from the ranks' events: failpoint faults only (torch's
        # faulty agent logs message faults to the ranks' output, which stays
        # with torchrun).
        at_failpoints = FaultPlan(tuple(f for f in world.plan if f.traits.at_failpoint))
        problems += unfired(at_failpoints, ranks)
    collectives: list[str] = []
    if stopped_early or any(o.status in (KILLED, DIED) for o in ranks):
        with tempfile.TemporaryDirectory(prefix="rpc-harness-torchrun-") as folder:
            for rank, end in ends.items():
                if end is not None:
                    with open(history_path(folder, rank), "w") as file:
                        file.write(end.history)
            collectives = where_ranks_are(folder, len(world.names))
    return WorldResult(
        names=world.names, seed=args.seed, faults=world.plan, deadline=args.deadline, ranks=ranks,
        duration=seconds, timed_out=any(o.status == HUNG for o in ranks), repro=replay_line(world, args),
        problems=problems, fuzz=args.fuzz, collectives=collectives, ended_by=ended,
    )


def replay_line(world: World, args: RunArgs) -> str:
    """The same world in one host's harness, for a side-by-side replay."""
    options: dict[str, Any] = {"faults": world.plan, "fuzz": args.fuzz}
    options.update((name, value) for name, value in (("process_group", args.process_group), ("rpc", args.rpc))
                   if value is not None)
    overrides = registry.config_overrides(world.scenario, world.config)
    return scenario_call(Repro(world_size=len(world.names), seed=args.seed, scenario=world.scenario.name,
                               config=overrides, options=options))


# -- the summary ----------------------------------------------------------------------


def summarise_world(world: World, args: RunArgs, result: WorldResult, reports: Mapping[int, RankReport | None],
                    ends: Mapping[int, RankEnd | None]) -> dict[str, Any]:
    """The JSON-ready summary the leader writes."""
    ranks = []
    for outcome_ in result.ranks:
        report, end = reports.get(outcome_.rank), ends.get(outcome_.rank)
        entry: dict[str, Any] = {"rank": outcome_.rank, "name": outcome_.name, "status": outcome_.status,
                                 "describe": outcome_.describe()}
        if end is not None:
            entry.update(host=end.host, pid=end.pid, exitcode=end.exitcode, signal=end.signal, ended_at=end.ended_at)
        if report is not None:
            entry.update(seconds=report.seconds, error=report.error, traceback=report.traceback,
                         value=summarise(report.value))
        if outcome_.stopped_because:
            entry["stopped_because"] = outcome_.stopped_because
        ranks.append(entry)
    failed = [f"{o.name} {o.status}" for o in result.ranks if o.failed] + result.problems
    label = world.scenario.name
    how = f"ok in {result.duration:.2f}s" if result.ok else f"failed ({', '.join(failed)})"
    if result.ok and result.ended_by:
        how += f", ended early by its fault plan: {result.ended_by}"
    return {
        "headline": f"rpc-harness torchrun: {label} world of {result.world_size} {how} (seed {args.seed})",
        "ok": result.ok,
        "scenario": label,
        "module": type(world.scenario).__module__,
        "world_size": result.world_size,
        "names": list(world.names),
        "seed": args.seed,
        "faults": str(world.plan),
        "fired": [dataclasses.asdict(fired) for fired in result.fired_faults()],
        "fuzz": args.fuzz,
        "process_group": world.process_group,
        "rpc": world.rpc,
        "config": summarise(dataclasses.asdict(world.config)) if dataclasses.is_dataclass(world.config) else None,
        "seconds": result.duration,
        "hosts": sorted({e["host"] for e in ranks if "host" in e}),
        "torch": torch.__version__,
        "ranks": ranks,
        "problems": result.problems,
        "ended_by": result.ended_by,
        "collectives": result.collectives,
        "report": result.report(replay=False),
        # The same world in one host's harness, for a side-by-side replay.
        "replay": result.repro,
    }


def summarise(value: Any, depth: int = 0) -> Any:
    """A JSON-ready picture of a return value: tensors as shape, dtype, norm
    (and values when small), dataclasses as dicts, non-finite floats as text."""
    if depth > 8:
        return _short_repr(value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, torch.Tensor):
        tensor = value.detach()
        out: dict[str, Any] = {"tensor": list(tensor.shape), "dtype": str(tensor.dtype).replace("torch.", "")}
        if tensor.is_floating_point() or tensor.is_complex():
            out["norm"] = summarise(float(tensor.double().norm()) if tensor.numel() else 0.0)
        if tensor.numel() <= _SMALL_TENSOR:
            out["values"] = summarise(tensor.tolist(), depth + 1)
        return out
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: summarise(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)}
        return {"type": type(value).__name__, **fields}
    if isinstance(value, Mapping):
        return {str(k): summarise(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = list(value)
        out_list = [summarise(v, depth + 1) for v in items[:_MAX_LIST]]
        if len(items) > _MAX_LIST:
            out_list.append(f"... {len(items) - _MAX_LIST} more")
        return out_list
    return _short_repr(value)


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


def write_outputs(out: str, summary: Mapping[str, Any], values: list[Any]) -> None:
    """``out``: the JSON summary; ``out + ".pt"``: every rank's return value."""
    folder = os.path.dirname(os.path.abspath(out))
    os.makedirs(folder, exist_ok=True)
    values_path = out + ".pt"
    torch.save(values, values_path)
    document = dict(summary, values_file=os.path.abspath(values_path))
    tmp = out + ".tmp"
    with open(tmp, "w") as file:
        json.dump(document, file, indent=2, allow_nan=False)
        file.write("\n")
    os.replace(tmp, out)  # a reader never sees half a summary


# -- command line ------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m rpc_harness.apps.torchrun",
        description="Run one rank of a scenario's world; start it with torchrun on every host.",
    )
    parser.add_argument("--scenario", required=True,
                        help="a registered scenario (rpc-harness list) or module:attribute of the scenario shape")
    add_option(parser, "seed", required=True, help="the world's root seed (same on every host)")
    parser.add_argument("--faults", default=None, help="fault plan (delay, kill, raise, msgfail, msgdelay)")
    add_option(parser, "process_group", default=None,
               help="the default process group every rank brings up on torchrun's store before its RPC agent: "
                    "gloo (default: the scenario's own, as rpc-harness run gives it)")
    add_option(parser, "rpc", default=None,
               help="whether every rank joins the RPC world: yes or no (default: the scenario's own)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a scenario config field (repeatable)")
    parser.add_argument("--steps", type=whole_argument, default=None, help="the scenario's training budget")
    add_option(parser, "fuzz", default=0.0)
    add_option(parser, "deadline", default=COMMAND_LINE_DEADLINE,
               help=f"seconds before a rank dumps its stacks and exits (default {COMMAND_LINE_DEADLINE:g})")
    parser.add_argument("--out", default=None, help="rank 0's JSON summary; return values go to OUT.pt")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rpc_harness.apps.torchrun ...``: run this process's rank."""
    ns = _parser().parse_args(argv)
    args = RunArgs(
        scenario=ns.scenario, seed=ns.seed, faults=ns.faults, overrides=tuple(ns.overrides),
        steps=ns.steps, fuzz=ns.fuzz, deadline=ns.deadline, out=ns.out, process_group=ns.process_group, rpc=ns.rpc,
    )
    # torchrun starts each worker in a session of its own: a torchrun killed
    # by SIGKILL would leave its workers running without this.
    die_with_parent()
    try:
        env = LaunchEnv.from_environ()
        return run_rank(args, env)
    except (UsageError, FaultPlanError) as error:
        print(f"rpc_harness.apps.torchrun: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rpc_harness.apps.torchrun: interrupted: the rank was stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    # Run the module's own import, not this ``__main__`` copy: the reports
    # in the store are pickled by class name, and rank 0's watcher must find
    # them as ``rpc_harness.apps.torchrun`` classes, as anyone else would.
    from rpc_harness.apps.torchrun import main as _main

    sys.exit(_main())
