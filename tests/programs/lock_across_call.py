"""A handler that holds a ``threading.Lock`` across an RPC: a second handler
waiting for the lock blocks where a scheduler cannot see (a bare lock), so a
controlled schedule that paused the first one mid-call can go no further.
Free-running, it is only slow. Never imports the harness."""

import threading

import torch.distributed.rpc as rpc

lock = threading.Lock()
log = []


def note(entry):
    log.append(entry)
    return len(log)


def guarded(who):
    with lock:
        return rpc.rpc_sync("keeper", note, args=(who,))


def run_worker(rank, world_size):
    names = ["keeper"] + [f"caller{k}" for k in range(1, world_size)]
    rpc.init_rpc(names[rank], rank=rank, world_size=world_size)
    result = rpc.rpc_sync("keeper", guarded, args=(names[rank],)) if rank else None
    rpc.shutdown()
    return result
