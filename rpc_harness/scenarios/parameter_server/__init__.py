"""The parameter-server scenario of PyTorch's RPC tutorials, run in full and
checked gradient for gradient against a single-process baseline.

Shape of "Implementing a Parameter Server Using Distributed RPC Framework":
rank 0 is ``parameter_server`` and holds the MNIST ``Net`` inside a
``ParameterServer`` created once behind a global lock; ranks 1.. are
``trainer{k}``. Each trainer builds a ``TrainerNet`` whose forward runs on the
server through the server's RRef, a ``DistributedOptimizer(optim.SGD, ...)``
over the server's parameter RRefs, and trains with ``dist_autograd.context``,
``dist_autograd.backward``, ``get_dist_gradients(cid)`` and ``opt.step(cid)``;
at the end each trainer measures accuracy on a held-out set (calling
``net(data)``, not the tutorial's ``model(data, -1)``).

The tutorial races with more than one trainer (pytorch/examples#780): trainer
A's forward saves the parameters for its backward, trainer B's optimizer step
updates them in place in between, and A's backward fails with "modified by an
inplace operation" -- or, worse, silently applies a gradient taken at one
parameter version to another. Here each training step holds a *step lease* on
the server from before its forward until after its optimizer step (see
:class:`ParameterServer`), so the parameters cannot change between a step's
forward, backward and update, and the server logs every applied step (trainer,
batch, parameter version before it, the gradients applied, the loss). The
baseline replays that log in one process: it rebuilds the parameters of every
version from the seeded initial weights and the recorded updates, recomputes
each step's gradient on the same batch with the same dropout masks, and
compares every tensor; the replayed final parameters must equal the server's.

Data: real MNIST through torchvision when torchvision imports *and*
``Config.mnist_root`` points at local files (nothing is downloaded);
otherwise seeded, learnable MNIST-shaped digits (28x28, 10 classes: smoothed
random class prototypes, shifted, scaled and noised per sample). Every random
stream -- weights, data shards, dropout masks -- derives from the world seed.

The package, split by concern: ``config`` (names, failpoints, knobs),
``model`` (the network), ``data`` (digits or MNIST), ``server`` and
``trainer`` (the roles) with ``roles`` (the rank entry), ``baseline`` (the
log's replay) and ``judge`` (contract, comparison, outcome).
"""

from __future__ import annotations

import functools
from typing import Any

from rpc_harness.scenario import PackageScenario, check_report, run_scenario

from . import config, judge
from .baseline import BaselineRun, BaselineStep, baseline, default_order
from .config import (
    DEFAULT_WORLD_SIZE,
    FAILPOINTS,
    MIN_STEPS,
    MIN_WORLD_SIZE,
    NAME,
    PS_NAME,
    STEPS_FIELD,
    Config,
    names,
    trainer_names,
)
from .data import (
    data_source,
    eval_batches,
    get_accuracy,
    held_out_set,
    synthetic_digits,
    trainer_batches,
)
from .model import Net, build_net, dropout_seed
from .roles import entry
from .server import ParameterServer
from .trainer import TrainerNet

__all__ = [
    "DEFAULT_WORLD_SIZE", "FAILPOINTS", "MIN_WORLD_SIZE", "NAME", "PS_NAME", "SCENARIO", "MIN_STEPS", "STEPS_FIELD",
    "BaselineRun", "BaselineStep", "Config", "Net", "ParameterServer", "TrainerNet", "baseline", "build_net",
    "check", "data_source", "default_order", "dropout_seed", "entry", "eval_batches", "get_accuracy",
    "held_out_set", "names", "run", "synthetic_digits", "trainer_batches", "trainer_names",
]



def _fault_checks(world_size: int, config: Config) -> dict[str, str]:
    """The contracts ``rpc-harness run`` checks besides the clean world: a
    slow trainer changes nothing; a killed one's lease is reclaimed and
    the others finish (from three ranks up: someone must be left to
    train); a killed server is named by the trainers within milliseconds."""
    checks = {"slow": "delay:trainer1@trainer.step=0.02s"}
    if world_size >= 3:
        checks["kill"] = f"kill:trainer{world_size - 1}@trainer.step#{min(3, config.batches)}"
    checks["server-kill"] = f"kill:{PS_NAME}@ps.forward#{min(4, config.batches)}"
    return checks


def _replay_log(config: Config, world_size: int, seed: int, records: judge.Records) -> BaselineRun:
    """The baseline, replaying the server's log: step k's gradient at
    version k, rebuilt from the seeded weights and the k recorded updates."""
    return baseline(config, world_size, seed, order=records.order,
                    applied=[s["grads"] for s in records.log["steps"]])


def _outcome(records: judge.Records, expected: BaselineRun, config: Config) -> Any:
    result = judge.outcome(records, expected, config)
    result.details["data"] = data_source(config)
    return result


SCENARIO = PackageScenario(
    config, judge, entry=entry, baseline=_replay_log, fault_checks=_fault_checks, outcome=_outcome,
    summary="a parameter server with the MNIST CNN and concurrent trainers (dist autograd, step lease)",
    metric_name="accuracy",
)


# ``run(config=None, *, world_size=..., seed=..., faults=...)``: this scenario
# against its baseline, as rpc_harness.run_scenario runs any scenario.
run = functools.partial(run_scenario, SCENARIO)
check = check_report
