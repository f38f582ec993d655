"""What a rank's code sees: its identity, its seeds, failpoints, events and progress.

``entry(ctx)`` receives a :class:`RankContext`. Code running inside a rank but
far from ``entry`` (an RPC handler, a remote module) reaches the same object
through :func:`current_context`, hits failpoints with :func:`failpoint` and
reports how far it has come with :func:`progress`; both are no-ops outside a
world, so the same code runs in a single-process baseline.
"""

from __future__ import annotations

import json
import mmap
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from . import _messages as msg
from .errors import InjectedFault
from .events import HITS, FaultFired
from .faults import FAILPOINT_KINDS, Fault, FaultPlan
from .progress import check_progress
from .seeds import derive_seed, rank_seed

_current: RankContext | None = None
PROGRESS_INTERVAL = 0.05  # seconds: fast enough for a bar, cheap in a tight loop


def current_context() -> RankContext | None:
    """The context of the rank this code runs in, or None outside a world."""
    return _current


def activate(ctx: RankContext | None) -> RankContext | None:
    """Make ``ctx`` the context that :func:`failpoint`, :func:`progress` and
    :func:`current_context` see in this process; return the one before.

    The harness calls this in every rank it starts; a launcher of another
    kind (the torchrun runner, a benchmark) calls it the same way.
    """
    global _current
    previous, _current = _current, ctx
    return previous


def failpoint(name: str) -> None:
    """Mark a named point where a fault plan may act; free when nothing is armed."""
    ctx = _current
    if ctx is not None:
        ctx.failpoint(name)


def progress(done: int, total: int, unit: str = "steps", **metrics: float) -> None:
    """Report that ``done`` of ``total`` units of this rank's work are done,
    with optional numeric ``metrics`` (e.g. ``loss=0.4``). Outside a world it
    reports nothing, but checks its arguments all the same, so that a
    single-process baseline running a rank's code catches a bad call too."""
    ctx = _current
    if ctx is None:
        check_progress(done, total, unit, metrics)
    else:
        ctx.progress(done, total, unit, **metrics)


class EventLog:
    """Append-only JSON-lines log of one rank's life.

    The file is memory-mapped: an event is a copy into the page cache, with
    no system call, and is in the file the moment it is written, so a
    SIGKILLed rank leaves everything up to its death behind. (A ``write(2)``
    per event also releases and retakes the GIL, which a rank's RPC threads
    contend for; with one RPC recorded per call, that showed.) The mapped
    file is longer than its events; readers stop at the first NUL byte.
    """

    INITIAL_SIZE = 1 << 20  # grows by doubling; sparse until written

    def __init__(self, path: str | None, rank: int) -> None:
        self._rank = rank
        self._lock = threading.Lock()
        self._map: mmap.mmap | None = None
        self._end = 0
        if path:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.ftruncate(fd, self.INITIAL_SIZE)
                self._map = mmap.mmap(fd, self.INITIAL_SIZE)
            finally:
                os.close(fd)  # the mapping keeps the file

    def write(self, kind: str, **data: Any) -> None:
        if self._map is None:
            return
        record = {"t": time.time(), "rank": self._rank, "tid": threading.get_ident(), "kind": kind}
        record.update(data)
        self.append((json.dumps(record, default=repr) + "\n").encode())

    def record(self, fired: FaultFired) -> None:
        """Write a fault that fired."""
        event = fired.as_event()
        event["tid"] = threading.get_ident()
        self.append((json.dumps(event) + "\n").encode())

    def append(self, line: bytes) -> None:
        """Append one event already encoded as a JSON line (for hot paths)."""
        if self._map is None:
            return
        with self._lock:
            end = self._end + len(line)
            if end > len(self._map):
                self._map.resize(max(2 * len(self._map), end))
            self._map[self._end:end] = line
            self._end = end


def read_event_lines(path: str, start: int = 0) -> list[dict]:
    """The events an :class:`EventLog` wrote to ``path``, in order, from
    byte ``start`` on (:func:`events_written` said where an earlier part
    ended); a line cut short by a death is left out."""
    try:
        with open(path, "rb") as file:
            file.seek(start)
            data = _written(file)
    except OSError:
        return []
    events = []
    for line in data.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


def events_written(path: str, known: int = 0) -> int:
    """How many bytes of events an :class:`EventLog` has written to ``path``
    so far; ``known``: bytes a look before found written (read on from there:
    a reused world's file grows with every entry)."""
    try:
        with open(path, "rb") as file:
            file.seek(known)
            return known + len(_written(file))
    except OSError:
        return 0


