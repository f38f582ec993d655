"""A handler hands a value to its rank's main thread through plain memory,
and the main thread spins on it with no sleep. Free-running, the handler
runs beside the spin and the program always finishes. Under a controlled
schedule that lets the main thread go first, the spin holds the one turn
and the handler that would end it waits for that turn: a stall of the
schedule's making, not of the program's. Never imports the harness."""

import torch.distributed.rpc as rpc

box = {}


def deliver(value):
    box["value"] = value
    return True


def run_worker(rank, world_size):
    names = ["keeper"] + [f"giver{k}" for k in range(1, world_size)]
    rpc.init_rpc(names[rank], rank=rank, world_size=world_size)
    if rank == 0:
        while "value" not in box:
            pass
        result = box["value"]
    else:
        result = rpc.rpc_sync("keeper", deliver, args=(rank,))
    rpc.shutdown()
    return result
