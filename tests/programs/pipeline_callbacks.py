"""A pipeline driven from callbacks, as pipeline runtimes chain stages: each
micro-batch's first-stage future gets a ``then`` callback that issues the
next stage's RPC from torch's callback thread (the shape of a
``rpc_async().then(...set_next...)``), and the driver waits on the chains.
``shape="then-then"``: the RPC is issued by a second ``then`` on the first
one's future (``rpc_async().then(scale).then(send)``); ``"gathered"``: one
RPC of the sum, from a ``then`` on ``collect_all`` of the first stage. The
program never imports the harness."""

import torch
import torch.distributed.rpc as rpc

_seen = []


def stage1(x):
    return x * 2


def stage2(x):
    _seen.append(x)
    return x + 1


def seen():
    return list(_seen)


def _send_on(fut):
    return rpc.rpc_async("stage2", stage2, args=(fut.value(),))


def _send_sum(fut):
    return rpc.rpc_async("stage2", stage2, args=(sum(first.value() for first in fut.value()),))


def run_worker(rank, world_size=3, microbatches=3, shape="then"):
    names = ["driver", "stage1", "stage2"]
    rpc.init_rpc(names[rank], rank=rank, world_size=world_size)
    out = None
    if rank == 0:
        firsts = [rpc.rpc_async("stage1", stage1, args=(i,)) for i in range(microbatches)]
        if shape == "gathered":
            chains = [torch.futures.collect_all(firsts).then(_send_sum)]
        elif shape == "then-then":
            chains = [first.then(lambda fut: fut.value() * 10).then(_send_on) for first in firsts]
        else:
            chains = [first.then(_send_on) for first in firsts]
        results = [chain.wait().wait() for chain in chains]
        out = {"results": results, "arrived": rpc.rpc_sync("stage2", seen)}
    rpc.shutdown()
    return out
