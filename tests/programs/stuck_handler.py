"""A server that only serves, the tutorials' way (``init_rpc`` then straight
into its own ``rpc.shutdown()``), whose handler gets stuck: ``worker0``'s
``wait_for_lease`` blocks until a lease is released that never is.
``worker1`` asks for the lease, waits a little, then gives up and raises.
At that moment ``worker0`` is inside its own graceful ``rpc.shutdown()``,
stuck serving ``worker1``'s call: its stacks are what would explain it."""

import os
import threading
import time

import torch.distributed.rpc as rpc

_lease_released = threading.Event()


def wait_for_lease(who):
    _lease_released.wait()  # nobody ever sets it: the server's bug
    return who


def run_worker(rank, world_size, patience=0.5):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "29500"
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=world_size)
    if rank != 0:
        lease = rpc.rpc_async("worker0", wait_for_lease, args=(rank,))
        time.sleep(patience)
        if not lease.done():
            raise RuntimeError(f"worker{rank} gave up waiting {patience}s for its lease")
    rpc.shutdown()
