"""A fire-and-forget call: ``worker0`` asks ``worker1`` to ``store`` a value
with ``rpc_async`` and never waits on the future, then polls ``worker1``
until the value is there. An error in ``store`` is lost with the future:
``worker0`` polls until the world's deadline, and nothing it does says why."""

import os
import time

import torch.distributed.rpc as rpc

_stored = []


def store(value):
    _stored.append(value)


def stored():
    return list(_stored)


def run_worker(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "29500"
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=world_size)
    if rank == 0:
        rpc.rpc_async("worker1", store, args=(42,))  # the program's bug: nobody waits on it
        while not rpc.rpc_sync("worker1", stored):
            time.sleep(0.05)
    rpc.shutdown()
