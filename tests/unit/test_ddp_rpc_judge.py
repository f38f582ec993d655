"""The DDP + RPC scenario's judge on hand-made records (no world): a
faithful run passes with every tensor the baseline has counted, per
trainer; a difference is named by tensor, step and trainer; the held-out
loss must fall."""

from __future__ import annotations

import copy
import functools

import pytest
import torch

import rpc_harness
from rpc_harness.events import HITS, FaultFired
from rpc_harness.result import KILLED, OK, RAISED, STOPPED
from rpc_harness.scenarios import _verdicts, ddp_rpc
from rpc_harness.scenarios.ddp_rpc import judge
from rpc_harness.scenarios.ddp_rpc.baseline import forward

# The tutorial's shape at a tenth of its sizes: the whole faithful run takes milliseconds.
CONFIG = ddp_rpc.Config(steps=3, bags_per_trainer=2, bag_size=3, num_embeddings=10, embedding_dim=4, classes=3)
SEED = 1
WORLD = 4  # a master, a server, two trainers
TRAINERS = ("trainer0", "trainer1")
PARAMS = 3  # embedding.weight, fc.weight, fc.bias: each has a gradient on every trainer


@functools.cache
def _faithful(config: ddp_rpc.Config, world_size: int, seed: int) -> tuple[dict, dict]:
    """What a faultless world's master returns (every trainer the baseline's
    own steps), and the baseline the judge replays from it."""
    before: list = [None]
    for _ in range(config.steps - 1):
        before.append(ddp_rpc.baseline(config, world_size, seed, before)["steps"][-1]["params"])
    steps = ddp_rpc.baseline(config, world_size, seed, before)["steps"]
    trainers = ddp_rpc.trainer_names(world_size)
    # The master's dict holds the trainers in the order their futures were made; the judge sorts by index.
    records = {"seed": seed, "trainers": {name: {"index": index, "steps": [
        {"grads": dict(s["grads"][name]), "params": {n: t.clone() for n, t in s["params"].items()},
         "loss": s["losses"][name]} for s in steps]}
        for index, name in reversed(list(enumerate(trainers)))}}
    return records, ddp_rpc.SCENARIO.baseline(config, world_size, seed, records)


def faithful(config: ddp_rpc.Config = CONFIG) -> tuple[dict, dict]:
    """A copy of :func:`_faithful`'s records and baseline, to change."""
    return copy.deepcopy(_faithful(config, WORLD, SEED))


def shift(records: dict, expected: dict, trainer: str, step: int, kind: str, name: str, times: float) -> float:
    """Move the first element of a trainer's tensor by ``times`` its bound
    (in float64: float32 would round a move this small); the move."""
    bounds = expected["steps"][step]["grad_bounds"][trainer] if kind == "grads" else \
        expected["steps"][step]["param_bounds"]
    by = times * float(bounds[name].flatten()[0])
    tensors = records["trainers"][trainer]["steps"][step][kind]
    tensors[name] = tensors[name].double()
    tensors[name].view(-1)[0] += by
    return by


def test_a_faithful_run_passes_and_every_trainers_tensors_are_counted_from_the_baseline():
    records, expected = faithful()
    result = judge.compare(records, expected, CONFIG, SEED)
    assert result.mismatches == []
    assert result.checked == result.expected == CONFIG.steps * len(TRAINERS) * PARAMS
    assert result.details["params_checked"] == result.details["params_expected"] == CONFIG.steps * len(TRAINERS) * 3
    assert result.max_diff == 0.0 and result.details["max_param_diff"] == 0.0
    assert result.details["tolerance"] == {"bound": "derived (rpc_harness/scenarios/_collective.py)",
                                           "rtol": 0.0, "atol": 0.0}


def test_differences_within_their_bounds_pass_and_are_reported_per_kind():
    records, expected = faithful()
    grads = shift(records, expected, "trainer1", 0, "grads", "fc.weight", 0.75)
    params = shift(records, expected, "trainer0", 2, "params", "embedding.weight", 0.5)
    result = judge.compare(records, expected, CONFIG, SEED)
    assert result.mismatches == []
    assert result.max_diff == pytest.approx(grads, rel=1e-6)
    assert result.details["max_param_diff"] == pytest.approx(params, rel=1e-6)
    assert result.details["worst_grad_ratio"] == pytest.approx(0.75, rel=1e-6)
    assert result.details["worst_param_ratio"] == pytest.approx(0.5, rel=1e-6)


