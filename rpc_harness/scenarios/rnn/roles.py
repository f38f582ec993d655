"""The rank entry: trainers train; parameter servers serve their RPCs."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch.distributed.autograd as dist_autograd
from torch import nn, optim

import rpc_harness

from .._device import here, prepare
from .._rpc import is_dead, one_line
from .._threads import threads
from .config import Config, Layout, layout
from .data import batches
from .model import RNNModel, init_hidden, model_seed

with warnings.catch_warnings():
    # Importing it scripts torch's functional optimizers, each a deprecation
    # warning about TorchScript that no user of this module can act on.
    warnings.simplefilter("ignore", DeprecationWarning)
    from torch.distributed.optim import DistributedOptimizer

rpc_harness.preload(__name__)


def entry(ctx: Any, config: Config) -> dict[str, Any] | None:
    """Rank entry: trainers train and return their records; parameter servers
    return at once and serve RPCs until every rank's entry has returned."""
    plan = layout(ctx.world_size)
    prepare(here())  # servers too: their modules compute on their device
    if ctx.name not in plan.trainers:
        return None
    try:
        with threads(1):
            return _train(ctx, config, plan)
    except Exception as error:
        dead = dead_server(plan.servers)
        if dead is None:
            raise
        ctx.event("ps_lost", server=dead, error=one_line(error))
        raise RuntimeError(f"parameter server {dead!r} died: {one_line(error)}") from error


def dead_server(servers: Sequence[str]) -> str | None:
    """The first parameter server that is dead by the shared liveness rule.

    A failed RPC does not say reliably which peer is gone (a distributed
    backward or optimizer step talks to all of them), so ask each.
    """
    return next((server for server in servers if is_dead(server)), None)


def _train(ctx: Any, config: Config, plan: Layout) -> dict[str, Any]:
    index = plan.trainers.index(ctx.name)
    data = batches(config, ctx.world_seed, index, len(plan.trainers))
    model = RNNModel(
        config,
        plan.embedding,
        plan.decoder,
        model_seed(ctx.world_seed, ctx.name),
        perturb=config.perturb,
        device=here(),
    )
    opt = DistributedOptimizer(optim.SGD, model.parameter_rrefs(), lr=config.lr)
    ctx.event("model_ready")
    criterion = nn.CrossEntropyLoss()
    steps = []
    total = config.epochs * len(data)
    ctx.progress(0, total, "steps")
    for epoch in range(config.epochs):
        hidden = init_hidden(config, here())
        for data_batch, target in data:
            ctx.failpoint("trainer.step")
            with dist_autograd.context() as context_id:
                # Truncated BPTT: carry the state, not its history.
                hidden = (hidden[0].detach(), hidden[1].detach())
                output, hidden = model(data_batch, hidden)
                loss = criterion(output.view(-1, config.vocab_size), target.to(here()))
                dist_autograd.backward(context_id, [loss])
                grads = model.gradients(context_id)
                ctx.failpoint("optimizer.step")
                opt.step(context_id)
            steps.append(
                {
                    "epoch": epoch,
                    "loss": loss.detach().to("cpu", copy=True),
                    "grads": grads,
                    "params": model.parameters_by_owner(),
                }
            )
            # "step loss": the run's metric, "loss" in its summary, is the last epoch's mean.
            ctx.progress(len(steps), total, "steps", step_loss=float(loss))
        ctx.event(
            "epoch",
            epoch=epoch,
            loss=sum(float(s["loss"]) for s in steps[-len(data) :]) / len(data),
        )
    # Records: each step {"epoch", "loss", "grads", "params"}.
    return {"trainer": ctx.name, "steps": steps, "device": str(here())}


