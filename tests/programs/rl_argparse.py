"""The RL tutorial's agent and observers as its page prints them: the
script reads its command line with argparse *at import*
(``args = parser.parse_args()`` at module level) and uses ``args.gamma`` and
``args.seed`` later. Imported from a test, it needs the test module to have
set ``sys.argv`` first; a test module does that at import time."""

import argparse
import os

import gymnasium as gym
import torch
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributed.rpc import RRef, remote, rpc_async, rpc_sync
from torch.distributions import Categorical

parser = argparse.ArgumentParser(description="PyTorch RPC RL example")
parser.add_argument("--world_size", default=2, type=int, metavar="W", help="number of workers")
parser.add_argument("--log_interval", type=int, default=10, metavar="N",
                    help="interval between training status logs")
parser.add_argument("--gamma", type=float, default=0.99, metavar="G", help="how much to value future rewards")
parser.add_argument("--seed", type=int, default=1, metavar="S", help="random seed for reproducibility")
args = parser.parse_args()

torch.manual_seed(args.seed)

AGENT_NAME = "agent"
OBSERVER_NAME = "obs{}"


def _call_method(method, rref, *args, **kwargs):
    return method(rref.local_value(), *args, **kwargs)


def _remote_method(method, rref, *args, **kwargs):
    args = [method, rref] + list(args)
    return rpc_sync(rref.owner(), _call_method, args=args, kwargs=kwargs)


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
        self.env.reset(seed=args.seed)

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
        for ob_rank in range(1, world_size):
            ob_info = rpc.get_worker_info(OBSERVER_NAME.format(ob_rank))
            self.ob_rrefs.append(remote(ob_info, Observer))
            self.rewards[ob_info.id] = []
            self.saved_log_probs[ob_info.id] = []

    def select_action(self, ob_id, state):
        m = Categorical(self.policy(torch.from_numpy(state).float().unsqueeze(0)))
        action = m.sample()
        self.saved_log_probs[ob_id].append(m.log_prob(action))
        return action.item()

    def report_reward(self, ob_id, reward):
        self.rewards[ob_id].append(reward)

    def run_episode(self, n_steps=0):
        futs = [rpc_async(ob_rref.owner(), _call_method, args=(Observer.run_episode, ob_rref, self.agent_rref, n_steps))
                for ob_rref in self.ob_rrefs]
        for fut in futs:
            fut.wait()

    def finish_episode(self):
        losses = []
        for ob_id, rewards in self.rewards.items():
            R, returns = 0.0, []
            for r in rewards[::-1]:
                R = r + args.gamma * R
                returns.insert(0, R)
            for log_prob, ret in zip(self.saved_log_probs[ob_id], returns, strict=True):
                losses.append(-log_prob * ret)
            self.rewards[ob_id], self.saved_log_probs[ob_id] = [], []
        self.optimizer.zero_grad()
        torch.cat(losses).sum().backward()
        self.optimizer.step()


def run_worker(rank, world_size, episodes=3, n_steps=5):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "29500"
    if rank == 0:
        rpc.init_rpc(AGENT_NAME, rank=rank, world_size=world_size)
        agent = Agent(world_size)
        for i_episode in range(episodes):
            agent.run_episode(n_steps=n_steps)
            agent.finish_episode()
            if i_episode % args.log_interval == 0:
                print(f"Episode {i_episode}")
    else:
        rpc.init_rpc(OBSERVER_NAME.format(rank), rank=rank, world_size=world_size)
    rpc.shutdown()


if __name__ == "__main__":
    mp.spawn(run_worker, args=(args.world_size,), nprocs=args.world_size, join=True)
