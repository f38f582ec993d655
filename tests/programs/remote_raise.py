"""A client that saves blocks on a storage worker, written the tutorials'
way: ``w0`` sends every block to ``w1`` by RPC and ``w1`` only serves. A
fault aimed at ``w1``'s handler (``rpc.serve:save_block``) raises there, and
the exception travels back to ``w0`` the way torch sends any remote error:
``w0``'s own error is torch's wrapper around it."""

import os

import torch
import torch.distributed.rpc as rpc

_saved = []


def save_block(index, block):
    _saved.append((index, float(block.sum())))
    return len(_saved)


def run_worker(rank, world_size, blocks=3, how="rpc_sync"):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "29500"
    rpc.init_rpc(f"w{rank}", rank=rank, world_size=world_size)
    saved = None
    if rank == 0:
        for index in range(blocks):
            block = torch.full((4,), float(index))
            if how == "rpc_sync":
                saved = rpc.rpc_sync("w1", save_block, args=(index, block))
            elif how == "rpc_async":
                saved = rpc.rpc_async("w1", save_block, args=(index, block)).wait()
            else:  # remote
                saved = rpc.remote("w1", save_block, args=(index, block)).to_here()
    rpc.shutdown()
    return saved
