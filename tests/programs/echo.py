"""The smallest program that survives a planned kill only if its own graceful
``rpc.shutdown()`` is not left to wait for the dead: every worker but the
first asks the first to echo a few numbers; the first only serves."""

import os

import torch.distributed.rpc as rpc


def echo(x):
    return x


def run_worker(rank, world_size, calls=3):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "29500"
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=world_size)
    answers = [rpc.rpc_sync("worker0", echo, args=(i,)) for i in range(calls)] if rank else []
    rpc.shutdown()
    return answers


def never_joins(rank, world_size):
    return rank


def joins_a_smaller_world(rank, world_size):
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=world_size - 1)
    rpc.shutdown()
