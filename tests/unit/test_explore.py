"""Exploration without worlds: a model program whose failure needs one
preemption, run through explore_runs and explore() with hand-made results
(tests/world/test_schedule.py explores real worlds). What shrinking keeps
and drops, what the summary and the replay lines of the schedule it found
carry, and how worlds that lost control (at their first step too) are told."""

from __future__ import annotations

import dataclasses
import pathlib
import sys

import pytest

import rpc_harness
from rpc_harness import FaultPlan, WorldResult
from rpc_harness import schedule as S
from rpc_harness.explore import (
    DEFAULT_CHECK_EVERY,
    DEFAULT_SHRINK_RUNS,
    Attempt,
    Exploration,
    explore,
    explore_runs,
    failure_line,
    world_signature,
)
from rpc_harness.repro import decode
from rpc_harness.result import RankOutcome

TESTS = str(pathlib.Path(__file__).resolve().parents[1])  # where programs/ is imported from

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

NAMES = ("keeper", "caller1")
STEPS = 10


def steps(preempted: frozenset[int], count: int = STEPS) -> list[S.Step]:
    """Steps alternating between the two ranks, preempted where asked. A
    preemption changes where a step stops (as it changes what runs next in
    a real world), so that schedules that differ in their preemptions
    differ in their steps, and so in their guides."""
    return [S.Step(index=i, rank=i % 2, worker=NAMES[i % 2], task=NAMES[i % 2], label="main",
                   point=f"p{i}" + ("!" if i in preempted else ""), preempted=i in preempted) for i in range(count)]


def result(seed: int, preempted: frozenset[int], *, failed: bool, error: str = "AssertionError: boom",
           lost_at: int | None = None, label: str = "controlled", count: int = STEPS) -> WorldResult:
    ranks = [RankOutcome(0, "keeper", status="raised" if failed else "ok", error=error if failed else None),
             RankOutcome(1, "caller1", status="ok")]
    return WorldResult(names=NAMES, seed=seed, faults=FaultPlan(), deadline=5.0, ranks=ranks,
                       schedule=steps(preempted, count), control_lost_at=lost_at, schedule_label=label)


class Model:
    """A program that fails when step ``needed`` is a preemption; each seed
    starts with the preemptions ``first[seed]`` (none for a seed not there).
    A guide schedule (``S.without``) drops one preemption of a world it
    ran before; ``after_drop`` may say what the world does instead."""

    def __init__(self, first: dict[int, frozenset[int]], needed: int = 4, *,
                 after_drop=None) -> None:
        self.first, self.needed, self.after_drop = first, needed, after_drop
        self.guides: dict[str, tuple[int, frozenset[int], int]] = {}
        self.calls: list[tuple[int, str]] = []
        self.attempts: list[Attempt] = []

    def world(self, seed: int, schedule: str) -> WorldResult:
        self.calls.append((seed, schedule))
        if schedule in self.guides:
            _, before, dropped = self.guides[schedule]
            preempted = before - {dropped}
            made = self.after_drop(seed, preempted, dropped) if self.after_drop else None
            if made is not None:
                return self._remember(made)
        else:
            preempted = self.first.get(seed, frozenset())
        return self._remember(result(seed, preempted, failed=self.needed in preempted))

    def _remember(self, world: WorldResult) -> WorldResult:
        preempted = frozenset(s.index for s in world.schedule if s.preempted)
        for index in preempted:
            self.guides[S.without(S.pairs(world.schedule), index)] = (world.seed, preempted, index)
        return world

    def run(self, seed: int, schedule: str) -> Attempt:
        world = self.world(seed, schedule)
        attempt = Attempt(seed, schedule, world, not world.ok, world_signature(world) if not world.ok else ())
        self.attempts.append(attempt)
        return attempt


def preemptions_of(attempt: Attempt | None) -> list[int]:
    assert attempt is not None and attempt.world is not None
    return [s.index for s in attempt.world.schedule if s.preempted]


# -- the search ---------------------------------------------------------------------


def test_the_search_runs_seed_after_seed_under_the_strategy_and_stops_at_the_first_failure():
    model = Model({3: frozenset({4})})
    found = explore_runs(model.run, seed=1, schedules=10, strategy="pct:2", shrink=False)
    assert model.calls == [(1, "pct:2"), (2, "pct:2"), (3, "pct:2")]
    assert found.failed and found.found is model.attempts[2] and found.found.seed == 3
    assert found.shrunk is None and found.shrink_runs == 0
    assert found.strategy == "pct:2"
    # The passing worlds are forgotten (their events would fill the memory), the failing one kept.
    assert [a.world is None for a in found.attempts] == [True, True, False]
    assert [a.digest for a in found.attempts] == found.digests and all(found.digests)


def test_the_search_stops_after_its_schedules_when_none_fails():
    model = Model({})
    found = explore_runs(model.run, seed=5, schedules=3, strategy="controlled")
    assert [seed for seed, _ in model.calls] == [5, 6, 7]
    assert not found.failed and found.found is None and found.shrunk is None and found.replay_schedule == ""
    assert found.summary() == ["explored 3 controlled schedule(s), 1 distinct: 3 ran controlled to the end",
                               "no schedule failed"]


def test_the_first_schedule_tried_is_the_seed_given():
    model = Model({0: frozenset({4})})
    found = explore_runs(model.run, seed=0, schedules=1, strategy="controlled")
    assert model.calls[0] == (0, "controlled") and found.found.seed == 0


# -- shrinking ----------------------------------------------------------------------


