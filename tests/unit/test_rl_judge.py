"""The RL judge on hand-made worlds and records, clause by clause: each
contract verdict with its whole note, whether the policy learned, and the
outcome's figures. (Found unchecked by mutation testing,
tools/mutation.py.)"""

from __future__ import annotations

import pytest
import torch

import rpc_harness
from rpc_harness.result import HUNG, KILLED, OK, RAISED
from rpc_harness.scenarios import rl
from rpc_harness.scenarios.rl.agent import Episode, Records
from rpc_harness.scenarios.rl.config import JUDGE_MIN_EPISODES, JUDGE_MIN_OBSERVERS
from rpc_harness.scenarios.rl.judge import compare, contract, judge_outcome, outcome, records

NAMES = rl.names(3)  # agent, observer1, observer2


def world(statuses=(OK, OK, OK), value=None, timed_out=False):
    ranks = [
        rpc_harness.RankOutcome(
            i,
            name,
            status=status,
            value=value if i == 0 else None,
            error="ValueError: x" if status == RAISED else None,
            signal="SIGKILL",
        )
        for i, (name, status) in enumerate(zip(NAMES, statuses, strict=True))
    ]
    return rpc_harness.WorldResult(
        names=NAMES,
        seed=0,
        faults=rpc_harness.FaultPlan(),
        deadline=60.0,
        ranks=ranks,
        timed_out=timed_out,
    )


def episode(n, rewards, running=0.0, observers=None, grads=None):
    observers = tuple(rewards) if observers is None else observers
    return Episode(n, observers, dict(rewards), min(rewards.values()), running, 0.0, grads or {})


def runs(count=2, dropped=None, solved_at=None, reward=10.0):
    episodes = [
        episode(i + 1, {"observer1": reward, "observer2": reward}, running=float(i))
        for i in range(count)
    ]
    return Records(episodes, dict(dropped or {}), 475.0, solved_at, steps=40)


def test_records_are_the_agents_value_when_it_is_records():
    mine = runs()
    assert records(world(value=mine)) is mine
    assert records(world(value={"episodes": []})) is None


def test_a_world_whose_ranks_all_finished_meets_the_contract():
    verdict = contract(world(), runs(3), rl.Config())
    assert (verdict.ok, verdict.note) == (True, "all 3 ranks finished; 3 episodes trained")


def test_a_killed_observer_dropped_by_the_agent_meets_the_contract_saying_when():
    verdict = contract(world((OK, OK, KILLED)), runs(3, dropped={"observer2": 2}), rl.Config())
    assert (verdict.ok, verdict.note) == (
        True,
        "observer2 died and was dropped at episode 2; the agent finished 3 episodes with observer1",
    )
    assert verdict.details == {"dropped": {"observer2": 2}}


def test_a_failed_world_fails_the_contract_naming_its_failed_ranks():
    verdict = contract(world((OK, RAISED, HUNG)), runs(), rl.Config())
    assert not verdict.ok
    assert verdict.note.startswith("the world failed: rank 1 (observer1): raised ValueError: x")
    assert "; rank 2 (observer2): " in verdict.note


def test_a_timed_out_world_with_no_failed_rank_names_those_not_killed():
    verdict = contract(world((OK, OK, KILLED), timed_out=True), runs(), rl.Config())
    assert verdict == rl.judge.Verdict(
        False, "the world failed: rank 0 (agent): ok; rank 1 (observer1): ok"
    )


def test_an_agent_without_records_fails_the_contract():
    assert contract(world(), None, rl.Config()) == rl.judge.Verdict(
        False, "the agent returned no training records"
    )


def test_a_world_that_failed_only_by_timing_out_with_every_rank_killed_says_so():
    w = world((KILLED, KILLED, KILLED), timed_out=True)
    assert contract(w, None, rl.Config()).note == "the world failed (timed out)"


