"""What a rank's code sees: its identity, its seeds, failpoints and events.

``entry(ctx)`` receives a :class:`RankContext`. Code running inside a rank but
far from ``entry`` (an RPC handler, a remote module) reaches the same object
through :func:`current_context`, and hits failpoints with :func:`failpoint`,
which is a no-op outside a world.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from collections.abc import Sequence
from typing import Any

from .errors import InjectedFault
from .faults import FAILPOINT_KINDS, Fault, FaultPlan
from .seeds import derive_seed, rank_seed

_current: RankContext | None = None


def current_context() -> RankContext | None:
    """The context of the rank this code runs in, or None outside a world."""
    return _current


def failpoint(name: str) -> None:
    """Mark a named point where a fault plan may act; free when nothing is armed."""
    ctx = _current
    if ctx is not None:
        ctx.failpoint(name)


class EventLog:
    """Append-only JSON-lines log of one rank's life, one write per event so
    that a SIGKILLed rank leaves everything up to its death behind."""

    def __init__(self, path: str | None, rank: int) -> None:
        self._rank = rank
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600) if path else None
        self._lock = threading.Lock()

    def write(self, kind: str, **data: Any) -> None:
        if self._fd is None:
            return
        record = {"t": time.time(), "rank": self._rank, "tid": threading.get_ident(), "kind": kind}
        record.update(data)
        line = (json.dumps(record, default=repr) + "\n").encode()
        with self._lock:
            os.write(self._fd, line)


class RankContext:
    """One rank's view of its world. Built by the harness; entries only read it."""

    def __init__(
        self,
        *,
        rank: int,
        names: Sequence[str],
        world_seed: int,
        workdir: str = "",
        faults: FaultPlan | None = None,
        fuzz: float = 0.0,
        events: EventLog | None = None,
    ) -> None:
        self.rank = rank
        self.names = tuple(names)
        self.world_size = len(self.names)
        self.name = self.names[rank]
        self.world_seed = world_seed
        self.seed = rank_seed(world_seed, rank)
        self.workdir = workdir
        self.faults = faults or FaultPlan()
        self.fuzz = fuzz
        self._events = events or EventLog(None, rank)
        self._armed: dict[str, list[Fault]] = {}
        for fault in self.faults.for_target(self.name):
            if fault.kind in FAILPOINT_KINDS:
                self._armed.setdefault(fault.point, []).append(fault)
        self._hits: dict[str, int] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RankContext(rank={self.rank}, name={self.name!r}, world_size={self.world_size}, world_seed={self.world_seed})"

    def derive_seed(self, *labels: object) -> int:
        """A seed from the world seed and ``labels``: the same in every rank and
        in a single-process baseline that calls ``harness.derive_seed``."""
        return derive_seed(self.world_seed, *labels)

    def rank_of(self, name: str) -> int:
        """The rank of worker ``name``."""
        return self.names.index(name)

    def event(self, name: str, **data: Any) -> None:
        """Record a named event on this rank's timeline."""
        self._events.write("event", name=name, **data)

    def hits(self) -> dict[str, int]:
        """How often each armed or fuzzed failpoint was reached so far."""
        with self._lock:
            return dict(self._hits)

    def failpoint(self, name: str) -> None:
        """Reach failpoint ``name``: fire the faults armed there for this hit."""
        armed = self._armed.get(name)
        if armed is None and not self.fuzz:
            return  # the common case: one dict lookup
        with self._lock:
            hit = self._hits[name] = self._hits.get(name, 0) + 1
        if self.fuzz:
            self._fuzz_delay(name, hit)
        for fault in armed or ():
            if fault.fires_on(hit):
                self._fire(fault, hit)

    def _fuzz_delay(self, name: str, hit: int) -> None:
        # Seeded per (rank, failpoint, hit): the same seed shakes the same way.
        rng = random.Random(derive_seed(self.world_seed, "fuzz", self.rank, name, hit))
        if rng.random() < 0.5:
            delay = rng.uniform(0.0, self.fuzz)
            self._events.write("fuzz", point=name, hit=hit, seconds=delay)
            time.sleep(delay)

    def _fire(self, fault: Fault, hit: int) -> None:
        self._events.write("fault", fault=str(fault), fault_kind=fault.kind, point=fault.point, hit=hit)
        if fault.kind == "delay":
            time.sleep(fault.seconds)
        elif fault.kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(60)  # SIGKILL is delivered before this returns
        elif fault.kind == "raise":
            message = fault.arg or f"injected fault {fault} fired on hit {hit}"
            raise InjectedFault(f"{message} (rank {self.rank}, {self.name})")
        elif fault.kind == "hang":
            hang_at_failpoint(fault.point)


def hang_at_failpoint(point: str) -> None:
    """Block forever; the name of this function marks the hung rank's stack."""
    while True:
        time.sleep(3600)