def test_shrinking_drops_every_preemption_the_failure_does_not_need():
    model = Model({0: frozenset({1, 4, 7})})
    found = explore_runs(model.run, seed=0, schedules=5, strategy="controlled")
    assert preemptions_of(found.found) == [1, 4, 7]
    assert preemptions_of(found.shrunk) == [4] and found.shrunk.preemptions == 1
    # Drop 1: still fails, kept; then drop 4: passes; drop 7: fails, kept;
    # then drop 4 again: passes, and nothing is left to drop.
    assert found.shrink_runs == 4 == len(model.calls) - 1
    assert [seed for seed, _ in model.calls] == [0] * 5, "every shrink run replays the failing seed"
    assert all(schedule.startswith("guide:") for _, schedule in model.calls[1:])
    # Each guide drops one preemption of the best schedule found so far.
    assert model.calls[1][1] == S.without(S.pairs(found.found.world.schedule), 1)
    assert found.replay_schedule == S.replay_schedule(found.shrunk.world.schedule)
    assert found.replay_schedule != S.replay_schedule(found.found.world.schedule)


def test_shrinking_forgets_the_worlds_it_does_not_keep():
    model = Model({0: frozenset({1, 4, 7})})
    found = explore_runs(model.run, seed=0, schedules=5, strategy="controlled")
    refused = [a for a in model.attempts[1:] if not a.failed]
    assert len(refused) == 2 and all(a.world is None for a in refused)
    assert found.shrunk.world is not None and found.found.world is not None


def test_shrinking_stops_at_its_budget_of_runs():
    model = Model({0: frozenset({1, 4, 7})})
    found = explore_runs(model.run, seed=0, schedules=5, strategy="controlled", shrink_runs=2)
    assert found.shrink_runs == 2 and len(model.calls) == 3
    assert preemptions_of(found.shrunk) == [4, 7], "drop 1 kept, drop 4 refused, then the budget ran out"
    one = explore_runs(Model({0: frozenset({1, 4, 7})}).run, seed=0, schedules=5, strategy="controlled",
                       shrink_runs=1)
    assert one.shrink_runs == 1 and preemptions_of(one.shrunk) == [4, 7]
    none = explore_runs(Model({0: frozenset({1, 4, 7})}).run, seed=0, schedules=5, strategy="controlled",
                        shrink_runs=0)
    assert none.shrink_runs == 0 and none.shrunk is none.found


def test_a_drop_that_still_fails_alike_is_kept_until_no_preemption_is_left():
    model = Model({0: frozenset(range(1, 10))}, needed=1,
                  after_drop=lambda seed, preempted, dropped: result(seed, preempted, failed=True))
    found = explore_runs(model.run, seed=0, schedules=1, strategy="controlled")
    assert found.shrink_runs == 9 and preemptions_of(found.shrunk) == []


def test_the_default_budget_of_shrinking_is_forty_runs():
    # 50 preemptions, each of which the failure needs: every drop passes.
    def passes(seed, preempted, dropped):
        return result(seed, preempted, failed=False, count=50)

    model = Model({}, after_drop=passes)
    model.first = {0: frozenset(range(50))}
    model.world = _counted(model.world, count=50)
    found = explore_runs(model.run, seed=0, schedules=1, strategy="controlled")
    assert DEFAULT_SHRINK_RUNS == 40
    assert found.shrink_runs == 40 and len(model.calls) == 41 and found.shrunk is found.found


def _counted(world, *, count):
    """The model's first world of a seed with ``count`` steps, all needed."""
    def make(seed, schedule):
        if schedule == "controlled":
            made = result(seed, frozenset(range(count)), failed=True, count=count)
            world.__self__.calls.append((seed, schedule))
            return world.__self__._remember(made)
        return world(seed, schedule)

    return make


def test_a_drop_that_fails_another_way_is_not_kept():
    def other(seed, preempted, dropped):
        return result(seed, preempted, failed=True, error="RuntimeError: another failure")

    found = explore_runs(Model({0: frozenset({1, 4})}, after_drop=other).run, seed=0, schedules=1,
                         strategy="controlled")
    assert found.shrink_runs == 2 and found.shrunk is found.found


def test_a_drop_whose_world_took_as_many_preemptions_elsewhere_is_not_kept():
    def elsewhere(seed, preempted, dropped):
        return result(seed, preempted | {dropped + 1}, failed=True)  # the guide led it to another preemption

    found = explore_runs(Model({0: frozenset({1, 4})}, after_drop=elsewhere).run, seed=0, schedules=1,
                         strategy="controlled")
    assert found.shrink_runs == 2 and found.shrunk is found.found


def test_a_drop_whose_world_lost_control_is_not_kept_even_at_its_first_step():
    # A world that ran free did not follow the guide: its schedule says
    # nothing of what the drop does.
    for lost_at in (0, 3):
        def free(seed, preempted, dropped, lost_at=lost_at):
            return result(seed, preempted, failed=True, lost_at=lost_at)

        found = explore_runs(Model({0: frozenset({1, 4})}, after_drop=free).run, seed=0, schedules=1,
                             strategy="controlled")
        assert found.shrink_runs == 2 and found.shrunk is found.found, lost_at


def test_a_failing_attempt_without_a_world_is_not_shrunk():
    def run(seed, schedule):
        return Attempt(seed, schedule, None, True, ("setup",))

    found = explore_runs(run, seed=0, schedules=3, strategy="controlled")
    assert found.failed and found.shrink_runs == 0 and found.shrunk is found.found
    assert found.replay_schedule == ""
    assert found.found.digest == "" and found.found.preemptions == 0 and found.found.lost_at is None
    assert found.summary()[1:] == ["schedule of seed 0 failed after 1 tries; shrunk from 0 to 0 preemption(s) in 0 "
                                   "run(s):", "  then: the world failed"]


