"""The FSDP2 scenario's judge on hand-made records (no world): a faithful
run, sharded as fully_shard shards it, passes and every tensor the baseline
has is counted; a difference is named by tensor, step and the rank whose
shard holds it; mixed precision compares gradients as wholes; the held-out
loss must fall."""

from __future__ import annotations

import copy
import functools

import pytest
import torch

import rpc_harness
from rpc_harness.events import HITS, FaultFired
from rpc_harness.result import KILLED, OK, RAISED, STOPPED
from rpc_harness.scenarios import _verdicts, fsdp
from rpc_harness.scenarios.fsdp import judge

# Small enough that the whole faithful run takes a second or so (784 parameters).
CONFIG = fsdp.Config(steps=3, layers=1, d_model=8, heads=2, d_ff=16, vocab=8, seq_len=4)
SEED = 1
WORLD = 2
PARAMS = 18  # tensors of CONFIG's model (each has a gradient, and two AdamW state tensors)


def shards(tensor: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Rank ``rank``'s share of dim 0, as fully_shard splits it (chunks of ceil(rows / world_size))."""
    chunk = -(-tensor.shape[0] // world_size)
    return tensor[rank * chunk:(rank + 1) * chunk].clone()


@functools.cache
def _faithful(config: fsdp.Config, world_size: int, seed: int) -> tuple[dict, dict]:
    """A faultless world's records (every rank its shards of the baseline's
    own steps) and the baseline the judge replays from them."""
    init = {name: p.detach().clone() for name, p in fsdp.build_model(config, seed).named_parameters()}
    before, params, state = [], init, {}
    for step in range(config.steps):
        # The gradients of this step first (fed zeros, AdamW's step is not read), then the step on them.
        zeros = {name: torch.zeros_like(p) for name, p in params.items()}
        grads = fsdp.baseline(config, world_size, seed, [*before, {"params": params, "state": state,
                                                                   "grads": zeros}])["steps"][step]["grads"]
        before.append({"params": params, "state": state, "grads": grads})
        after = fsdp.baseline(config, world_size, seed, before)["steps"][step]
        params, state = after["params"], after["state"]
    steps = fsdp.baseline(config, world_size, seed, before)["steps"]
    records = {f"worker{rank}": {"rank": rank, "seed": seed, "init": init, "steps": [
        {"loss": s["loss"], **{kind: {name: shards(t, rank, world_size) for name, t in s[kind].items()}
                               for kind in ("grads", "params", "state")}} for s in steps]}
               for rank in range(world_size)}
    return records, fsdp.baseline(config, world_size, seed, judge.replay_points(records))


def faithful(config: fsdp.Config = CONFIG, world_size: int = WORLD, seed: int = SEED) -> tuple[dict, dict]:
    """A copy of :func:`_faithful`'s records and baseline, to change."""
    return copy.deepcopy(_faithful(config, world_size, seed))


def bound(expected: dict, step: int, kind: str, name: str, rank: int = 0) -> float:
    """The derived bound of the first element of ``rank``'s shard of a tensor."""
    whole = expected["steps"][step][judge.BOUNDS[kind]][name]
    chunk = -(-whole.shape[0] // WORLD)
    return float(whole[rank * chunk:].flatten()[0])


def shift(records: dict, expected: dict, rank: int, step: int, kind: str, name: str, times: float) -> float:
    """Move the first element of ``rank``'s shard of a tensor by ``times``
    its bound (in float64: a float32 rounds a move this small); the move."""
    by = times * bound(expected, step, kind, name, rank)
    for record in records.values():
        record["steps"][step][kind][name] = record["steps"][step][kind][name].double()
    records[f"worker{rank}"]["steps"][step][kind][name].view(-1)[0] += by
    return by


def outcome(rank, name, status=OK, value=None, events=()):
    return rpc_harness.RankOutcome(rank, name, status=status, value=value, events=list(events))


def world(ranks, faults=""):
    return rpc_harness.WorldResult(names=fsdp.names(len(ranks)), seed=0, faults=rpc_harness.FaultPlan.parse(faults),
                                   deadline=60.0, ranks=ranks)


def test_a_faithful_sharded_run_passes_and_every_tensor_is_counted_from_the_baseline():
    records, expected = faithful()
    result = judge.compare(records, expected, CONFIG, SEED)
    assert result.mismatches == []
    assert result.checked == result.expected == CONFIG.steps * PARAMS
    # Parameters and both AdamW state tensors of each, every step.
    assert result.details["others_checked"] == result.details["others_expected"] == CONFIG.steps * 3 * PARAMS
    assert result.max_diff == 0.0 and result.details["max_param_diff"] == result.details["max_state_diff"] == 0.0
    assert result.details["tolerance"] == {"bound": "derived (rpc_harness/scenarios/_collective.py, "
                                                    "fsdp/baseline.py)", "rtol": 0.0, "atol": 0.0,
                                         "device": "cpu"}


def test_differences_within_their_bounds_pass_and_are_reported_per_kind():
    records, expected = faithful()
    # A fraction of its bound in each kind, each at another step: each kind's worst is its own.
    moves = {"grads": (0, "head.weight", 0.75), "params": (1, "embed.weight", 0.5),
             "state": (2, "head.weight.exp_avg_sq", 0.25)}
    sizes = {kind: shift(records, expected, 0, step, kind, name, fraction)
             for kind, (step, name, fraction) in moves.items()}
    result = judge.compare(records, expected, CONFIG, SEED)
    assert result.mismatches == []
    assert result.max_diff == pytest.approx(sizes["grads"], rel=1e-3)
    assert result.details["max_param_diff"] == pytest.approx(sizes["params"], rel=1e-3)
    assert result.details["max_state_diff"] == pytest.approx(sizes["state"], rel=1e-3)
    assert result.details["worst_grad_ratio"] == pytest.approx(0.75, rel=1e-3)
    assert result.details["worst_param_ratio"] == pytest.approx(0.5, rel=1e-3)
    assert result.details["worst_state_ratio"] == pytest.approx(0.25, rel=1e-3)


@pytest.mark.parametrize(("kind", "name", "what"), [
    ("grads", "head.weight", "gradient"),
    ("params", "blocks.0.qkv.weight", "parameter"),
    ("state", "embed.weight.exp_avg", "AdamW state"),
])
def test_a_difference_is_named_by_tensor_step_and_the_rank_whose_shard_holds_it(kind, name, what):
    records, expected = faithful()
    size = shift(records, expected, 1, 1, kind, name, 3)
    result = judge.compare(records, expected, CONFIG, SEED)
    assert [(m.scenario, m.step, m.rank, m.param, m.what, m.seed) for m in result.mismatches] == [
        ("fsdp", 1, "worker1", name, what, SEED)]
    assert result.mismatches[0].max_abs == pytest.approx(size, rel=1e-3)
    assert result.mismatches[0].atol == pytest.approx(size / 3, rel=1e-6)


def test_the_slack_of_the_config_is_added_to_the_bound():
    records, expected = faithful()
    size = shift(records, expected, 1, 1, "grads", "head.weight", 3)
    slack = fsdp.Config(**{**CONFIG.__dict__, "atol": size})
    result = judge.compare(records, expected, slack, SEED)
    assert result.mismatches == []
    assert result.details["tolerance"]["atol"] == size
    scaled = fsdp.Config(**{**CONFIG.__dict__, "rtol": 1e6})  # |e| * rtol: far above the difference
    assert judge.compare(records, expected, scaled, SEED).mismatches == []
    assert judge.compare(records, expected, scaled, SEED).details["tolerance"]["rtol"] == 1e6


def test_the_initial_parameters_are_held_bit_for_bit():
    records, expected = faithful()
    records["worker0"]["init"]["norm.bias"][0] += 1e-7
    mismatches = judge.compare(records, expected, CONFIG, SEED).mismatches
    assert [(m.scenario, m.step, m.rank, m.param, m.what, m.atol, m.rtol, m.seed) for m in mismatches] == [
        ("fsdp", "init", "worker0", "norm.bias", "initial parameter", 0.0, 0.0, SEED)]


def test_a_tensor_one_rank_lacks_is_counted_as_never_compared():
    records, expected = faithful()
    del records["worker1"]["steps"][2]["state"]["norm.weight.exp_avg"]
    del records["worker0"]["steps"][0]["grads"]["norm.bias"]
    result = judge.compare(records, expected, CONFIG, SEED)
    assert result.checked == result.expected - 1
    assert result.details["others_checked"] == result.details["others_expected"] - 1
    assert [(m.step, m.rank, m.param) for m in result.mismatches] == [
        (0, "all ranks", "norm.bias (missing in the distributed run)"),
        (2, "all ranks", "norm.weight.exp_avg (missing in the distributed run)"),
        ("all", "all ranks", f"1 of the {CONFIG.steps * 3 * PARAMS} parameter and state tensors the baseline has "
                             "(never compared)")]
    never = result.mismatches[-1]
    assert (never.scenario, never.what, never.max_abs, never.max_rel, never.seed) == (
        "fsdp", "parameter", float("inf"), float("inf"), SEED)
    assert (never.atol, never.rtol) == (0.0, 0.0)
    slack = fsdp.Config(**{**CONFIG.__dict__, "atol": 0.5, "rtol": 0.25})
    assert [(m.atol, m.rtol) for m in judge.compare(records, expected, slack, SEED).mismatches][-1] == (0.5, 0.25)


def test_a_run_shorter_than_its_baseline_is_counted_short_and_a_longer_one_is_named():
    records, expected = faithful()
    records["worker1"]["steps"].pop()  # the whole run ends where its shortest rank does
    result = judge.compare(records, expected, CONFIG, SEED)
    assert result.checked == result.expected - PARAMS
    assert result.details["others_checked"] == result.details["others_expected"] - 3 * PARAMS
    assert result.mismatches[-1].param.startswith(f"{3 * PARAMS} of the ")
    records, expected = faithful()
    expected["steps"].pop()  # the run took a step its baseline did not
    result = judge.compare(records, expected, CONFIG, SEED)
    assert [(m.scenario, m.step, m.rank, m.param, m.what, m.max_abs, m.atol, m.rtol, m.seed)
            for m in result.mismatches] == [("fsdp", "all", "worker0", "steps", "number of steps", 1.0, 0.0, 0.0, SEED)]
    assert result.checked == result.expected == (CONFIG.steps - 1) * PARAMS
    records["worker0"]["init"]["norm.bias"][0] += 1e-7  # named beside the extra step, not replaced by it
    assert [(m.step, m.param) for m in judge.compare(records, expected, CONFIG, SEED).mismatches] == [
        ("init", "norm.bias"), ("all", "steps")]


MIXED = fsdp.Config(**{**CONFIG.__dict__, "mixed_precision": True})


def scale_gradient(records: dict, step: int, name: str, factor: float) -> None:
    for record in records.values():
        record["steps"][step]["grads"][name].mul_(factor)


def test_mixed_precision_holds_a_gradient_as_a_whole_to_its_own_tolerance():
    records, expected = faithful()
    # 5 % of the gradient's norm: far past its rounding bound, within mixed precision's 10 %.
    scale_gradient(records, 1, "head.weight", 1.05)
    assert [m.param for m in judge.compare(records, expected, CONFIG, SEED).mismatches] == ["head.weight"]
    result = judge.compare(records, expected, MIXED, SEED)
    assert result.mismatches == [] and result.max_diff > 0
    assert result.details["worst_grad_ratio"] == 0.0  # no element-wise bound was applied
    assert result.details["tolerance"]["gradients"] == "as a whole, rtol=0.1 (mixed precision)"
    assert "gradients" not in judge.compare(records, expected, CONFIG, SEED).details["tolerance"]
    scale_gradient(records, 1, "head.weight", 1.2 / 1.05)  # 20 %: beyond
    mismatches = judge.compare(records, expected, MIXED, SEED).mismatches
    assert [(m.scenario, m.step, m.rank, m.param, m.what, m.rtol, m.atol, m.seed) for m in mismatches] == [
        ("fsdp", 1, "all ranks", "head.weight", "gradient", judge.MIXED_RTOL, 0.0, SEED)]
    assert mismatches[0].rel_norm == pytest.approx(0.2, rel=1e-3)
    # The config's atol is slack on the whole too (atol * sqrt(n)).
    loose = fsdp.Config(**{**MIXED.__dict__, "atol": 1.0})
    assert judge.compare(records, expected, loose, SEED).mismatches == []


def test_mixed_precision_leaves_parameters_and_state_to_their_bounds():
    records, expected = faithful()
    shift(records, expected, 0, 1, "params", "head.bias", 3)
    shift(records, expected, 0, 2, "state", "head.bias.exp_avg", 3)
    mismatches = judge.compare(records, expected, MIXED, SEED).mismatches
    assert [(m.step, m.param, m.what, m.rel_norm) for m in mismatches] == [
        (1, "head.bias", "parameter", None), (2, "head.bias.exp_avg", "AdamW state", None)]


def test_the_replay_starts_each_step_from_the_runs_parameters_and_state_before_it():
    records, _ = faithful()
    points = judge.replay_points(records)
    whole = judge.whole(records)
    assert len(points) == CONFIG.steps
    assert points[0]["state"] == {}
    for k in range(CONFIG.steps):
        for kind in ("params", "state"):
            source = whole["init"] if (k, kind) == (0, "params") else ({} if k == 0 else whole["steps"][k - 1][kind])
            assert points[k][kind].keys() == source.keys()
            assert all(torch.equal(points[k][kind][n], source[n]) for n in source)
        assert points[k]["grads"].keys() == whole["steps"][k]["grads"].keys()
        assert all(torch.equal(points[k]["grads"][n], whole["steps"][k]["grads"][n]) for n in points[k]["grads"])
    # Not the same parameters at each step: the step before's.
    assert not torch.equal(points[2]["params"]["head.weight"], points[1]["params"]["head.weight"])


def test_whole_puts_the_ranks_shards_together_in_rank_order_and_keeps_the_first_ranks_fields():
    first = {"loss": 2.0, "grads": {"w": torch.tensor([1.0, 2.0]), "only0": torch.tensor([1.0])},
             "params": {"p": torch.tensor([5.0])}, "state": {"s": torch.tensor([7.0])}}
    second = {"loss": 1.0, "grads": {"w": torch.tensor([3.0])}, "params": {"p": torch.tensor([6.0])},
              "state": {"s": torch.tensor([8.0])}}
    records = {"worker1": {"rank": 1, "seed": 5, "init": {"x": torch.tensor(1.0)}, "steps": [second]},
               "worker0": {"rank": 0, "seed": 4, "init": {"x": torch.tensor(0.0)}, "steps": [first, first]}}
    whole = judge.whole(records)
    assert (whole["rank"], whole["seed"], float(whole["init"]["x"])) == (0, 4, 0.0)
    assert len(whole["steps"]) == 1  # the shortest rank's
    step = whole["steps"][0]
    assert step["loss"] == 2.0
    assert torch.equal(step["grads"]["w"], torch.tensor([1.0, 2.0, 3.0]))
    assert torch.equal(step["params"]["p"], torch.tensor([5.0, 6.0]))
    assert torch.equal(step["state"]["s"], torch.tensor([7.0, 8.0]))
    assert "only0" not in step["grads"]


def test_the_ranks_are_taken_in_their_rank_order_not_their_names():
    # Names sort otherwise from ten ranks on ("worker10" < "worker2"): here
    # the two ranks' numbers are swapped, so worker1's shards come first.
    def record(rank, row):
        return {"rank": rank, "seed": 0, "device": f"cuda:{rank}", "init": {},
                "steps": [{"loss": 1.0, "grads": {"w": torch.tensor([row])}, "params": {}, "state": {}}]}

    records = {"worker0": record(1, 2.0), "worker1": record(0, 1.0)}
    assert torch.equal(judge.whole(records)["steps"][0]["grads"]["w"], torch.tensor([1.0, 2.0]))
    records, expected = faithful()
    records["worker0"]["rank"], records["worker1"]["rank"] = 1, 0
    records["worker0"]["device"], records["worker1"]["device"] = "cuda:1", "cuda:0"  # each rank its own GPU
    # The ranks swapped: their shards (the halves of each tensor) swap with them.
    records["worker0"]["steps"], records["worker1"]["steps"] = records["worker1"]["steps"], records["worker0"]["steps"]
    result = judge.compare(records, expected, CONFIG, SEED)
    assert result.mismatches == [] and result.details["tolerance"]["device"] == "cuda:0"


def test_mixed_precision_takes_the_configs_rtol_where_it_is_wider():
    records, expected = faithful()
    scale_gradient(records, 1, "head.weight", 1.2)  # 20 %: beyond mixed precision's 10 %
    wide = fsdp.Config(**{**MIXED.__dict__, "rtol": 0.3})
    assert judge.compare(records, expected, wide, SEED).mismatches == []
    assert [m.rtol for m in judge.compare(records, expected, MIXED, SEED).mismatches] == [judge.MIXED_RTOL]


def test_the_held_out_loss_of_a_faithful_run_falls_and_is_the_models_own():
    records, expected = faithful()
    result = judge.outcome(records, expected, CONFIG)
    model = fsdp.build_model(CONFIG, SEED)
    x, y = fsdp.model.held_out_batch(CONFIG, SEED)
    with torch.no_grad():
        assert result.history[0] == pytest.approx(float(fsdp.loss_fn(model(x), y)), rel=1e-6)
    assert result.ok and len(result.history) == CONFIG.steps + 1 and result.steps == CONFIG.steps
    assert result.history[-1] < result.history[0] and result.metric == result.history[-1]
    assert result.baseline_history == pytest.approx(result.history, rel=1e-6)
    assert result.note == (f"held-out loss {result.history[0]:.4f} -> {result.history[-1]:.4f} over "
                           f"{CONFIG.steps} steps")
    # Each point is the loss of that step's own parameters.
    assert result.history[2] == pytest.approx(
        judge.held_out_loss(CONFIG, SEED, judge.whole(records)["steps"][1]["params"]), rel=1e-6)
    assert len(set(result.history)) == len(result.history)


def test_a_run_whose_loss_did_not_fall_or_took_too_few_steps_fails_its_outcome():
    records, expected = faithful()
    for record in records.values():  # every step back at the first parameters
        for step in record["steps"]:
            for name in step["params"]:
                step["params"][name] = shards(record["init"][name], record["rank"], WORLD)
    stuck = judge.outcome(records, expected, CONFIG)
    assert not stuck.ok and stuck.note.startswith("the held-out loss did not fall: ")
    assert stuck.note.endswith(f"over {CONFIG.steps} steps")
    assert stuck.baseline_history[1:] != stuck.history[1:]  # the baseline's own steps, not the run's
    records, expected = faithful()
    for record in records.values():
        record["steps"] = record["steps"][:2]
    assert judge.outcome(records, expected, CONFIG).ok  # two steps: three points, enough
    for record in records.values():
        record["steps"] = record["steps"][:1]
    short = judge.outcome(records, expected, CONFIG)
    assert short.history[1] < short.history[0] and not short.ok  # fell, but one step says nothing


def test_records_are_every_ranks_value_only_when_every_rank_finished():
    finished = world([outcome(0, "worker0", value={"rank": 0}), outcome(1, "worker1", value={"rank": 1})])
    assert judge.records(finished) == {"worker0": {"rank": 0}, "worker1": {"rank": 1}}
    finished.ranks[1].value = None  # finished without a record
    assert judge.records(finished) is None
    killed = world([outcome(0, "worker0", RAISED, value={"rank": 0}), outcome(1, "worker1", KILLED)])
    assert judge.records(killed) is None
    raised = world([outcome(0, "worker0", value={"rank": 0}), outcome(1, "worker1", RAISED, value={"rank": 1})])
    assert judge.records(raised) is None


def test_the_contract_is_the_collective_one():
    kill = "kill:worker1@fsdp.step#2"
    fired = FaultFired(100.0, 1, kill, "kill", "fsdp.step", 2).as_event()
    killed = world([outcome(0, "worker0", STOPPED), outcome(1, "worker1", KILLED, events=[fired])], faults=kill)
    verdict = judge.contract(killed, None, CONFIG)
    assert verdict == _verdicts.collective_contract(killed)
    assert verdict.ok and verdict.note.startswith("worker1 killed as planned at fsdp.step #2")
    assert not judge.contract(world([outcome(0, "worker0"), outcome(1, "worker1")], faults=kill), None, CONFIG).ok


def adamw_run(skipped: dict[int, tuple[str, ...]]) -> dict:
    """The records of a run that trained as the ranks do, one AdamW kept
    across the steps, but in which the gradients named in ``skipped[step]``
    were never reduced at that step (AdamW then leaves the parameter, and
    its state and step count, as they were). Independent of the baseline:
    the gradients are the global batch's, the steps AdamW's own."""
    model = fsdp.build_model(CONFIG, SEED)
    named = dict(model.named_parameters())
    init = {name: p.detach().clone() for name, p in named.items()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=CONFIG.lr, weight_decay=CONFIG.weight_decay)
    steps = []
    for step in range(CONFIG.steps):
        optimizer.zero_grad(set_to_none=True)
        x, y = fsdp.global_batch(CONFIG, SEED, WORLD, step)
        loss = fsdp.loss_fn(model(x), y)
        loss.backward()
        for name in skipped.get(step, ()):
            named[name].grad = None
        grads = {name: p.grad.clone() for name, p in named.items() if p.grad is not None}
        optimizer.step()
        state = {f"{name}.{key}": optimizer.state[p][key].clone() for name, p in named.items()
                 for key in ("exp_avg", "exp_avg_sq") if key in optimizer.state.get(p, {})}
        params = {name: p.detach().clone() for name, p in named.items()}
        steps.append({"loss": loss.item(), "grads": grads, "params": params, "state": state})
    return {f"worker{rank}": {"rank": rank, "seed": SEED, "init": init, "steps": [
        {"loss": s["loss"], **{kind: {name: shards(t, rank, WORLD) for name, t in s[kind].items()}
                               for kind in ("grads", "params", "state")}} for s in steps]}
            for rank in range(WORLD)}


def replayed(records: dict) -> dict:
    return fsdp.baseline(CONFIG, WORLD, SEED, judge.replay_points(records))


def test_a_parameter_adamw_skipped_is_replayed_as_skipped_with_its_own_step_count():
    # head.bias reduced no gradient at step 0 (AdamW has no state for it
    # yet); norm.bias none at step 1 (its state stays, and its count: at
    # step 2 it takes its second AdamW step, not its third).
    records = adamw_run({0: ("head.bias",), 1: ("norm.bias",)})
    expected = replayed(records)
    assert "head.bias.exp_avg" not in expected["steps"][0]["state"]
    assert torch.equal(expected["steps"][1]["state"]["norm.bias.exp_avg"],
                       judge.whole(records)["steps"][0]["state"]["norm.bias.exp_avg"])
    # head.bias's first AdamW step, at step 1, is bounded as a first step (bias corrected by 1, not 2).
    start, after = judge.replay_points(records)[1], expected["steps"][1]
    first = fsdp.adamw_bounds(CONFIG, 1, start["grads"]["head.bias"], torch.zeros(()), start["params"]["head.bias"],
                              None, None, after["state"]["head.bias.exp_avg"], after["state"]["head.bias.exp_avg_sq"])
    assert torch.equal(after["param_bounds"]["head.bias"], first["param"])
    result = judge.compare(records, expected, CONFIG, SEED)
    # What differs is what the run did: no gradient where the baseline's model has one. Every
    # parameter and state tensor, skipped or not, is within its bound of AdamW's own.
    assert [(m.step, m.param, m.what) for m in result.mismatches] == [
        (0, "head.bias (missing in the distributed run)", "gradient"),
        (1, "norm.bias (missing in the distributed run)", "gradient")]
    assert result.details["others_checked"] == result.details["others_expected"] == CONFIG.steps * 3 * PARAMS - 2


def test_adamw_state_on_one_side_only_is_named_as_a_difference():
    # The run holds state for a parameter it reduced no gradient for (an
    # optimizer that stepped it anyway): the baseline has none.
    records = adamw_run({0: ("head.bias",)})
    for record in records.values():
        for key in ("exp_avg", "exp_avg_sq"):
            record["steps"][0]["state"][f"head.bias.{key}"] = torch.zeros_like(record["steps"][0]["params"]["head.bias"])
    at_step_0 = [(m.param, m.what) for m in judge.compare(records, replayed(records), CONFIG, SEED).mismatches
                 if m.step == 0]
    assert at_step_0 == [("head.bias (missing in the distributed run)", "gradient"),
                         ("head.bias.exp_avg (missing in the baseline)", "AdamW state"),
                         ("head.bias.exp_avg_sq (missing in the baseline)", "AdamW state")]
    # The run lost the state of a parameter AdamW stepped: the baseline has it.
    records = adamw_run({})
    for record in records.values():
        del record["steps"][1]["state"]["head.bias.exp_avg"]
    at_step_1 = [(m.param, m.what) for m in judge.compare(records, replayed(records), CONFIG, SEED).mismatches
                 if m.step == 1]
    assert at_step_1 == [("head.bias.exp_avg (missing in the distributed run)", "AdamW state")]


def test_the_contract_names_the_step_a_kill_inside_a_collective_struck_in():
    kill = "kill:worker0@c10d.reduce_scatter_tensor#4"
    events = [{"kind": HITS, "hits": {"fsdp.step": 2, "c10d.reduce_scatter_tensor": 4}},
              FaultFired(100.0, 0, kill, "kill", "c10d.reduce_scatter_tensor", 4).as_event()]
    killed = world([outcome(0, "worker0", KILLED, events=events), outcome(1, "worker1", STOPPED)], faults=kill)
    verdict = judge.contract(killed, None, CONFIG)
    assert verdict.ok and verdict.details["during"] == "fsdp.step #2"
    assert verdict.note.startswith("worker0 killed as planned at c10d.reduce_scatter_tensor #4, during fsdp.step #2")
