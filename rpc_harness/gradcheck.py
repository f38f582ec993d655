"""Gradient-for-gradient comparison of a distributed run against its baseline.

A mismatch is reported the way a person debugging it needs: scenario, step,
rank, parameter, max absolute and relative difference, tolerance, and the
seed to replay.

Two ways to compare a tensor. Element by element (``|a - e| <= atol + rtol
* |e|`` everywhere, as torch.allclose): what a CPU run is held to. As a
whole (``norm=True``: ``||a - e|| <= rtol * ||e|| + atol * sqrt(n)``, the
Euclidean norm): what a GPU run is held to, because there an element can
move by far more than rounding while the tensor does not (a ReLU or a
max-pool breaking a near-tie the other way moves one term of a sum;
``rpc_harness/scenarios/_device.py`` has the measurements).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_RTOL = 1e-5
DEFAULT_ATOL = 1e-6


@dataclass(frozen=True)
class Mismatch:
    """One tensor that differs from its baseline beyond tolerance."""

    scenario: str
    step: Any
    rank: str
    param: str
    max_abs: float
    max_rel: float
    atol: float
    rtol: float
    seed: int
    what: str = "gradient"
    # Compared as a whole: ||a - e|| / ||e|| (None: compared element by element).
    rel_norm: float | None = None

    def __str__(self) -> str:
        where = f"{self.scenario}: {self.what} of {self.param!r} on {self.rank} at step {self.step}"
        diffs = f"max abs diff {self.max_abs:.3g}, max rel diff {self.max_rel:.3g}"
        if self.rel_norm is None:
            return (f"{where} differs from the baseline: {diffs} "
                    f"(tolerance atol={self.atol:g}, rtol={self.rtol:g}); seed {self.seed}")
        return (f"{where} differs from the baseline as a whole: relative norm diff {self.rel_norm:.3g}, {diffs} "
                f"(tolerance ||a - e|| <= rtol*||e|| + atol*sqrt(n), rtol={self.rtol:g}, atol={self.atol:g}); "
                f"seed {self.seed}")


def max_differences(actual: Any, expected: Any) -> tuple[float, float]:
    """(max absolute, max relative) difference of two same-shaped tensors."""
    import torch

    a = torch.as_tensor(actual).detach().double()
    e = torch.as_tensor(expected).detach().double()
    if a.shape != e.shape:
        return float("inf"), float("inf")
    if a.numel() == 0:
        return 0.0, 0.0
    diff = (a - e).abs()
    rel = diff / e.abs().clamp_min(1e-12)
    return float(diff.max()), float(rel.max())


def close(actual: Any, expected: Any, *, rtol: float, atol: float, norm: bool = False) -> bool:
    """Whether two tensors agree: element by element as torch.allclose, or
    with ``norm`` as a whole (``||a - e|| <= rtol * ||e|| + atol * sqrt(n)``)."""
    import torch

    a = torch.as_tensor(actual).detach().double()
    e = torch.as_tensor(expected).detach().double()
    if a.shape != e.shape:
        return False
    if not norm:
        return torch.allclose(a, e, rtol=rtol, atol=atol)
    if not (torch.isfinite(a).all() and torch.isfinite(e).all()):
        return torch.equal(a, e)  # a NaN or an inf is no rounding: equal, or a mismatch
    bound = rtol * float(e.norm()) + atol * e.numel() ** 0.5
    return float((a - e).norm()) <= bound


def relative_norm(actual: Any, expected: Any) -> float:
    """``||a - e|| / ||e||`` of two same-shaped tensors (inf if ``e`` is zero and ``a`` is not)."""
    import torch

    a = torch.as_tensor(actual).detach().double()
    e = torch.as_tensor(expected).detach().double()
    if a.shape != e.shape:
        return float("inf")
    diff, size = float((a - e).norm()), float(e.norm())
    return diff / size if size else (0.0 if diff == 0 else float("inf"))


def compare(
    actual: Mapping[str, Any],
    expected: Mapping[str, Any],
    *,
    scenario: str,
    step: Any,
    rank: str,
    seed: int,
    rtol: float = DEFAULT_RTOL,
    atol: float = DEFAULT_ATOL,
    what: str = "gradient",
    norm: bool = False,
) -> tuple[float, list[Mismatch]]:
    """Compare named tensors; return the largest absolute difference seen and
    every mismatch: ``|a - e| > atol + rtol * |e|`` anywhere (as
    torch.allclose), or with ``norm`` ``||a - e|| > rtol * ||e|| + atol *
    sqrt(n)`` (each tensor as a whole; the module docstring says when)."""
    import torch

    worst = 0.0
    mismatches = []
    for name in sorted(set(actual) | set(expected)):
        if name not in actual or name not in expected:
            side = "distributed run" if name not in actual else "baseline"
            mismatches.append(
                Mismatch(scenario, step, rank, f"{name} (missing in the {side})", float("inf"), float("inf"), atol, rtol, seed, what)
            )
            continue
        a = torch.as_tensor(actual[name]).detach().double()
        e = torch.as_tensor(expected[name]).detach().double()
        max_abs, max_rel = max_differences(a, e)
        worst = max(worst, max_abs)
        if not close(a, e, rtol=rtol, atol=atol, norm=norm):
            rel_norm = relative_norm(a, e) if norm else None
            mismatches.append(Mismatch(scenario, step, rank, name, max_abs, max_rel, atol, rtol, seed, what, rel_norm))
    return worst, mismatches
