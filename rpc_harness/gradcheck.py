"""Gradient-for-gradient comparison of a distributed run against its baseline.

A mismatch is reported the way a person debugging it needs: scenario, step,
rank, parameter, max absolute and relative difference, tolerance, and the
seed to replay.
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

    def __str__(self) -> str:
        return (
            f"{self.scenario}: {self.what} of {self.param!r} on {self.rank} at step {self.step} "
            f"differs from the baseline: max abs diff {self.max_abs:.3g}, max rel diff {self.max_rel:.3g} "
            f"(tolerance atol={self.atol:g}, rtol={self.rtol:g}); seed {self.seed}"
        )


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
) -> tuple[float, list[Mismatch]]:
    """Compare named tensors; return the largest absolute difference seen and
    every mismatch (``|a - e| > atol + rtol * |e|`` anywhere, as torch.allclose)."""
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
        if a.shape != e.shape or not torch.allclose(a, e, rtol=rtol, atol=atol):
            mismatches.append(Mismatch(scenario, step, rank, name, max_abs, max_rel, atol, rtol, seed, what))
    return worst, mismatches
