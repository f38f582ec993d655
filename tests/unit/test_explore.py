"""Exploration without worlds: a model program whose failure needs one
preemption, run through explore_runs and explore() with hand-made results
(tests/world/test_schedule.py explores real worlds). What shrinking keeps
and drops, what the summary and the replay lines of the schedule it found
carry, and how worlds that lost control (at their first step too) are told."""

from __future__ import annotations

import dataclasses
import pathlib

import pytest

import rpc_harness
from rpc_harness import FaultPlan, WorldResult
from rpc_harness import schedule as S
from rpc_harness.explore import (
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

    monkeypatch.setattr("rpc_harness._launcher.run_world", run_world)
    monkeypatch.setattr("rpc_harness._launcher.spawn", spawn)
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
    assert line.startswith(f"import sys; sys.path[:0] = [{TESTS!r}]; "
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
    assert line.startswith(f"import sys; sys.path[:0] = [{TESTS!r}]; rpc_harness.spawn(")
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


def test_explore_refuses_a_schedule_and_strategies_that_explore_nothing(worlds):
    with pytest.raises(rpc_harness.WorldSpecError, match=r"^explore\(\): give the schedules to try as strategy="):
        explore("programs.echo:echo", 2, schedule="controlled")
    pairs = S.pairs(steps(frozenset({1})))
    for strategy in ("free", S.replay_schedule(pairs), S.without(pairs, 1)):
        with pytest.raises(rpc_harness.WorldSpecError, match=r"^explore\(\): strategy .* explores nothing; use "
                                                              r"controlled, random"):
            explore("programs.echo:echo", 2, strategy=strategy)
    assert worlds == []
