"""Controlled schedules: the order of a world's steps, decided by its seed.

Without control, which of a world's threads runs next (a rank's entry, the
RPC handlers its peers' calls start, on every rank) is the operating
system's choice: a race found once replays by luck. Under a controlled
schedule one *task* runs at a time in the whole world, from one scheduling
point to the next (a *step*): issuing an RPC, waiting on its future or an
RRef, starting and ending a served function, ``dist_autograd.backward``,
``DistributedOptimizer.step``, failpoints, sleeps and condition waits. At
each point the supervisor chooses the next task, with the world's seed:

- ``random`` (also ``controlled``): uniformly among the tasks that can run;
- ``pct`` or ``pct:D``: PCT (probabilistic concurrency testing, as Shuttle
  and Coyote use it): each task gets a random priority, the highest runs,
  and at D-1 random steps the running task's priority drops below all
  others. A bug that needs D ordering constraints is found with probability
  at least 1/(n k^(D-1)) per schedule (n tasks, k steps);
- ``replay:...``: the steps of a schedule recorded before, one for one; a
  world that no longer takes them fails, saying at which step it diverged.

This module holds what describes a schedule (its parsed form, its steps,
digests, the replay form, how it reads); ``_schedule`` decides, ``_gate`` is the
rank's side, ``explore`` searches and shrinks.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import WorldSpecError, clip

FREE = "free"
CONTROLLED = "controlled"  # the default strategy: random
STRATEGIES = ("random", "pct")
# Exhaustive exploration (rpc_harness.explore): dynamic partial-order
# reduction with sleep sets, and the naive depth-first search it is measured
# against. As a single world's schedule, either is its first schedule.
EXHAUSTIVE = ("dpor", "dfs")
DEFAULT_DEPTH = 3
MAX_DEPTH = 20
_REPLAY, _GUIDE, _DPOR = "replay:", "guide:", "dpor:"
_MAX_BLOB = 1 << 22


@dataclass(frozen=True)
class ScheduleSpec:
    """A parsed ``schedule`` option."""

    kind: str  # "free", "random", "pct", "replay", "guide"
    depth: int = DEFAULT_DEPTH  # pct: how many ordering constraints a bug may need
    length: int = 0  # pct: the steps its change points are spread over (0: a default)
    steps: tuple[tuple[str, str], ...] = ()  # replay: (task, point) of each recorded step
    digest: str = ""  # replay: the recorded schedule's digest
    prefs: tuple[tuple[str, str, int, str], ...] = ()  # guide: (task, point, nth time) -> the task chosen next
    prefix: tuple[str, ...] = ()  # dpor: the task chosen at each of the first steps
    # dpor: (task, rank, footprint or None) not to choose after them (explored already)
    sleep: tuple[tuple[str, int, frozenset[str] | None], ...] = ()

    @property
    def controlled(self) -> bool:
        return self.kind != "free"

    @property
    def label(self) -> str:
        """The schedule as a headline names it: short, recorded steps left out."""
        if self.kind == "random":
            return CONTROLLED
        if self.kind == "pct":
            return f"pct:{self.depth}" + (f":{self.length}" if self.length else "")
        if self.kind == "replay":
            return f"replay of {len(self.steps)} steps"
        if self.kind == "dpor":
            return f"dpor branch at step {len(self.prefix)}" if self.prefix else "dpor"
        return self.kind


def parse(text: str, *, where: str = "schedule") -> ScheduleSpec:
    """Read a ``schedule`` option: ``free``, ``controlled``, ``random``,
    ``pct``, ``pct:D``, ``replay:BLOB``, or ``dpor``/``dfs``/``dpor:BLOB``
    (a branch of exhaustive exploration: its first choices, then the task
    that ran last where it can go on, never one of its sleep set)."""
    if not isinstance(text, str):
        raise WorldSpecError(f"{where}: invalid schedule {clip(text)}; use free, controlled, random, pct, pct:D, dpor, dfs or replay:...")
    value = text.strip()
    if value == FREE:
        return ScheduleSpec("free")
    if value in (CONTROLLED, "random"):
        return ScheduleSpec("random")
    if value == "pct" or value.startswith("pct:"):
        depth_text, colon, length_text = value[4:].partition(":")
        depth_text = depth_text if value != "pct" else str(DEFAULT_DEPTH)
        if not depth_text.isdigit() or not 1 <= int(depth_text) <= MAX_DEPTH:
            raise WorldSpecError(f"{where}: invalid schedule {clip(text)}; pct's depth is a whole number 1..{MAX_DEPTH}")
        if colon and not (length_text.isdigit() and 1 <= int(length_text) <= 1_000_000):
            raise WorldSpecError(f"{where}: invalid schedule {clip(text)}; pct:DEPTH:STEPS takes a whole number of steps "
                                 "1..1000000")
        return ScheduleSpec("pct", depth=int(depth_text), length=int(length_text or 0))
    if value.startswith(_REPLAY):
        steps, recorded = _decode_steps(value[len(_REPLAY):], where=where)
        return ScheduleSpec("replay", steps=steps, digest=recorded)
    if value.startswith(_GUIDE):
        return ScheduleSpec("guide", prefs=_decode_choices(value[len(_GUIDE):], where=where))
    if value in EXHAUSTIVE:
        return ScheduleSpec("dpor")
    if value.startswith(_DPOR):
        prefix, sleep = _decode_branch(value[len(_DPOR):], where=where)
        return ScheduleSpec("dpor", prefix=prefix, sleep=sleep)
    raise WorldSpecError(f"{where}: invalid schedule {clip(text)}; use free, controlled, random, pct, pct:D, dpor, dfs or replay:...")


def check(value: Any, where: str) -> str:
    """The ``schedule`` option's check: the text, if it parses."""
    parse(value, where=where)
    return value.strip()


