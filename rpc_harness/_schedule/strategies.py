"""The strategies of controlled schedules, each behind one small interface.

After Shuttle's scheduler trait: a strategy is an object with one method,
``choose(ready, history)``, which picks the task to run next among
``ready`` (never empty, sorted by id) from what the scheduler shows of its
past, :class:`History`: the world's seed, the schedule's random stream, the
steps so far and how often each (task, point) came, the task that ran
last, and where to say that a replay diverged. A strategy never sees the
rest of the scheduler, and nothing here imports torch or starts a process:
the scheduler's model test drives them all (tests/unit/test_scheduler_model.py).

- :class:`RandomWalk` (``random``, ``controlled``): uniformly among the ready.
- :class:`Pct` (``pct:D:K``): PCT, as Shuttle and Coyote use it.
- :class:`Replay` (``replay:...``): the recorded steps, one for one.
- :class:`Guide` (``guide:...``): a recorded schedule's choices where the
  same moment comes again; how shrinking drops one preemption at a time.
- :class:`Branch` (``dpor``, ``dpor:...``): one branch of exhaustive
  exploration (:mod:`.dpor` decides which): its first choices, then the
  task that ran last where it can go on, never a task of its sleep set.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Protocol, TypeVar

from ..schedule import ScheduleSpec, Step
from ..seeds import derive_seed
from .dpor import awake_after

PCT_DEFAULT_LENGTH = 200  # steps over which PCT spreads its change points when not told


class Runnable(Protocol):
    """What a strategy reads of a task."""

    id: str
    rank: int
    label: str
    point: str
    notified: bool  # False: the schedule's clock woke it (its wait timed out)


T = TypeVar("T", bound=Runnable)


class History(Protocol):
    """What a strategy sees of the scheduler (the scheduler is one)."""

    seed: int
    rng: random.Random
    steps: list[Step]
    occurrences: dict[tuple[str, str], int]  # (task, point) -> how many times a step ended there
    problems: list[str]

    @property
    def last(self) -> Runnable | None: ...

    def diverged(self, what: str) -> None: ...


class Strategy(Protocol):
    def choose(self, ready: Sequence[T], history: History) -> T: ...


def make(schedule: ScheduleSpec, history: History) -> Strategy:
    """The strategy a parsed ``schedule`` option names (a controlled one)."""
    if schedule.kind == "pct":
        return Pct(schedule.depth, schedule.length, history)
    if schedule.kind == "replay":
        return Replay(schedule.steps)
    if schedule.kind == "guide":
        return Guide(schedule.prefs)
    if schedule.kind == "dpor":
        return Branch(schedule.prefix, schedule.sleep)
    return RandomWalk()


class RandomWalk:
    """Each step, one of the ready tasks, uniformly, from the seed."""

    def choose(self, ready: Sequence[T], history: History) -> T:
        return ready[0] if len(ready) == 1 else ready[history.rng.randrange(len(ready))]


class Pct:
    """PCT: a priority per task (from the seed and the task's id, so not
    from the order tasks arrive in), the highest ready one runs; at depth-1
    change points, drawn in 1..length, the task that just ran drops below
    every other. A bug that needs ``depth`` ordering constraints among n
    tasks within ``length`` steps is found with probability at least
    1 / (n length^(depth-1)) per schedule."""

    def __init__(self, depth: int, length: int, history: History) -> None:
        length = length or PCT_DEFAULT_LENGTH
        # Drawn here, first thing off the schedule's random stream: a seed's
        # change points do not depend on the world.
        self.changes = sorted(history.rng.sample(range(1, max(length, depth)), depth - 1))
        self.lowered: dict[str, int] = {}
        self.seed = history.seed

    def _priority(self, task: Runnable) -> float:
        if task.id in self.lowered:
            return -self.lowered[task.id]
        return float(derive_seed(self.seed, "pct", task.id))

    def choose(self, ready: Sequence[T], history: History) -> T:
        step = len(history.steps)
        while self.changes and self.changes[0] <= step:
            self.changes.pop(0)
            if history.last is not None:
                self.lowered[history.last.id] = len(self.lowered) + 1
        return max(ready, key=self._priority)


class Replay:
    """The recorded steps, one for one; where the world can no longer take
    them (the recorded task cannot run, or the world goes on past them), it
    says where and goes on as :func:`continuing` would."""

    def __init__(self, steps: Sequence[tuple[str, str]]) -> None:
        self.steps = steps

    def choose(self, ready: Sequence[T], history: History) -> T:
        step = len(history.steps)
        if step < len(self.steps):
            expected = self.steps[step][0]
            for task in ready:
                if task.id == expected:
                    return task
            if not history.problems:
                history.diverged(f"step {step}: expected {expected} to run, but it could not; ready: {_shown(ready)}")
        elif not history.problems:
            history.diverged(f"step {step}: the recorded schedule ended after {len(self.steps)} steps, "
                             f"but the world went on: {_shown(ready)} could run")
        return continuing(ready, history)


class Guide:
    """Follow the choices of a recorded schedule where the same moment comes
    (the same task at the same point for the same time), else go on with
    the task that ran."""

    def __init__(self, prefs: Sequence[tuple[str, str, int, str]]) -> None:
        self.prefer = {(prev, point, n): chosen for prev, point, n, chosen in prefs}

    def choose(self, ready: Sequence[T], history: History) -> T:
        last = history.steps[-1] if history.steps else None
        # (Every recorded step is counted in occurrences, the last one too.)
        key = (last.task, last.point, history.occurrences[(last.task, last.point)]) if last else ("", "", 0)
        wanted = self.prefer.get(key)
        for task in ready:
            if task.id == wanted:
                return task
        return continuing(ready, history)


class Branch:
    """One branch of exhaustive exploration: ``prefix`` chosen one for one
    (a world that cannot take it diverged: the program is not deterministic
    under its schedule, and exploration says so), then the task that ran
    last where it can go on, else the first by id; never a task of the
    sleep set while another can run. The sleep set given is the one before
    the prefix's last step; each step from that one on wakes the sleeping
    tasks it depends on, once it has run and its footprint is seen
    (:func:`rpc_harness._schedule.dpor.awake_after`)."""

    def __init__(self, prefix: Sequence[str], sleep: Sequence[tuple[str, int, frozenset[str] | None]]) -> None:
        self.prefix = prefix
        self.sleep = {task: (rank, objects) for task, rank, objects in sleep}

    def choose(self, ready: Sequence[T], history: History) -> T:
        step = len(history.steps)
        if step >= len(self.prefix) and step:
            self.sleep = awake_after(self.sleep, history.steps[-1])
        chosen = None
        if step < len(self.prefix):
            chosen = next((task for task in ready if task.id == self.prefix[step]), None)
            if chosen is None and not history.problems:
                history.diverged(f"step {step}: the branch chose {self.prefix[step]}, which could not run; "
                                 f"ready: {_shown(ready)}")
        if chosen is None:
            awake = [task for task in ready if task.id not in self.sleep]
            chosen = continuing(awake or ready, history)
        return chosen


def continuing(ready: Sequence[T], history: History) -> T:
    """The task that ran last, if it can go on; else the first by id."""
    last = history.last
    for task in ready:
        if last is not None and task is last:
            return task
    return ready[0]


def _shown(ready: Sequence[Runnable]) -> str:
    return ", ".join(f"{t.id} ({t.label}) at {t.point}" for t in ready)
