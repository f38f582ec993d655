"""A parameter server that applies updates in batches, in the style of
torch's "batch RPC processing" tutorial: its ``@async_execution`` update
returns one shared future, completed when the batch's last update arrives,
so one step answers every trainer's call at once. The trainer's callbacks
on those answers record the order they ran in, and each reports to the
server. The program never imports the harness."""

import threading

import torch
import torch.distributed.rpc as rpc
from torch.distributed.rpc import functions

_lock = threading.Lock()
_batch = {"future": None, "arrived": 0}
_reports = []


@functions.async_execution
def update(batch_size, i):
    with _lock:
        if _batch["future"] is None:
            _batch["future"] = torch.futures.Future()
        future = _batch["future"]
        _batch["arrived"] += 1
        if _batch["arrived"] == batch_size:
            _batch["future"], _batch["arrived"] = None, 0
            future.set_result(i)
    return future


def report(i):
    _reports.append(i)


def reports():
    return list(_reports)


def run_worker(rank, world_size=2, batch_size=4):
    rpc.init_rpc(["trainer", "ps"][rank], rank=rank, world_size=world_size)
    out = None
    if rank == 0:
        ran = []

        def on_answer(i):
            ran.append(i)
            return rpc.rpc_async("ps", report, args=(i,))

        answers = [rpc.rpc_async("ps", update, args=(batch_size, i)).then(lambda fut, i=i: on_answer(i))
                   for i in range(batch_size)]
        torch.futures.wait_all([answer.wait() for answer in answers])
        out = {"ran": ran, "reports": rpc.rpc_sync("ps", reports)}
    rpc.shutdown()
    return out
