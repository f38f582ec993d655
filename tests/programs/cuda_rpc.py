"""A program written as PyTorch's "Direct Device-to-Device Communication
with TensorPipe CUDA RPC" tutorial writes it: ``worker0`` maps its GPU 0 to
``worker1``'s GPU 0 in its TensorPipe options and sends it CUDA tensors,
which arrive on ``worker1``'s GPU and come back on ``worker0``'s.

``how`` says how worker0 names the devices: ``"device_maps"`` (the
options' argument), ``"set_device_map"`` (the tutorial's call) or
``"devices"`` (the options' device list, which torch accepts on a CPU
build and only trips over later)."""

import os

import torch
import torch.distributed.rpc as rpc


def add_on_device(x, y):
    assert x.is_cuda and y.is_cuda, "the tensors arrive on worker1's GPU"
    return x + y


def run_worker(rank, world_size, how="device_maps"):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "29500"
    if rank == 0:
        if how == "device_maps":
            options = rpc.TensorPipeRpcBackendOptions(num_worker_threads=8, device_maps={"worker1": {0: 0}})
        elif how == "set_device_map":
            options = rpc.TensorPipeRpcBackendOptions(num_worker_threads=8)
            options.set_device_map("worker1", {0: 0})
        else:
            options = rpc.TensorPipeRpcBackendOptions(num_worker_threads=8, devices=["cuda:0"])
        rpc.init_rpc("worker0", rank=rank, world_size=world_size, rpc_backend_options=options)
        x = torch.ones(2, device="cuda:0")
        y = rpc.rpc_sync("worker1", add_on_device, args=(x, x))
        result = {"device": str(y.device), "value": y.cpu().tolist()}
    else:
        # No map of its own: torch answers along the inverse of the caller's.
        options = rpc.TensorPipeRpcBackendOptions(num_worker_threads=8)
        rpc.init_rpc("worker1", rank=rank, world_size=world_size, rpc_backend_options=options)
        result = None
    rpc.shutdown()
    return result
