"""The rank entry, as the tutorial's ``run_worker``: the master creates
the RemoteModule on the parameter server and drives the trainers by RPC;
the trainers train their HybridModel with DDP, distributed autograd and a
DistributedOptimizer; the parameter server serves the embedding."""

from __future__ import annotations

import time
import warnings
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
from torch import nn, optim
from torch.distributed.nn import RemoteModule
from torch.nn.parallel import DistributedDataParallel as DDP

import rpc_harness

from .._collective import process_group
from .._threads import threads
from .config import MASTER, PS, TRAINER_GROUP, Config, trainer_names
from .model import SeededEmbeddingBag, build_fc, embedding_seed, loss_fn, step_bags, trainer_bags

with warnings.catch_warnings():
    # Importing it scripts torch's functional optimizers, each a deprecation
    # warning about TorchScript that no user of this module can act on.
    warnings.simplefilter("ignore", DeprecationWarning)
    from torch.distributed.optim import DistributedOptimizer

rpc_harness.preload(__name__)

# The trainers' DDP group, made in every rank (new_group is collective over
# the default group) and read by the trainer's RPC handler.
_TRAINERS: dict[str, Any] = {}


class ServedEmbeddingBag(SeededEmbeddingBag):
    """The embedding as the parameter server serves it: with a failpoint in its forward."""

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        rpc_harness.failpoint("ps.forward")
        return super().forward(*args, **kwargs)


def entry(ctx: Any, config: Config) -> dict[str, Any] | None:
    """Every rank is in the world's process group (the scenario's world
    option; made here only where a caller's options left it out) and makes
    the trainers' subgroup from it; the master then drives the training and
    returns every trainer's record."""
    process_group(ctx)
    trainers = trainer_names(ctx.world_size)
    _TRAINERS["group"] = dist.new_group([ctx.rank_of(name) for name in trainers], group_desc=TRAINER_GROUP)
    dist.barrier()  # every rank holds the group before the master's calls can arrive
    if ctx.name != MASTER:
        return None  # trainers and the server serve RPCs until every entry has returned
    remote_emb = RemoteModule(f"{PS}/cpu", ServedEmbeddingBag,
                              args=(config.num_embeddings, config.embedding_dim, embedding_seed(ctx.world_seed)))
    futures = [rpc.rpc_async(name, run_trainer, args=(remote_emb, config, index, ctx.world_seed))
               for index, name in enumerate(trainers)]
    return {"seed": ctx.world_seed, "trainers": dict(zip(trainers, first_error_first(futures), strict=True))}


def first_error_first(futures: list[Any], poll: float = 0.01) -> list[Any]:
    """The futures' values, raising the first error as soon as it comes. A
    trainer that raised leaves the others blocked in DDP's all-reduce,
    waiting for it (its process lives on): waiting on trainer0 first, the
    master sat out the 60 s RPC timeout before it saw trainer1's error
    (found by the property test), and ``torch.futures.wait_all``, documented
    to exit early on an error, waited for them all."""
    while not all(future.done() for future in futures):
        for future in futures:
            if future.done():
                future.wait()  # raises its error, if it has one
        time.sleep(poll)
    return [future.wait() for future in futures]


class HybridModel(nn.Module):
    """The tutorial's model: the remote embedding's lookup, then a local
    Linear under DDP over the trainers' group."""

    def __init__(self, remote_emb_module: RemoteModule, fc: nn.Module) -> None:
        super().__init__()
        self.remote_emb_module = remote_emb_module
        self.fc = fc

    def forward(self, indices: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        emb_lookup = self.remote_emb_module.forward(indices, offsets)
        return self.fc(emb_lookup)


def embedding_gradients(module_rref: rpc.RRef, context_id: int) -> dict[str, torch.Tensor]:
    """On the parameter server: the embedding's gradients in a trainer's context."""
    module = module_rref.local_value()
    grads = dist_autograd.get_gradients(context_id)
    return {f"embedding.{name}": grads[p].clone() for name, p in module.named_parameters() if p in grads}


def embedding_parameters(module_rref: rpc.RRef) -> dict[str, torch.Tensor]:
    """On the parameter server: the embedding's parameters now."""
    return {f"embedding.{name}": p.detach().clone() for name, p in module_rref.local_value().named_parameters()}


def run_trainer(remote_emb: RemoteModule, config: Config, index: int, world_seed: int) -> dict[str, Any]:
    """A trainer's training, run on it by the master's RPC (the tutorial's ``_run_trainer``)."""
    ctx = rpc_harness.current_context()
    group = _TRAINERS["group"]
    trainers = dist.get_world_size(group)
    last = index == trainers - 1
    with threads(1):
        fc = build_fc(config, world_seed)
        model = HybridModel(remote_emb, DDP(fc, process_group=group))
        rrefs = remote_emb.remote_parameters() + [rpc.RRef(p) for p in fc.parameters()]
        lr = config.lr * (2 if config.plant == "rank_lr" and last else 1)
        opt = DistributedOptimizer(optim.SGD, rrefs, lr=lr)
        module_rref = remote_emb.get_module_rref()
        shift = 1 if config.plant == "shifted_shard" and last else 0
        steps = []
        for step in range(config.steps):
            ctx.failpoint("trainer.step")
            indices, offsets, targets = trainer_bags(config, step_bags(config, world_seed, trainers, step), index,
                                                     shift)
            with dist_autograd.context() as context_id:
                loss = loss_fn(model(indices, offsets), targets)
                if config.plant == "loss_scale":
                    loss = loss / trainers
                dist_autograd.backward(context_id, [loss])
                local = dist_autograd.get_gradients(context_id)
                grads = {f"fc.{name}": local[p].clone() for name, p in fc.named_parameters() if p in local}
                grads.update(rpc.rpc_sync(PS, embedding_gradients, args=(module_rref, context_id)))
                ctx.failpoint("optimizer.step")
                opt.step(context_id)
            # Every trainer's updates applied before any reads the embedding
            # again: the tutorial races here (a trainer's next lookup may come
            # before or after another's optimizer step on the server).
            dist.barrier(group=group)
            params = {f"fc.{name}": p.detach().clone() for name, p in fc.named_parameters()}
            params.update(rpc.rpc_sync(PS, embedding_parameters, args=(module_rref,)))
            steps.append({"grads": grads, "params": params, "loss": loss.item()})
            ctx.progress(step + 1, config.steps, "steps", loss=loss.item())
    # Which ranks each group holds, as torch sees them: the test of the layout reads it.
    groups = {"default": dist.get_process_group_ranks(dist.group.WORLD),
              "ddp": dist.get_process_group_ranks(model.fc.process_group)}
    return {"index": index, "steps": steps, "groups": groups}