# -- what an attempt and a failure say ------------------------------------------------


def test_an_attempt_takes_its_digest_preemptions_and_lost_step_from_its_world():
    world = result(2, frozenset({1, 4}), failed=True, lost_at=0)
    attempt = Attempt(2, "controlled", world, True)
    assert attempt.digest == world.schedule_digest != ""
    assert attempt.preemptions == 2 and attempt.lost_at == 0
    attempt.forget()
    assert attempt.world is None and attempt.report is None
    assert (attempt.digest, attempt.preemptions, attempt.lost_at) == (world.schedule_digest, 2, 0)


def test_the_failure_line_is_the_first_failed_rank_then_the_report_then_the_worlds_problem():
    failed = result(0, frozenset(), failed=True)
    assert failure_line(Attempt(0, "c", failed, True)) == failed.failures[0].describe()
    assert failure_line(Attempt(0, "c", None, True)) == "the world failed"

    class Report:
        def __init__(self, problems):
            self._problems = problems

        def problems(self):
            return self._problems

    passed = result(0, frozenset(), failed=False)
    assert failure_line(Attempt(0, "c", passed, True, report=Report(["outcome: did not learn", "b"]))) == \
        "outcome: did not learn"
    with_problem = dataclasses.replace(passed, problems=["kill:caller1@x never fired", "other"])
    assert failure_line(Attempt(0, "c", with_problem, True, report=Report([]))) == "kill:caller1@x never fired"
    assert failure_line(Attempt(0, "c", passed, True)) == "the world failed"


def test_a_failure_signature_is_which_ranks_failed_how_and_the_kinds_of_problems():
    one = result(0, frozenset(), failed=True, error="AssertionError: x == 1")
    other_text = result(1, frozenset({3}), failed=True, error="AssertionError: y == 2")
    assert world_signature(one) == world_signature(other_text) == (("keeper", "raised", "AssertionError"),)
    other_kind = result(0, frozenset(), failed=True, error="RuntimeError: x")
    assert world_signature(one) != world_signature(other_kind)
    ranks = [RankOutcome(0, "keeper", status="hung"), RankOutcome(1, "caller1", status="raised", error=None)]
    two = dataclasses.replace(one, ranks=ranks, problems=["b" * 50 + ": second", "a: first"])
    assert world_signature(two) == (("caller1", "raised", ""), ("keeper", "hung", ""), "a", "b" * 40)


# -- the summary --------------------------------------------------------------------


def test_the_summary_of_a_shrunk_failure_reads_as_its_steps_and_its_replay_lines():
    found = explore_runs(Model({2: frozenset({1, 4, 7})}).run, seed=0, schedules=5, strategy="controlled")
    found.replay = ["rpc-harness replay TOKEN", "rpc_harness.run_world(...)"]
    lines = found.summary()
    assert lines[0] == "explored 3 controlled schedule(s), 2 distinct: 3 ran controlled to the end"
    assert lines[1] == "schedule of seed 2 failed after 3 tries; shrunk from 3 to 1 preemption(s) in 4 run(s):"
    body = S.summary(found.shrunk.world.schedule, failed_at=found.shrunk.world.failures[0].describe())
    assert lines[2:-2] == ["  " + line for line in body]
    assert lines[-2:] == ["Replay: rpc-harness replay TOKEN", "    or: rpc_harness.run_world(...)"]
    assert not any("lost control" in line for line in lines)


def test_a_summary_without_shrinking_shows_the_schedule_that_failed():
    found = explore_runs(Model({0: frozenset({1, 4})}).run, seed=0, schedules=5, strategy="random",
                         shrink=False)
    lines = found.summary()
    assert lines[1] == "schedule of seed 0 failed after 1 tries; shrunk from 2 to 2 preemption(s) in 0 run(s):"
    assert lines[2:] == ["  " + line for line in S.summary(found.found.world.schedule,
                                                            failed_at=failure_line(found.found))]


def test_a_world_that_lost_control_at_its_first_step_is_counted_and_named():
    # Step 0 is a step like any other: "lost at step 0" is not "never lost".
    def run(seed, schedule):
        world = result(seed, frozenset({4}) if seed == 3 else frozenset(), failed=seed == 3,
                       lost_at={1: 0, 3: 0}.get(seed))
        return Attempt(seed, schedule, world, not world.ok, world_signature(world))

    found = explore_runs(run, seed=0, schedules=5, strategy="controlled", shrink=False)
    assert [a.seed for a in found.lost] == [1, 3]
    assert found.control_line() == "2 ran controlled to the end, 2 lost control (at step 0: seeds 1, 3)"
    lines = found.summary()
    assert "  (it lost control at step 0 and ran free from there: its replay may take other steps)" in lines
    passing = explore_runs(run, seed=0, schedules=2, strategy="controlled")
    assert passing.summary()[1] == ("no schedule failed, but 1 of 2 world(s) lost control: they ran free from "
                                    "that step on, so their later steps were not explored")


def test_the_control_line_sorts_the_steps_and_lists_each_steps_seeds():
    exploration = Exploration("controlled", attempts=[
        Attempt(seed, "controlled", result(seed, frozenset(), failed=False, lost_at=lost_at), False)
        for seed, lost_at in ((4, 7), (5, None), (6, 2), (7, 7))])
    assert exploration.control_line() == "1 ran controlled to the end, 3 lost control (at step 2: seed 6; " \
                                         "at step 7: seeds 4, 7)"


