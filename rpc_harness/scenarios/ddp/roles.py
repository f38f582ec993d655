"""The rank entry: the DDP tutorial's training loop, recorded step by step,
on the rank's device (``--device cuda``: the model on the rank's GPU, its
shard of each batch moved there, gloo all-reducing CUDA tensors; the
records copied to the CPU)."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import optim
from torch.nn.parallel import DistributedDataParallel as DDP

import rpc_harness

from .._collective import gradients, parameters, process_group
from .._device import here, prepare
from .._threads import threads
from .config import Config
from .model import build_model, global_batch, loss_fn, rank_rows

rpc_harness.preload(__name__)


def entry(ctx: Any, config: Config) -> dict[str, Any]:
    """Train the tutorial's ToyModel with DDP; return the initial parameters
    and every step's gradients, parameters after it and loss."""
    process_group(ctx)
    with threads(1):
        return train(ctx, config)


def train(ctx: Any, config: Config) -> dict[str, Any]:
    rank, size = dist.get_rank(), dist.get_world_size()
    last = rank == size - 1
    device = here()
    prepare(device)
    model = build_model(config, ctx.world_seed).to(device)
    # device_ids: the one device of a single-device module on a GPU, None on the CPU (DDP's rule).
    ddp_model = DDP(model, device_ids=[device] if device.type == "cuda" else None,
                    bucket_cap_mb=config.bucket_cap_mb,
                    gradient_as_bucket_view=config.gradient_as_bucket_view,
                    static_graph=config.static_graph, find_unused_parameters=config.find_unused_parameters)
    if config.plant == "skip_bucket":
        ddp_model.register_comm_hook(None, _skip_last_bucket)
    lr = config.lr * (2 if config.plant == "rank_lr" and last else 1)
    optimizer = optim.SGD(ddp_model.parameters(), lr=lr)
    record: dict[str, Any] = {"rank": rank, "seed": ctx.world_seed, "device": str(device),
                              "init": parameters(model), "steps": []}
    ctx.progress(0, config.steps, "steps")
    for step in range(config.steps):
        ctx.failpoint("ddp.step")
        x, y = global_batch(config, ctx.world_seed, size, step)
        optimizer.zero_grad(set_to_none=True)
        losses = []
        for micro in range(config.accumulate):
            rows = rank_rows(config, size, rank, micro)
            if config.plant == "shifted_shard" and last:
                # One sample late; the one past the end wraps to the first.
                rows = (torch.arange(rows.start, rows.stop) + 1) % x.shape[0]
            # The mean over all micro-batches: each one's mean, divided by their number.
            loss = loss_fn(ddp_model(x[rows].to(device)), y[rows].to(device)) / config.accumulate
            if config.plant == "loss_scale":
                loss = loss / size
            if micro < config.accumulate - 1:
                with ddp_model.no_sync():
                    loss.backward()
            else:
                loss.backward()
            losses.append(float(loss) * config.accumulate)
        ctx.failpoint("optimizer.step")
        optimizer.step()
        record["steps"].append({"grads": gradients(model), "params": parameters(model),
                                "loss": sum(losses) / len(losses)})
        ctx.progress(step + 1, config.steps, "steps", loss=record["steps"][-1]["loss"])
    return record


def _skip_last_bucket(state, bucket):  # noqa: ANN001, ANN202
    """DDP's default all-reduce, except for the last bucket (a planted bug).
    Unannotated: DDP checks a hook's annotations against dist.GradBucket,
    and this module's (``from __future__ import annotations``) are strings."""
    tensor = bucket.buffer()
    if bucket.is_last():
        done = torch.futures.Future()
        done.set_result(tensor)
        return done
    work = dist.all_reduce(tensor.div_(dist.get_world_size()), async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])