# -- steps -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One step of a controlled world: what ``task`` did between being let
    run and reaching ``point``, where it stopped (a scheduling point, a wait
    it blocks in, or ``end``)."""

    index: int
    rank: int
    worker: str  # the rank's worker name
    task: str  # the task's id: the worker's name for its entry, trainer1/3 for its third call's handler
    label: str  # what the task is: "main", "serving ParameterServer.forward (trainer1/3)"
    point: str  # where the step stopped
    preempted: bool = False  # another task could have gone on and was stopped for this one
    start: float = 0.0  # time.time() when the step began
    end: float = 0.0
    # What exhaustive exploration (``_schedule.dpor``) reads: the tasks that
    # could run when this one was chosen, as (task, rank); the step whose
    # effects made this task ready (-1: none but its own previous step); and
    # whether the schedule's clock woke it (a wait that timed out).
    ready: tuple[tuple[str, int], ...] = ()
    cause: int = -1
    timer: bool = False
    clock: float = 0.0  # the schedule's own time when it began: seconds its sleeps and timeouts moved it on
    # The objects of its rank's memory the step touched (``_schedule.dpor``'s
    # footprint), or None: unknown, all of them. A rank cannot see what a
    # stretch of Python touches, so a world's steps say None.
    objects: frozenset[str] | None = None

    def describe(self) -> str:
        """``trainer1 (main) -> rpc.call:ParameterServer.forward``"""
        return f"{self.worker} ({self.label}) -> {self.point}"


def digest(steps: Iterable[Step] | Iterable[tuple[str, str]]) -> str:
    """A short string equal exactly when two schedules are equal (task and
    point of every step, in order; not the times)."""
    h = hashlib.blake2b(digest_size=8)
    for step in steps:
        task, point = (step.task, step.point) if isinstance(step, Step) else step
        h.update(f"{task}\x1f{point}\x1e".encode())
    return h.hexdigest()


def preemptions(steps: Sequence[Step]) -> int:
    """How many times a task that could have gone on was stopped for another."""
    return sum(1 for step in steps if step.preempted)


def pairs(steps: Sequence[Step]) -> list[tuple[str, str]]:
    """``(task, point)`` of every step: what a schedule is, times aside."""
    return [(step.task, step.point) for step in steps]


def replay_schedule(steps: Sequence[Step] | Sequence[tuple[str, str]]) -> str:
    """The ``schedule`` value that takes exactly these steps again."""
    pairs_of = [(s.task, s.point) if isinstance(s, Step) else (s[0], s[1]) for s in steps]
    tasks: dict[str, int] = {}
    points: dict[str, int] = {}
    table = [[tasks.setdefault(t, len(tasks)), points.setdefault(p, len(points))] for t, p in pairs_of]
    return _REPLAY + _encode({"t": list(tasks), "p": list(points), "s": table, "d": digest(pairs_of)})


def choices(steps: Sequence[tuple[str, str]]) -> list[tuple[str, str, int, str]]:
    """The choices a schedule made, each keyed by the moment it was made at:
    the task that ran last, where it stopped, and how many times it had
    stopped there (``("", "", 0)`` for the first). Keys survive steps
    added or removed elsewhere, which step numbers do not."""
    out, seen = [], {}
    previous: tuple[str, str, int] = ("", "", 0)
    for task, point in steps:
        out.append((*previous, task))
        seen[(task, point)] = seen.get((task, point), 0) + 1
        previous = (task, point, seen[(task, point)])
    return out


def without(steps: Sequence[tuple[str, str]], index: int) -> str:
    """A guide that follows ``steps`` but for the choice of step ``index``
    (where the task that ran last goes on, if it can)."""
    kept = [list(c) for i, c in enumerate(choices(steps)) if i != index]
    return _GUIDE + _encode({"c": kept})


def branch_schedule(prefix: Sequence[str], sleep: Sequence[tuple[str, int, frozenset[str] | None]] = ()) -> str:
    """The ``schedule`` value of one branch of exhaustive exploration: the
    task chosen at each of the first ``len(prefix)`` steps, then never one
    of ``sleep`` (task, rank, the footprint of its next step or None)
    until a step it depends on has run."""
    tasks: dict[str, int] = {}
    chosen = [tasks.setdefault(t, len(tasks)) for t in prefix]
    asleep = [[tasks.setdefault(t, len(tasks)), rank] + ([] if objects is None else [sorted(objects)])
              for t, rank, objects in sleep]
    return _DPOR + _encode({"t": list(tasks), "c": chosen, "z": asleep})


def _encode(data: object) -> str:
    raw = json.dumps(data, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode().rstrip("=")


def _decode(blob: str) -> Any:
    raw = zlib.decompressobj().decompress(base64.urlsafe_b64decode(blob + "=" * (-len(blob) % 4)), _MAX_BLOB)
    return json.loads(raw)


def _decode_choices(blob: str, *, where: str) -> tuple[tuple[str, str, int, str], ...]:
    try:
        found = tuple((str(a), str(b), int(n), str(c)) for a, b, n, c in _decode(blob)["c"])
    except (binascii.Error, zlib.error, ValueError, KeyError, TypeError) as error:
        raise WorldSpecError(f"{where}: a guide schedule that cannot be read ({error})") from None
    return found


def _decode_branch(blob: str, *, where: str) -> tuple[tuple[str, ...],
                                                     tuple[tuple[str, int, frozenset[str] | None], ...]]:
    try:
        data = _decode(blob)
        tasks = data["t"]
        prefix = tuple(str(tasks[i]) for i in data["c"])
        sleep = tuple((str(tasks[i]), int(rank), None if not objects else frozenset(map(str, objects[0])))
                      for i, rank, *objects in data["z"])
    except (binascii.Error, zlib.error, ValueError, KeyError, TypeError, IndexError) as error:
        raise WorldSpecError(f"{where}: a dpor schedule that cannot be read ({error}); copy it whole") from None
    return prefix, sleep


def _decode_steps(blob: str, *, where: str) -> tuple[tuple[tuple[str, str], ...], str]:
    try:
        data = _decode(blob)
        tasks, points, table, recorded = data["t"], data["p"], data["s"], data["d"]
        steps = tuple((tasks[t], points[p]) for t, p in table)
        if not all(isinstance(t, str) and isinstance(p, str) for t, p in steps) or not isinstance(recorded, str):
            raise ValueError("not a schedule")
    except (binascii.Error, zlib.error, ValueError, KeyError, TypeError, IndexError) as error:
        raise WorldSpecError(f"{where}: a replay schedule that cannot be read ({error}); copy it whole") from None
    return steps, recorded


# -- how a schedule reads -----------------------------------------------------------------


def summary(steps: Sequence[Step], *, failed_at: str | None = None, limit: int = 40) -> list[str]:
    """The schedule as a short list of lines: one per run of steps of one
    task, each preemption marked, the last line where it ended (``failed_at``:
    the error of the task that failed, if any)::

        trainer_1 (main): 3 steps, up to rpc.call:ParameterServer.forward
        -> trainer_2 (main), preempting it: 4 steps, up to DistributedOptimizer.step
        trainer_1 (main): 1 step, up to dist_autograd.backward
    """
    runs: list[list[Step]] = []
    for step in steps:
        if runs and runs[-1][-1].task == step.task:
            runs[-1].append(step)
        else:
            runs.append([step])
    lines = []
    for run in runs:
        first, last = run[0], run[-1]
        mark = "-> " if first.preempted else ""
        how = ", preempting" if first.preempted else ""
        count = f"{len(run)} step{'s' if len(run) > 1 else ''}"
        lines.append(f"{mark}{first.worker} ({first.label}){how}: {count}, up to {last.point}")
    if len(lines) > limit:
        lines = lines[: limit // 2] + [f"... {len(lines) - limit} more runs ..."] + lines[-limit // 2:]
    if failed_at:
        lines.append(f"then: {failed_at}")
    return lines
