"""rpc-harness: real multi-process torch.distributed.rpc worlds for tests.

The public API. Nothing here imports torch or pytest at import time: ranks
import torch in the forkserver, and ``pytest --help`` stays fast.

PYTEST_DONT_REWRITE: pytest marks a plugin's package for assertion
rewriting, and a session that finds it imported already, not by its own
hook, warns "Module already imported so cannot be rewritten; rpc_harness"
(seen in in-process pytester sessions of this project's own suite, in
whichever one first ran in an xdist worker after some earlier test; which
test leaves it so was not found). The package's own asserts are invariants,
not checks of a user's code: nothing needs them rewritten, and the marker
here tells pytest so (it reads the package's docstring).
"""

from ._cuda_fork import cuda_available
from ._parent.launcher import launch, preload, raise_for_failures, run_world, spawn
from .context import RankContext, current_context, failpoint, progress
from .errors import (
    ControlLost,
    FaultPlanError,
    GradientMismatch,
    HarnessError,
    InjectedFault,
    MissingExtra,
    ReplayError,
    ScenarioError,
    StaleStore,
    Unsupported,
    UsageError,
    WorldFailed,
    WorldSpecError,
    WorldTimeout,
)
from .explore import Exploration, explore
from .faults import Fault, FaultPlan
from .options import DEFAULT_DEADLINE, WorldOptions
from .progress import Progress, ProgressBar
from .result import RankOutcome, WorldResult
from .scenario import Scenario, ScenarioReport, check_report, run_scenario
from .seeds import derive_seed
from .spec import WorldSpec, make_spec

__all__ = [
    "ControlLost",
    "DEFAULT_DEADLINE",
    "Exploration",
    "Fault",
    "FaultPlan",
    "FaultPlanError",
    "GradientMismatch",
    "HarnessError",
    "InjectedFault",
    "MissingExtra",
    "Progress",
    "ProgressBar",
    "RankContext",
    "RankOutcome",
    "ReplayError",
    "Scenario",
    "ScenarioError",
    "ScenarioReport",
    "StaleStore",
    "Unsupported",
    "UsageError",
    "WorldFailed",
    "WorldResult",
    "WorldOptions",
    "WorldSpec",
    "WorldSpecError",
    "WorldTimeout",
    "check_report",
    "cuda_available",
    "current_context",
    "derive_seed",
    "explore",
    "failpoint",
    "launch",
    "make_spec",
    "preload",
    "progress",
    "raise_for_failures",
    "run_scenario",
    "run_world",
    "spawn",
]