# -- explore(): the worlds it runs and the replay lines it prints ------------------------


@pytest.fixture
def worlds(monkeypatch):
    """run_world and spawn replaced by the model: seed 12 fails, its
    preemptions at 1, 4 and 7; the calls are recorded."""
    model = Model({12: frozenset({1, 4, 7})})
    calls = []

    def run_world(entry, world_size=None, **kwargs):
        calls.append(("run_world", entry, world_size, kwargs))
        return model.world(kwargs["seed"], kwargs["schedule"])

    def spawn(fn, **kwargs):
        calls.append(("spawn", fn, kwargs.get("nprocs"), kwargs))
        return model.world(kwargs["seed"], kwargs["schedule"])

    monkeypatch.setattr("rpc_harness._parent.launcher.run_world", run_world)
    monkeypatch.setattr("rpc_harness._parent.launcher.spawn", spawn)
    return calls


def test_explore_replays_the_shrunk_schedule_with_its_seed_deadline_and_options(worlds):
    found = explore("programs.echo:echo", 2, seed=10, schedules=5, deadline=7.0, rpc_timeout=4.0,
                    names=["keeper", "caller1"])
    assert [call[3]["seed"] for call in worlds] == [10, 11, 12, 12, 12, 12, 12]
    first = worlds[0]
    assert first[:3] == ("run_world", "programs.echo:echo", 2)
    assert first[3]["deadline"] == 7.0 and first[3]["rpc_timeout"] == 4.0 and first[3]["check"] is False
    assert first[3]["names"] == ["keeper", "caller1"] and first[3]["schedule"] == "controlled"
    assert found.found.seed == 12 and preemptions_of(found.shrunk) == [4]
    token, line = found.replay
    python = line.rpartition("; ")[2]  # after the import path the line sets up, where it does
    assert token.startswith("rpc-harness replay ") and "--deadline 7" in token
    repro = decode(token.split()[2])
    assert repro.seed == 12 and repro.entry == "programs.echo:echo" and repro.names == ("keeper", "caller1")
    assert repro.options["schedule"] == found.replay_schedule == S.replay_schedule(found.shrunk.world.schedule)
    assert repro.options["rpc_timeout"] == 4.0
    # programs/ is imported from tests/, which pytest put on sys.path: the line puts it there first.
    assert line.startswith(f"import rpc_harness, sys; sys.path[:0] = [{TESTS!r}]; "
                           "rpc_harness.run_world('programs.echo:echo', names=['keeper', 'caller1'], seed=12, ")
    assert "seed=12" in python and f"schedule={found.replay_schedule!r}" in python and "deadline=7.0" in python
    assert found.summary()[-2:] == [f"Replay: {token}", f"    or: {line}"]


def test_explore_of_a_spawned_program_spawns_it_and_replays_it_as_spawned(worlds):
    found = explore("programs.echo:run_worker", 2, spawn=True, args=(2,), kwargs={"calls": 1}, seed=12,
                    schedules=1, shrink=False, deadline=9.0, names=["keeper", "caller1"])
    assert [call[:3] for call in worlds] == [("spawn", "programs.echo:run_worker", 2)]
    given = worlds[0][3]
    assert given["args"] == (2,) and given["kwargs"] == {"calls": 1} and given["names"] == ["keeper", "caller1"]
    assert given["schedule"] == "controlled" and given["check"] is False and given["deadline"] == 9.0
    assert found.found.schedule == "controlled" and found.found.signature == world_signature(found.found.world)
    token, line = found.replay
    python = line.rpartition("; ")[2]
    repro = decode(token.split()[2])
    assert repro.spawned and repro.seed == 12 and repro.options["schedule"] == found.replay_schedule
    assert repro.names == ("keeper", "caller1") and repro.args == (2,) and repro.kwargs == {"calls": 1}
    assert python.startswith("rpc_harness.spawn('programs.echo:run_worker', args=(2,), nprocs=2, ")
    assert "kwargs={'calls': 1}" in python and "names=['keeper', 'caller1']" in python
    assert line.startswith(f"import rpc_harness, sys; sys.path[:0] = [{TESTS!r}]; rpc_harness.spawn(")
    assert found.shrunk is None and found.replay_schedule == S.replay_schedule(found.found.world.schedule)


def test_explore_gives_the_entry_its_args_and_kwargs_and_replays_them(worlds):
    found = explore("worlds:timed_steps", 2, args=(3,), seed=12, schedules=1, shrink=False)
    assert worlds[0][3]["args"] == (3,) and worlds[0][3]["check"] is False
    assert "args=(3,)" in found.replay[1] and decode(found.replay[0].split()[2]).args == (3,)
    worlds.clear()
    found = explore("worlds:timed_steps", 2, kwargs={"steps": 3}, seed=12, schedules=1, shrink=False)
    assert worlds[0][3]["kwargs"] == {"steps": 3}
    assert "kwargs={'steps': 3}" in found.replay[1] and decode(found.replay[0].split()[2]).kwargs == {"steps": 3}
    assert found.found.schedule == "controlled" and found.found.signature == world_signature(found.found.world)


def test_explore_tries_twenty_schedules_from_seed_zero_by_default(worlds):
    found = explore("programs.echo:echo", 2)
    assert [call[3]["seed"] for call in worlds] == [*range(13), 12, 12, 12, 12], "seed 12 fails, then shrinks"
    assert found.found.seed == 12
    worlds.clear()
    found = explore("programs.echo:echo", 2, seed=13)
    assert [call[3]["seed"] for call in worlds] == list(range(13, 33)) and not found.failed


