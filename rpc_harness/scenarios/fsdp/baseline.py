"""The same training in one process: the whole global batch of every step,
replayed from the run's own parameters and AdamW state before it, with
each tensor's rounding bound.

Two checks a step. The gradients of the global batch against the run's
(the ranks' shards put together), within the bound of ``rpc_harness/scenarios/_collective.py``.
Then AdamW's step taken from the run's own gradients, against the run's
state and parameters after it: what the optimizer made of the gradients
it was given, held to rounding alone. Feeding the baseline's gradients
instead would carry their rounding through AdamW's normalisation, which
turns a gradient within rounding of zero into a step of either sign and
size ``lr``: a bound wide enough for that cannot see an optimizer off by a
factor of two. Together the two checks pin every step.

AdamW's bound, first order in the unit roundoff ``u``, from the gradient's
bound ``Bg`` (0 here: the run's own gradients are fed), element by element,
with ``t`` the parameter's own AdamW step (the steps it had a gradient in),
``m``, ``v`` the state before it and ``m'``, ``v'`` after, and every
elementwise operation rounding once (``u`` of its result; four of them
allowed per line)::

    Bm     = (1 - b1) Bg + 4u (b1 |m| + (1 - b1) |g|)
    Bv     = (1 - b2) (2|g| + Bg) Bg + 4u (b2 v + (1 - b2) g^2)
    Bsqrt  = min(Bv / (2 sqrt(v')), sqrt(Bv))         (sqrt is 1/2-Hoelder near 0)
    denom  = sqrt(v') / sqrt(1 - b2^t) + eps,  Bd = Bsqrt / sqrt(1 - b2^t) + 4u denom
    upd    = lr / (1 - b1^t) * m' / denom
    Bupd   = lr / (1 - b1^t) * (Bm / denom + |m'| Bd / (denom * max(denom - Bd, eps))) + 4u |upd|
    Bp     = Bupd + 4u (|p| + |upd|)                   (p (1 - lr wd) - upd)
"""

from __future__ import annotations

from typing import Any

import torch

from .._collective import U32, per_sample_magnitude, reassociation_bound
from .._threads import threads
from .config import Config
from .model import build_model, fan_in, global_batch, loss_fn

BETAS = (0.9, 0.999)  # AdamW's defaults, which the ranks use
EPS = 1e-8
MOMENTS = ("exp_avg", "exp_avg_sq")  # AdamW's state of a parameter, as the ranks record it


