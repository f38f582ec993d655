"""The rank entry: the transformer under fully_shard, trained with AdamW,
its shards recorded step by step, on the rank's device (``--device cuda``:
a device mesh of that kind over the world's gloo group, so fully_shard
moves the shards to the rank's GPU; the records copied to the CPU)."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

import rpc_harness

from .._collective import process_group
from .._device import here, prepare
from .._threads import threads
from .config import Config
from .model import build_model, global_batch, loss_fn, rank_rows

rpc_harness.preload(__name__)


def entry(ctx: Any, config: Config) -> dict[str, Any]:
    """Train the transformer with FSDP2; return the initial parameters and,
    every step, this rank's shards of the gradients, parameters and AdamW
    state, and its loss."""
    process_group(ctx)
    with threads(1):
        return train(ctx, config)


def mesh_on(device: torch.device) -> DeviceMesh:
    """The world's ranks as one mesh of ``device``'s kind. Named, not left to
    fully_shard: its default mesh is of the machine's accelerator's kind,
    which on a machine with a GPU would move a CPU world's shards onto it."""
    return init_device_mesh(device.type, (dist.get_world_size(),))


def shard(model: torch.nn.Module, config: Config, mesh: DeviceMesh) -> None:
    """fully_shard on every block, then on the root (the tutorial's way)."""
    policy = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
              if config.mixed_precision else MixedPrecisionPolicy())
    for block in model.blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=config.reshard(), mp_policy=policy)
    fully_shard(model, mesh=mesh, reshard_after_forward=config.reshard(), mp_policy=policy)


def local(tensors: dict[str, Any]) -> dict[str, torch.Tensor]:
    """This rank's shard of every (DTensor) tensor, on the CPU. The judge
    puts the ranks' shards together: gathering here would cost a collective
    per tensor and step, ten times the training's own on a busy machine."""
    return {name: (t.to_local() if hasattr(t, "to_local") else t).detach().to("cpu", copy=True)
            for name, t in tensors.items()}


def train(ctx: Any, config: Config) -> dict[str, Any]:
    rank, size = dist.get_rank(), dist.get_world_size()
    last = rank == size - 1
    model = build_model(config, ctx.world_seed)
    init = {name: p.detach().clone() for name, p in model.named_parameters()}
    model.checkpointing = config.activation_checkpointing
    device = here()
    prepare(device)
    shard(model, config, mesh_on(device))
    lr = config.lr * (2 if config.plant == "rank_lr" and last else 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=config.weight_decay)
    named = dict(model.named_parameters())
    record: dict[str, Any] = {"rank": rank, "seed": ctx.world_seed, "device": str(device), "init": init,
                              "steps": []}
    ctx.progress(0, config.steps, "steps")
    for step in range(config.steps):
        ctx.failpoint("fsdp.step")
        x, y = global_batch(config, ctx.world_seed, size, step)
        rows: Any = rank_rows(config, rank)
        if config.plant == "shifted_shard" and last:
            rows = (torch.arange(rows.start, rows.stop) + 1) % x.shape[0]  # one sequence late, wrapping
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x[rows].to(device)), y[rows].to(device))
        if config.plant == "loss_scale":
            loss = loss / size
        loss.backward()
        grads = local({name: p.grad for name, p in named.items() if p.grad is not None})
        ctx.failpoint("optimizer.step")
        optimizer.step()
        state = {}
        for name, p in named.items():
            for key in ("exp_avg", "exp_avg_sq"):
                if key in optimizer.state[p]:
                    state[f"{name}.{key}"] = optimizer.state[p][key]
        params, state = local(named), local(state)
        record["steps"].append({"grads": grads, "params": params, "state": state, "loss": loss.item()})
        ctx.progress(step + 1, config.steps, "steps", loss=loss.item())
    return record