def test_judged_only_on_a_big_enough_budget():
    small = runs(JUDGE_MIN_EPISODES - 1)
    ok, note = judge_outcome(small)
    assert ok and note == (
        f"not judged: {JUDGE_MIN_EPISODES - 1} episodes with 2 observer(s) is below the budget where a rise is "
        f"reliable ({JUDGE_MIN_EPISODES} episodes, {JUDGE_MIN_OBSERVERS} observers); running reward "
        f"{JUDGE_MIN_EPISODES - 2:.2f}"
    )
    assert judge_outcome(Records([], {}, 475.0)) == (
        True,
        f"not judged: 0 episodes with 0 observer(s) is below the budget where a rise is reliable "
        f"({JUDGE_MIN_EPISODES} episodes, {JUDGE_MIN_OBSERVERS} observers); running reward 0.00",
    )


def learning(rewards):
    names = [f"observer{i}" for i in range(1, JUDGE_MIN_OBSERVERS + 1)]
    episodes = [
        episode(i + 1, {n: r for n in names}, running=float(r)) for i, r in enumerate(rewards)
    ]
    return Records(episodes, {}, 475.0)


def test_a_reward_that_rises_from_the_first_quarter_to_the_last_passes():
    ok, note = judge_outcome(learning([1.0] * 5 + [2.0] * 10 + [4.0] * 5))
    assert ok and note == (
        "mean episode reward rises: first 5 episodes 1.0, last 5 4.0; "
        "running reward 4.00 (threshold 475)"
    )


@pytest.mark.parametrize("rewards", [[2.0] * 20, [4.0] * 5 + [2.0] * 10 + [1.0] * 5])
def test_a_reward_that_does_not_rise_fails(rewards):
    ok, note = judge_outcome(learning(rewards))
    assert not ok and note.startswith("mean episode reward does not rise: first 5 episodes")


def test_one_observer_short_of_the_budget_is_not_judged():
    records_ = learning([4.0] * 5 + [1.0] * 15)
    records_.episodes[3] = episode(4, {"observer1": 4.0, "observer2": 4.0})
    assert judge_outcome(records_)[1].startswith("not judged: 20 episodes with 2 observer(s)")


def test_a_solved_run_passes_naming_its_episode():
    assert judge_outcome(runs(3, solved_at=3)) == (
        True,
        "solved at episode 3: running reward 2.0 > 475",
    )


def test_the_outcome_carries_the_histories_and_details():
    actual = runs(3, dropped={"observer2": 2})
    result = outcome(actual, runs(2), rl.Config())
    assert (result.ok, result.metric, result.steps) == (True, 2.0, 3)
    assert result.history == [0.0, 1.0, 2.0] and result.baseline_history == [0.0, 1.0]
    assert result.details == {
        "episodes": 3,
        "env_steps": 40,
        "episode_rewards": [{"observer1": 10.0, "observer2": 10.0}] * 3,
        "solved_at": None,
        "threshold": 475.0,
        "dropped": {"observer2": 2},
    }
    assert outcome(Records([], {}, 475.0), runs(1), rl.Config()).metric == 0.0


def with_grads(*values):
    episodes = [
        episode(i + 1, {"observer1": 1.0}, grads={"w": torch.tensor([v], dtype=torch.float64)})
        for i, v in enumerate(values)
    ]
    return Records(episodes, {}, 475.0)


def test_the_comparison_is_bit_exact_only_when_every_gradient_is_equal():
    same = compare(with_grads(1.0, 2.0), with_grads(1.0, 2.0), rl.Config(), seed=1)
    assert (same.checked, same.expected, same.mismatches, same.details["bit_exact"]) == (
        2,
        2,
        [],
        True,
    )
    assert (
        same.details["grad_check"]
        == "every episode's gradients against the single-process baseline"
    )
    close = compare(with_grads(1.0, 2.0), with_grads(1.0, 2.0 + 1e-9), rl.Config(), seed=1)
    assert close.mismatches == [] and close.details["bit_exact"] is False


def test_episodes_only_one_side_has_are_compared_as_missing():
    result = compare(with_grads(1.0), with_grads(1.0, 2.0), rl.Config(), seed=1)
    assert (result.checked, result.expected, len(result.mismatches)) == (1, 2, 1)
    assert result.details["bit_exact"] is False
    dropped = with_grads(1.0)
    dropped.dropped = {"observer2": 1}
    assert (
        compare(dropped, with_grads(1.0), rl.Config(), seed=1)
        .details["grad_check"]
        .startswith(
            "every episode's gradients against a baseline that replays the drop schedule (observer2 from episode 1)"
        )
    )
