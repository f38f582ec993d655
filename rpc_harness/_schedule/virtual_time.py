"""The schedule's own time: sleeps and timed waits of a controlled world.

Under control no task waits for the wall clock. A sleep, a wait with a
timeout, or a delay fault ends when no task can run and it is the earliest
still waiting to end, as in a discrete-event simulator (FoundationDB's,
madsim's): the clock then jumps to its end. Timers that end at the same
time end together; a timer whose task stopped waiting on it (woken, ended,
or waiting again with another timer) is skipped. A timer belongs to a task
(its id) or to a call's timeout (``("call", id)``): both are keys here.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable


class VirtualTime:
    """The schedule's clock (seconds from the world's start) and its timers."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, str | tuple]] = []
        self._order = itertools.count()  # equal ends pop in the order they were set

    def timer(self, task: str | tuple, seconds: float) -> float:
        """Set ``task``'s timer ``seconds`` from now (a negative wait ends
        now); the time it ends at."""
        at = self.now + max(0.0, seconds)
        heapq.heappush(self._heap, (at, next(self._order), task))
        return at

    def wake_due(self, still_waits: Callable[[str | tuple, float], bool]) -> list[str | tuple]:
        """The tasks whose timers end first, the clock moved to that end;
        ``still_waits(task, at)`` tells a live timer from a cancelled one.
        Nothing (and the clock unmoved) when no timer is live."""
        woken: list[str | tuple] = []
        first: float | None = None
        while self._heap:
            at, _, task = self._heap[0]
            if not still_waits(task, at):
                heapq.heappop(self._heap)
                continue
            if first is not None and at != first:
                break
            first = at
            heapq.heappop(self._heap)
            woken.append(task)
        if first is not None:
            self.now = max(self.now, first)
        return woken