def _written(file: Any, chunk: int = 1 << 16) -> bytes:
    """What an event file holds from where ``file`` stands up to its first
    NUL byte: read a chunk at a time, not the whole mapped length (a MiB
    and more, nearly all of it unwritten)."""
    parts = []
    while True:
        data = file.read(chunk)
        end = data.find(b"\x00")
        if end >= 0 or len(data) < chunk:
            parts.append(data if end < 0 else data[:end])
            return b"".join(parts)
        parts.append(data)


class RankContext:
    """One rank's view of its world. Built by the harness; entries only read it."""

    def __init__(
        self,
        *,
        rank: int,
        names: Sequence[str] = (),
        world_seed: int,
        workdir: str = "",
        faults: FaultPlan | None = None,
        fuzz: float = 0.0,
        events: EventLog | None = None,
        deadline: float | None = None,
        world_size: int | None = None,
    ) -> None:
        self.rank = rank
        self.world_seed = world_seed
        self.seed = rank_seed(world_seed, rank)
        self.workdir = workdir
        self.faults = faults or FaultPlan()
        self.fuzz = fuzz
        # Seconds the world's entries may run (None: no deadline known, as in
        # a baseline): code that waits on peers bounds its waits by it, so a
        # stuck rank fails with its own message before the world's deadline.
        self.deadline = deadline
        self._events = events or EventLog(None, rank)
        self._armed: dict[str, list[Fault]] = {}
        self._hits: dict[str, int] = {}
        # A rank some fault is aimed at counts every failpoint it reaches, so
        # that a fault that never fires can be reported with what the rank
        # did reach; the others stay at one dictionary lookup per failpoint.
        self._count_all = False
        self._lock = threading.Lock()
        # Under a controlled schedule, where a failpoint waits for its turn (_gate).
        self.schedule_point: Callable[[str], None] | None = None
        # Where progress (and a freeze) goes besides the event log: the supervisor's pipe.
        self.progress_sink: Callable[[msg.ProgressReported | msg.Frozen], None] | None = None
        self._progress_lock = threading.Lock()
        self._progress_sent = 0.0
        self._progress_pending: msg.ProgressReported | None = None
        self.names: tuple[str, ...] = ()
        self.name: str | None = None
        # The rank's device (a torch.device in a rank: its CUDA device under
        # the world option devices, already current; the CPU otherwise).
        self.device: Any = "cpu"
        self.world_devices: tuple[str, ...] = ()  # the world option devices, for the device maps
        # The default process group (torch.distributed's ProcessGroup): the
        # world's (world option process_group), or a spawned program's own.
        self.group: Any = None
        self.world_size = len(names) if world_size is None else world_size
        if names:
            self.join(names)

    def join(self, names: Sequence[str]) -> None:
        """Learn every worker's name (and arm this rank's faults, if its own
        name was not known before).

        A harness rank knows the names before its entry runs; a spawned
        program's rank learns them when its own ``init_rpc`` returns."""
        self.names = tuple(names)
        self.world_size = len(self.names)
        if self.name is None:
            self.take_name(self.names[self.rank])

    def take_name(self, name: str) -> None:
        """This rank is worker ``name``: arm the faults aimed at it. A spawned
        program names itself as it calls ``init_rpc``, and peers may call it
        before that call returns: its faults are armed before RPC starts."""
        self.name = name
        mine = self.faults.for_target(name)
        with self._lock:
            for fault in mine:
                if fault.traits.at_failpoint:
                    self._armed.setdefault(fault.point, []).append(fault)
            self._count_all = bool(mine)

    def __repr__(self) -> str:
        return (f"RankContext(rank={self.rank}, name={self.name!r}, world_size={self.world_size}, "
                f"world_seed={self.world_seed})")

    def derive_seed(self, *labels: object) -> int:
        """A seed from the world seed and ``labels``: the same in every rank and
        in a single-process baseline that calls ``rpc_harness.derive_seed``."""
        return derive_seed(self.world_seed, *labels)

    def rank_of(self, name: str) -> int:
        """The rank of worker ``name``."""
        return self.names.index(name)

    def event(self, name: str, **data: Any) -> None:
        """Record a named event on this rank's timeline."""
        self._events.write("event", name=name, **data)

    def progress(self, done: int, total: int, unit: str = "steps", **metrics: float) -> None:
        """Report that ``done`` of ``total`` units of this rank's work are done.

        Reports come at most every PROGRESS_INTERVAL seconds (the last one
        and a finished one always): a loop may call this every iteration."""
        update = msg.ProgressReported(done, total, unit, check_progress(done, total, unit, metrics))
        # Decided and sent under one lock: reports from several threads
        # reach the supervisor in the order they were let through.
        with self._progress_lock:
            now = time.monotonic()
            if done < total and now - self._progress_sent < PROGRESS_INTERVAL:
                self._progress_pending = update
                return
            self._progress_sent = now
            self._progress_pending = None
            self._send_progress(update)

    def flush_progress(self) -> None:
        """Send the last report that was held back (the harness calls this
        when the entry ends)."""
        with self._progress_lock:
            update, self._progress_pending = self._progress_pending, None
            if update is not None:
                self._send_progress(update)

    def _send_progress(self, update: msg.ProgressReported) -> None:
        self._events.write("progress", done=update.done, total=update.total, unit=update.unit,
                           metrics=update.metrics)
        if self.progress_sink is not None:
            self.progress_sink(update)

    def hits(self) -> dict[str, int]:
        """How often each failpoint was reached so far: armed and fuzzed ones,
        and in a rank a fault is aimed at, every one."""
        with self._lock:
            return dict(self._hits)

    def record_hits(self) -> None:
        """Write the hit counts to the event log (a rank a fault is aimed at
        does this as its entry ends and before a fault ends it): what a
        report names when that fault never fired."""
        if self._count_all:
            self._events.write(HITS, hits=self.hits())

    def failpoint(self, name: str) -> None:
        """Reach failpoint ``name``: fire the faults armed there for this hit."""
        if self.schedule_point is not None and not name.startswith(("rpc.", "c10d.")):
            # A scheduling point of its own (an RPC's failpoints stand at the
            # RPC's, which is one already; a collective's peers wait in it
            # for each other, which the scheduler cannot see).
            self.schedule_point(f"failpoint {name}")
        armed = self._armed.get(name)
        if armed is None and not self.fuzz and not self._count_all:
            return  # the common case: one dict lookup
        with self._lock:
            hit = self._hits[name] = self._hits.get(name, 0) + 1
        if self.fuzz:
            self._fuzz_delay(name, hit)
        firing = [fault for fault in armed or () if fault.fires_on(hit)]
        if armed and not firing:
            # The hits before (and after) the one a fault waits for: a
            # timeline shows "kill on hit 5" as four hits, then the kill.
            self._events.write("failpoint", point=name, hit=hit)
        for fault in firing:
            self._fire(fault, hit)

    def _fuzz_delay(self, name: str, hit: int) -> None:
        # Seeded per (rank, failpoint, hit): the same seed shakes the same way.
        rng = random.Random(derive_seed(self.world_seed, "fuzz", self.rank, name, hit))
        if rng.random() < 0.5:
            delay = rng.uniform(0.0, self.fuzz)
            self._events.write("fuzz", point=name, hit=hit, seconds=delay)
            time.sleep(delay)

    def _fire(self, fault: Fault, hit: int) -> None:
        self._events.record(FaultFired(time.time(), self.rank, str(fault), fault.kind, fault.point, hit))
        if fault.kind != "delay":
            self.record_hits()  # this fault may end the rank (or its entry) here
            for write in BEFORE_A_FAULT_ENDS:
                write()
        FIRING[fault.kind](self, fault, hit)


