"""The observer: owns one CartPole environment and plays episodes with the
agent's policy, asking the agent for every action by RPC."""

from __future__ import annotations

from typing import Any

from rpc_harness import derive_seed, failpoint

from .._rpc import remote_method
from .agent import Agent
from .config import ENV_ID, gymnasium


def call_agent(method: Any, agent: Any, *args: Any) -> Any:
    """``method(agent, *args)``: locally in the baseline, which hands the
    observers the agent itself, through the agent's RRef in a world."""
    if isinstance(agent, Agent):
        return method(agent, *args)
    return remote_method(method, agent, *args)


class Observer:
    """Owns one CartPole environment and plays episodes with the agent's policy."""

    def __init__(self, ob_id: int, name: str, world_seed: int) -> None:
        self.id = ob_id
        self.name = name
        self.world_seed = world_seed
        self.env = gymnasium().make(ENV_ID)

    def env_seed(self, episode: int) -> int:
        """The seed of this observer's environment for ``episode``."""
        return derive_seed(self.world_seed, "env", self.name, episode)

    def run_episode(self, agent: Any, episode: int, n_steps: int) -> int:
        """Play one episode of at most ``n_steps`` steps; returns the steps taken."""
        failpoint("observer.run_episode")
        # Seeded per episode, so that an episode's start does not depend on
        # how far earlier episodes used the environment's RNG.
        state, _ = self.env.reset(seed=self.env_seed(episode))
        steps = 0
        for _ in range(n_steps):
            failpoint("observer.step")
            action = call_agent(Agent.select_action, agent, self.id, state)
            state, reward, terminated, truncated, _ = self.env.step(action)
            call_agent(Agent.report_reward, agent, self.id, float(reward))
            steps += 1
            if terminated or truncated:
                break
        return steps

