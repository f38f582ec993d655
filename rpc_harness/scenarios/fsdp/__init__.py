"""FSDP2 (``fully_shard``) training a small transformer, run in full and
checked step for step against the same model and optimizer in one process
on the global batch.

The shape of PyTorch's FSDP2 tutorial: ``fully_shard`` on every transformer
block, then on the root; ``torch.optim.AdamW`` over the sharded (DTensor)
parameters; one FSDP rank per world rank over a gloo group. The model: token
and position embeddings, ``layers`` pre-norm blocks (causal self-attention
and an MLP), a norm and a head, about 40 thousand parameters by default. The
data: seeded sequences of a small language in which each token has two
likely successors (learnable in a few steps); each rank trains on its
contiguous share of the global batch. Options: ``reshard_after_forward``
(true, false, or a whole number of ranks), mixed precision (bf16
parameters, float32 reduction) and activation checkpointing.

After every step the first rank gathers (``full_tensor``) the gradients,
the AdamW state (``exp_avg``, ``exp_avg_sq``) and the parameters. The
baseline replays each step from those of the step before, on the whole
global batch, and every tensor is compared within its derived bound
(``rpc_harness/scenarios/_collective.py`` for gradients,
``fsdp/baseline.py`` for AdamW); a mismatch names the rank whose shard
holds the first bad element. Mixed precision has its own tolerance
(``fsdp/judge.py``). Fault contract: ``rpc_harness/scenarios/_verdicts.py``,
at ``fsdp.step`` as inside FSDP2's collectives (``c10d.all_gather_into_tensor``
for parameters, ``c10d.reduce_scatter_tensor`` for gradients, one reduce-scatter
a fully_shard unit a step), where the verdict names the collective and the step.
"""

from __future__ import annotations

import functools
from typing import Any

from rpc_harness.scenario import PackageScenario, check_report, run_scenario

from . import config, judge
from .baseline import adamw_bounds, baseline
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
    validate,
)
from .model import Block, Transformer, build_model, global_batch, loss_fn, rank_rows
from .roles import entry

__all__ = [
    "DEFAULT_WORLD_SIZE", "FAILPOINTS", "MIN_STEPS", "MIN_WORLD_SIZE", "NAME", "PLANTS", "SCENARIO", "STEPS_FIELD",
    "Block", "Config", "Transformer", "adamw_bounds", "baseline", "build_model", "check", "entry", "global_batch",
    "loss_fn", "names", "rank_rows", "run",
]


def _fault_checks(world_size: int, config: Config) -> dict[str, str]:
    """The contracts ``rpc-harness run`` checks besides the clean world, at
    FSDP2's own collectives: a rank slow in its all-gathers and
    reduce-scatters changes nothing; one killed in a reduce-scatter ends the
    world, named with the collective and the step. fully_shard on each block
    and on the root reduce-scatters each unit's gradients once a step
    (``layers + 1`` a step, whatever the options), so the kill is the first
    reduce-scatter of step ``min(3, steps)``. With one rank FSDP2 issues no
    collective: the slow rank is slow at its step, and nobody is left to
    notice a kill."""
    last = names(world_size)[-1]
    if world_size == 1:
        return {"slow": f"delay:{last}@fsdp.step=0.02s"}
    units = config.layers + 1
    step = min(3, config.steps)
    return {"slow": f"delay:{last}@c10d.all_gather_into_tensor=0.01s,delay:{last}@c10d.reduce_scatter_tensor=0.01s",
            "kill": f"kill:{last}@c10d.reduce_scatter_tensor#{(step - 1) * units + 1}"}


def _replay(config: Config, world_size: int, seed: int, records: judge.Records) -> Any:
    """The baseline, replaying every step from the parameters and state the run began it with."""
    return baseline(config, world_size, seed, judge.replay_points(records))


SCENARIO = PackageScenario(
    config, judge, entry=entry, baseline=_replay, fault_checks=_fault_checks, validate=validate,
    summary="FSDP2 (fully_shard per block and root, AdamW) on a small transformer against one process",
    metric_name="loss",
    world={"process_group": "gloo", "rpc": False},
)

run = functools.partial(run_scenario, SCENARIO)
check = check_report
