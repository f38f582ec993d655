"""The same training in one process: per step, every trainer's bags
through the same embedding and Linear, replayed from the run's own
parameters before the step (see ``rpc_harness/scenarios/_collective.py``).

What the distributed run computes, written out: each trainer's embedding
gradient is its own (the RemoteModule is not under DDP; each trainer's
DistributedOptimizer steps the server's embedding with it), so the server
applies every trainer's: ``E' = E - lr * sum_t g_t``. The Linear's
gradient is DDP's average over the trainers, and each trainer steps its
own replica with it: ``fc' = fc - lr * mean_t g_t``.
"""

from __future__ import annotations

import torch

from .._collective import U32, reassociation_bound
from .._threads import threads
from .config import Config, trainer_names
from .model import build_embedding, build_fc, loss_fn, step_bags, trainer_bags


def fan_in(config: Config) -> int:
    """The dot products one bag's gradient term goes through, forward and
    backward: the bag's sum, the Linear, the softmax."""
    return 2 * (config.bag_size + config.embedding_dim + config.classes)


def forward(embedding: torch.nn.Module, fc: torch.nn.Module, bags: tuple) -> torch.Tensor:
    indices, offsets, targets = bags
    return loss_fn(fc(embedding(indices, offsets)), targets)


def baseline(config: Config, world_size: int, seed: int, before: list[dict[str, torch.Tensor] | None]) -> dict:
    """Per step (one for each entry of ``before``: the parameters the run
    began it with, None for the seeded initial ones): per trainer, the
    gradients it should see; the parameters after the step; the bounds."""
    trainers = trainer_names(world_size)
    embedding, fc = build_embedding(config, seed), build_fc(config, seed)
    modules = {"embedding": embedding, "fc": fc}
    init = _named(modules)
    steps = []
    with threads(1):
        for step, start in enumerate(before):
            with torch.no_grad():
                for name, p in _parameters(modules).items():
                    p.copy_((start or init)[name])
            everything = step_bags(config, seed, len(trainers), step)
            per_trainer, magnitudes, losses = {}, {}, {}
            for index, trainer in enumerate(trainers):
                mine = trainer_bags(config, everything, index)
                loss = forward(embedding, fc, mine)
                grads = torch.autograd.grad(loss, list(_parameters(modules).values()))
                per_trainer[trainer] = dict(zip(_parameters(modules), (g.detach() for g in grads), strict=True))
                magnitudes[trainer] = _magnitude(modules, mine, 1.0 / config.bags_per_trainer)
                losses[trainer] = loss.item()
            fc_grads = {name: torch.stack([per_trainer[t][name] for t in trainers]).mean(0)
                        for name in per_trainer[trainers[0]] if name.startswith("fc.")}
            expected = {t: {**{n: g for n, g in per_trainer[t].items() if n.startswith("embedding.")}, **fc_grads}
                        for t in trainers}
            # DDP's reduction: every trainer's bags, each 1/(trainers * bags) of the mean.
            bags = len(trainers) * config.bags_per_trainer
            fc_bound = {name: reassociation_bound(sum(magnitudes[t][name] for t in trainers) / len(trainers),
                                                  bags + len(trainers) + 4, fan_in(config))
                        for name in fc_grads}
            grad_bounds = {t: {**{n: reassociation_bound(m, config.bags_per_trainer + 4, fan_in(config))
                                  for n, m in magnitudes[t].items() if n.startswith("embedding.")}, **fc_bound}
                           for t in trainers}
            # The updates, as the optimizers make them (the server's in whichever order the trainers come).
            params = {}
            with torch.no_grad():
                for name, p in _parameters(modules).items():
                    if name.startswith("embedding."):
                        value = p.detach().clone()
                        for t in trainers:
                            value.add_(per_trainer[t][name], alpha=-config.lr)
                    else:
                        value = p.detach() - config.lr * fc_grads[name]
                    params[name] = value
            param_bounds = {}
            for name, value in params.items():
                if name.startswith("embedding."):
                    moved = sum(config.lr * grad_bounds[t][name] for t in trainers)
                    size = sum(config.lr * per_trainer[t][name].double().abs() for t in trainers)
                    # One rounding of each trainer's update on each side, at the size of the value then.
                    param_bounds[name] = moved + 2 * len(trainers) * U32 * (value.double().abs() + size)
                else:
                    param_bounds[name] = config.lr * fc_bound[name] + 2 * U32 * (
                        value.double().abs() + config.lr * fc_grads[name].double().abs())
            steps.append({"grads": expected, "grad_bounds": grad_bounds, "params": params,
                          "param_bounds": param_bounds, "losses": losses})
    return {"init": init, "steps": steps}


def _parameters(modules: dict[str, torch.nn.Module]) -> dict[str, torch.nn.Parameter]:
    return {f"{prefix}.{name}": p for prefix, module in modules.items() for name, p in module.named_parameters()}


def _named(modules: dict[str, torch.nn.Module]) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in _parameters(modules).items()}


def _magnitude(modules: dict[str, torch.nn.Module], bags: tuple, scale: float) -> dict[str, torch.Tensor]:
    """``sum_i |d(scale * loss_i)/d(theta)|`` over the bags, one bag at a time."""
    indices, offsets, targets = bags
    params = _parameters(modules)
    total = {name: torch.zeros(p.shape, dtype=torch.float64) for name, p in params.items()}
    ends = [*offsets.tolist()[1:], indices.shape[0]]
    for i, (begin, end) in enumerate(zip(offsets.tolist(), ends, strict=True)):
        one = (indices[begin:end], torch.zeros(1, dtype=torch.long), targets[i:i + 1])
        grads = torch.autograd.grad(scale * forward(modules["embedding"], modules["fc"], one), list(params.values()))
        for name, g in zip(params, grads, strict=True):
            total[name] += g.double().abs()
    return total
