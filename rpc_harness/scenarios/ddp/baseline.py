"""The same training in one process: the whole global batch of every step,
replayed from the run's own parameters before it (see
``rpc_harness/scenarios/_collective.py`` for why), with each tensor's
rounding bound."""

from __future__ import annotations

from typing import Any

import torch
from torch import optim

from .._collective import U32, per_sample_magnitude, reassociation_bound
from .._threads import threads
from .config import Config
from .model import FAN_IN, build_model, global_batch, loss_fn


def baseline(config: Config, world_size: int, seed: int, before: list[dict[str, torch.Tensor]]) -> dict[str, Any]:
    """Per step (one for each entry of ``before``, the parameters the run
    started that step with): the gradients of the global batch's loss, the
    parameters after one SGD step, the loss, and the bounds of both.
    Also ``init``: the seeded initial parameters."""
    model = build_model(config, seed)
    init = {name: p.detach().clone() for name, p in model.named_parameters()}
    rows = world_size * config.accumulate * config.batch_per_rank
    # The sums that differ between run and baseline: the rows of the batch,
    # the micro-batches and ranks adding their partial means, and the divisions.
    terms = rows + config.accumulate + world_size + 4
    steps = []
    with threads(1):  # as in the ranks
        for step, params in enumerate(before):
            with torch.no_grad():
                for name, p in model.named_parameters():
                    p.copy_(params[name])
            x, y = global_batch(config, seed, world_size, step)
            optimizer = optim.SGD(model.parameters(), lr=config.lr)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            grads = {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}
            magnitude = per_sample_magnitude(
                model, loss_fn, x, y, 1.0 / rows)
            optimizer.step()
            after = {name: p.detach().clone() for name, p in model.named_parameters()}
            grad_bounds = {name: reassociation_bound(magnitude[name], terms, FAN_IN) for name in grads}
            # p - lr*g: lr times the gradient's bound, and each side's two roundings (the product, the sum).
            param_bounds = {
                name: config.lr * grad_bounds.get(name, torch.zeros(())) + 2 * U32 * (
                    after[name].double().abs() + config.lr * grads.get(name, torch.zeros(())).double().abs())
                for name in after}
            steps.append({"grads": grads, "params": after, "loss": loss.item(), "grad_bounds": grad_bounds,
                          "param_bounds": param_bounds})
    return {"init": init, "steps": steps}
