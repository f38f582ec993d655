"""A trainer that runs one step of distributed autograd against a parameter
server, the way the distributed RNN and the DDP + RPC tutorials do, and is
done: ``worker0`` computes through ``worker1`` inside a
``dist_autograd.context()``, runs the backward pass and leaves the context.
Leaving it sends ``CLEANUP_AUTOGRAD_CONTEXT_REQ`` to ``worker1``, one of the
messages torch retries (about 1 s apart, with back-off); the program shuts
down right after, long before a retry would run."""

import os

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc


def run_worker(rank, world_size, steps=1):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "29500"
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=world_size)
    grads = None
    if rank == 0:
        weight = torch.ones(3, requires_grad=True)
        for _ in range(steps):
            with dist_autograd.context() as context_id:
                out = rpc.rpc_sync("worker1", torch.mul, args=(weight, 2.0))
                dist_autograd.backward(context_id, [out.sum()])
                grads = dist_autograd.get_gradients(context_id)[weight].tolist()
    rpc.shutdown()
    return grads
