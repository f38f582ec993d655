"""A program that builds its own backend options, as pytorch/examples and
torch's docs do (``rpc.TensorPipeRpcBackendOptions()``, torch's defaults),
and passes them to ``init_rpc``. ``worker1`` asks ``worker0`` for a reply
that takes ``slow`` seconds, with no timeout of its own on the call, and
says what happened: the RPC timeout it ran under, whether the call timed
out, and after how long."""

import os
import time

import torch.distributed.rpc as rpc


def slow_reply(seconds):
    time.sleep(seconds)
    return "late"


def run_worker(rank, world_size, slow=8.0):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "29500"
    options = rpc.TensorPipeRpcBackendOptions()
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=world_size, rpc_backend_options=options)
    report = {"rpc_timeout": rpc.get_rpc_timeout()}
    if rank == 1:
        started = time.monotonic()
        try:
            rpc.rpc_sync("worker0", slow_reply, args=(slow,))
            report["timed_out"] = False
        except RuntimeError as error:
            report["timed_out"] = "timeout" in str(error).lower()
            report["error"] = str(error).splitlines()[0]
        report["seconds"] = round(time.monotonic() - started, 1)
    rpc.shutdown()
    return report