@pytest.mark.parametrize(("kind", "name", "what"), [
    ("grads", "embedding.weight", "gradient"),  # the trainer's own, on the server
    ("grads", "fc.bias", "gradient"),  # DDP's average
    ("params", "fc.weight", "parameter"),
])
@pytest.mark.parametrize("trainer", TRAINERS)
def test_a_difference_is_named_by_tensor_step_and_trainer(kind, name, what, trainer):
    records, expected = faithful()
    size = shift(records, expected, trainer, 1, kind, name, 3)
    result = judge.compare(records, expected, CONFIG, SEED)
    assert [(m.scenario, m.step, m.rank, m.param, m.what, m.seed) for m in result.mismatches] == [
        ("ddp_rpc", 1, trainer, name, what, SEED)]
    assert result.mismatches[0].max_abs == pytest.approx(size, rel=1e-6)
    assert result.mismatches[0].atol == pytest.approx(size / 3, rel=1e-6)


def test_each_trainer_is_held_to_its_own_embedding_gradient():
    records, expected = faithful()
    run = records["trainers"]["trainer0"]["steps"][1]["grads"]
    other = records["trainers"]["trainer1"]["steps"][1]["grads"]
    assert not torch.equal(run["embedding.weight"], other["embedding.weight"])  # their bags differ
    run["embedding.weight"] = other["embedding.weight"].clone()
    mismatches = judge.compare(records, expected, CONFIG, SEED).mismatches
    assert [(m.step, m.rank, m.param) for m in mismatches] == [(1, "trainer0", "embedding.weight")]


def test_the_slack_of_the_config_is_added_to_the_bound():
    records, expected = faithful()
    size = shift(records, expected, "trainer0", 1, "grads", "fc.weight", 3)
    slack = ddp_rpc.Config(**{**CONFIG.__dict__, "atol": size})
    result = judge.compare(records, expected, slack, SEED)
    assert result.mismatches == [] and result.details["tolerance"]["atol"] == size
    scaled = ddp_rpc.Config(**{**CONFIG.__dict__, "rtol": 1e6})
    result = judge.compare(records, expected, scaled, SEED)
    assert result.mismatches == [] and result.details["tolerance"]["rtol"] == 1e6


def test_a_missing_tensor_is_counted_as_never_compared():
    records, expected = faithful()
    del records["trainers"]["trainer1"]["steps"][2]["grads"]["fc.bias"]
    del records["trainers"]["trainer0"]["steps"][0]["params"]["embedding.weight"]
    result = judge.compare(records, expected, CONFIG, SEED)
    assert result.checked == result.expected - 1
    assert result.details["params_checked"] == result.details["params_expected"] - 1
    total = CONFIG.steps * len(TRAINERS) * 3
    assert [(m.step, m.rank, m.param, m.what) for m in result.mismatches] == [
        (0, "trainer0", "embedding.weight (missing in the distributed run)", "parameter"),
        (2, "trainer1", "fc.bias (missing in the distributed run)", "gradient"),
        ("all", "trainer0, trainer1", f"1 of the {total} parameter tensors the baseline has (never compared)",
         "parameter")]
    never = result.mismatches[-1]
    assert (never.scenario, never.max_abs, never.max_rel, never.seed) == ("ddp_rpc", float("inf"), float("inf"), SEED)
    assert (never.atol, never.rtol) == (0.0, 0.0)
    slack = ddp_rpc.Config(**{**CONFIG.__dict__, "atol": 0.5, "rtol": 0.25})
    assert [(m.atol, m.rtol) for m in judge.compare(records, expected, slack, SEED).mismatches][-1] == (0.5, 0.25)


