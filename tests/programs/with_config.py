"""A program configured by an object, as most real ones are: ``run_worker``
takes a ``Config`` instance (a plain class, no ``__repr__``), so its repr is
``<programs.with_config.Config object at 0x...>``, which no Python line can
hold."""

import os

import torch.distributed.rpc as rpc


class Config:
    def __init__(self, steps=3, scale=2):
        self.steps = steps
        self.scale = scale


def work(x, scale):
    return x * scale


def run_worker(rank, world_size, config):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "29500"
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=world_size)
    out = []
    if rank == 0:
        out = [rpc.rpc_sync("worker1", work, args=(step, config.scale)) for step in range(config.steps)]
    rpc.shutdown()
    return out
