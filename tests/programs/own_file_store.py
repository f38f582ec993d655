"""A program with its own FileStore (``init_method="file://PATH"``), as
torch's docs show for a world on one machine: ``store`` is the file every
rank names."""

import torch.distributed.rpc as rpc


def echo(x):
    return x


def run_worker(rank, world_size, store):
    options = rpc.TensorPipeRpcBackendOptions(init_method=f"file://{store}")
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=world_size, rpc_backend_options=options)
    answer = rpc.rpc_sync("worker0", echo, args=(rank,)) if rank else None
    rpc.shutdown()
    return answer