def test_a_spawned_program_explored_without_a_world_size_runs_one_process(worlds):
    explore("programs.echo:run_worker", spawn=True, args=(1,), seed=0, schedules=1)
    assert worlds[0][2] == 1


def test_explore_that_finds_nothing_has_no_replay_line(worlds):
    found = explore("programs.echo:echo", 2, seed=0, schedules=2)
    assert not found.failed and found.replay == []


def test_explore_names_itself_in_the_refusal_of_a_strategy_it_cannot_read(worlds):
    with pytest.raises(rpc_harness.WorldSpecError, match=r"^explore\(\): strategy: invalid schedule 'bogus'; use "):
        explore("programs.echo:echo", 2, strategy="bogus")
    assert worlds == []


def test_explore_refuses_a_schedule_and_strategies_that_explore_nothing(worlds):
    with pytest.raises(rpc_harness.WorldSpecError, match=r"^explore\(\): give the schedules to try as strategy="):
        explore("programs.echo:echo", 2, schedule="controlled")
    pairs = S.pairs(steps(frozenset({1})))
    for strategy in ("free", S.replay_schedule(pairs), S.without(pairs, 1)):
        with pytest.raises(rpc_harness.WorldSpecError, match=r"^explore\(\): strategy .* explores nothing; use "
                                                              r"controlled, random"):
            explore("programs.echo:echo", 2, strategy=strategy)
    assert worlds == []


# -- exhaustive search (dpor, dfs): the branches it runs, its bounds, its verdict ----------------
# The worlds are test_dpor's model of message passing, run under each
# branch's own strategy, as a world runs it; a failure is the model's outcome.

from rpc_harness._schedule import dpor, strategies  # noqa: E402

from .test_dpor import APART, BANK, BOTH_SLEEP, PIPELINE, THREE_TO_ONE, interleavings  # noqa: E402
from .test_dpor import run as run_program  # noqa: E402
from .test_dpor import search as search_directly  # noqa: E402


def lost_update(outcome: tuple) -> bool:
    """BANK's two deposits of 10 and 5, one of them lost."""
    return dict(dict(outcome)[0]).get("balance") != 15


class Program:
    """Worlds of one model program: ``fails(outcome)`` says whether a world
    failed; ``lose(run, steps)`` may give the step a world ran free from;
    ``change(run)`` may give the program another world makes instead (a
    program that is not deterministic under its schedule); ``lose`` is
    also given how many steps the branch chooses."""

    def __init__(self, program: dict[int, tuple], *, fails=lambda outcome: False, lose=None, change=None,
                 problems=None) -> None:
        self.program, self.fails, self.lose, self.change, self.problems = program, fails, lose, change, problems
        self.calls: list[tuple[int, str]] = []
        self.attempts: list[Attempt] = []
        self.clock = 100.0  # (not 0: a clock read is not a duration)

    def run(self, seed: int, schedule: str) -> Attempt:
        self.clock += 1.0
        self.calls.append((seed, schedule))
        number = len(self.calls)
        program = self.change(number) if self.change else None
        taken, outcome, _ = run_program(program or self.program, strategies.make(S.parse(schedule), None).choose)
        steps = [S.Step(index=i, rank=t.rank, worker=f"r{t.rank}", task=t.task, label="main", point=f"p{i}",
                        ready=t.ready, cause=t.cause, timer=t.timer) for i, t in enumerate(taken)]
        failed = self.fails(outcome)
        prefix = len(S.parse(schedule).prefix) if schedule.startswith("dpor:") else 0
        lost_at = self.lose(number, steps, prefix) if self.lose else None
        names = tuple(f"r{rank}" for rank in sorted(self.program))
        ranks = [RankOutcome(0, "r0", status="raised" if failed else "ok",
                             error="AssertionError: lost update" if failed else None)]
        ranks += [RankOutcome(rank, name) for rank, name in enumerate(names) if rank]
        world = WorldResult(names=names, seed=seed, faults=FaultPlan(), deadline=5.0, ranks=ranks,
                            schedule=steps, control_lost_at=lost_at, schedule_label="dpor",
                            problems=list(self.problems(number) if self.problems else []))
        attempt = Attempt(seed, schedule, world, not world.ok, world_signature(world) if not world.ok else ())
        self.attempts.append(attempt)
        return attempt


def test_an_exhaustive_search_runs_every_branch_of_one_seed_and_says_it_exhausted_them():
    model = Program(THREE_TO_ONE)
    found = explore_runs(model.run, seed=3, schedules=1000, strategy="dpor", check_every=0)
    _, direct = search_directly(THREE_TO_ONE)
    assert len(found.attempts) == direct.runs == len(model.calls) and direct.runs > 1
    assert {seed for seed, _ in model.calls} == {3}, "every branch is a schedule of the seed given"
    assert all(schedule.startswith("dpor:") for _, schedule in model.calls)
    assert len(set(found.digests)) == len(found.attempts), "each branch a different interleaving"
    assert found.exhaustive and found.exhausted and found.cut_by == [] and not found.failed
    assert found.redundant == direct.redundant and found.checks == 0
    assert all(a.world is None for a in found.attempts), "passing worlds are forgotten"
    verdict = f"exhausted: {direct.runs} schedules (dpor), none failed"
    assert found.verdict() == verdict
    assert found.summary() == [f"explored {direct.runs} dpor schedule(s), {direct.runs} distinct: {direct.runs} ran "
                               "controlled to the end", verdict]


