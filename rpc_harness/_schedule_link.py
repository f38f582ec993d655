"""The supervisor's end of a controlled world: the schedule core
(:mod:`rpc_harness._schedule`) wired to the ranks' pipes, and the watch for
a world that stalled where the scheduler cannot see.

The scheduler itself has no pipes, processes or threads; this adapter
delivers the ranks' messages to it, sends its decisions back, and, when
nothing has moved for :data:`STALL_SECONDS` while no rank thread could run,
says what control waits for so that the supervisor can let the world run
free (with every rank's stacks) instead of hanging.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ._schedule.scheduler import Scheduler
from .schedule import ScheduleSpec

# A step or an awaited event with no message for this long, while no thread
# of any rank could run (none runnable, in every look), is waiting where the
# scheduler cannot see: control is given up. Runnable threads on a loaded
# machine are starved, not stuck: they reset the clock.
STALL_SECONDS = 3.0


class ScheduleLink:
    """The scheduler and its pipes to the ranks, as the supervisor drives them."""

    def __init__(self, schedule: ScheduleSpec, seed: int, world_size: int, clock: Callable[[], float]) -> None:
        self.conns: list[object | None] = []
        self.scheduler = Scheduler(schedule, seed, world_size, self._send, clock)
        self.heard = clock()  # the last message, or the last time a rank thread could run
        self.clock = clock

    def add(self, conn: object | None) -> None:
        self.conns.append(conn)

    def _send(self, rank: int, message: object) -> None:
        conn = self.conns[rank] if rank < len(self.conns) else None
        if conn is None:
            return
        try:
            conn.send(message)  # type: ignore[attr-defined]
        except (OSError, ValueError):  # the rank is gone; its sentinel says how
            pass

    def waitables(self, ranks: set[int]) -> dict[object, int]:
        return {conn: rank for rank, conn in enumerate(self.conns) if conn is not None and rank in ranks}

    def drain(self, rank: int) -> None:
        conn = self.conns[rank]
        try:
            while conn is not None and conn.poll():  # type: ignore[attr-defined]
                self.scheduler.on_message(rank, conn.recv())  # type: ignore[attr-defined]
        except (EOFError, OSError):
            self.conns[rank] = None
        self.heard = self.clock()
        self.scheduler.decide()

    def rank_gone(self, rank: int, *, frozen: bool = False, unexpected: bool = False) -> None:
        self.scheduler.rank_gone(rank, frozen=frozen, unexpected=unexpected)
        self.scheduler.decide()

    def stalled(self, pids: list[int]) -> str | None:
        """What control waits for, if nothing has moved for a while and the
        ranks use no CPU (a task blocked where the scheduler cannot see, or
        every task waiting for another); None while things move."""
        scheduler = self.scheduler
        idle_with_waiters = scheduler.quiet() and bool(scheduler.waiting) and not scheduler.ready
        now = self.clock()
        if not scheduler.controlled or not (scheduler.busy() or idle_with_waiters):
            self.heard = now
            return None
        if now - self.heard < STALL_SECONDS:
            return None
        if _any_runnable(pids):  # computing, or starved on a loaded machine: not stuck
            self.heard = now
            return None
        return scheduler.stalled()

    def close(self) -> None:
        for conn in self.conns:
            if conn is not None:
                conn.close()  # type: ignore[attr-defined]
        self.conns = [None] * len(self.conns)


def _any_runnable(pids: list[int]) -> bool:
    """Whether any thread of these processes is running or waiting for a CPU."""
    for pid in pids:
        try:
            threads = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in threads:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as file:
                    state = file.read().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state == "R":
                return True
    return False