# What a layer writes down before a fault may end its rank: the collectives
# layer (c10d.hooks) its ops' completions, so that a rank killed after its
# last collective completed is not reported inside it.
BEFORE_A_FAULT_ENDS: list[Callable[[], None]] = []


# What each failpoint kind does in the rank where it fires (the rest of what
# a kind is lives in faults.FAULT_KINDS).


def _delay(ctx: RankContext, fault: Fault, hit: int) -> None:
    time.sleep(fault.seconds)


def _kill(ctx: RankContext, fault: Fault, hit: int) -> None:
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)  # SIGKILL is delivered before this returns


def _raise(ctx: RankContext, fault: Fault, hit: int) -> None:
    message = fault.arg or f"injected fault {fault} fired on hit {hit}"
    raise InjectedFault(f"{message} (rank {ctx.rank}, {ctx.name})")


def _hang(ctx: RankContext, fault: Fault, hit: int) -> None:
    hang_at_failpoint(fault.point)


def _freeze(ctx: RankContext, fault: Fault, hit: int) -> None:
    # Stopped, not dead: its sockets stay open, so peers see no EOF, only
    # calls that never come back (a hung host, a partition). The supervisor
    # kills it once the others are done.
    if ctx.progress_sink is not None:
        ctx.progress_sink(msg.Frozen())
    os.kill(os.getpid(), signal.SIGSTOP)
    hang_at_failpoint(fault.point)  # if it is ever continued


FIRING: dict[str, Callable[[RankContext, Fault, int], None]] = {
    "delay": _delay, "kill": _kill, "raise": _raise, "hang": _hang, "freeze": _freeze,
}
assert set(FIRING) == set(FAILPOINT_KINDS), "every failpoint kind fires somehow"


def hang_at_failpoint(point: str) -> None:
    """Block forever; the name of this function marks the hung rank's stack."""
    while True:
        time.sleep(3600)
