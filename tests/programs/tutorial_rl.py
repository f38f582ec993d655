"""Distributed reinforcement learning, the way PyTorch's "Getting Started with
Distributed RPC Framework" tutorial writes it (gymnasium's API): an agent and
observers playing CartPole, REINFORCE on the agent."""

import os

import gymnasium as gym
import numpy as np
import torch
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributed.rpc import RRef, remote, rpc_async
from torch.distributions import Categorical

AGENT_NAME = "agent"
OBSERVER_NAME = "obs{}"


def _call_method(method, rref, *args, **kwargs):
    return method(rref.local_value(), *args, **kwargs)


def _remote_method(method, rref, *args, **kwargs):
    args = [method, rref] + list(args)
    return rpc.rpc_sync(rref.owner(), _call_method, args=args, kwargs=kwargs)


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine1 = nn.Linear(4, 128)
        self.dropout = nn.Dropout(p=0.6)
        self.affine2 = nn.Linear(128, 2)

    def forward(self, x):
        x = self.affine1(x)
        x = self.dropout(x)
        x = F.relu(x)
        action_scores = self.affine2(x)
        return F.softmax(action_scores, dim=1)


class Observer:
    def __init__(self):
        self.id = rpc.get_worker_info().id
        self.env = gym.make("CartPole-v1")
        self.env.reset(seed=self.id)

    def run_episode(self, agent_rref, n_steps):
        state, _ = self.env.reset()
        for _ in range(n_steps):
            action = _remote_method(Agent.select_action, agent_rref, self.id, state)
            state, reward, terminated, truncated, _ = self.env.step(action)
            _remote_method(Agent.report_reward, agent_rref, self.id, reward)
            if terminated or truncated:
                break


class Agent:
    def __init__(self, world_size):
        self.ob_rrefs = []
        self.agent_rref = RRef(self)
        self.rewards = {}
        self.saved_log_probs = {}
        self.policy = Policy()
        self.optimizer = optim.Adam(self.policy.parameters(), lr=1e-2)
        self.eps = np.finfo(np.float32).eps.item()
        self.running_reward = 0
        self.reward_threshold = gym.make("CartPole-v1").spec.reward_threshold
        for ob_rank in range(1, world_size):
            ob_info = rpc.get_worker_info(OBSERVER_NAME.format(ob_rank))
            self.ob_rrefs.append(remote(ob_info, Observer))
            self.rewards[ob_info.id] = []
            self.saved_log_probs[ob_info.id] = []

    def select_action(self, ob_id, state):
        state = torch.from_numpy(state).float().unsqueeze(0)
        probs = self.policy(state)
        m = Categorical(probs)
        action = m.sample()
        self.saved_log_probs[ob_id].append(m.log_prob(action))
        return action.item()

    def report_reward(self, ob_id, reward):
        self.rewards[ob_id].append(reward)

    def run_episode(self, n_steps=0):
        futs = []
        for ob_rref in self.ob_rrefs:
            futs.append(rpc_async(ob_rref.owner(), _call_method,
                                  args=(Observer.run_episode, ob_rref, self.agent_rref, n_steps)))
        for fut in futs:
            fut.wait()

    def finish_episode(self):
        R, probs, rewards = 0, [], []
        for ob_id in self.rewards:
            probs.extend(self.saved_log_probs[ob_id])
            rewards.extend(self.rewards[ob_id])
        min_reward = min(sum(self.rewards[ob_id]) for ob_id in self.rewards)
        self.running_reward = 0.05 * min_reward + (1 - 0.05) * self.running_reward
        for ob_id in self.rewards:
            self.rewards[ob_id] = []
            self.saved_log_probs[ob_id] = []
        policy_loss, returns = [], []
        for r in rewards[::-1]:
            R = r + 0.99 * R
            returns.insert(0, R)
        returns = torch.tensor(returns)
        returns = (returns - returns.mean()) / (returns.std() + self.eps)
        for log_prob, R in zip(probs, returns, strict=True):
            policy_loss.append(-log_prob * R)
        self.optimizer.zero_grad()
        policy_loss = torch.cat(policy_loss).sum()
        policy_loss.backward()
        self.optimizer.step()
        return min_reward


def run_worker(rank, world_size, episodes=4, n_steps=20):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "29500"
    if rank == 0:
        rpc.init_rpc(AGENT_NAME, rank=rank, world_size=world_size)
        agent = Agent(world_size)
        rewards = []
        for _ in range(episodes):
            agent.run_episode(n_steps=n_steps)
            rewards.append(agent.finish_episode())
        print(f"last reward {rewards[-1]}, running reward {agent.running_reward:.2f}")
        result = {"episodes": len(rewards), "running_reward": agent.running_reward}
    else:
        rpc.init_rpc(OBSERVER_NAME.format(rank), rank=rank, world_size=world_size)
        result = None
    rpc.shutdown()
    return result


if __name__ == "__main__":
    mp.spawn(run_worker, args=(3,), nprocs=3, join=True)
