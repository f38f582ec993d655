"""What the collective scenarios (``ddp``, ``fsdp``, ``ddp_rpc``) share: the
process group, the judge's rounding bound, and comparison against it.

The bound. A data-parallel run and its one-process baseline compute the
same sums in another order and nothing else: the baseline adds the N
per-sample terms of a gradient in one pass; a rank adds its own share,
divides, and the ranks' partial means are added by the collective and
divided again. Recursive summation of n float32 terms errs by at most
``gamma(n-1) * sum |x_i|`` (Higham, *Accuracy and Stability of Numerical
Algorithms*, Thm 4.1; ``gamma(n) = n*u/(1-n*u)``, ``u = 2**-24``), whatever
the order, so two orders differ by at most twice that. Each term is itself
a product of dot products over the layers' fan-ins (the forward and the
backward of one sample), computed by kernels that block a batch of 8 and a
batch of 32 differently: another ``F = sum of fan-ins`` roundings of each
term's magnitude. Hence, for every element of a gradient tensor::

    |g_run - g_base| <= 2 * (N + F) * u * M  +  atol + rtol * |g_base|

where ``M`` is the largest, over the tensor's elements, of ``sum_i |c_i|``,
the sum of an element's absolute per-sample contributions (computed by
the baseline, one sample's gradient at a time). The largest over the
tensor, not each element's own: a term that is itself a cancellation
carries the rounding of the layer's magnitudes, not of its value. Measured
on the fsdp scenario at 3 ranks: the gradient of an attention layer's key
bias is exactly zero (softmax ignores a shift of the keys), each per-sample
term 1e-14, and the run's 6.7e-9, the rounding of the bias's other
(query, value) elements' scale; an embedding row of a rare token likewise.
``M`` and not ``|g|`` is the scale: a gradient element that cancels to near
zero carries the rounding of its terms. The config's ``atol`` and ``rtol``
(0 by default) are slack on top of the derived bound, not instead of it.

A parameter after an SGD step, ``p - lr * g``, differs by ``lr`` times its
gradient's bound plus one rounding of the subtraction on each side
(``2 * u * |p|``): the baseline replays every step from the run's own
parameters before it (as the parameter-server baseline replays its
versions), so a step's check is the rounding of that step alone, not of
the steps before it; the chain of steps is checked link by link, and the
first parameters against the seeded initial ones bit for bit.

On CUDA (``--device cuda``: every rank's model on its GPU, gloo between
them, N ranks sharing one GPU where there is one) the run is held to the
GPU tolerances of ``_device.py`` instead, as the other scenarios' GPU runs
are: each tensor as a whole, and for parameters and optimizer state each
step's change as a whole (:func:`compare_run`). The initial parameters,
built on the CPU from the seed, are still compared bit for bit.

What the bound leaves out: a ReLU whose input lies within rounding of zero
takes the other branch in one run (one term of a sum moves; see
``_device.py``). At these sizes (a few hundred pre-activations a step,
each O(1), rounding 1e-7) that is about one step in 10**4 and would show
as a mismatch of one element, by far more than rounding.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from rpc_harness.gradcheck import Mismatch, max_differences
from rpc_harness.gradcheck import compare as compare_tensors
from rpc_harness.scenario import Outcome

from ._device import tolerances

# float32's unit roundoff.
U32 = 2.0**-24


def process_group(ctx: Any) -> None:
    """The world's default process group (gloo), made from the world's
    folder when the world did not make one itself."""
    import torch.distributed as dist

    if dist.is_initialized():
        return
    dist.init_process_group("gloo", init_method=f"file://{ctx.workdir}/process_group", rank=ctx.rank,
                            world_size=ctx.world_size)


def reassociation_bound(magnitude: torch.Tensor, terms: int, fan_in: int, unit: float = U32) -> torch.Tensor:
    """The largest difference two summation orders of one gradient can make,
    element by element (the module docstring derives it): ``2 * (terms +
    fan_in) * unit`` times the tensor's largest ``magnitude``."""
    scale = float(magnitude.double().max()) if magnitude.numel() else 0.0
    return torch.full(magnitude.shape, 2.0 * (terms + fan_in) * unit * scale, dtype=torch.float64)


