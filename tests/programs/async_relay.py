"""A relay in torch's @async_execution style: a client calls ``mid``, whose
function returns the future of its own call to ``leaf`` (``how="direct"``)
or a ``then()`` of it (``"then"``, torch's documented example) instead of
a value; torch answers the client once that future completes. ``"nested"``:
the client makes three calls at once, each relayed twice (``mid`` to
``leaf`` to ``mid``), and the order the last hops arrived in is returned.
The program never imports the harness."""

import torch.distributed.rpc as rpc
from torch.distributed.rpc import functions

_arrived = []


def work(x):
    _arrived.append(x)
    return x * 2


def arrived():
    return list(_arrived)


@functions.async_execution
def inner(x):
    return rpc.rpc_async("mid", work, args=(x,))


@functions.async_execution
def outer(x):
    return rpc.rpc_async("leaf", inner, args=(x,)).then(lambda fut: fut.value() + 1)


@functions.async_execution
def relay_direct(x):
    return rpc.rpc_async("leaf", work, args=(x,))


@functions.async_execution
def relay_then(x):
    return rpc.rpc_async("leaf", work, args=(x,)).then(lambda fut: fut.value() + 1)


def run_worker(rank, world_size=3, how="direct"):
    names = ["client", "mid", "leaf"]
    rpc.init_rpc(names[rank], rank=rank, world_size=world_size)
    out = None
    if rank == 0 and how == "nested":
        calls = [rpc.rpc_async("mid", outer, args=(x,)) for x in (1, 2, 3)]
        out = [call.wait() for call in calls], rpc.rpc_sync("mid", arrived)
    elif rank == 0:
        relay = relay_direct if how == "direct" else relay_then
        out = [rpc.rpc_sync("mid", relay, args=(x,)) for x in (1, 2)]
    rpc.shutdown()
    return out
