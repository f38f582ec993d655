"""PyTorch's own example RPC programs (``torch.testing._internal.distributed.rpc.
examples``), run the way torch's own tests run them: every rank joins as
``worker{rank}``, rank 0 drives the example, every rank shuts down. Importing
them needs ``expecttest`` (torch's test utilities import it)."""

import torch.distributed.rpc as rpc
from torch.testing._internal.dist_utils import worker_name
from torch.testing._internal.distributed.rpc.examples import parameter_server_test as batch_ps
from torch.testing._internal.distributed.rpc.examples import (
    reinforcement_learning_rpc_test as rl_example,
)


def run_batch_parameter_server(rank, world_size):
    """torch's test_batch_updating_parameter_server, as a program."""
    rpc.init_rpc(worker_name(rank), rank=rank, world_size=world_size)
    if rank == 0:
        batch_ps.run_ps([worker_name(r) for r in range(1, world_size)])
    rpc.shutdown()


def run_reinforcement_learning(rank, world_size):
    """torch's test_rl_rpc, as a program; rank 0 returns the running reward."""
    rpc.init_rpc(worker_name(rank), rank=rank, world_size=world_size)
    reward = None
    if rank == 0:
        agent = rl_example.Agent(world_size)
        rl_example.run_agent(agent, n_steps=int(rl_example.TOTAL_EPISODE_STEP / (world_size - 1)))
        reward = agent.running_reward
    rpc.shutdown()
    return reward
