"""pytorch/examples' DDP + RPC example (distributed/rpc/ddp_rpc/main.py) on
CPU with a shorter training loop: two trainers run DistributedDataParallel
over a Gloo group of their own, the master drives them by RPC, and an
EmbeddingBag lives on the parameter server as a RemoteModule.

What matters here is what the example does with stores: it opens its own.
``init_process_group(init_method="tcp://localhost:29500")`` for the trainers'
Gloo group and ``TensorPipeRpcBackendOptions(init_method="tcp://localhost:29501")``
for RPC. Rank 0 (trainer0) hosts both TCPStores, and, being a passive rank,
exits as soon as its own ``rpc.shutdown()`` returns, while its peers may still
be reading the RPC store in theirs."""

import random

import torch
import torch.distributed as dist
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp
import torch.optim as optim
from torch.distributed.nn import RemoteModule
from torch.distributed.optim import DistributedOptimizer
from torch.distributed.rpc import RRef, TensorPipeRpcBackendOptions
from torch.nn.parallel import DistributedDataParallel as DDP

NUM_EMBEDDINGS = 100
EMBEDDING_DIM = 16


class HybridModel(torch.nn.Module):
    def __init__(self, remote_emb_module):
        super().__init__()
        self.remote_emb_module = remote_emb_module
        self.fc = DDP(torch.nn.Linear(16, 8))

    def forward(self, indices, offsets):
        emb_lookup = self.remote_emb_module.forward(indices, offsets)
        return self.fc(emb_lookup)


def _run_trainer(remote_emb_module, rank, epochs, batches):
    model = HybridModel(remote_emb_module)
    model_parameter_rrefs = model.remote_emb_module.remote_parameters()
    for param in model.fc.parameters():
        model_parameter_rrefs.append(RRef(param))
    opt = DistributedOptimizer(optim.SGD, model_parameter_rrefs, lr=0.05)
    criterion = torch.nn.CrossEntropyLoss()
    rng = random.Random(rank)

    def get_next_batch():
        for _ in range(batches):
            num_indices = rng.randint(20, 50)
            indices = torch.LongTensor(num_indices).random_(0, NUM_EMBEDDINGS)
            offsets, start, batch_size = [], 0, 0
            while start < num_indices:
                offsets.append(start)
                start += rng.randint(1, 10)
                batch_size += 1
            yield indices, torch.LongTensor(offsets), torch.LongTensor(batch_size).random_(8)

    for _epoch in range(epochs):
        for indices, offsets, target in get_next_batch():
            with dist_autograd.context() as context_id:
                loss = criterion(model(indices, offsets), target)
                dist_autograd.backward(context_id, [loss])
                opt.step(context_id)
    return float(loss)


def run_worker(rank, world_size, epochs=2, batches=3):
    rpc_backend_options = TensorPipeRpcBackendOptions()
    rpc_backend_options.init_method = "tcp://localhost:29501"
    result = None
    if rank == 2:
        rpc.init_rpc("master", rank=rank, world_size=world_size, rpc_backend_options=rpc_backend_options)
        remote_emb_module = RemoteModule("ps", torch.nn.EmbeddingBag, args=(NUM_EMBEDDINGS, EMBEDDING_DIM),
                                         kwargs={"mode": "sum"})
        futs = [rpc.rpc_async(f"trainer{trainer_rank}", _run_trainer,
                              args=(remote_emb_module, trainer_rank, epochs, batches))
                for trainer_rank in [0, 1]]
        result = [fut.wait() for fut in futs]
    elif rank <= 1:
        dist.init_process_group(backend="gloo", rank=rank, world_size=2, init_method="tcp://localhost:29500")
        rpc.init_rpc(f"trainer{rank}", rank=rank, world_size=world_size, rpc_backend_options=rpc_backend_options)
    else:
        rpc.init_rpc("ps", rank=rank, world_size=world_size, rpc_backend_options=rpc_backend_options)
    # block until all rpcs finish
    rpc.shutdown()
    return result


if __name__ == "__main__":
    mp.spawn(run_worker, args=(4,), nprocs=4, join=True)
