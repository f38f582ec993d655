"""A caller that gives up on a handler: ``impatient`` asks ``server`` for a
reply it takes ``sleep`` seconds to make, and waits ``timeout`` seconds for
it (a per-call ``timeout=``; ``None``: the world's RPC timeout). Free-
running, torch marks the call with its timeout error once the time has
passed, and the caller says so. Never imports the harness."""

import time

import torch.distributed.rpc as rpc


def slow_reply(seconds):
    time.sleep(seconds)
    return "answered"


def run_worker(rank, world_size, sleep=60.0, timeout=20.0, how="sync"):
    names = ["server", "impatient"]
    rpc.init_rpc(names[rank], rank=rank, world_size=world_size)
    outcome = None
    if rank == 1:
        extra = {} if timeout is None else {"timeout": timeout}
        try:
            if how == "sync":
                outcome = rpc.rpc_sync("server", slow_reply, args=(sleep,), **extra)
            else:
                outcome = rpc.rpc_async("server", slow_reply, args=(sleep,), **extra).wait()
        except RuntimeError as error:
            outcome = f"{type(error).__name__}: {error}"
    rpc.shutdown()
    return outcome
