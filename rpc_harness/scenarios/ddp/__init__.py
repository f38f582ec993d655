"""PyTorch's "Getting Started with Distributed Data Parallel" tutorial, run
in full and checked gradient for gradient against one process training on
the whole global batch.

The tutorial's program, kept: its ``ToyModel`` (``net2(relu(net1(x)))``,
10 -> 10 -> 5), ``nn.MSELoss`` and ``optim.SGD`` over
``DistributedDataParallel(model)``, one DDP rank per world rank over a gloo
group. What it leaves out, added: real data (a seeded global batch per
step, from a linear teacher plus noise, so that the loss can fall; each
rank trains on its contiguous shard), and the options a user changes:
``bucket_cap_mb``, ``gradient_as_bucket_view``, ``static_graph``,
``find_unused_parameters`` (the model then grows a branch its forward
never calls) and ``no_sync`` gradient accumulation (``accumulate``
micro-batches a step, all but the last under ``no_sync``).

The baseline is one process on the global batch of every step (the
ranks' shards together, every micro-batch), with the same initial weights
and optimizer: DDP's average of the ranks' mean gradients is the global
batch's mean gradient, up to the order of the additions. Every rank's
gradients and parameters after every step are compared with it, element
by element, within the derived rounding bound of
``rpc_harness/scenarios/_collective.py`` (float reassociation only; the
config's ``atol`` and ``rtol``, 0 by default, are slack on top); the
initial parameters bit for bit.

Fault contract (``rpc_harness/scenarios/_verdicts.py``): a slow rank
changes nothing; a killed rank ends the world, named, with no survivor
hung; a rank that raises is reported as the origin. At ``ddp.step`` as
inside the all-reduce DDP's reducer issues from C++ (``c10d.all_reduce``,
one a step with the default bucket size), where the verdict names the
collective and the step: ``worker1 killed as planned at c10d.all_reduce
#2, during ddp.step #2``.

The package, split by concern: ``config`` (names, failpoints, knobs,
planted bugs), ``model`` (the tutorial's model and loss, the data),
``roles`` (the rank entry), ``baseline`` and ``judge``.
"""

from __future__ import annotations

import functools
from typing import Any

from rpc_harness.scenario import PackageScenario, check_report, run_scenario

from . import config, judge
from .baseline import baseline
from .config import (
    DEFAULT_WORLD_SIZE,
    FAILPOINTS,
    MIN_STEPS,
    MIN_WORLD_SIZE,
    NAME,
    PLANTS,
    STEPS_FIELD,
    Config,
    names,
)
from .model import ToyModel, build_model, global_batch, loss_fn, rank_rows
from .roles import entry

__all__ = [
    "DEFAULT_WORLD_SIZE", "FAILPOINTS", "MIN_STEPS", "MIN_WORLD_SIZE", "NAME", "PLANTS", "SCENARIO", "STEPS_FIELD",
    "Config", "ToyModel", "baseline", "build_model", "check", "entry", "global_batch", "loss_fn", "names",
    "rank_rows", "run",
]


def _fault_checks(world_size: int, config: Config) -> dict[str, str]:
    """The contracts ``rpc-harness run`` checks besides the clean world, at
    the all-reduce DDP's reducer issues from C++ inside ``backward()``: a
    rank slow in it changes nothing; one killed in it ends the world, named
    with the collective and the step (from two ranks up: someone must be
    left to notice). Every config all-reduces at least once a step (once a
    gradient bucket; only the last micro-batch of an accumulation), so the
    hit ``min(3, steps)`` exists at every world size and budget."""
    last = names(world_size)[-1]
    checks = {"slow": f"delay:{last}@c10d.all_reduce=0.01s"}
    if world_size >= 2:
        checks["kill"] = f"kill:{last}@c10d.all_reduce#{min(3, config.steps)}"
    return checks


def _replay(config: Config, world_size: int, seed: int, records: judge.Records) -> Any:
    """The baseline, replaying every step from the parameters the run began it with."""
    return baseline(config, world_size, seed, judge.replay_points(records))


SCENARIO = PackageScenario(
    config, judge, entry=entry, baseline=_replay, fault_checks=_fault_checks,
    summary="the DDP tutorial's ToyModel on N ranks against one process on the global batch",
    metric_name="loss",
    world={"process_group": "gloo", "rpc": False},
)

# ``run(config=None, *, world_size=..., seed=..., faults=...)``: this scenario
# against its baseline, as rpc_harness.run_scenario runs any scenario.
run = functools.partial(run_scenario, SCENARIO)
check = check_report
