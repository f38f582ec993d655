"""The distributed RL scenario: every episode's gradients equal the
single-process baseline's, the policy learns, and the fault contracts hold
(slow observer, killed observer, failing agent or observer)."""

from __future__ import annotations

import re

import pytest
import torch

from rpc_harness import GradientMismatch
from rpc_harness.scenarios import rl

SEED = 20240611
PARAMS = {"affine1.weight", "affine1.bias", "affine2.weight", "affine2.bias"}


def death_episode(config: rl.Config, world_size: int, observer: str, hit: int) -> int:
    """The episode in which ``observer`` reaches observer.step for the
    ``hit``-th time, from the baseline alone (a CartPole reward is 1 a step)."""
    done = 0
    for episode in rl.baseline(config, world_size, SEED).episodes:
        done += int(episode.rewards[observer])
        if done >= hit:
            return episode.episode
    raise AssertionError(f"{observer} never reaches step {hit} in {config}")


@pytest.mark.parametrize("world_size", [2, 4])
def test_every_episode_matches_the_baseline(world_size):
    config = rl.Config()
    report = rl.run(config, world_size=world_size, seed=SEED)
    rl.check(report)
    assert report.world.ok and not report.world.dead
    assert report.steps == config.episodes
    assert report.grads_checked == len(PARAMS) * config.episodes
    # Bit for bit, not only within tolerance: the design removes every
    # source of order dependence, so the rewards agree exactly as well.
    assert report.details["bit_exact"], report.max_grad_diff
    assert report.max_grad_diff == 0.0
    assert report.history == report.baseline_history
    records = report.world.values[0]
    assert set(records.episodes[0].grads) == PARAMS
    assert all(ep.observers == rl.names(world_size)[1:] for ep in records.episodes)


def test_reward_rises_on_the_ci_budget():
    report = rl.run(rl.Config(episodes=rl.JUDGE_MIN_EPISODES), world_size=4, seed=SEED)
    rl.check(report)
    assert report.outcome_note.startswith("mean episode reward rises"), report.outcome_note
    rewards = [sum(r.values()) / len(r) for r in report.details["episode_rewards"]]
    k = len(rewards) // 4
    assert sum(rewards[-k:]) > sum(rewards[:k])


def test_slow_observer_changes_nothing():
    config = rl.Config(episodes=4)
    report = rl.run(config, world_size=3, seed=SEED, faults="delay:observer1@observer.step=0.02s")
    rl.check(report)
    records = report.world.values[0]
    fired = report.world.fired_faults()
    # Every step observer1 took, and nothing else.
    steps = sum(ep.rewards["observer1"] for ep in records.episodes)
    assert steps > 0 and len(fired) == steps
    observer1 = report.world.names.index("observer1")
    assert {(f.rank, f.point, f.fault) for f in fired} == {
        (observer1, "observer.step", "delay:observer1@observer.step#1+=0.02s")}
    assert sorted(f.hit for f in fired) == list(range(1, int(steps) + 1))
    assert report.details["bit_exact"]
    assert report.history == report.baseline_history


def test_shaken_schedule_changes_nothing():
    report = rl.run(rl.Config(episodes=3), world_size=3, seed=SEED, fuzz=0.003)
    rl.check(report)
    assert report.details["bit_exact"]
    assert any(e["kind"] == "fuzz" for r in report.world for e in r.events)


@pytest.mark.parametrize("world_size, hit", [(3, 5), (4, 60)])
def test_killed_observer_is_dropped_and_training_goes_on(world_size, hit):
    config = rl.Config()
    dies_in = death_episode(config, world_size, "observer2", hit)
    report = rl.run(config, world_size=world_size, seed=SEED, faults=f"kill:observer2@observer.step#{hit}")
    rl.check(report)
    assert [r.name for r in report.world.killed] == ["observer2"]
    assert report.world["agent"].status == "ok"
    assert report.details["dropped"] == {"observer2": dies_in}
    assert f"observer2 died and was dropped at episode {dies_in}" in report.contract_note
    records = report.world.values[0]
    assert len(records.episodes) == config.episodes
    survivors = tuple(n for n in rl.names(world_size)[1:] if n != "observer2")
    for episode in records.episodes:
        expected = survivors if episode.episode >= dies_in else rl.names(world_size)[1:]
        assert episode.observers == expected, episode.episode
    # Before the death, the plain baseline (no drop schedule) agrees too.
    plain = rl.baseline(config, world_size, SEED)
    for actual, expected in zip(records.episodes[: dies_in - 1], plain.episodes[: dies_in - 1], strict=True):
        assert all(torch.equal(actual.grads[p], expected.grads[p]) for p in PARAMS)
    # After it, every episode was checked against the survivors' baseline.
    assert report.grads_checked == len(PARAMS) * config.episodes
    assert report.details["bit_exact"]


def test_failing_agent_fails_the_world():
    report = rl.run(rl.Config(), world_size=3, seed=SEED, faults="raise:agent@agent.finish_episode#2")
    assert not report.ok and not report.contract_ok
    agent = report.world["agent"]
    assert agent.status == "raised" and agent.error.startswith("InjectedFault"), agent.describe()
    assert "rank 0 (agent): raised InjectedFault" in report.contract_note
    assert [r.name for r in report.world.failures] == ["agent"]
    with pytest.raises(AssertionError, match=r"rank 0 \(agent\): raised InjectedFault") as info:
        rl.check(report)
    assert "Replay:" in str(info.value)


@pytest.mark.parametrize(
    "faults, origin",
    [
        ("raise:observer1@observer.step#3", "observer1"),
        ("raise:agent@agent.select_action#7", "agent"),  # raised in an RPC handler
    ],
)
def test_an_exception_is_not_mistaken_for_a_death(faults, origin):
    report = rl.run(rl.Config(), world_size=3, seed=SEED, faults=faults)
    assert not report.contract_ok and not report.world.dead
    agent = report.world["agent"]
    assert agent.status == "raised", agent.describe()
    # The agent names the observer whose episode failed and where it began.
    assert re.match(r"RuntimeError: observer\d failed in episode 1: ", agent.error), agent.error
    assert f"InjectedFault: injected fault {faults} fired on hit" in agent.error
    assert f"(raised on {origin})" in agent.error, agent.error
    assert report.details.get("dropped") is None


def test_planted_perturbation_is_caught():
    config = rl.Config(episodes=4, perturb_episode=3)
    report = rl.run(config, world_size=2, seed=SEED)
    assert report.contract_ok and report.mismatches and not report.ok
    # Nothing differs before the planted episode; from it on, the parameters
    # have moved apart, so every later episode differs as well.
    assert {m.step for m in report.mismatches} == {"episode 3", "episode 4"}
    with pytest.raises(GradientMismatch) as info:
        rl.check(report)
    message = str(info.value)
    first = message.splitlines()[1]
    for part in ("rl:", "on agent at step episode 3", "affine", "max abs diff", "atol=1e-06", "rtol=1e-05", f"seed {SEED}"):
        assert part in first, (part, first)
    assert "\nReplay: rpc-harness replay rpch1_" in message
    assert message.endswith(
        f"    or: import rpc_harness; rpc_harness.run_scenario('rl', {{'episodes': 4, 'perturb_episode': 3}}, world_size=2, seed={SEED})"
    )