def per_sample_magnitude(model: torch.nn.Module, sample_loss: Callable[..., torch.Tensor],
                         inputs: torch.Tensor, targets: torch.Tensor, scale: float) -> dict[str, torch.Tensor]:
    """``sum_i |d(scale * loss_i)/d(theta)|`` for every parameter: the
    magnitude ``M`` of the bound, one sample's gradient at a time
    (``sample_loss(output, target)`` is the loss of a batch of one sample;
    ``scale`` its weight in the batch's loss, e.g. ``1/N`` for a mean).
    A loop, not ``torch.func.vmap``: vmap's first call costs ~4 s of set-up,
    the loop milliseconds at these sizes."""
    params = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    total = {name: torch.zeros(p.shape, dtype=torch.float64) for name, p in params}
    for x, y in zip(inputs, targets, strict=True):
        loss = scale * sample_loss(model(x.unsqueeze(0)), y.unsqueeze(0))
        grads = torch.autograd.grad(loss, [p for _, p in params], allow_unused=True)
        for (name, _), g in zip(params, grads, strict=True):
            if g is not None:
                total[name] += g.detach().double().abs()
    return total


def compare_within(actual: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor],
                   bounds: Mapping[str, torch.Tensor], *, scenario: str, step: Any, rank: str, seed: int,
                   what: str, atol: float = 0.0, rtol: float = 0.0,
                   owner: Callable[[torch.Tensor], str] | None = None) -> tuple[float, float, list[Mismatch]]:
    """Every tensor of ``expected`` against ``actual`` within its
    element-wise bound plus ``atol + rtol * |e|``. Returns the largest
    absolute difference, the largest ratio of a difference to its bound
    (above 1: a mismatch), and the mismatches; a mismatch's ``atol`` is the
    bound at its worst element, so its line says by how much against what.
    ``owner(bad)``, given the mask of the elements out of bounds, names the
    rank that holds the first of them (a sharded tensor's), in place of ``rank``."""
    worst_diff, worst_ratio, mismatches = 0.0, 0.0, []
    for name in sorted(set(actual) | set(expected)):
        if name not in actual or name not in expected:
            side = "distributed run" if name not in actual else "baseline"
            mismatches.append(Mismatch(scenario, step, rank, f"{name} (missing in the {side})", float("inf"),
                                       float("inf"), atol, rtol, seed, what))
            continue
        a = torch.as_tensor(actual[name]).detach().double()
        e = torch.as_tensor(expected[name]).detach().double()
        if a.shape != e.shape:
            mismatches.append(Mismatch(scenario, step, rank, f"{name} (shape {tuple(a.shape)}, baseline "
                                       f"{tuple(e.shape)})", float("inf"), float("inf"), atol, rtol, seed, what))
            continue
        allowed = bounds[name].double() + atol + rtol * e.abs()
        diff = (a - e).abs()
        # 0/0 is no difference; a difference where nothing is allowed is infinitely over; NaN is never close.
        ratio = torch.where(diff == 0, torch.zeros_like(diff), diff / allowed)
        ratio = torch.nan_to_num(ratio, nan=float("inf"), posinf=float("inf"))  # (its default posinf: the largest float)
        max_abs, max_rel = max_differences(a, e)
        worst_diff = max(worst_diff, max_abs)
        if ratio.numel():
            at = int(ratio.argmax())
            worst_ratio = max(worst_ratio, float(ratio.flatten()[at]))
            bad = ~(diff <= allowed)  # NaN compares false
            if bool(bad.any()):
                where = owner(bad) if owner is not None else rank
                mismatches.append(Mismatch(scenario, step, where, name, max_abs, max_rel,
                                           float(allowed.flatten()[at]), rtol, seed, what))
    return worst_diff, worst_ratio, mismatches


