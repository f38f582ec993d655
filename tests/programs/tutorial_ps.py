"""A parameter server with several trainers, the way PyTorch's "Implementing
Batch RPC Processing Using Asynchronous Executions" tutorial writes it: the
server waits for every trainer's gradients, applies their sum and answers
all of them with the new model; trainers talk to it through an RRef proxy."""

import os
import threading

import torch
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp
import torch.nn as nn
from torch import optim

batch_size = 16
in_features = 32
out_features = 8
num_batches = 4


class BatchUpdateParameterServer:
    def __init__(self, batch_update_size):
        self.model = nn.Linear(in_features, out_features)
        self.lock = threading.Lock()
        self.future_model = torch.futures.Future()
        self.batch_update_size = batch_update_size
        self.curr_update_size = 0
        self.optimizer = optim.SGD(self.model.parameters(), lr=0.001, momentum=0.9)
        for p in self.model.parameters():
            p.grad = torch.zeros_like(p)

    def get_model(self):
        return self.model

    @staticmethod
    @rpc.functions.async_execution
    def update_and_fetch_model(ps_rref, grads):
        self = ps_rref.local_value()
        for p, g in zip(self.model.parameters(), grads, strict=True):
            if p.grad is None:
                p.grad = g
            else:
                p.grad += g
        with self.lock:
            self.curr_update_size += 1
            fut = self.future_model
            if self.curr_update_size >= self.batch_update_size:
                for p in self.model.parameters():
                    p.grad /= self.batch_update_size
                self.curr_update_size = 0
                self.optimizer.step()
                self.optimizer.zero_grad()
                fut.set_result(self.model)
                self.future_model = torch.futures.Future()
        return fut


class Trainer:
    def __init__(self, ps_rref):
        self.ps_rref = ps_rref
        self.loss_fn = nn.MSELoss()
        generator = torch.Generator().manual_seed(rpc.get_worker_info().id)
        self.batches = [(torch.randn(batch_size, in_features, generator=generator),
                         torch.randn(batch_size, out_features, generator=generator)) for _ in range(num_batches)]

    def train(self):
        name = rpc.get_worker_info().name
        m = self.ps_rref.rpc_sync().get_model()
        losses = []
        for inputs, labels in self.batches:
            loss = self.loss_fn(m(inputs), labels)
            loss.backward()
            losses.append(loss.item())
            m = rpc.rpc_sync(self.ps_rref.owner(), BatchUpdateParameterServer.update_and_fetch_model,
                             args=(self.ps_rref, [p.grad for p in m.cpu().parameters()]))
        print(f"{name} done, last loss {losses[-1]:.4f}")
        return losses


def run_trainer(ps_rref):
    return Trainer(ps_rref).train()


def run_ps(trainers):
    ps_rref = rpc.RRef(BatchUpdateParameterServer(len(trainers)))
    futs = [rpc.rpc_async(trainer, run_trainer, args=(ps_rref,)) for trainer in trainers]
    return {trainer: fut.wait() for trainer, fut in zip(trainers, futs, strict=True)}


def run_worker(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "29500"
    options = rpc.TensorPipeRpcBackendOptions(num_worker_threads=16, rpc_timeout=60)
    if rank != 0:
        rpc.init_rpc(f"trainer{rank}", rank=rank, world_size=world_size, rpc_backend_options=options)
        result = None
    else:
        rpc.init_rpc("ps", rank=rank, world_size=world_size, rpc_backend_options=options)
        result = run_ps([f"trainer{r}" for r in range(1, world_size)])
    rpc.shutdown()
    return result


if __name__ == "__main__":
    mp.spawn(run_worker, args=(3,), nprocs=3, join=True)
