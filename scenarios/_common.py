"""What every scenario returns: outcome, gradient check, the world itself."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.gradcheck import Mismatch
from harness.result import WorldResult


@dataclass
class ScenarioReport:
    """One scenario run: distributed world, baseline, and how they compare.

    ``ok`` is true only when the world met the scenario's contract (under the
    fault plan, if any), every checked gradient matched the baseline and the
    outcome check passed.
    """

    scenario: str
    world_size: int
    seed: int
    steps: int  # episodes / optimizer steps actually run
    metric_name: str  # "running reward", "loss", "accuracy"
    metric: float  # the final outcome metric
    history: list[float] = field(default_factory=list)  # metric per step, distributed run
    baseline_history: list[float] = field(default_factory=list)  # the same, baseline
    max_grad_diff: float = 0.0
    grads_checked: int = 0  # how many gradient tensors were compared
    mismatches: list[Mismatch] = field(default_factory=list)
    outcome_ok: bool = True  # the scenario's outcome check (reward rises, loss falls, accuracy)
    outcome_note: str = ""
    contract_ok: bool = True  # behaviour under the fault plan (who died, who finished)
    contract_note: str = ""
    duration: float = 0.0
    world: WorldResult | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.contract_ok and self.outcome_ok and not self.mismatches

    def problems(self) -> list[str]:
        """Why this run is not ok, one line each."""
        out = []
        if not self.contract_ok:
            out.append(f"contract: {self.contract_note}")
        if not self.outcome_ok:
            out.append(f"outcome: {self.outcome_note}")
        out += [str(m) for m in self.mismatches[:10]]
        return out