def compare_run(actual: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor],
                bounds: Mapping[str, torch.Tensor], *, device: str, start: Mapping[str, torch.Tensor] | None = None,
                scenario: str, step: Any, rank: str, seed: int, what: str, atol: float = 0.0, rtol: float = 0.0,
                owner: Callable[[torch.Tensor], str] | None = None) -> tuple[float, float, list[Mismatch]]:
    """One step's tensors of a run on ``device`` against the CPU baseline.
    On the CPU: :func:`compare_within`, element by element within the
    derived bound. On CUDA, as the other scenarios' GPU runs are compared
    (``_device.py`` says why: a GPU's kernels break a ReLU's near-ties the
    other way, which no element-wise rounding bound holds): each tensor as
    a whole, within ``_device.tolerances``. ``start``, for what a step
    updates (parameters, optimizer state): the tensors the step began
    from, which the baseline began from too; then the step's change is
    compared, not the tensors: a wrong update (an optimizer stepping twice
    as far) is a few hundredths of a parameter's norm but all of its
    update's, and a tolerance relative to the whole tensor would pass it.
    Returns what :func:`compare_within` does; the ratio, on CUDA, is a
    tensor's norm difference over its bound."""
    if not str(device).startswith("cuda"):
        return compare_within(actual, expected, bounds, scenario=scenario, step=step, rank=rank, seed=seed,
                              what=what, atol=atol, rtol=rtol, owner=owner)
    tolerance = tolerances(rtol, atol, device)
    if start is not None:
        actual, expected = _changes(actual, start), _changes(expected, start)
        what = f"{what} update"
    worst_diff, mismatches = compare_tensors(actual, expected, scenario=scenario, step=step, rank=rank, seed=seed,
                                             what=what, **tolerance)
    worst_ratio = 0.0
    for name in set(actual) & set(expected):
        a, e = actual[name].detach().double(), expected[name].detach().double()
        if a.shape == e.shape and a.numel():  # (on CUDA atol > 0: a tensor with elements allows some)
            allowed = tolerance["rtol"] * float(e.norm()) + tolerance["atol"] * a.numel() ** 0.5
            worst_ratio = max(worst_ratio, float((a - e).norm()) / allowed)
    return worst_diff, worst_ratio, mismatches


def _changes(tensors: Mapping[str, torch.Tensor], start: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Each tensor less what it was at the step's start (zero where it did
    not exist yet: an optimizer's state at its first step)."""
    return {name: t.detach().double() - (start[name].detach().double()
                                         if name in start and start[name].shape == t.shape else 0.0)
            for name, t in tensors.items()}


def shard_owner(bad: torch.Tensor, world_size: int) -> str:
    """The worker whose FSDP shard holds the first element marked in ``bad``:
    fully_shard splits dim 0 into ``world_size`` chunks of ``ceil(rows / world_size)``."""
    if bad.dim() == 0:
        return "worker0"
    row = int(bad.reshape(bad.shape[0], -1).any(dim=1).nonzero()[0])
    chunk = -(-bad.shape[0] // world_size)
    return f"worker{row // chunk}"


def parameters(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A copy of every parameter, by name, on the CPU."""
    return {name: p.detach().to("cpu", copy=True) for name, p in module.named_parameters()}


def gradients(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A copy of every gradient that exists, by name, on the CPU (a parameter
    without one, an unused branch's, is absent, as it is in the baseline)."""
    return {name: p.grad.detach().to("cpu", copy=True) for name, p in module.named_parameters()
            if p.grad is not None}


def falling_loss(first: Mapping[str, Any], expected: Mapping[str, Any],
                 loss: Callable[[Mapping[str, torch.Tensor]], float]) -> Outcome:
    """The outcome of a collective scenario: ``loss`` (the held-out loss of
    a model's parameters) falls from the initial parameters to the last
    step's, in the run (``first``: its parameters as one rank holds them)
    and beside it, its baseline's (``expected``). ``first["init"]`` goes to
    ``loss`` as it is (ddp_rpc's records hold none: its ``None`` is the
    seeded parameters)."""
    history = [loss(first["init"])] + [loss(step["params"]) for step in first["steps"]]
    baseline_history = [history[0]] + [loss(step["params"]) for step in expected["steps"]]
    ok = len(history) >= 3 and history[-1] < history[0]
    note = (f"held-out loss {history[0]:.4f} -> {history[-1]:.4f} over {len(history) - 1} steps" if ok else
            f"the held-out loss did not fall: {history[0]:.4f} -> {history[-1]:.4f} over {len(history) - 1} steps")
    return Outcome(ok=ok, note=note, metric=history[-1], steps=len(first["steps"]),
                   history=history, baseline_history=baseline_history)