def test_the_naive_exhaustive_search_runs_every_interleaving():
    model = Program(THREE_TO_ONE)
    found = explore_runs(model.run, seed=0, schedules=1000, strategy="dfs", check_every=0)
    assert len(found.attempts) == interleavings(THREE_TO_ONE) > search_directly(THREE_TO_ONE)[1].runs
    assert found.exhausted and found.verdict().startswith(f"exhausted: {len(found.attempts)} schedules (dfs)")


def test_an_exhaustive_search_stops_at_the_first_failure_and_never_calls_that_exhausted():
    model = Program(BANK, fails=lost_update)
    found = explore_runs(model.run, seed=0, schedules=1000, strategy="dpor", check_every=0, shrink=False)
    assert found.failed and found.found is model.attempts[-1] and found.found.world is not None
    assert [a.failed for a in found.attempts] == [False] * (len(found.attempts) - 1) + [True]
    assert not found.exhausted and found.cut_by == []
    count = len(found.attempts)
    assert found.verdict() == f"a schedule failed after {count} schedule{'s' if count > 1 else ''} of dpor search"
    assert found.summary()[1] == found.verdict()
    # It replays: its schedule, run again, fails the same way.
    again = model.run(0, found.replay_schedule)
    assert again.failed and again.signature == found.found.signature


def test_a_schedule_bound_cuts_the_search_and_says_so():
    found = explore_runs(Program(THREE_TO_ONE).run, seed=0, schedules=2, strategy="dpor", check_every=0)
    assert len(found.attempts) == 2 and found.cut_by == ["schedule bound 2"] and not found.exhausted
    assert found.verdict() == "not exhausted: schedule bound 2; 2 schedules (dpor), none failed"
    one = explore_runs(Program(THREE_TO_ONE).run, seed=0, schedules=1, strategy="dpor", check_every=0)
    assert one.verdict() == "not exhausted: schedule bound 1; 1 schedule (dpor), none failed"
    big = explore_runs(Program(THREE_TO_ONE).run, seed=0, schedules=1234, strategy="dfs", check_every=0)
    assert big.exhausted, "a bound the search did not reach cuts nothing"
    failed = explore_runs(Program(BANK, fails=lost_update).run, seed=0, schedules=1, strategy="dfs",
                          check_every=0)
    assert failed.verdict().endswith("1 schedule (dfs), none failed") and failed.cut_by == ["schedule bound 1"]


def test_a_time_bound_cuts_the_search_once_its_seconds_have_passed(monkeypatch):
    explore_module = sys.modules[Attempt.__module__]  # (rpc_harness.explore is also the function's name)
    model = Program(THREE_TO_ONE)

    class Clock:  # one second per world
        @staticmethod
        def monotonic() -> float:
            return model.clock

    monkeypatch.setattr(explore_module, "time", Clock)
    found = explore_runs(model.run, seed=0, schedules=1000, strategy="dpor", seconds=2, check_every=0)
    assert len(found.attempts) == 2, "cut when 2 s have passed, not after"
    assert found.cut_by == ["time bound 2 s"] and not found.exhausted
    assert found.verdict() == "not exhausted: time bound 2 s; 2 schedules (dpor), none failed"
    model.clock = 100.0
    assert len(explore_runs(model.run, seed=0, schedules=1000, strategy="dpor", seconds=2.5,
                            check_every=0).attempts) == 3


def test_a_preemption_bound_leaves_branches_out_and_the_verdict_says_how_many():
    # (A program whose races need a preemption under the finer dependence:
    # the pipeline's no longer do, its steps' footprints apart.)
    _, direct = search_directly(BOTH_SLEEP, preemption_bound=0)
    assert direct.cut > 0 and direct.runs > 2
    found = explore_runs(Program(BOTH_SLEEP).run, seed=0, schedules=1000, strategy="dpor", preemptions=0,
                         check_every=0)
    assert len(found.attempts) == direct.runs and not found.exhausted
    assert found.cut_by == [f"preemption bound 0 (left out {direct.cut:,} branch(es))"]
    # It comes first, before what else cut the search.
    both = explore_runs(Program(APART).run, seed=0, schedules=2, strategy="dfs", preemptions=0, check_every=0)
    assert both.cut_by == ["preemption bound 0 (left out 3 branch(es))", "schedule bound 2"]
    assert both.verdict() == ("not exhausted: preemption bound 0 (left out 3 branch(es)); schedule bound 2; "
                              "2 schedules (dfs), none failed")
    assert explore_runs(Program(BOTH_SLEEP).run, seed=0, schedules=1000, strategy="dpor", preemptions=1,
                        check_every=0).exhausted, "a bound no branch needed more than cut nothing"


def test_a_schedule_bound_the_search_just_reached_cut_nothing():
    _, direct = search_directly(THREE_TO_ONE)
    found = explore_runs(Program(THREE_TO_ONE).run, seed=0, schedules=direct.runs, strategy="dpor", check_every=0)
    assert len(found.attempts) == direct.runs and found.cut_by == [] and found.exhausted
    assert found.verdict() == f"exhausted: {direct.runs} schedules (dpor), none failed"


def test_a_world_that_lost_control_cuts_the_search_once():
    model = Program(PIPELINE, lose=lambda number, steps, prefix: {1: 7, 3: 8}.get(number))
    found = explore_runs(model.run, seed=0, schedules=1000, strategy="dpor", check_every=0)
    assert [a.lost_at for a in found.attempts][:4] == [7, None, 8, None] and len(found.attempts) > 4
    assert found.cut_by == ["a world lost control at step 7 (its later steps ran free, unexplored)"]
    assert not found.exhausted and not found.nondeterministic and not found.failed
    assert found.verdict() == ("not exhausted: a world lost control at step 7 (its later steps ran free, "
                               f"unexplored); {len(found.attempts)} schedules (dpor), none failed")


