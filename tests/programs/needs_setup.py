"""A program that fetches its data set at start-up, as most training
scripts do: ``load_dataset()`` would download it. A test replaces the
download with a small fake one, and the replacement has to be in place in
every rank's process before the program runs. ``programs.fake_dataset``
holds the setup that does it."""

import os

import torch.distributed.rpc as rpc

SOURCE = "https://example.invalid/dataset.tar.gz"


def load_dataset():
    raise RuntimeError(f"tried to download {SOURCE}: tests must not reach the network")


def size_of_shard(rank, world_size):
    return len(load_dataset()[rank::world_size])


def run_worker(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "29500"
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=world_size)
    mine = len(load_dataset()[rank::world_size])
    peer = (rank + 1) % world_size
    theirs = rpc.rpc_sync(f"worker{peer}", size_of_shard, args=(peer, world_size))
    rpc.shutdown()
    return {"mine": mine, "peer's": theirs, "pid": os.getpid()}
