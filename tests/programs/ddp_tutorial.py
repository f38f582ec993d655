"""torch's DDP tutorial ("Getting Started with Distributed Data Parallel",
basic use case) on CPU with gloo, as written there: ``setup`` sets
``MASTER_ADDR``/``MASTER_PORT`` (a hard-coded port) and calls
``init_process_group``, the model trains a few steps under DDP, ``cleanup``
destroys the group. No init_rpc, nothing of the harness imported."""

import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP


def setup(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "12355"
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


def cleanup():
    dist.destroy_process_group()


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def demo_basic(rank, world_size, steps=3):
    setup(rank, world_size)
    torch.manual_seed(0)  # the same initial model everywhere (DDP broadcasts rank 0's anyway)
    model = ToyModel()
    ddp_model = DDP(model)
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)
    torch.manual_seed(rank)  # each rank its own batch
    for _ in range(steps):
        optimizer.zero_grad()
        outputs = ddp_model(torch.randn(20, 10))
        loss_fn(outputs, torch.randn(20, 5)).backward()
        optimizer.step()
    weights = [p.detach().clone() for p in model.parameters()]
    cleanup()
    return weights


def own_store(rank, world_size, path):
    """A program that brings its own store, as torch's own tests do."""
    store = dist.FileStore(path, world_size)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size)
    tensor = torch.tensor([float(rank + 1)])
    dist.all_reduce(tensor)
    dist.destroy_process_group()
    return tensor.item()