def test_a_first_world_that_lost_control_at_its_first_step_leaves_nothing_explored_and_says_so():
    # Step 0 is a step: a world free from it showed no choice to explore.
    model = Program(PIPELINE, lose=lambda number, steps, prefix: 0 if number == 1 else None)
    found = explore_runs(model.run, seed=0, schedules=1000, strategy="dpor", check_every=0)
    assert len(found.attempts) == 1 and found.attempts[0].lost_at == 0 and not found.exhausted
    assert found.cut_by == ["a world lost control at step 0 (its later steps ran free, unexplored)"]
    assert found.summary() == [
        "explored 1 dpor schedule(s), 1 distinct: 0 ran controlled to the end, 1 lost control (at step 0: seed 0)",
        "not exhausted: a world lost control at step 0 (its later steps ran free, unexplored); 1 schedule (dpor), "
        "none failed"]


def test_a_world_that_ran_free_before_its_branchs_choices_is_skipped_not_taken_for_a_changed_program():
    # Its steps say nothing of the branch: the search goes on to the next one.
    model = Program(PIPELINE, lose=lambda number, steps, prefix: 0 if number == 2 else None)
    found = explore_runs(model.run, seed=0, schedules=1000, strategy="dpor", check_every=0)
    assert not found.nondeterministic and found.found is None
    assert len(found.attempts) > 2 and found.attempts[1].lost_at == 0 and found.attempts[1].world is None
    assert found.cut_by == ["a world lost control at step 0 (its later steps ran free, unexplored)"]


def test_a_world_that_ran_free_right_after_its_branchs_choices_is_recorded_and_checked():
    # Its steps take every choice of its branch: what it showed is the branch's.
    lost: list[tuple[str, ...]] = []

    def lose(number, steps, prefix):
        """The first branch that chooses some steps, not all, runs free
        right after them; so does its check (a run of the same steps)."""
        chosen = tuple(s.task for s in steps[:prefix])
        if not lost and 0 < prefix < len(steps):
            lost.append(chosen)
        return prefix if lost and chosen == lost[0] else None

    model = Program(PIPELINE, lose=lose)
    found = explore_runs(model.run, seed=0, schedules=1000, strategy="dpor", check_every=1)
    free = [a for a in found.attempts if a.lost_at is not None]
    assert len(free) == 1 and free[0].lost_at == len(lost[0])
    assert found.checks == len(found.attempts) and not found.nondeterministic, "every world recorded, and checked"


def test_an_exhaustive_search_whose_first_attempt_failed_without_a_world_says_it_failed():
    found = explore_runs(lambda seed, schedule: Attempt(seed, schedule, None, True, ("setup",)), seed=0,
                         schedules=10, strategy="dpor")
    assert found.failed and len(found.attempts) == 1 and not found.exhausted
    assert found.verdict() == "a schedule failed after 1 schedule of dpor search"


def test_a_world_that_failed_before_its_branchs_choices_is_the_searchs_finding():
    model = Program(THREE_TO_ONE, fails=lambda outcome: len(model.calls) == 2,
                    lose=lambda number, steps, prefix: 0 if number == 2 else None)
    found = explore_runs(model.run, seed=0, schedules=1000, strategy="dpor", check_every=0, shrink=False)
    assert found.found is model.attempts[1] and len(found.attempts) == 2 and not found.nondeterministic


def test_a_world_that_shows_other_tasks_on_its_branch_is_not_deterministic_and_stops_the_search():
    # From its second world on the program has a fourth caller: the tasks
    # that could run at the branch's first step are not what they were.
    fourth = {**THREE_TO_ONE, 4: (("call", 0, (("append", "log", 4),)),)}
    model = Program(THREE_TO_ONE, change=lambda number: fourth if number > 1 else None)
    found = explore_runs(model.run, seed=0, schedules=1000, strategy="dpor", check_every=0)
    assert len(found.attempts) == 2 and not found.exhausted and found.found is None
    assert found.nondeterministic.startswith("step 0: the tasks that could run were {r1, r2, r3} before, "
                                             "{r1, r2, r3, r4} now")
    assert found.verdict() == (f"not exhausted: the program is not deterministic under its schedule "
                               f"({found.nondeterministic}); stopped after 2 schedules")


def test_a_world_whose_schedule_diverged_is_not_deterministic():
    diverged = "the schedule diverged at step 3: rank 1 did not take its turn"
    model = Program(THREE_TO_ONE, problems=lambda number: ["other problem", diverged] if number == 2 else [])
    found = explore_runs(model.run, seed=0, schedules=1000, strategy="dpor", check_every=0)
    assert found.nondeterministic == diverged and len(found.attempts) == 2 and not found.exhausted
    # A world's other problems (a fault that never fired) fail it, and are not a divergence.
    model = Program(THREE_TO_ONE, problems=lambda number: ["kill:r1@x never fired"] if number == 2 else [])
    found = explore_runs(model.run, seed=0, schedules=1000, strategy="dpor", check_every=0, shrink=False)
    assert found.found is model.attempts[1] and found.nondeterministic == ""


