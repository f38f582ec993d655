"""The record of a controlled world's steps, and replay checked against it.

The recorder is what a strategy sees of the past (the strategies'
:class:`~rpc_harness._schedule.strategies.History`): the world's seed, the
schedule's random stream, the steps so far, how often each (task, point)
ended a step, and the task that ran last.

Replay is checked step by step and in length: under ``replay:...`` the
step at index i must be the recorded step i (the same task reaching the
same point), and the world must take as many steps as were recorded. The
first difference is the one reported ("the replayed schedule diverged:
..."); the steps after it are recorded but not compared, since a world
that left its schedule takes other steps by necessity.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Protocol

from ..schedule import ScheduleSpec, Step
from ..seeds import derive_seed


class Recorded(Protocol):
    """What the recorder reads of the task that ended a step."""

    id: str
    rank: int
    label: str


class Recorder:
    """The steps of one controlled world, as they end."""

    def __init__(self, schedule: ScheduleSpec, seed: int) -> None:
        self.schedule = schedule
        self.seed = seed
        self.rng = random.Random(derive_seed(seed, "schedule"))
        self.steps: list[Step] = []
        self.occurrences: dict[tuple[str, str], int] = {}  # (task, point) -> steps that ended there
        self.problems: list[str] = []  # a replay that diverged
        self.last: Recorded | None = None

    def record(self, task: Recorded, point: str, *, preempted: bool, started: float, ended: float,
               ready: tuple[tuple[str, int], ...] = (), cause: int = -1, timer: bool = False,
               clock: float = 0.0) -> None:
        """``task``'s step ended at ``point``; under replay, it must be the recorded one.
        ``ready``, ``cause`` and ``timer`` are how it was chosen (:class:`~rpc_harness.schedule.Step`);
        ``clock``: the schedule's time when it began."""
        index = len(self.steps)
        self.steps.append(Step(index, task.rank, "", task.id, task.label, point, preempted, started, ended,
                               ready, cause, timer, clock))
        key = (task.id, point)
        self.occurrences[key] = self.occurrences.get(key, 0) + 1
        self.last = task
        if self.schedule.kind == "replay" and index < len(self.schedule.steps) and not self.problems:
            expected_task, expected_point = self.schedule.steps[index]
            if (task.id, point) != (expected_task, expected_point):
                self.diverged(f"step {index}: expected {expected_task} to reach {expected_point}, "
                              f"{task.id} ({task.label}) reached {point}")

    def diverged(self, what: str) -> None:
        """A replay could not take its recorded steps: say where (once per replay)."""
        self.problems.append(f"the replayed schedule diverged: {what}")

    def finish(self) -> None:
        """The world is over: a replay that took fewer or more steps diverged."""
        if self.schedule.kind == "replay" and not self.problems and len(self.steps) != len(self.schedule.steps):
            self.diverged(f"the world took {len(self.steps)} steps; the recorded schedule has "
                          f"{len(self.schedule.steps)}")

    def named(self, names: tuple[str, ...]) -> list[Step]:
        """The steps, with each rank's worker name filled in."""
        return [dataclasses.replace(step, worker=names[step.rank] if step.rank < len(names) else "")
                for step in self.steps]