def test_a_missing_gradient_is_counted_among_the_gradients_and_not_the_parameters():
    records, expected = faithful()
    del records["trainers"]["trainer0"]["steps"][1]["grads"]["fc.weight"]
    result = judge.compare(records, expected, CONFIG, SEED)
    assert result.checked == result.expected - 1
    assert result.details["params_checked"] == result.details["params_expected"]
    assert [(m.step, m.rank, m.param) for m in result.mismatches] == [
        (1, "trainer0", "fc.weight (missing in the distributed run)")], "no parameter is never compared"


def test_the_trainers_are_taken_in_their_index_order_not_their_names():
    # Names sort otherwise from ten trainers on ("trainer10" < "trainer2"):
    # here the two trainers' indices are swapped, so trainer1 is the first.
    records, expected = faithful()
    records["trainers"]["trainer0"]["index"], records["trainers"]["trainer1"]["index"] = 1, 0
    assert judge.first_trainer(records) is records["trainers"]["trainer1"]
    assert judge.replay_points(records)[1] is records["trainers"]["trainer1"]["steps"][0]["params"]
    del records["trainers"]["trainer0"]["steps"][0]["params"]["fc.bias"]
    del records["trainers"]["trainer1"]["steps"][0]["params"]["fc.bias"]
    mismatches = judge.compare(records, expected, CONFIG, SEED).mismatches
    assert [m.rank for m in mismatches] == ["trainer1", "trainer0", "trainer1, trainer0"]


def test_a_trainer_that_ran_short_is_counted_short_and_one_that_ran_long_is_named():
    records, expected = faithful()
    records["trainers"]["trainer1"]["steps"].pop()
    result = judge.compare(records, expected, CONFIG, SEED)
    assert result.checked == result.expected - PARAMS
    assert result.details["params_checked"] == result.details["params_expected"] - 3
    assert result.mismatches[-1].param == (f"3 of the {CONFIG.steps * len(TRAINERS) * 3} parameter tensors the "
                                           "baseline has (never compared)")
    records, expected = faithful()
    expected["steps"].pop()
    result = judge.compare(records, expected, CONFIG, SEED)
    assert [(m.scenario, m.step, m.rank, m.param, m.what, m.max_abs, m.atol, m.rtol, m.seed)
            for m in result.mismatches] == [
        ("ddp_rpc", "all", trainer, "steps", "number of steps", 1.0, 0.0, 0.0, SEED) for trainer in TRAINERS]
    records["trainers"]["trainer0"]["steps"].pop()  # as long as its baseline now: only trainer1 is named
    assert [m.rank for m in judge.compare(records, expected, CONFIG, SEED).mismatches] == ["trainer1"]


def test_the_replay_starts_from_the_seeded_parameters_then_the_first_trainers_after_each_step():
    records, _ = faithful()
    records["trainers"]["trainer1"]["steps"][0]["params"]["fc.bias"] += 1.0  # not the one replayed from
    points = judge.replay_points(records)
    first = records["trainers"]["trainer0"]["steps"]
    assert len(points) == CONFIG.steps and points[0] is None
    assert points[1] is first[0]["params"] and points[2] is first[1]["params"]
    assert judge.first_trainer(records) is records["trainers"]["trainer0"]


def test_the_held_out_loss_of_a_faithful_run_falls_and_is_the_models_own():
    records, expected = faithful()
    result = judge.outcome(records, expected, CONFIG)
    seeded = forward(ddp_rpc.build_embedding(CONFIG, SEED), ddp_rpc.build_fc(CONFIG, SEED),
                                      ddp_rpc.model.held_out(CONFIG, SEED))
    assert result.history[0] == pytest.approx(seeded.item(), rel=1e-6)
    assert result.ok and len(result.history) == CONFIG.steps + 1 and result.steps == CONFIG.steps
    assert result.history[-1] < result.history[0] and result.metric == result.history[-1]
    assert result.baseline_history == pytest.approx(result.history, rel=1e-6)
    assert result.note == (f"held-out loss {result.history[0]:.4f} -> {result.history[-1]:.4f} over "
                           f"{CONFIG.steps} steps")
    after_two = records["trainers"]["trainer0"]["steps"][1]["params"]
    assert result.history[2] == pytest.approx(judge.held_out_loss(CONFIG, SEED, after_two), rel=1e-6)
    assert len(set(result.history)) == len(result.history)


