"""Exploration: try schedules until one fails, then shrink it.

Two kinds of search. Sampling (``controlled``/``random``, ``pct:D``): a
new seed's schedule each time, so "none failed" speaks of the schedules
tried. Exhaustive (``dpor``, and ``dfs`` to measure it against): one seed,
every schedule that can differ, up to bounds (:mod:`._schedule.dpor`), so
"exhausted: none failed" speaks of them all; the verdict never says
exhausted when a bound, a world that lost control or a program that is not
deterministic under its schedule cut the search.

:func:`explore` runs a world again and again under controlled schedules
(seeds ``seed``, ``seed + 1``, ...), stops at the first that fails, and
shrinks that schedule to the fewest preemptions that still fail the same
way: one preemption at a time is dropped (the task that ran goes on there
instead), keeping every other choice where the same moment comes again,
and the drop is kept when the world still fails alike. What it returns
reads as a short list of steps, with the lines that replay the shrunk
schedule exactly (``schedule="replay:..."``).

:func:`explore_runs` is the same search over any function that runs one
world (``rpc-harness run --schedule controlled --repeat N`` uses it for
scenarios).
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import schedule as S
from ._schedule import dpor
from .repro import python_call, world_token
from .result import WorldResult

DEFAULT_SHRINK_RUNS = 40  # worlds shrinking may run
# Exhaustive search: every Nth schedule is run twice and the two compared
# step by step (the tasks that ran and could run): a program that is not
# deterministic under its schedule cannot be explored exhaustively.
DEFAULT_CHECK_EVERY = 10


@dataclass
class Attempt:
    """One world of an exploration: its seed, its schedule, and how it ended.
    (An exploration keeps the worlds of failing attempts only: hundreds of
    passing worlds' events would fill the memory for nothing.)"""

    seed: int
    schedule: str
    world: WorldResult | None
    failed: bool
    signature: tuple = ()  # how it failed: a shrunk schedule must fail the same way
    report: Any = None  # a scenario's report, when a scenario was explored
    digest: str = ""
    preemptions: int = 0
    lost_at: int | None = None  # the step from which the world ran free, if it lost control

    def __post_init__(self) -> None:
        if self.world is not None:
            self.digest = self.world.schedule_digest
            self.preemptions = S.preemptions(self.world.schedule)
            self.lost_at = self.world.control_lost_at

    def forget(self) -> None:
        """Keep what the exploration's summary needs, not the world."""
        self.world = self.report = None


@dataclass
class Exploration:
    """What :func:`explore` found."""

    strategy: str
    attempts: list[Attempt] = field(default_factory=list)  # every schedule tried, in order
    found: Attempt | None = None  # the first that failed
    shrunk: Attempt | None = None  # the failing schedule with the fewest preemptions found
    shrink_runs: int = 0
    replay: list[str] = field(default_factory=list)  # the lines that replay the shrunk schedule
    # Exhaustive search only (dpor, dfs):
    exhaustive: bool = False
    exhausted: bool = False  # every schedule was run, none cut by a bound or lost control
    cut_by: list[str] = field(default_factory=list)  # what stopped the search short of exhausting it
    nondeterministic: str = ""  # where a schedule run twice (or a branch) did not show the same world
    redundant: int = 0  # schedules in which every task that could run slept from some step on
    checks: int = 0  # schedules run a second time, to check the world is deterministic under them

    @property
    def failed(self) -> bool:
        return self.found is not None

    @property
    def digests(self) -> list[str]:
        """The schedule digest of each world tried (distinct interleavings explored)."""
        return [a.digest for a in self.attempts]

    @property
    def replay_schedule(self) -> str:
        """The ``schedule`` value that replays the shrunk failure step for step."""
        best = self.shrunk or self.found
        return S.replay_schedule(best.world.schedule) if best is not None and best.world is not None else ""

    @property
    def lost(self) -> list[Attempt]:
        """The worlds tried that lost control (ran free from a step on: the
        rest of their schedule was the operating system's, not explored)."""
        return [a for a in self.attempts if a.lost_at is not None]

    def control_line(self) -> str:
        """How many worlds ran controlled to the end, how many lost control and where."""
        lost = self.lost
        held = f"{len(self.attempts) - len(lost)} ran controlled to the end"
        if not lost:
            return held
        at: dict[int, list[int]] = {}
        for attempt in lost:
            at.setdefault(attempt.lost_at, []).append(attempt.seed)  # type: ignore[arg-type]
        where = "; ".join(f"at step {step}: seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"
                          for step, seeds in sorted(at.items()))
        return f"{held}, {len(lost)} lost control ({where})"

    def verdict(self) -> str:
        """An exhaustive search's verdict, in one line: exhausted or not, and why."""
        count = f"{len(self.attempts):,} schedule{'s' if len(self.attempts) != 1 else ''}"
        if self.nondeterministic:
            return (f"not exhausted: the program is not deterministic under its schedule ({self.nondeterministic}); "
                    f"stopped after {count}")
        if self.found is not None:
            return f"a schedule failed after {count} of {self.strategy} search"
        if self.exhausted:
            return f"exhausted: {count} ({self.strategy}), none failed"
        return f"not exhausted: {'; '.join(self.cut_by)}; {count} ({self.strategy}), none failed"

    def summary(self) -> list[str]:
        """A few lines: what was tried, whether control held, what failed,
        the shrunk schedule."""
        lines = [f"explored {len(self.attempts)} {self.strategy} schedule(s), "
                 f"{len(set(self.digests))} distinct: {self.control_line()}"]
        if self.exhaustive:
            lines.append(self.verdict())
        if self.found is None:
            if self.exhaustive:
                return lines
            if self.lost:
                return lines + [f"no schedule failed, but {len(self.lost)} of {len(self.attempts)} world(s) lost "
                                "control: they ran free from that step on, so their later steps were not explored"]
            return lines + ["no schedule failed"]
        best = self.shrunk or self.found
        lines.append(f"schedule of seed {self.found.seed} failed after {len(self.attempts)} tries; shrunk from "
                     f"{self.found.preemptions} to {best.preemptions} preemption(s) in {self.shrink_runs} run(s):")
        if best.lost_at is not None:
            lines.append(f"  (it lost control at step {best.lost_at} and ran free from there: its replay may "
                         "take other steps)")
        lines += ["  " + line for line in S.summary(best.world.schedule if best.world else [],
                                                     failed_at=failure_line(best))]
        lines += [f"Replay: {way}" if i == 0 else f"    or: {way}" for i, way in enumerate(self.replay)]
        return lines


def failure_line(attempt: Attempt) -> str:
    """What went wrong, in one line."""
    world = attempt.world
    if world is None:
        return "the world failed"
    failed = world.failures
    if failed:
        return failed[0].describe()
    if attempt.report is not None and attempt.report.problems():
        return attempt.report.problems()[0]
    return world.problems[0] if world.problems else "the world failed"


def world_signature(world: WorldResult) -> tuple:
    """How a world failed, coarsely: which ranks failed how (the error's type)."""
    ranks = tuple(sorted((o.name, o.status, (o.error or "").split(":")[0]) for o in world.failures))
    return ranks + tuple(sorted(p.split(":")[0][:40] for p in world.problems))


def explore_runs(run: Callable[[int, str], Attempt], *, seed: int, schedules: int, strategy: str,
                 shrink: bool = True, shrink_runs: int = DEFAULT_SHRINK_RUNS, preemptions: int | None = None,
                 seconds: float | None = None, check_every: int = DEFAULT_CHECK_EVERY) -> Exploration:
    """Run ``run(seed, schedule)`` with seeds ``seed, seed + 1, ...`` under
    ``strategy`` until one fails (at most ``schedules``), then shrink it.
    An exhaustive ``strategy`` (``dpor``, ``dfs``) runs one seed's schedules
    instead, each a branch of its search, within the bounds given."""
    if strategy in S.EXHAUSTIVE:
        found = _search(run, seed=seed, strategy=strategy, schedules=schedules, preemptions=preemptions,
                        seconds=seconds, check_every=check_every)
    else:
        found = _sample(run, seed=seed, schedules=schedules, strategy=strategy)
    if found.found is not None and shrink:
        found.shrunk, found.shrink_runs = _shrink(run, found.found, budget=shrink_runs)
    return found


def _sample(run: Callable[[int, str], Attempt], *, seed: int, schedules: int, strategy: str) -> Exploration:
    found = Exploration(strategy)
    for index in range(schedules):
        attempt = run(seed + index, strategy)
        found.attempts.append(attempt)
        if attempt.failed:
            found.found = attempt
            break
        attempt.forget()
    return found


def _search(run: Callable[[int, str], Attempt], *, seed: int, strategy: str, schedules: int,
            preemptions: int | None, seconds: float | None, check_every: int) -> Exploration:
    """Every schedule of one seed's world that can differ (``dpor``: up to
    the reordering of steps that commute; ``dfs``: all), until one fails or
    a bound cuts the search."""
    found = Exploration(strategy, exhaustive=True)
    search = dpor.Search(reduce=strategy == "dpor", preemption_bound=preemptions)
    started = time.monotonic()
    while True:
        # The next branch first: a bound the search has just reached, with
        # no branch left, cut nothing (the search is exhausted).
        branch = search.next()
        if branch is None:
            break
        if len(found.attempts) >= schedules:
            found.cut_by.append(f"schedule bound {schedules:,}")
            break
        if seconds is not None and time.monotonic() - started >= seconds:
            found.cut_by.append(f"time bound {seconds:g} s")
            break
        attempt = run(seed, branch.schedule)
        found.attempts.append(attempt)
        steps = _controlled_steps(attempt)
        if attempt.lost_at is not None and not any("lost control" in cut for cut in found.cut_by):
            found.cut_by.append(f"a world lost control at step {attempt.lost_at} (its later steps ran free, "
                                "unexplored)")
        if len(steps) < len(branch.prefix) and (attempt.failed or attempt.lost_at is not None):
            # It ended, or ran free, before its branch's choices: nothing of the
            # branch was seen, so nothing is recorded (a failure is still one).
            if attempt.failed:
                found.found = attempt
                break
            attempt.forget()
            continue
        problem = search.record(branch, steps)
        if problem is None and attempt.world is not None and attempt.world.problems and \
                any("diverged" in p for p in attempt.world.problems):
            problem = next(p for p in attempt.world.problems if "diverged" in p)
        if problem is not None:
            found.nondeterministic = problem
            break
        if attempt.failed:
            found.found = attempt
            break
        if check_every and search.runs % check_every == 0:
            problem = _run_twice(run, seed, steps, found, lost=attempt.lost_at is not None)
            if problem is not None:
                found.nondeterministic = problem
                break
        attempt.forget()
    if search.cut:
        found.cut_by.insert(0, f"preemption bound {preemptions} (left out {search.cut:,} branch(es))")
    found.redundant = search.redundant
    found.exhausted = search.exhausted and not found.cut_by and found.found is None and not found.nondeterministic
    return found


def _controlled_steps(attempt: Attempt) -> list[S.Step]:
    """The steps of a world the schedule chose (up to where it lost control)."""
    steps = attempt.world.schedule if attempt.world is not None else []
    return steps[:attempt.lost_at]  # (None: every step)


def _run_twice(run: Callable[[int, str], Attempt], seed: int, steps: Sequence[S.Step],
               found: Exploration, *, lost: bool = False) -> str | None:
    """Run the schedule just run again, and compare the two step by step.
    Where either run lost control (``lost``: the first did), only the steps
    both chose are compared: where control is lost depends on the real
    clock (a stall, a lock the scheduler cannot see), not on the program."""
    found.checks += 1
    again = run(seed, dpor.Branch(tuple(step.task for step in steps)).schedule)
    second = _controlled_steps(again)
    if lost or again.lost_at is not None:
        common = min(len(steps), len(second))
        steps, second = steps[:common], second[:common]
    problem = dpor.compare(steps, second)
    again.forget()
    return problem


def _shrink(run: Callable[[int, str], Attempt], failing: Attempt, *, budget: int) -> tuple[Attempt, int]:
    """Drop preemptions one at a time while the world still fails alike."""
    best, runs = failing, 0
    improved = True
    while improved and best.world is not None:  # the budget is checked before each run
        improved = False
        steps = best.world.schedule
        for index in [s.index for s in steps if s.preempted]:
            if runs >= budget:
                break
            runs += 1
            candidate = run(best.seed, S.without(S.pairs(steps), index))
            if candidate.failed and candidate.signature == best.signature and \
                    candidate.preemptions < best.preemptions and candidate.world is not None and \
                    candidate.world.controlled:
                best, improved = candidate, True
                break
            candidate.forget()
    return best, runs


def explore(
    entry: Callable[..., Any] | str,
    world_size: int | None = None,
    *,
    spawn: bool = False,
    schedules: int = 20,
    strategy: str = "controlled",
    seed: int = 0,
    shrink: bool = True,
    shrink_runs: int = DEFAULT_SHRINK_RUNS,
    preemptions: int | None = None,
    seconds: float | None = None,
    check_every: int = DEFAULT_CHECK_EVERY,
    reuse: bool = False,
    names: Sequence[str] | str | None = None,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    **options: Any,
) -> Exploration:
    """Search the schedules of a world for one that fails.

    Runs ``entry`` (``spawn=True``: a program run as :func:`rpc_harness.spawn`
    runs it, ``world_size`` its ``nprocs``) under ``strategy`` (``controlled``,
    ``random``, ``pct`` or ``pct:D``) with seeds ``seed, seed + 1, ...``,
    stops at the first world that fails (at most ``schedules``), and shrinks
    its schedule to the fewest preemptions that still fail the same way.

    ``strategy="dpor"`` searches exhaustively instead: every schedule of
    seed ``seed``'s world up to the reordering of steps that commute (steps
    on different ranks), with sleep sets; ``"dfs"`` runs every schedule, to
    measure against. Bounds: ``schedules``, ``preemptions`` (a branch that
    needs more is left out), ``seconds``; :meth:`Exploration.verdict` says
    "exhausted" only when none cut the search. Every ``check_every``-th
    schedule is run twice and compared step by step: a program that is not
    deterministic under its schedule is reported, not explored further.
    ``reuse=True`` runs each schedule as one entry of a live world (as
    ``rpc_world_module.run`` does): brought up once, its ranks run entry
    after entry, each checked clean after it (an entry that leaves state
    fails, naming the rule it broke), and a schedule costs what an entry
    costs. A schedule begins at the entry's start, as in a fresh world once
    it has joined: the same schedule takes the same steps either way. A
    world an entry failed or left dirty is ended, and the next schedule gets
    a fresh one. ``options`` are world options (faults, deadline, ...), as for
    :func:`rpc_harness.run_world`. Nothing raises for a failing world: the
    :class:`Exploration` says what failed, how to read it and how to replay it.
    """
    from ._parent.launcher import run_world
    from ._parent.launcher import spawn as spawn_world
    from .errors import WorldSpecError
    from .spec import make_spec

    if "schedule" in options:
        raise WorldSpecError("explore(): give the schedules to try as strategy=, not schedule=")
    kind = S.parse(strategy, where="explore(): strategy").kind
    if kind in ("free", "replay", "guide") or (kind == "dpor" and strategy not in S.EXHAUSTIVE):
        raise WorldSpecError(f"explore(): strategy {strategy!r} explores nothing; use controlled, random, pct:D, "
                             "dpor or dfs")
    if preemptions is not None and (isinstance(preemptions, bool) or not isinstance(preemptions, int)
                                    or preemptions < 0):
        raise WorldSpecError(f"explore(): invalid preemptions {preemptions!r}; use a whole number >= 0, or None")
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float))
                                or not seconds > 0):
        raise WorldSpecError(f"explore(): invalid seconds {seconds!r}; use a number of seconds > 0, or None")

    size = (world_size or 1) if spawn else world_size  # a spawned program's nprocs
    # Every input checked before any world, named as explore()'s.
    make_spec(entry, size, names=names, args=args, kwargs=kwargs, spawned=spawn, where="explore()", **options)
    if not isinstance(reuse, bool):
        raise WorldSpecError(f"explore(): invalid reuse {reuse!r}; use True or False")
    if reuse and spawn:
        raise WorldSpecError("explore(): reuse=True runs the schedules as entries of one live world; a program "
                             "that calls init_rpc and rpc.shutdown itself (spawn=True) needs a world of its own")
    pool = None
    if reuse:
        from ._parent.live import WorldPool, refusal

        refused = refusal(make_spec(entry, world_size, names=names, args=args, kwargs=kwargs, where="explore()",
                                    **dict(options, seed=seed)))
        if refused is not None:
            raise WorldSpecError(f"explore(): {refused[1]}: it cannot run in a reused world; use reuse=False")
        pool = WorldPool(limit=1)

    def run(world_seed: int, schedule: str) -> Attempt:
        if pool is not None:
            world = _run_entry(pool, make_spec(entry, world_size, names=names, args=args, kwargs=kwargs,
                                               where="explore()", **dict(options, seed=world_seed, schedule=schedule)))
        elif spawn:
            world = spawn_world(entry, args=args, nprocs=size, kwargs=kwargs, names=names,
                                seed=world_seed, schedule=schedule, check=False, **options)
        else:
            world = run_world(entry, size, names=names, args=args, kwargs=kwargs, seed=world_seed,
                              schedule=schedule, check=False, **options)
        return Attempt(world_seed, schedule, world, not world.ok, world_signature(world))  # (passed: empty)

    try:
        found = explore_runs(run, seed=seed, schedules=schedules, strategy=strategy, shrink=shrink,
                             shrink_runs=shrink_runs, preemptions=preemptions, seconds=seconds,
                             check_every=check_every)
    finally:
        if pool is not None:
            pool.close()
    best = found.shrunk or found.found
    if best is not None:
        spec = make_spec(entry, size, names=names, args=args, kwargs=kwargs,
                         spawned=spawn, where="explore()", **dict(options, seed=best.seed,
                                                                    schedule=found.replay_schedule))
        token = world_token(spec, reused=reuse)  # replayed as it ran: in a reused world, its rules checked
        call = python_call(spec)
        if reuse and not call.startswith("("):
            call += "  # in a fresh world, where no rule of a reused world is checked"
        found.replay = ([token.command(deadline=spec.options.deadline)] if token else []) + [call]
    return found


def _run_entry(pool: Any, spec: Any) -> WorldResult:
    """One schedule as an entry of ``pool``'s live world; its replay line
    takes its steps exactly, as a fresh world's does."""
    from .repro import replaying

    result = pool.run(dataclasses.replace(spec, repro=python_call(spec)), f"explore() schedule {next(_entries)}")
    if result.schedule:
        result.repro = python_call(replaying(spec, result.schedule))
    return result


_entries = itertools.count(1)  # labels of exploration entries, as later entries' reports name them
