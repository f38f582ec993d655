"""What exploration says of worlds that lost control, without worlds: hand-made
results (tests/world/test_control_lost.py runs real ones)."""

from __future__ import annotations

import argparse
import dataclasses
import warnings

import pytest

from rpc_harness import FaultPlan, WorldResult
from rpc_harness.explore import Attempt, explore_runs
from rpc_harness.result import RankOutcome

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

NOTE = ("no longer controlled: no step ended for 3s while no rank thread could run: caller1/1 (serving grab for "
        "caller1) has not reached its next scheduling point since serve grab. The world ran free from step {} on")


def world(seed: int, lost_at: int | None, *, failed: bool = False) -> WorldResult:
    ranks = [RankOutcome(0, "keeper", status="raised" if failed else "ok", error="AssertionError: boom"),
             RankOutcome(1, "caller1", status="ok")]
    note = NOTE.format(lost_at) if lost_at is not None else "controlled (controlled), 4 steps"
    return WorldResult(names=("keeper", "caller1"), seed=seed, faults=FaultPlan(), deadline=5.0, ranks=ranks,
                       schedule_note=note, control_lost_at=lost_at, schedule_label="controlled")


def explored(lost: dict[int, int], failing: int | None = None, schedules: int = 4):
    def run(seed: int, schedule: str) -> Attempt:
        result = world(seed, lost.get(seed), failed=seed == failing)
        return Attempt(seed, schedule, result, not result.ok)

    return explore_runs(run, seed=0, schedules=schedules, strategy="controlled", shrink=False)


def test_an_exploration_whose_worlds_lost_control_says_how_many_and_where():
    found = explored({0: 2, 1: 2, 3: 5})
    assert [a.lost_at for a in found.lost] == [2, 2, 5]
    summary = found.summary()
    assert summary[0] == ("explored 4 controlled schedule(s), 1 distinct: 1 ran controlled to the end, 3 lost "
                          "control (at step 2: seeds 0, 1; at step 5: seed 3)")
    assert summary[1].startswith("no schedule failed, but 3 of 4 world(s) lost control"), summary
    assert summary != ["explored 4 controlled schedule(s), 1 distinct", "no schedule failed"]


def test_an_exploration_that_kept_control_says_so():
    summary = explored({}).summary()
    assert summary == ["explored 4 controlled schedule(s), 1 distinct: 4 ran controlled to the end",
                       "no schedule failed"]


def test_a_failing_world_that_had_lost_control_says_its_replay_may_differ():
    found = explored({1: 3}, failing=1)
    summary = found.summary()
    assert summary[0].endswith("1 ran controlled to the end, 1 lost control (at step 3: seed 1)"), summary
    assert "  (it lost control at step 3 and ran free from there: its replay may take other steps)" in summary


def test_run_repeat_under_a_schedule_counts_the_worlds_that_lost_control(monkeypatch, capsys):
    from rpc_harness import scenario as registry
    from rpc_harness.apps import cli
    from rpc_harness.repro import Repro

    sc = registry.load("rnn")
    repro = Repro(world_size=3, seed=7, scenario="rnn", names=sc.names(3),
                  options={"faults": FaultPlan(), "schedule": "controlled"})

    def run_job(job, **_):
        lost_at = 2 if job.repro.seed in (7, 9) else None
        return registry.ScenarioReport(scenario="rnn", world_size=3, seed=job.repro.seed, metric_name="loss",
                                       steps=3, metric=2.5, grads_checked=10, grads_expected=10,
                                       world=world(job.repro.seed, lost_at))

    monkeypatch.setattr(cli, "run_job", run_job)
    args = argparse.Namespace(repeat=3, schedule="controlled", deadline=None, progress="off")
    assert cli.explore_jobs([cli.Job(sc, repro, "clean")], args) == 0
    out = capsys.readouterr().out
    assert "rnn world 3 (clean): explored 3 controlled schedule(s), 1 distinct: 1 ran controlled to the end, " \
           "2 lost control (at step 2: seeds 7, 9)" in out, out
    assert "no schedule failed, but 2 of 3 world(s) lost control" in out, out


def test_whether_a_world_stayed_controlled_is_one_predicate_on_the_step_it_was_lost_at():
    assert world(1, None).controlled
    assert not world(1, 3).controlled
    free = WorldResult(names=("a",), seed=1, faults=FaultPlan(), deadline=5.0, ranks=[RankOutcome(0, "a")])
    assert not free.controlled, "a free-running world was never controlled"
    # The note is for people: a world whose note reads otherwise is judged by its step.
    assert not dataclasses.replace(world(1, 3), schedule_note="controlled (controlled), 4 steps").controlled


@pytest.mark.parametrize("lost_at", [0, 3])
def test_the_fixture_warns_of_a_world_that_lost_control_even_at_its_first_step(rpc_world, monkeypatch, lost_at):
    # Step 0 is a step: a world that ran free from its very first step was
    # never controlled at all, and must not pass as one that held.
    from rpc_harness import schedule as S
    from rpc_harness.pytest_plugin import ControlLostPytestWarning

    steps = [S.Step(index=i, rank=i % 2, worker=("keeper", "caller1")[i % 2], task=("keeper", "caller1")[i % 2],
                    label="main", point=f"p{i}") for i in range(4)]
    lost = dataclasses.replace(world(1, lost_at), schedule=steps)
    monkeypatch.setattr("rpc_harness._parent.launcher.launch", lambda spec, **_: lost)
    with pytest.warns(ControlLostPytestWarning, match=rf"lost control at step {lost_at} and ran free from there"):
        rpc_world.run("programs.echo:echo", names=["keeper", "caller1"], seed=1, schedule="controlled")
    monkeypatch.setattr("rpc_harness._parent.launcher.launch", lambda spec, **_: dataclasses.replace(lost,
                                                                                           control_lost_at=None))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ControlLostPytestWarning)
        rpc_world.run("programs.echo:echo", names=["keeper", "caller1"], seed=1, schedule="controlled")
