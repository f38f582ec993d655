"""The supervisor's end of a controlled world: the schedule core
(:mod:`rpc_harness._schedule`) wired to the ranks' pipes, and the watch for
a world that stalled where the scheduler cannot see.

The scheduler itself has no pipes, processes or threads; this adapter
delivers the ranks' messages to it, sends its decisions back, and says
what control waits for so that the supervisor can let the world run free
(with every rank's stacks) instead of hanging, in two cases:

- nothing has moved for :data:`STALL_SECONDS` while no rank thread could
  run (a task blocked where the scheduler cannot see: :meth:`ScheduleLink.stalled`);
- the running step went on for :data:`SPIN_SECONDS` without a scheduling
  point while another task waited for its turn, on a CPU and in the same
  calls all that time (a spin on what another task is to do:
  :meth:`ScheduleLink.spinning`). Free-running, the other task would run
  beside it; under control it never does, and the stall is the
  schedule's, not the program's.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from .. import _messages as msg
from .._schedule.scheduler import Scheduler
from ..schedule import ScheduleSpec

# A step or an awaited event with no message for this long, while no thread
# of any rank could run (none runnable, in every look), is waiting where the
# scheduler cannot see: control is given up. Runnable threads on a loaded
# machine are starved, not stuck: they reset the clock.
STALL_SECONDS = 3.0

# A step that runs this long without reaching a scheduling point while
# another task waits for its turn is looked at (its thread's stack and CPU
# time, every LOOK_SECONDS): when all that time it stayed in the same calls
# (the same frames, outermost to innermost; lines aside) and was on a CPU
# for at least SPIN_CPU_SHARE of it, it is taken for a spin on what another
# task is to do, and control is given up. A computation that moves through
# its code changes its stack and keeps its turn, however long it runs; one
# that waits (a lock, a future torch made) uses no CPU and is the
# STALL_SECONDS watch's. What this takes for a spin wrongly is one call
# into C++ running longer than this while another task waits: control is
# then given up (the computation goes on, free). Measured under control,
# the longest step of the three scenarios, the PS tutorial and the lost
# update took 0.33 s (rnn's trainer; 0.21 s in the PS tutorial).
SPIN_SECONDS = 5.0
# Measured on this 2-core machine: a spinning thread got 11 % (load 17) to
# 26 % (load 9) of the time; a waiting one uses none (a futex: microseconds).
SPIN_CPU_SHARE = 0.02
LOOK_SECONDS = 0.5


@dataclass
class _Looks:
    """What was seen of the running step's thread (see :data:`SPIN_SECONDS`)."""

    task: str
    step: int  # the index of the step it runs
    asked: float  # when it was last asked for
    first: tuple[float, msg.Looked] | None = None  # the first look of the calls it is in now
    last: tuple[float, msg.Looked] | None = None


class ScheduleLink:
    """The scheduler and its pipes to the ranks, as the supervisor drives them."""

    def __init__(self, schedule: ScheduleSpec, seed: int, world_size: int, clock: Callable[[], float]) -> None:
        self.conns: list[object | None] = []
        self.scheduler = Scheduler(schedule, seed, world_size, self._send, clock)
        self.heard = clock()  # the last message, or the last time a rank thread could run
        self.clock = clock
        self.looks: _Looks | None = None
        self.releases_sent: set[int] = set()  # ranks told Release (a gate hears it once)
        self.released: set[int] = set()  # ranks whose gate said Released: nothing more comes from it
        self.muted = False  # the schedule is over: nothing more is sent to the ranks

    def add(self, conn: object | None) -> None:
        self.conns.append(conn)

    def _send(self, rank: int, message: object) -> None:
        conn = self.conns[rank] if rank < len(self.conns) else None
        if conn is None or self.muted:
            return
        if isinstance(message, msg.Release):
            if rank in self.releases_sent:
                return
            self.releases_sent.add(rank)
        try:
            conn.send(message)  # type: ignore[attr-defined]
        except (OSError, ValueError):  # the rank is gone; its sentinel says how
            pass

    def waitables(self, ranks: set[int]) -> dict[object, int]:
        return {conn: rank for rank, conn in enumerate(self.conns) if conn is not None and rank in ranks}

    def drain(self, rank: int) -> None:
        conn = self.conns[rank]
        heard = False
        try:
            while conn is not None and conn.poll():  # type: ignore[attr-defined]
                message = conn.recv()  # type: ignore[attr-defined]
                if isinstance(message, msg.Looked):  # an answer to the link's own look: no progress
                    self._looked(message)
                    continue
                if isinstance(message, msg.Released):  # its gate's last word, for end_entry
                    self.released.add(rank)
                    continue
                heard = True
                self.scheduler.on_message(rank, message)
        except (EOFError, OSError):
            self.conns[rank] = None
            heard = True
        if heard:
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

    def spinning(self) -> str | None:
        """Why control should be given up, when the running step has gone on
        for :data:`SPIN_SECONDS` without a scheduling point while another
        task waited for its turn, on a CPU and in the same calls all that
        time; None otherwise. Asks the running task's rank where it stands
        (every :data:`LOOK_SECONDS`); the answers come in through :meth:`drain`."""
        scheduler = self.scheduler
        running = scheduler.running
        waiters = scheduler.waiting_for_turn() if running is not None else []
        if not scheduler.controlled or scheduler.halted or running is None or not waiters:
            self.looks = None
            return None
        now = self.clock()
        looks = self.looks
        if looks is None or (looks.task, looks.step) != (running.id, len(scheduler.steps)):
            looks = self.looks = _Looks(running.id, len(scheduler.steps), now - LOOK_SECONDS)
        if now - looks.asked >= LOOK_SECONDS:
            looks.asked = now
            self._send(running.rank, msg.Look(running.id))
        if looks.first is None or looks.last is None:
            return None
        (since, first), (seen, last) = looks.first, looks.last
        window = seen - since
        if window < SPIN_SECONDS or first.cpu < 0 or last.cpu - first.cpu < SPIN_CPU_SHARE * window:
            return None
        return (f"{running.id} ({running.label}) ran for {now - scheduler.step_started:.1f}s without reaching a "
                f"scheduling point since {running.point or 'it began'}, in the same calls for the last {window:.1f}s "
                f"(at {last.where}) and on a CPU for {last.cpu - first.cpu:.1f}s of them, while "
                f"{'; '.join(waiters)} waited for a turn: it seems to wait, spinning, for something another task "
                f"is to do (plain memory it writes), where the scheduler cannot see. A stall of the schedule's "
                f"making, not a hang of the program's: free-running, the program may pass")

    def _looked(self, looked: msg.Looked) -> None:
        looks = self.looks
        if looks is None or looked.task != looks.task:
            return  # a look at a step that has ended since
        now = self.clock()
        if not looked.frames:  # no live thread: no evidence
            looks.first = looks.last = None
            return
        if looks.first is None or looks.first[1].frames != looked.frames:
            looks.first = (now, looked)  # it moved: the window starts again here
        looks.last = (now, looked)

    def end_entry(self) -> None:
        """A reused world's entry is over: the schedule ends here (as at a
        fresh world's shutdown), every rank not told yet is told Release,
        and nothing more is sent: the pipes are the next entry's schedule's
        once each rank's gate has said :class:`~rpc_harness._messages.Released`."""
        self.scheduler.entries_done()
        self.scheduler.halt()
        for rank in range(len(self.conns)):
            self._send(rank, msg.Release())
        self.muted = True

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