def baseline(config: Config, world_size: int, seed: int, before: list[dict[str, Any]]) -> dict[str, Any]:
    """Per step (one for each entry of ``before``: the parameters and AdamW
    state the run began that step with, and the gradients it reduced): the
    gradients of the global batch's loss, the AdamW state and parameters
    after a step on the run's gradients, the loss, and the bounds of each.
    Also ``init``: the seeded initial parameters."""
    model = build_model(config, seed)
    init = {name: p.detach().clone() for name, p in model.named_parameters()}
    sequences = world_size * config.batch_per_rank
    terms = sequences + world_size + 4  # the sequences, the ranks' partial sums, the divisions
    named = dict(model.named_parameters())
    steps = []
    with threads(1):  # as in the ranks
        for step, start in enumerate(before):
            optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
            with torch.no_grad():
                for name, p in named.items():
                    p.copy_(start["params"][name])
                    if f"{name}.exp_avg" in start["state"]:
                        # AdamW's count is the parameter's own: the steps the run reduced a gradient
                        # for it in (AdamW skips a parameter without one), not the step's index.
                        taken = sum(name in earlier["grads"] for earlier in before[:step])
                        optimizer.state[p] = {"step": torch.tensor(float(taken)),
                                              "exp_avg": start["state"][f"{name}.exp_avg"].clone(),
                                              "exp_avg_sq": start["state"][f"{name}.exp_avg_sq"].clone()}
            # optimizer.state.get, never optimizer.state[p]: it is a defaultdict, and a lookup
            # would leave an empty state behind for a parameter AdamW never stepped.
            previous = {name: (p.detach().clone(), *(optimizer.state.get(p, {}).get(key) for key in MOMENTS))
                        for name, p in named.items()}
            x, y = global_batch(config, seed, world_size, step)
            loss = loss_fn(model(x), y)
            loss.backward()
            grads = {name: p.grad.detach().clone() for name, p in named.items() if p.grad is not None}
            magnitude = per_sample_magnitude(model, loss_fn, x, y, 1.0 / sequences)
            fed = start["grads"]
            with torch.no_grad():
                for name, p in named.items():
                    p.grad = fed[name].clone() if name in fed else None
            optimizer.step()
            params = {name: p.detach().clone() for name, p in named.items()}
            # The state AdamW holds: none for a parameter the run never reduced a gradient for, so
            # that the judge names state on one side only as a difference.
            state = {f"{name}.{key}": optimizer.state[p][key].detach().clone()
                     for name, p in named.items() for key in MOMENTS if key in optimizer.state.get(p, {})}
            grad_bounds = {name: reassociation_bound(magnitude[name], terms, fan_in(config)) for name in grads}
            param_bounds, state_bounds = {}, {}
            for name in params:
                p_before, m_before, v_before = previous[name]
                if name not in fed:  # the run reduced no gradient for it: AdamW skipped it, and must have
                    # left it and any state it has exactly as they were.
                    param_bounds[name] = torch.zeros(params[name].shape, dtype=torch.float64)
                    for key in (f"{name}.{moment}" for moment in MOMENTS if f"{name}.{moment}" in state):
                        state_bounds[key] = torch.zeros(state[key].shape, dtype=torch.float64)
                    continue
                t = int(optimizer.state[named[name]]["step"])  # the count AdamW corrected its bias by
                bounds = adamw_bounds(config, t, fed[name], torch.zeros(()), p_before, m_before, v_before,
                                      state[f"{name}.exp_avg"], state[f"{name}.exp_avg_sq"])
                param_bounds[name] = bounds["param"]
                state_bounds[f"{name}.exp_avg"], state_bounds[f"{name}.exp_avg_sq"] = bounds["m"], bounds["v"]
            optimizer.zero_grad(set_to_none=True)
            steps.append({"grads": grads, "params": params, "state": state, "loss": loss.item(),
                          "grad_bounds": grad_bounds, "param_bounds": param_bounds, "state_bounds": state_bounds})
    return {"init": init, "steps": steps}


def adamw_bounds(config: Config, t: int, g: torch.Tensor, bg: torch.Tensor, p: torch.Tensor,
                 m: torch.Tensor | None, v: torch.Tensor | None, m_after: torch.Tensor,
                 v_after: torch.Tensor) -> dict[str, torch.Tensor]:
    """The bounds of one AdamW step (the module docstring derives them)."""
    b1, b2 = BETAS
    u, lr = U32, config.lr
    g, bg, p = g.double(), bg.double(), p.double()
    m = torch.zeros_like(g) if m is None else m.double()
    v = torch.zeros_like(g) if v is None else v.double()
    m_after, v_after = m_after.double(), v_after.double()
    bm = (1 - b1) * bg + 4 * u * (b1 * m.abs() + (1 - b1) * g.abs())
    bv = (1 - b2) * (2 * g.abs() + bg) * bg + 4 * u * (b2 * v + (1 - b2) * g * g)
    root = v_after.sqrt()
    bsqrt = torch.minimum(torch.where(root > 0, bv / (2 * root), torch.full_like(root, float("inf"))), bv.sqrt())
    correction1, correction2 = 1 - b1**t, (1 - b2**t) ** 0.5
    denom = root / correction2 + EPS
    bd = bsqrt / correction2 + 4 * u * denom
    update = lr / correction1 * m_after / denom
    bupd = (lr / correction1 * (bm / denom + m_after.abs() * bd / (denom * (denom - bd).clamp_min(EPS)))
            + 4 * u * update.abs())
    return {"m": bm, "v": bv, "param": bupd + 4 * u * (p.abs() + update.abs())}