def test_a_run_whose_loss_did_not_fall_or_took_too_few_steps_fails_its_outcome():
    records, expected = faithful()
    seeded = {f"{prefix}.{name}": p.detach().clone() for prefix, module in
              (("embedding", ddp_rpc.build_embedding(CONFIG, SEED)), ("fc", ddp_rpc.build_fc(CONFIG, SEED)))
              for name, p in module.named_parameters()}
    for step in records["trainers"]["trainer0"]["steps"]:
        step["params"] = seeded
    stuck = judge.outcome(records, expected, CONFIG)
    assert not stuck.ok and stuck.note.startswith("the held-out loss did not fall: ")
    assert stuck.note.endswith(f"over {CONFIG.steps} steps")
    assert stuck.baseline_history[1:] != stuck.history[1:]  # the baseline's own steps, not the run's
    records, expected = faithful()
    for trainer in records["trainers"].values():
        trainer["steps"] = trainer["steps"][:2]
    assert judge.outcome(records, expected, CONFIG).ok  # two steps: three points, enough
    for trainer in records["trainers"].values():
        trainer["steps"] = trainer["steps"][:1]
    short = judge.outcome(records, expected, CONFIG)
    assert short.history[1] < short.history[0] and not short.ok  # fell, but one step says nothing


def outcome(rank, name, status=OK, value=None, events=(), error=None):
    return rpc_harness.RankOutcome(rank, name, status=status, value=value, events=list(events), error=error)


def world(ranks, faults=""):
    return rpc_harness.WorldResult(names=ddp_rpc.names(len(ranks)), seed=0,
                                   faults=rpc_harness.FaultPlan.parse(faults), deadline=60.0, ranks=ranks)


def test_records_are_the_masters_value_only_when_every_rank_finished():
    record = {"seed": 0, "trainers": {}}
    names = ddp_rpc.names(3)
    finished = world([outcome(0, names[0], value=record), outcome(1, names[1]), outcome(2, names[2])])
    assert judge.records(finished) is record
    finished.ranks[0].value = None
    assert judge.records(finished) is None
    raised = world([outcome(0, names[0], value=record), outcome(1, names[1]), outcome(2, names[2], RAISED)])
    assert judge.records(raised) is None


def test_the_contract_is_the_collective_one():
    kill = "kill:trainer0@trainer.step#2"
    fired = FaultFired(100.0, 2, kill, "kill", "trainer.step", 2).as_event()
    names = ddp_rpc.names(3)
    killed = world([outcome(0, names[0], RAISED, error="RuntimeError: trainer0 died"), outcome(1, names[1], STOPPED),
                    outcome(2, names[2], KILLED, events=[fired])], faults=kill)
    verdict = judge.contract(killed, None, CONFIG)
    assert verdict == _verdicts.collective_contract(killed)
    assert verdict.ok and verdict.note.startswith("trainer0 killed as planned at trainer.step #2")
    assert not judge.contract(world([outcome(r, n) for r, n in enumerate(names)], faults=kill), None, CONFIG).ok


def test_the_contract_names_the_step_a_kill_inside_a_trainers_collective_struck_in():
    kill = "kill:trainer1@c10d.all_reduce#3"
    events = [{"kind": HITS, "hits": {"trainer.step": 3, "c10d.all_reduce": 3}},
              FaultFired(100.0, 3, kill, "kill", "c10d.all_reduce", 3).as_event()]
    names = ddp_rpc.names(4)
    killed = world([outcome(0, names[0], RAISED, error="RuntimeError: trainer1 died"), outcome(1, names[1], STOPPED),
                    outcome(2, names[2], STOPPED), outcome(3, names[3], KILLED, events=events)], faults=kill)
    verdict = judge.contract(killed, None, CONFIG)
    assert verdict.ok and verdict.details["during"] == "trainer.step #3"
    assert verdict.note.startswith("trainer1 killed as planned at c10d.all_reduce #3, during trainer.step #3")
