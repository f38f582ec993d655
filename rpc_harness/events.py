"""Typed records of what a rank's event log says, for the code that reads it
(reports, the tally of faults, the scenarios' judges).

A rank writes its life as JSON lines (``context.EventLog``: cheap, and
readable up to the moment of a SIGKILL). The trace export reads those lines
as they are; everything that *decides* something reads them through the
records here, so a field's name is written in one place.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

FAULT = "fault"  # the event kind of a fault that fired
HITS = "hits"  # the event kind of a rank's failpoint hit counts


@dataclass(frozen=True)
class FaultFired:
    """One fault that fired in one rank: a failpoint fault at one hit, or
    one send a message fault failed (``attempt``: torch's try) or delayed."""

    t: float  # time.time() when it fired
    rank: int
    fault: str  # the fault's text form, as in the plan
    kind: str  # its kind: kill, delay, msgfail, ...
    point: str  # the failpoint, or the message type
    hit: int  # which hit of the point (which send, for a message fault)
    attempt: int | None = None  # msgfail: torch's try of that send (1..6)

    def as_event(self) -> dict[str, Any]:
        """The event-log form (what ``EventLog.write`` stores)."""
        event: dict[str, Any] = {"t": self.t, "rank": self.rank, "kind": FAULT, "fault": self.fault,
                                 "fault_kind": self.kind, "point": self.point, "hit": self.hit}
        if self.attempt is not None:
            event["try"] = self.attempt
        return event

    @classmethod
    def from_event(cls, event: dict[str, Any]) -> FaultFired:
        return cls(t=event["t"], rank=event["rank"], fault=event["fault"], kind=event["fault_kind"],
                   point=event["point"], hit=event["hit"], attempt=event.get("try"))


def faults_fired(events: Iterable[dict[str, Any]]) -> list[FaultFired]:
    """The faults an event log says fired, in the log's order."""
    return [FaultFired.from_event(e) for e in events if e.get("kind") == FAULT]


def last_hits(events: Iterable[dict[str, Any]]) -> dict[str, int]:
    """The failpoints a rank reached, with hit counts, as it last recorded them."""
    recorded = [e for e in events if e.get("kind") == HITS]
    return dict(recorded[-1]["hits"]) if recorded else {}
