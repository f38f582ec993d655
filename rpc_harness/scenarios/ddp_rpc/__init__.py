"""PyTorch's "Combining Distributed DataParallel with Distributed RPC
Framework" tutorial, run in full and checked step for step against one
process with the same embedding and Linear.

The tutorial's shape, kept: ``master`` creates a ``RemoteModule``
(``EmbeddingBag(mode="sum")``, 100 x 16) on ``ps`` and starts
``_run_trainer`` on every trainer by ``rpc_async``; each trainer builds
the ``HybridModel`` (the remote embedding's lookup, then ``DDP(Linear(16,
8))`` over the trainers' own process group), a ``DistributedOptimizer(SGD)``
over the embedding's remote parameters and its Linear's, and trains with
``dist_autograd``. Changed, and why: the bags are learnable (a class's
bags draw from its own embeddings; the tutorial's targets are random);
every bag has ``bag_size`` indices (the offsets are kept); and the
trainers meet at a barrier after each optimizer step, because the
tutorial races there (a trainer's next lookup may read the embedding
before or after another trainer's update).

Layout: ``master``, ``ps``, ``trainer0`` .. ``trainer{n-3}``, in a
collective world with RPC: every rank is in the world's process group
(gloo, made by the harness on the world's store before the RPC agent, the
order in which the tutorial's trainers make theirs), and all make the
trainers' subgroup from it (``new_group`` is collective over the default
group), described as ``trainers``. The tutorial's trainers make a group
of their own, of the trainers alone, on their own store; the subgroup is
that group, and the world's group gives the collective world's guarantees
besides: the ``c10d.*`` failpoints (``c10d.all_reduce:trainers`` is DDP's
gradient all-reduce alone), and a world that ends at a lost trainer,
saying where each rank was in its collectives.

The baseline (``baseline.py``) replays every step from the run's own
parameters before it; every trainer's gradients (its embedding gradient,
read on the server from its autograd context, and DDP's averaged Linear)
and the parameters after the step are compared within the derived bound
of ``rpc_harness/scenarios/_collective.py``. Fault contract:
``rpc_harness/scenarios/_verdicts.py``.
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
    MASTER,
    MIN_STEPS,
    MIN_WORLD_SIZE,
    NAME,
    PLANTS,
    PS,
    STEPS_FIELD,
    TRAINER_GROUP,
    Config,
    names,
    trainer_names,
)
from .model import (
    SeededEmbeddingBag,
    bags,
    build_embedding,
    build_fc,
    loss_fn,
    step_bags,
    trainer_bags,
)
from .roles import HybridModel, entry

__all__ = [
    "DEFAULT_WORLD_SIZE", "FAILPOINTS", "MASTER", "MIN_STEPS", "MIN_WORLD_SIZE", "NAME", "PLANTS", "PS", "SCENARIO",
    "STEPS_FIELD", "TRAINER_GROUP", "Config", "HybridModel", "SeededEmbeddingBag", "bags", "baseline",
    "build_embedding", "build_fc", "check", "entry", "loss_fn", "names", "run", "step_bags", "trainer_bags",
    "trainer_names",
]


def _fault_checks(world_size: int, config: Config) -> dict[str, str]:
    """The contracts ``rpc-harness run`` checks besides the clean world: a
    slow parameter server, and a trainer slow in DDP's gradient all-reduce,
    change nothing; a trainer killed inside that all-reduce (once a step,
    its one bucket) ends the world, naming it, the collective and the step."""
    last = trainer_names(world_size)[-1]
    return {"slow": f"delay:{PS}@ps.forward=0.01s,delay:{last}@c10d.all_reduce:{TRAINER_GROUP}=0.01s",
            "kill": f"kill:{last}@c10d.all_reduce:{TRAINER_GROUP}#{min(3, config.steps)}"}


def _replay(config: Config, world_size: int, seed: int, records: judge.Records) -> Any:
    return baseline(config, world_size, seed, judge.replay_points(records))


SCENARIO = PackageScenario(
    config, judge, entry=entry, baseline=_replay, fault_checks=_fault_checks,
    summary="DDP + RPC: trainers' DDP Linear over a RemoteModule embedding on a parameter server",
    metric_name="loss",
    world={"process_group": "gloo"},
    cpu_only=True,  # its RemoteModule, DistributedOptimizer and DDP module are not placed on a device
)

run = functools.partial(run_scenario, SCENARIO)
check = check_report
