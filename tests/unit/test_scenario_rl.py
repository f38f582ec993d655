"""The RL scenario without a world: the outcome judge and the seeded baseline."""

from __future__ import annotations

import torch

from rpc_harness import derive_seed
from rpc_harness.scenarios import rl

SEED = 20240611
PARAMS = {"affine1.weight", "affine1.bias", "affine2.weight", "affine2.bias"}


def fake_records(rewards: list[float], observers: int = 3, solved_at: int | None = None) -> rl.Records:
    names = tuple(f"observer{k}" for k in range(1, observers + 1))
    episodes = [
        rl.Episode(i + 1, names, dict.fromkeys(names, r), r, 0.0, 0.0, {}) for i, r in enumerate(rewards)
    ]
    return rl.Records(episodes, {}, 475.0, solved_at)


def test_outcome_check_can_fail():
    n = rl.JUDGE_MIN_EPISODES
    falling = rl.judge_outcome(fake_records([30.0] * (n // 2) + [12.0] * (n - n // 2)))
    assert falling[0] is False and "does not rise" in falling[1], falling
    rising = rl.judge_outcome(fake_records([12.0] * (n // 2) + [30.0] * (n - n // 2)))
    assert rising[0] is True and "rises" in rising[1], rising
    # Below the judged budget (too few episodes, or too few observers) a
    # flat or falling curve says nothing about the code: noted, not failed.
    few = rl.judge_outcome(fake_records([30.0, 12.0, 12.0, 12.0]))
    lone = rl.judge_outcome(fake_records([30.0] * n + [12.0] * n, observers=1))
    assert few[0] and lone[0] and few[1].startswith("not judged") and lone[1].startswith("not judged")
    assert rl.judge_outcome(fake_records([500.0] * 3, solved_at=3))[0]


def test_observers_play_different_seeded_episodes():
    observers = [rl.Observer(k, f"observer{k}", SEED) for k in (1, 2, 3)]
    starts = [tuple(ob.env.reset(seed=ob.env_seed(1))[0].tolist()) for ob in observers]
    assert len(set(starts)) == 3, "every observer must get its own environment seed"
    assert observers[0].env_seed(1) == derive_seed(SEED, "env", "observer1", 1)
    assert observers[0].env_seed(1) != observers[0].env_seed(2)
    again = rl.baseline(rl.Config(episodes=3), 3, SEED)
    first = rl.baseline(rl.Config(episodes=3), 3, SEED)
    other = rl.baseline(rl.Config(episodes=3), 3, SEED + 1)
    assert all(
        torch.equal(a.grads[p], b.grads[p]) for a, b in zip(first.episodes, again.episodes, strict=True) for p in PARAMS
    )
    assert not torch.equal(first.episodes[0].grads["affine2.weight"], other.episodes[0].grads["affine2.weight"])
