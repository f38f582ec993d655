"""The RL judge on hand-made worlds and records, clause by clause: each
contract verdict with its whole note, whether the policy learned, and the
outcome's figures. (Found unchecked by mutation testing,
tools/mutation.py.)"""

from __future__ import annotations

import pytest
import torch

import rpc_harness
from rpc_harness.gradcheck import Mismatch
from rpc_harness.result import HUNG, KILLED, OK, RAISED
from rpc_harness.scenarios import rl
from rpc_harness.scenarios._device import GPU_ATOL, GPU_RTOL
from rpc_harness.scenarios.rl.agent import Episode, Records
from rpc_harness.scenarios.rl.config import JUDGE_MIN_EPISODES, JUDGE_MIN_OBSERVERS
from rpc_harness.scenarios.rl.judge import compare, contract, judge_outcome, outcome, records


def world(statuses=(OK, OK, OK), value=None, timed_out=False):
    names = rl.names(len(statuses))
    ranks = [
        rpc_harness.RankOutcome(
            i,
            name,
            status=status,
            value=value if i == 0 else None,
            error="ValueError: x" if status == RAISED else None,
            signal="SIGKILL",
        )
        for i, (name, status) in enumerate(zip(names, statuses, strict=True))
    ]
    return rpc_harness.WorldResult(
        names=names,
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


def test_a_failed_world_names_at_most_four_of_its_failed_ranks():
    w = world((OK, RAISED, RAISED, RAISED, RAISED, RAISED))
    verdict = contract(w, runs(), rl.Config())
    assert verdict.ok is False
    assert verdict.note == "the world failed: " + "; ".join(r.describe() for r in w.ranks[1:5])
    assert "observer5" not in verdict.note


def test_observers_killed_and_dropped_are_each_named_with_their_episode_and_the_survivors_listed():
    w = world((OK, OK, KILLED, OK, KILLED))
    verdict = contract(w, runs(3, dropped={"observer4": 3, "observer2": 2}), rl.Config())
    assert verdict == rl.judge.Verdict(
        True,
        "observer2 died and was dropped at episode 2, observer4 died and was dropped at episode 3; "
        "the agent finished 3 episodes with observer1, observer3",
        {"dropped": {"observer2": 2, "observer4": 3}},
    )
    assert verdict.ok is True


@pytest.mark.parametrize(
    ("statuses", "dropped", "killed_and_dropped"),
    [
        ((OK, OK, KILLED), {}, "killed observers ['observer2'] but the agent dropped []"),
        ((OK, OK, OK), {"observer1": 2}, "killed observers [] but the agent dropped ['observer1']"),
    ],
)
def test_an_agent_that_dropped_other_observers_than_the_dead_breaks_the_contract_stating_the_rule(
    statuses, dropped, killed_and_dropped
):
    verdict = contract(world(statuses), runs(3, dropped=dropped), rl.Config())
    assert verdict.ok is False
    assert (
        verdict.note
        == f"{killed_and_dropped}: a dead observer must be dropped, and only a dead one"
    )


def test_a_timed_out_world_with_no_failed_rank_names_those_not_killed():
    verdict = contract(world((OK, OK, KILLED), timed_out=True), runs(), rl.Config())
    assert verdict == rl.judge.Verdict(
        False, "the world failed: rank 0 (agent): ok; rank 1 (observer1): ok"
    )


def test_an_agent_without_records_fails_the_contract():
    assert contract(world(), None, rl.Config()) == rl.judge.Verdict(
        False, "the agent returned no training records"
    )


def test_an_agent_killed_before_it_returned_its_records_fails_the_contract_saying_it_was_killed():
    verdict = contract(world((KILLED, OK, OK)), None, rl.Config())
    assert verdict.ok is False
    assert verdict.note == (
        "the agent returned no training records (rank 0 (agent): killed by SIGKILL as the fault plan asked)"
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
    assert result.note == judge_outcome(actual)[1]
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


def test_a_mismatch_names_the_scenario_episode_agent_seed_and_the_configs_tolerances():
    config = rl.Config(rtol=1e-3, atol=1e-4)
    result = compare(with_grads(1.0, 2.0), with_grads(1.0, 2.5), config, seed=7)
    assert result.mismatches == [
        Mismatch("rl", "episode 2", "agent", "w", 0.5, 0.2, atol=1e-4, rtol=1e-3, seed=7)
    ]
    assert result.max_diff == 0.5
    assert result.details == {
        "bit_exact": False,
        "tolerance": {"rtol": 1e-3, "atol": 1e-4, "norm": False, "device": "cpu"},
        "grad_check": "every episode's gradients against the single-process baseline",
    }


def test_a_run_with_more_episodes_than_the_baseline_is_a_mismatch_for_each_extra_episode():
    result = compare(with_grads(1.0, 2.0, 3.0), with_grads(1.0), rl.Config(), seed=1)
    assert [(m.step, m.param) for m in result.mismatches] == [
        ("episode 2", "w (missing in the baseline)"),
        ("episode 3", "w (missing in the baseline)"),
    ]
    assert (result.checked, result.expected, result.details["bit_exact"]) == (1, 1, False)


def test_a_run_on_cuda_is_compared_with_the_gpu_tolerances():
    actual = with_grads(1.0)
    actual.device = "cuda:0"
    # 5e-5 off: past the CPU tolerance at 1.0 (1.1e-5), within the GPU one (1e-2 of the tensor's norm).
    close = with_grads(1.0 + 5e-5)
    assert len(compare(with_grads(1.0), close, rl.Config(), seed=1).mismatches) == 1
    result = compare(actual, close, rl.Config(), seed=1)
    assert result.mismatches == []
    assert result.details["tolerance"] == {"rtol": GPU_RTOL, "atol": GPU_ATOL, "norm": True, "device": "cuda:0"}


def test_a_comparison_with_observers_dropped_says_it_replays_each_drop_and_checks_every_episode():
    actual = with_grads(1.0, 2.0)
    actual.dropped = {"observer3": 2, "observer2": 1}
    assert compare(actual, with_grads(1.0, 2.0), rl.Config(), seed=1).details["grad_check"] == (
        "every episode's gradients against a baseline that replays the drop schedule "
        "(observer2 from episode 1, observer3 from episode 2): the survivors' environments and RNG "
        "streams do not depend on the dead observer, so episodes after the death are checked too, "
        "not only those before it"
    )