def test_every_nth_schedule_is_run_twice_and_compared():
    model = Program(THREE_TO_ONE)
    found = explore_runs(model.run, seed=5, schedules=1000, strategy="dpor", check_every=2)
    runs = len(found.attempts)
    assert found.checks == runs // 2 and found.exhausted
    assert len(model.calls) == runs + runs // 2 and {seed for seed, _ in model.calls} == {5}
    # The second run of the 2nd schedule follows its steps one for one.
    second = model.attempts[1]
    assert model.calls[2][1] == dpor.Branch(tuple(s.task for s in model.attempts[2].world.schedule)).schedule \
        if model.attempts[2].world is not None else True
    assert model.attempts[2].world is None and second.world is None, "the check's world is forgotten too"
    assert DEFAULT_CHECK_EVERY == 10
    default = explore_runs(Program(THREE_TO_ONE).run, seed=0, schedules=1000, strategy="dfs")
    assert default.checks == len(default.attempts) // 10 > 0


def test_a_schedule_that_runs_otherwise_the_second_time_is_not_deterministic():
    fourth = {**THREE_TO_ONE, 4: (("call", 0, (("append", "log", 4),)),)}
    model = Program(THREE_TO_ONE, change=lambda number: fourth if number == 3 else None)
    found = explore_runs(model.run, seed=0, schedules=1000, strategy="dpor", check_every=2)
    assert found.checks == 1 and len(found.attempts) == 2 and len(model.calls) == 3
    assert found.nondeterministic.startswith("step 0: the tasks that could run were {r1, r2, r3} the first time, "
                                             "{r1, r2, r3, r4} the second")


def test_explore_searches_exhaustively_with_dpor_or_dfs_but_refuses_one_branchs_schedule(worlds):
    for strategy in ("dpor", "dfs"):
        found = explore("programs.echo:echo", 2, strategy=strategy, schedules=1, preemptions=0, seconds=60)
        assert found.exhaustive and found.strategy == strategy and worlds[-1][3]["schedule"].startswith("dpor:")
    calls = len(worlds)
    branch = S.branch_schedule(("keeper", "caller1"))
    with pytest.raises(rpc_harness.WorldSpecError) as refused:
        explore("programs.echo:echo", 2, strategy=branch)
    assert str(refused.value) == (f"explore(): strategy {branch!r} explores nothing; use controlled, random, pct:D, "
                                  "dpor or dfs")
    assert len(worlds) == calls


@pytest.mark.parametrize("preemptions", [-1, True, 1.5, "2"])
def test_explore_refuses_preemptions_that_are_not_a_whole_number_from_zero(worlds, preemptions):
    with pytest.raises(rpc_harness.WorldSpecError) as refused:
        explore("programs.echo:echo", 2, strategy="dpor", preemptions=preemptions)
    assert str(refused.value) == (f"explore(): invalid preemptions {preemptions!r}; use a whole number >= 0, "
                                  "or None")
    assert worlds == []


@pytest.mark.parametrize("seconds", [0, -1.5, True, "5", float("nan")])
def test_explore_refuses_seconds_that_are_not_a_positive_number(worlds, seconds):
    with pytest.raises(rpc_harness.WorldSpecError) as refused:
        explore("programs.echo:echo", 2, strategy="dpor", seconds=seconds)
    assert str(refused.value) == f"explore(): invalid seconds {seconds!r}; use a number of seconds > 0, or None"
    assert worlds == []


def test_explore_takes_no_preemption_bound_and_a_fraction_of_a_second(worlds):
    for preemptions, seconds in ((None, 0.5), (0, None), (3, 2)):
        found = explore("programs.echo:echo", 2, strategy="dfs", schedules=1, preemptions=preemptions,
                        seconds=seconds)
        assert found.exhaustive


def test_explore_passes_its_search_and_its_bounds_on(worlds, monkeypatch):
    given = []

    def search(run, **bounds):
        given.append(bounds)
        return Exploration(bounds["strategy"])

    monkeypatch.setattr(sys.modules[Attempt.__module__], "explore_runs", search)
    explore("programs.echo:echo", 2, strategy="dpor", seed=4, schedules=7, shrink=False, shrink_runs=3,
            preemptions=2, seconds=9.5, check_every=5)
    assert given == [dict(seed=4, schedules=7, strategy="dpor", shrink=False, shrink_runs=3, preemptions=2,
                          seconds=9.5, check_every=5)]



def test_explore_refuses_a_bad_option_as_its_own_before_any_world(worlds):
    with pytest.raises(rpc_harness.WorldSpecError, match=r"^explore\(\): invalid deadline -1; use seconds > 0"):
        explore("programs.echo:echo", 2, deadline=-1)
    with pytest.raises(rpc_harness.WorldSpecError, match=r"^explore\(\): a spawned program names its workers itself"):
        explore("programs.echo:run_worker", 2, spawn=True, args=(2,), names="keeper")
    assert worlds == []


def test_a_spawned_program_explored_without_a_world_size_replays_as_one_process(worlds):
    found = explore("programs.echo:run_worker", spawn=True, args=(1,), seed=12, schedules=1, shrink=False)
    assert found.failed and worlds[0][2] == 1
    token, line = found.replay
    assert decode(token.split()[2]).world_size == 1 and "nprocs=1" in line


def test_an_explored_failure_whose_arguments_a_token_cannot_carry_replays_by_its_python_line(worlds):
    found = explore("worlds:timed_steps", 2, args=({3},), seed=12, schedules=1, shrink=False)
    assert found.failed and len(found.replay) == 1
    assert "rpc_harness.run_world('worlds:timed_steps'" in found.replay[0] and "args=({3},)" in found.replay[0]
