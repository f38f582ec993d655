"""Distributed RL the way the "Getting Started with Distributed RPC
Framework" tutorial prints its agent today: episodes are kicked off by
sending an RRef proxy's method as the function,
``rpc_async(ob_rref.owner(), ob_rref.rpc_sync().run_episode, ...)``, and the
observers talk to the agent through RRef proxies too. (The same kick-off
through ``rref.rpc_async().run_episode`` cannot work: the owner would have to
send back a Future, which torch cannot pickle.)"""

import os

import gymnasium as gym
import torch
import torch.distributed.rpc as rpc
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributed.rpc import RRef, remote, rpc_async
from torch.distributions import Categorical

AGENT_NAME = "agent"
OBSERVER_NAME = "observer{}"


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine1 = nn.Linear(4, 32)
        self.affine2 = nn.Linear(32, 2)

    def forward(self, x):
        return F.softmax(self.affine2(F.relu(self.affine1(x))), dim=1)


class Observer:
    def __init__(self):
        self.id = rpc.get_worker_info().id
        self.env = gym.make("CartPole-v1")
        self.env.reset(seed=self.id)

    def run_episode(self, agent_rref, n_steps):
        state, _ = self.env.reset()
        for _ in range(n_steps):
            action = agent_rref.rpc_sync().select_action(self.id, state)
            state, reward, terminated, truncated, _ = self.env.step(action)
            agent_rref.rpc_sync().report_reward(self.id, reward)
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
        for ob_rank in range(1, world_size):
            ob_info = rpc.get_worker_info(OBSERVER_NAME.format(ob_rank))
            self.ob_rrefs.append(remote(ob_info, Observer))
            self.rewards[ob_info.id] = []
            self.saved_log_probs[ob_info.id] = []

    def select_action(self, ob_id, state):
        probs = self.policy(torch.from_numpy(state).float().unsqueeze(0))
        m = Categorical(probs)
        action = m.sample()
        self.saved_log_probs[ob_id].append(m.log_prob(action))
        return action.item()

    def report_reward(self, ob_id, reward):
        self.rewards[ob_id].append(reward)

    def run_episode(self, n_steps=0):
        futs = []
        for ob_rref in self.ob_rrefs:
            # make async RPC to kick off an episode on all observers
            futs.append(rpc_async(ob_rref.owner(), ob_rref.rpc_sync().run_episode,
                                  args=(self.agent_rref, n_steps)))
        for fut in futs:
            fut.wait()

    def finish_episode(self):
        losses = []
        for ob_id, rewards in self.rewards.items():
            returns = torch.tensor(rewards).flip(0).cumsum(0).flip(0)
            for log_prob, ret in zip(self.saved_log_probs[ob_id], returns, strict=True):
                losses.append(-log_prob * ret)
            self.rewards[ob_id], self.saved_log_probs[ob_id] = [], []
        self.optimizer.zero_grad()
        torch.cat(losses).sum().backward()
        self.optimizer.step()


def run_worker(rank, world_size, episodes=2, n_steps=5):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "29500"
    if rank == 0:
        rpc.init_rpc(AGENT_NAME, rank=rank, world_size=world_size)
        agent = Agent(world_size)
        for _ in range(episodes):
            agent.run_episode(n_steps=n_steps)
            agent.finish_episode()
        result = episodes
    else:
        rpc.init_rpc(OBSERVER_NAME.format(rank), rank=rank, world_size=world_size)
        result = None
    rpc.shutdown()
    return result
