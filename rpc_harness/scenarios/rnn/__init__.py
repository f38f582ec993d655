"""The distributed RNN (model parallel) of PyTorch's "Getting Started with
Distributed RPC Framework" tutorial, run in full and checked gradient for
gradient against the same model trained in one process.

The tutorial's shape, kept: ``EmbeddingTable`` and ``Decoder`` live on
parameter-server ranks, created by the trainer's ``RNNModel`` through
``rpc.remote``; the LSTM stays on the trainer; forward goes through
``_remote_method``; ``parameter_rrefs()`` collects RRefs of every parameter;
a ``DistributedOptimizer(optim.SGD, ...)`` steps them inside a
``dist_autograd.context()``.

What the tutorial gets wrong, fixed: its batches are uninitialised
``torch.LongTensor``s. Here the tokens are real: a seeded Faker corpus of
sentences, tokenised into a small vocabulary (the most frequent words plus
``<unk>`` and ``<eos>``) and batched for a word language model (inputs
``tokens[t]``, targets ``tokens[t+1]``). Dropout is kept but controlled: the
parameter servers draw their masks from per-module seeded generators and the
LSTM's inter-layer dropout runs under a per-call seed, so the baseline draws
the very same masks.

Layout by world size (``names(world_size)``):

- 2: ``ps``, ``trainer``: embedding and decoder on ``ps``.
- 3: ``ps0``, ``ps1``, ``trainer``: embedding on ``ps0``, decoder on ``ps1``.
- n >= 4: ``ps0``, ``ps1``, ``trainer0`` .. ``trainer{n-3}``: every trainer
  builds its own ``RNNModel`` (its own remote embedding on ``ps0`` and decoder
  on ``ps1``) and trains on its own contiguous shard of the corpus, with its
  own seeds. The models share the servers, never parameters, so each trainer
  has its own single-process baseline.

For every step the trainer fetches the gradients of the step's distributed
autograd context from every owner (``dist_autograd.get_gradients`` run on the
owner through RPC, keyed ``"<owner>/<module>.<param>"``, e.g.
``"ps0/encoder.weight"`` or ``"trainer/rnn.weight_ih_l0"``), then the
parameters after ``opt.step``. ``run`` compares both, and the loss, with the
baseline's.

Fault contract: a parameter server killed by the plan makes every trainer
fail fast with ``RuntimeError("parameter server 'ps' died: ...")`` (the
trainer probes the servers when a step fails, so the error names the dead
one, not whichever call happened to notice, and never blames a server that
merely raised). ``contract_ok`` holds only if the killed server is the one
named, the trainer raised within ``FAIL_FAST_SHARE`` of the deadline of the
kill, and nothing else failed. A killed trainer is excused; the others are
still checked. Retryable message failures and slow parameter servers change
nothing: the run completes with baseline-equal gradients.

Which retryable messages this scenario sends: the trainer sends
``RREF_USER_DELETE`` (for the remote modules', parameters' and optimizers'
RRefs it drops) and ``CLEANUP_AUTOGRAD_CONTEXT_REQ`` (every step, to every
server); the servers send ``RREF_CHILD_ACCEPT``. Nobody sends
``RREF_FORK_REQUEST`` (no RRef is passed on to a third worker) and the servers
hold no user RRefs, so ``msgfail:trainer@RREF_FORK_REQUEST`` and
``msgfail:ps@RREF_USER_DELETE`` never fire.

The package, split by concern: ``config`` (names, layout, failpoints,
knobs), ``data`` (the corpus), ``model`` (the tutorial's classes), ``roles``
(the rank entry), ``baseline`` and ``judge`` (contract, comparison, outcome).
"""

from __future__ import annotations

import functools

from rpc_harness.scenario import PackageScenario, check_report, run_scenario

from . import config, judge
from .baseline import baseline
from .config import (
    DEFAULT_WORLD_SIZE,
    EOS,
    FAILPOINTS,
    MIN_STEPS,
    MIN_WORLD_SIZE,
    NAME,
    STEPS_FIELD,
    UNK,
    Config,
    Layout,
    layout,
    names,
)
from .data import batches, corpus
from .judge import epoch_means
from .model import Decoder, EmbeddingTable, RNNModel
from .roles import entry

__all__ = [
    "DEFAULT_WORLD_SIZE", "EOS", "FAILPOINTS", "MIN_WORLD_SIZE", "NAME", "SCENARIO", "MIN_STEPS", "STEPS_FIELD", "UNK",
    "Config", "Decoder", "EmbeddingTable", "Layout", "RNNModel", "baseline", "batches", "check", "corpus",
    "entry", "epoch_means", "layout", "names", "run",
]



def _validate(config: Config, world_size: int, seed: int) -> None:
    """Each trainer's shard of the corpus must fill two rows of a batch;
    raises ValueError naming the fix before any rank starts."""
    trainers = len(layout(world_size).trainers)
    for index in range(trainers):
        batches(config, seed, index, trainers)


def _fault_checks(world_size: int, config: Config) -> dict[str, str]:
    """The contracts ``rpc-harness run`` checks besides the clean world:
    a slow parameter server changes no gradient; a killed one is named by
    the trainers within milliseconds."""
    plan = layout(world_size)
    return {"slow": f"delay:{plan.embedding}@ps.forward=0.01s",
            "server-kill": f"kill:{plan.decoder}@ps.forward#3"}


def _each_trainer_alone(config: Config, world_size: int, seed: int, records: judge.Records) -> judge.Records:
    """Every trainer's baseline (a trainer's run depends on nothing the
    world decided: the records are not needed to replay it)."""
    return baseline(config, world_size, seed)


SCENARIO = PackageScenario(
    config, judge, entry=entry, needs=("faker",), baseline=_each_trainer_alone, fault_checks=_fault_checks, validate=_validate,
    summary="the distributed RNN: remote embedding and decoder on parameter servers, LSTM on the trainers",
    metric_name="loss",
)


# ``run(config=None, *, world_size=..., seed=..., faults=...)``: this scenario
# against its baseline, as rpc_harness.run_scenario runs any scenario.
run = functools.partial(run_scenario, SCENARIO)
check = check_report
