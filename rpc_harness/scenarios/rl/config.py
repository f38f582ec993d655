"""The RL scenario's names, failpoints and knobs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rpc_harness.extras import require
from rpc_harness.scenario import require_world_size

NAME = "rl"
MIN_WORLD_SIZE = 2
DEFAULT_WORLD_SIZE = 3
STEPS_FIELD = "episodes"  # the training budget the CLI's --steps sets
# The smallest budget its judge can pass: budgets below JUDGE_MIN_EPISODES
# pass with a note saying the rise of the reward was not judged.
MIN_STEPS = 1
ENV_ID = "CartPole-v1"


def gymnasium() -> Any:
    """gymnasium, which the ``[scenarios]`` extra installs (imported where it
    is used, so that listing the scenarios needs none of their packages)."""
    return require("gymnasium", "the rl scenario (CartPole)")
AGENT_NAME = "agent"
OBSERVER_NAME = "observer{}"

# Every failpoint this scenario reaches, in the order an episode reaches them.
FAILPOINTS = (
    "agent.run_episode",  # agent, before it starts an episode on the observers
    "observer.run_episode",  # observer, at the start of its episode
    "observer.step",  # observer, at the top of every step of its episode loop
    "agent.select_action",  # agent, in the RPC handler choosing an action
    "agent.report_reward",  # agent, in the RPC handler recording a reward
    "agent.finish_episode",  # agent, before the REINFORCE update of an episode
)

# The outcome check judges "the reward rises" only on budgets where that is
# reliable. Measured on the baseline (max_steps 40): with 3 observers, 20
# episodes rose in 199 of 200 seeds; with 2 observers, 30 episodes in 146 of
# 150; with 1 observer even 60 episodes stayed flat in 19 of 100 seeds.
# REINFORCE on so few trajectories is that noisy: below the budget a flat
# curve says nothing about the code.
JUDGE_MIN_EPISODES = 20
JUDGE_MIN_OBSERVERS = 3


@dataclass(frozen=True)
class Config:
    """The scenario's knobs. The defaults are sized for CI (about a second of
    training on 2 cores); ``episodes=1000, max_steps=500`` is the budget that
    reaches the environment's reward threshold (475), as in the tutorial's
    sample output (measured on the baseline: 6 of 8 seeds solved with one
    observer in 261-432 episodes, 3 of 3 with three observers in 188-378)."""

    episodes: int = 12  # at most this many episodes (training budget)
    max_steps: int = 40  # steps per observer per episode (the tutorial's n_steps)
    gamma: float = 0.99
    lr: float = 1e-2
    hidden: int = 128
    dropout: float = 0.6
    stop_when_solved: bool = True  # stop once the running reward passes the threshold
    # Test hook, never the baseline: the distributed agent adds perturb_reward
    # to the first reward of its first observer in episode perturb_episode
    # (1-based; 0 = off), so a test can show the gradient check does fail.
    perturb_episode: int = 0
    perturb_reward: float = 0.01
    # The gradient check's tolerance. The design makes the distributed
    # gradients bit-equal to the baseline's (the report's details say whether
    # they were); the tolerance only keeps the check meaningful if a platform
    # ever differs in the last bit.
    rtol: float = 1e-5
    atol: float = 1e-6

    def __post_init__(self) -> None:
        for name in ("episodes", "max_steps", "hidden"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if not self.lr > 0:  # NaN too
            raise ValueError(f"lr must be > 0, got {self.lr!r}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {self.gamma!r}")
        for name in ("perturb_episode", "rtol", "atol"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")


def names(world_size: int) -> tuple[str, ...]:
    """``agent`` then ``observer1`` .. ``observer{world_size-1}``."""
    require_world_size(NAME, world_size, MIN_WORLD_SIZE, "an agent and an observer")
    return (AGENT_NAME, *(OBSERVER_NAME.format(k) for k in range(1, world_size)))
