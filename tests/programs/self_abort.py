"""Three workers where one death takes a second rank down by torch's own
hand, as in pytorch/examples' ResNet pipeline: when ``worker1`` dies,
``worker0`` (the driver) raises at once, and ``worker2``, which was sending
to ``worker1`` too, gives up a moment later and aborts its own process
(``os.abort()``, as torch does when a message runs out of retries:
``terminate called ... max retries (5)``). The harness did not send that
SIGABRT."""

import os
import time

import torch
import torch.distributed.rpc as rpc


def stage(x):
    return x + 1


def run_worker(rank, world_size, steps=20, give_up_after=0.02):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "29500"
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=world_size)
    if rank == 0:
        x = torch.zeros(2)
        for _ in range(steps):
            x = rpc.rpc_sync("worker1", stage, args=(x,))
    elif rank == 2:
        try:
            for _ in range(steps * 10):
                rpc.rpc_sync("worker1", stage, args=(torch.zeros(2),))
                time.sleep(0.01)
        except RuntimeError:
            time.sleep(give_up_after)  # torch's last retries
            os.abort()
    rpc.shutdown()
