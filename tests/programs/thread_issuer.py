"""Workers that issue RPCs where no task of a schedule is: from a thread of
their own (as prefetchers and background reporters do, ``how="thread"``),
or by waiting on a peer inside a ``then`` callback (``how="callback"``),
which torch's docs advise against but programs do. The program never
imports the harness."""

import threading

import torch.distributed.rpc as rpc


def add(a, b):
    return a + b


def run_worker(rank, world_size=2, how="thread"):
    rpc.init_rpc(f"w{rank}", rank=rank, world_size=world_size)
    out = None
    if rank == 0 and how == "thread":
        box = []
        prefetcher = threading.Thread(target=lambda: box.append(rpc.rpc_sync("w1", add, args=(1, 2))),
                                      name="prefetcher")
        prefetcher.start()
        prefetcher.join()
        out = box[0]
    elif rank == 0:
        out = rpc.rpc_async("w1", add, args=(1, 2)).then(
            lambda fut: rpc.rpc_sync("w1", add, args=(fut.value(), 10))).wait()
    rpc.shutdown()
    return out
