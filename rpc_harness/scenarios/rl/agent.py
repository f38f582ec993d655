"""The agent: holds the policy, serves the observers' RPCs, trains with
REINFORCE after each episode. The same class runs in the agent's rank and in
the single-process baseline."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.distributions import Categorical

from rpc_harness import derive_seed, failpoint, progress

from .._device import prepare
from .._threads import threads
from .config import ENV_ID, Config, gymnasium
from .model import Policy


@dataclass
class Trajectory:
    """What the agent recorded for one observer in the current episode."""

    states: list[torch.Tensor] = field(default_factory=list)
    masks: list[torch.Tensor] = field(default_factory=list)
    actions: list[int] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)


@dataclass
class Episode:
    """One finished episode of training, as the agent saw it."""

    episode: int  # 1-based
    observers: tuple[str, ...]  # those whose trajectories were trained on
    rewards: dict[str, float]  # each observer's episode reward
    ep_reward: float  # the smallest of them (the tutorial's "last reward")
    running_reward: float
    loss: float
    grads: dict[str, torch.Tensor]  # the update's gradients, by parameter name


@dataclass
class Records:
    """A whole training run: what the agent's entry and the baseline return."""

    episodes: list[Episode]
    dropped: dict[str, int]  # observer name -> the episode in which it was dropped
    threshold: float
    solved_at: int | None = None
    steps: int = 0  # environment steps over all observers
    device: str = "cpu"  # where the policy trained (the judge's tolerances depend on it)


class Agent:
    """Holds the policy; serves the observers' RPCs; trains after each episode."""

    def __init__(
        self,
        config: Config,
        world_seed: int,
        observers: Mapping[int, str],
        *,
        perturb_episode: int = 0,
        device: torch.device | str = "cpu",
    ) -> None:
        self.config = config
        # The policy on the agent's device; its initial weights drawn on the
        # CPU, as in the baseline, so both start from the same numbers.
        self.device = torch.device(device)
        prepare(self.device)
        self.names = dict(sorted(observers.items()))  # ob_id -> name, in fixed order
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(world_seed, "policy-init"))
            self.policy = Policy(config.hidden, config.dropout).to(self.device)
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=config.lr)
        self.eps = torch.finfo(torch.float32).eps
        self.running_reward = 0.0
        self.reward_threshold = float(gymnasium().spec(ENV_ID).reward_threshold)
        # One stream per observer: each observer's calls arrive one at a time,
        # so its stream is consumed in the same order however observers interleave.
        self.generators = {
            ob_id: torch.Generator().manual_seed(derive_seed(world_seed, "policy-rng", name))
            for ob_id, name in self.names.items()
        }
        self.trajectories = {ob_id: Trajectory() for ob_id in self.names}
        self.active = list(self.names)  # ob_ids still trained on
        self.dropped: dict[str, int] = {}
        self.perturb_episode = perturb_episode
        self.episode = 0
        self.steps = 0

    def select_action(self, ob_id: int, state: Any) -> int:
        """Sample an action for observer ``ob_id`` (runs in an RPC handler)."""
        failpoint("agent.select_action")
        trajectory = self.trajectories[ob_id]
        x = torch.as_tensor(state, dtype=torch.float32).unsqueeze(0)
        generator = self.generators[ob_id]
        mask = self.policy.dropout_mask(generator)
        # No graph here: finish_episode replays the steps in a fixed order.
        # States and masks stay on the CPU (the observers' numbers, the CPU
        # generators' draws); the action is sampled on the CPU from the
        # policy's probabilities, with the observer's own CPU generator.
        with torch.no_grad():
            probs = self.policy(x.to(self.device), mask.to(self.device)).cpu()
        action = int(torch.multinomial(probs, 1, generator=generator).item())
        trajectory.states.append(x)
        trajectory.masks.append(mask)
        trajectory.actions.append(action)
        return action

    def report_reward(self, ob_id: int, reward: float) -> None:
        """Record observer ``ob_id``'s reward for its last action (RPC handler)."""
        failpoint("agent.report_reward")
        self.trajectories[ob_id].rewards.append(reward)

    def start_episode(self) -> int:
        """Clear every trajectory and count a new episode; returns its number."""
        failpoint("agent.run_episode")
        self.episode += 1
        self.trajectories = {ob_id: Trajectory() for ob_id in self.names}
        return self.episode

    def drop(self, ob_id: int) -> None:
        """Stop training with observer ``ob_id`` from the current episode on."""
        self.active.remove(ob_id)
        self.dropped[self.names[ob_id]] = self.episode
        self.trajectories[ob_id] = Trajectory()

    def finish_episode(self) -> Episode:
        """REINFORCE over every active observer's trajectory: one Adam step."""
        failpoint("agent.finish_episode")
        if not self.active:
            raise RuntimeError(f"episode {self.episode}: every observer is gone; nothing to train on")
        order = list(self.active)
        rewards = {self.names[i]: float(sum(self.trajectories[i].rewards)) for i in order}
        ep_reward = min(rewards.values())
        self.running_reward = 0.05 * ep_reward + (1 - 0.05) * self.running_reward
        if self.episode == self.perturb_episode:
            self.trajectories[order[0]].rewards[0] += self.config.perturb_reward
        with threads(1):
            log_probs, returns = [], []
            for ob_id in order:
                trajectory = self.trajectories[ob_id]
                if len(trajectory.rewards) != len(trajectory.actions):
                    raise RuntimeError(
                        f"episode {self.episode}: {self.names[ob_id]} sent {len(trajectory.actions)} "
                        f"states but {len(trajectory.rewards)} rewards"
                    )
                if not trajectory.actions:
                    continue
                probs = self.policy(torch.cat(trajectory.states).to(self.device),
                                    torch.cat(trajectory.masks).to(self.device))
                log_probs.append(Categorical(probs).log_prob(torch.tensor(trajectory.actions, device=self.device)))
                R, discounted = 0.0, []
                for r in reversed(trajectory.rewards):
                    R = r + self.config.gamma * R
                    discounted.append(R)
                returns.extend(reversed(discounted))
            returns_t = torch.tensor(returns, device=self.device)
            if returns_t.numel() > 1:
                returns_t = (returns_t - returns_t.mean()) / (returns_t.std() + self.eps)
            policy_loss = (-torch.cat(log_probs) * returns_t).sum()
            self.optimizer.zero_grad()
            policy_loss.backward()
            grads = {
                # Copied to the CPU: records go to the test process, which never touches CUDA.
                name: p.grad.detach().to("cpu", copy=True) for name, p in self.policy.named_parameters()
            }
            self.optimizer.step()
        self.steps += sum(len(self.trajectories[i].actions) for i in order)
        return Episode(
            episode=self.episode,
            observers=tuple(self.names[i] for i in order),
            rewards=rewards,
            ep_reward=ep_reward,
            running_reward=self.running_reward,
            loss=float(policy_loss.detach()),
            grads=grads,
        )

    def train(self, run_episode: Any) -> Records:
        """Run episodes with ``run_episode(agent, episode)`` until the budget
        is spent or the running reward passes the threshold."""
        episodes, solved_at = [], None
        for _ in range(self.config.episodes):
            episode = self.start_episode()
            run_episode(self, episode)
            episodes.append(self.finish_episode())
            # A no-op in the baseline, which runs outside any world.
            progress(episode, self.config.episodes, "episodes", running_reward=self.running_reward)
            if self.running_reward > self.reward_threshold:
                solved_at = episode
                if self.config.stop_when_solved:
                    break
        return Records(episodes, dict(self.dropped), self.reward_threshold, solved_at, self.steps, str(self.device))

