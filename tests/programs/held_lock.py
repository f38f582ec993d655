"""A rank that holds a bare ``threading.Lock`` from before ``init_rpc`` and
waits on an ``Event`` that a handler sets just before it takes that lock.
Free-running, the main thread wakes, lets go of the lock and the handler
goes on. Under a controlled schedule the handler's step blocks on the lock
where no scheduler can see, and the only task that could free it waits for
that step to end: every seed loses control at the same step. Never imports
the harness."""

import threading

import torch.distributed.rpc as rpc

lock = threading.Lock()
started = threading.Event()


def grab():
    started.set()
    with lock:
        return "grabbed"


def run_worker(rank, world_size):
    names = ["keeper"] + [f"caller{k}" for k in range(1, world_size)]
    if rank == 0:
        lock.acquire()
    rpc.init_rpc(names[rank], rank=rank, world_size=world_size)
    if rank == 0:
        started.wait()
        lock.release()
        result = None
    else:
        result = rpc.rpc_sync("keeper", grab)
    rpc.shutdown()
    return result
