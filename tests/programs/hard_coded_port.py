"""The tutorials' rendezvous, with the port as an argument instead of 29500:
``MASTER_ADDR``/``MASTER_PORT`` set by hand, then ``init_rpc`` with its
default ``env://`` init method."""

import os

import torch.distributed.rpc as rpc


def add(a, b):
    return a + b


def run_worker(rank, world_size, port):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = str(port)
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=world_size)
    peer = f"worker{(rank + 1) % world_size}"
    answer = rpc.rpc_sync(peer, add, args=(rank, 1))
    rpc.shutdown()
    return answer
