"""A parameter server whose trainers' names do not sort the way their ranks
do (``trainer10`` before ``trainer2`` by name): rank 0 is ``ps``, then
``trainer2`` and ``trainer10``. Trainer k reports to the server k // 4
times, so each rank leaves a different trail."""

import os

import torch.distributed.rpc as rpc

NAMES = ("ps", "trainer2", "trainer10")


def report(name, rank):
    return f"{name} (rank {rank}) reported"


def run_worker(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "29500"
    name = NAMES[rank]
    rpc.init_rpc(name, rank=rank, world_size=world_size)
    replies = []
    if rank:
        for _ in range(int(name.removeprefix("trainer")) // 4):
            replies.append(rpc.rpc_sync("ps", report, args=(name, rank)))
    rpc.shutdown()
    return {"rank": rank, "name": name, "replies": replies}
