"""The collective scenarios' judges on hand-made records (no world): the
bound, every tensor counted from the baseline, and a difference named by
parameter, step and rank."""

from __future__ import annotations

import copy
import functools

import pytest
import torch

import rpc_harness
from rpc_harness.events import HITS, FaultFired
from rpc_harness.result import KILLED, OK, RAISED, STOPPED
from rpc_harness.scenarios import _collective, _verdicts, ddp, fsdp


def test_compare_within_holds_each_element_to_its_bound_and_names_the_worst():
    expected = {"w": torch.tensor([1.0, 2.0, 0.0])}
    bounds = {"w": torch.tensor([1e-3, 1e-3, 1e-3], dtype=torch.float64)}
    at_bound = {"w": torch.tensor([1.001, 2.0, -0.001], dtype=torch.float64)}
    _, ratio, bad = _collective.compare_within(at_bound, expected, bounds, scenario="s", step=2, rank="r", seed=0,
                                               what="gradient")
    assert bad == [] and ratio == pytest.approx(1.0, rel=1e-6)
    over = {"w": torch.tensor([1.0, 2.0, 0.01])}
    diff, ratio, bad = _collective.compare_within(over, expected, bounds, scenario="s", step=2, rank="r", seed=0,
                                                  what="gradient", atol=1e-3)
    assert [(m.step, m.rank, m.param, m.what) for m in bad] == [(2, "r", "w", "gradient")]
    assert bad[0].atol == pytest.approx(2e-3) and diff == pytest.approx(0.01) and ratio == pytest.approx(5.0)
    nan = {"w": torch.tensor([1.0, float("nan"), 0.0])}
    assert len(_collective.compare_within(nan, expected, bounds, scenario="s", step=0, rank="r", seed=0,
                                          what="gradient")[2]) == 1
    missing = _collective.compare_within({}, expected, bounds, scenario="s", step=0, rank="r", seed=0, what="x")[2]
    assert missing[0].param == "w (missing in the distributed run)"


def test_the_bound_is_the_tensors_largest_magnitude_times_the_summation_length():
    magnitude = torch.tensor([[1.0, 0.0], [4.0, 2.0]])
    bound = _collective.reassociation_bound(magnitude, terms=30, fan_in=10)
    assert torch.equal(bound, torch.full((2, 2), 2 * 40 * 2.0**-24 * 4.0, dtype=torch.float64))


def test_a_shard_owner_is_the_rank_whose_chunk_of_dim_0_holds_the_first_bad_row():
    bad = torch.zeros(10, 3, dtype=torch.bool)
    bad[7, 1] = True  # chunks of ceil(10/4) = 3 rows: rows 6..8 are worker2's
    assert _collective.shard_owner(bad, 4) == "worker2"
    bad[2, 0] = True
    assert _collective.shard_owner(bad, 4) == "worker0"
    assert _collective.shard_owner(torch.tensor(True), 4) == "worker0"


def perfect_ddp_run(config, world_size, seed):
    """What a faultless world would return: every rank the baseline's own steps."""
    init = {name: p.detach().clone() for name, p in ddp.build_model(config, seed).named_parameters()}
    before = [init]
    for _ in range(config.steps):
        out = ddp.baseline(config, world_size, seed, before)
        before.append(out["steps"][-1]["params"])
    steps = [{"grads": s["grads"], "params": s["params"], "loss": s["loss"]} for s in out["steps"]]
    return {f"worker{r}": {"rank": r, "seed": seed, "init": copy.deepcopy(init), "steps": copy.deepcopy(steps)}
            for r in range(world_size)}


def judge_ddp(records, config, seed):
    expected = ddp.SCENARIO.baseline(config, len(records), seed, records)
    return ddp.SCENARIO.compare(records, expected, config, seed)


def test_the_ddp_judge_passes_a_faithful_run_and_counts_every_tensor_from_the_baseline():
    config = ddp.Config(steps=3)
    result = judge_ddp(perfect_ddp_run(config, 2, 1), config, 1)
    assert result.mismatches == [] and result.checked == result.expected == 2 * 3 * 4
    assert result.details["params_checked"] == result.details["params_expected"] == 2 * 3 * 4


def test_the_ddp_judge_names_the_first_parameter_step_and_rank_that_differ():
    config = ddp.Config(steps=3)
    records = perfect_ddp_run(config, 2, 1)
    records["worker1"]["steps"][1]["grads"]["net2.weight"][0, 0] += 1e-3
    mismatches = judge_ddp(records, config, 1).mismatches
    assert [(m.step, m.rank, m.param, m.what) for m in mismatches] == [(1, "worker1", "net2.weight", "gradient")]
    assert mismatches[0].max_abs == pytest.approx(1e-3, rel=1e-3)


def test_the_ddp_judge_counts_a_missing_tensor_or_step_as_not_compared():
    config = ddp.Config(steps=3)
    records = perfect_ddp_run(config, 2, 1)
    del records["worker0"]["steps"][2]["grads"]["net1.bias"]
    result = judge_ddp(records, config, 1)
    assert result.checked == result.expected - 1
    assert [m.param for m in result.mismatches] == ["net1.bias (missing in the distributed run)"]
    short = perfect_ddp_run(config, 2, 1)
    short["worker1"]["steps"].pop()
    result = ddp.SCENARIO.compare(short, ddp.SCENARIO.baseline(config, 2, 1, perfect_ddp_run(config, 2, 1)),
                                  config, 1)
    assert result.checked == result.expected - 4
    assert any("parameter tensors the baseline has (never compared)" in m.param for m in result.mismatches)
    assert "number of steps" not in [m.what for m in result.mismatches], "short is not long"
    short["worker0"]["steps"].pop()  # the first rank, whose steps say where each began, short too
    result = ddp.SCENARIO.compare(short, ddp.SCENARIO.baseline(config, 2, 1, perfect_ddp_run(config, 2, 1)),
                                  config, 1)
    assert result.checked == result.expected - 8


def test_the_ddp_judge_holds_the_initial_parameters_bit_for_bit():
    config = ddp.Config(steps=2)
    records = perfect_ddp_run(config, 2, 1)
    records["worker1"]["init"]["net1.weight"][0, 0] += 1e-7  # the replay starts from worker0's
    mismatches = judge_ddp(records, config, 1).mismatches
    assert [(m.scenario, m.step, m.rank, m.param, m.what, m.atol, m.rtol, m.seed) for m in mismatches] == [
        ("ddp", "init", "worker1", "net1.weight", "initial parameter", 0.0, 0.0, 1)]
    records["worker0"]["init"]["net2.bias"][0] += 1e-7  # every rank's own initial parameters, each named
    assert [(m.rank, m.param) for m in judge_ddp(records, config, 1).mismatches] == [
        ("worker0", "net2.bias"), ("worker1", "net1.weight")]


def test_the_fsdp_judge_puts_the_ranks_shards_together_in_rank_order():
    shards = {"worker1": {"rank": 1, "seed": 0, "init": {}, "steps": [
                  {"loss": 1.0, "grads": {"w": torch.tensor([3.0])}, "params": {}, "state": {}}]},
              "worker0": {"rank": 0, "seed": 0, "init": {}, "steps": [
                  {"loss": 2.0, "grads": {"w": torch.tensor([1.0, 2.0]), "only0": torch.tensor([1.0])},
                   "params": {}, "state": {}}]}}
    whole = fsdp.judge.whole(shards)
    assert torch.equal(whole["steps"][0]["grads"]["w"], torch.tensor([1.0, 2.0, 3.0]))
    assert "only0" not in whole["steps"][0]["grads"]  # a tensor some rank lacks is never compared
    assert whole["steps"][0]["loss"] == 2.0


# -- the DDP judge's other parts: the report's figures, the outcome, records, contract --------


DDP = ddp.Config(steps=3)


@functools.cache
def _ddp_faithful(world_size: int, seed: int) -> tuple[dict, dict]:
    records = perfect_ddp_run(DDP, world_size, seed)
    return records, ddp.SCENARIO.baseline(DDP, world_size, seed, records)


def ddp_faithful(world_size: int = 2, seed: int = 1) -> tuple[dict, dict]:
    """A faithful DDP run's records and its baseline, copies to change."""
    return copy.deepcopy(_ddp_faithful(world_size, seed))


def ddp_shift(records, expected, rank, step, kind, name, times):
    """Move the first element of a rank's tensor by ``times`` its bound (in
    float64: a float32 rounds a move this small); the move."""
    by = times * float(expected["steps"][step][kind[:-1] + "_bounds"][name].flatten()[0])
    tensors = records[rank]["steps"][step][kind]
    tensors[name] = tensors[name].double()
    tensors[name].view(-1)[0] += by
    return by


def test_the_ddp_judge_reports_each_kinds_largest_difference_and_its_ratio_to_the_bound():
    records, expected = ddp_faithful()
    grads = ddp_shift(records, expected, "worker1", 0, "grads", "net2.weight", 0.75)
    params = ddp_shift(records, expected, "worker0", 2, "params", "net1.weight", 0.5)
    result = ddp.judge.compare(records, expected, DDP, 1)
    assert result.mismatches == []
    assert result.max_diff == pytest.approx(grads, rel=1e-6)
    assert result.details["max_param_diff"] == pytest.approx(params, rel=1e-6)
    assert result.details["worst_grad_ratio"] == pytest.approx(0.75, rel=1e-6)
    assert result.details["worst_param_ratio"] == pytest.approx(0.5, rel=1e-6)
    assert result.details["tolerance"] == {"bound": "derived (rpc_harness/scenarios/_collective.py)",
                                           "rtol": 0.0, "atol": 0.0, "device": "cpu"}


def test_the_ddp_judge_names_a_parameter_after_a_step_against_its_bound_and_adds_the_configs_slack():
    records, expected = ddp_faithful()
    size = ddp_shift(records, expected, "worker0", 2, "params", "net1.bias", 3)
    mismatches = ddp.judge.compare(records, expected, DDP, 1).mismatches
    assert [(m.scenario, m.step, m.rank, m.param, m.what, m.seed) for m in mismatches] == [
        ("ddp", 2, "worker0", "net1.bias", "parameter", 1)]
    assert mismatches[0].max_abs == pytest.approx(size, rel=1e-6)
    assert mismatches[0].atol == pytest.approx(size / 3, rel=1e-6)
    slack = ddp.Config(steps=3, atol=size)
    result = ddp.judge.compare(records, expected, slack, 1)
    assert result.mismatches == [] and result.details["tolerance"]["atol"] == size
    scaled = ddp.Config(steps=3, rtol=1e6)
    result = ddp.judge.compare(records, expected, scaled, 1)
    assert result.mismatches == [] and result.details["tolerance"]["rtol"] == 1e6


def test_the_ddp_judge_names_each_rank_that_ran_more_steps_than_its_baseline():
    records, expected = ddp_faithful()
    expected["steps"].pop()
    result = ddp.judge.compare(records, expected, DDP, 1)
    assert [(m.scenario, m.step, m.rank, m.param, m.what, m.max_abs, m.atol, m.rtol, m.seed)
            for m in result.mismatches] == [
        ("ddp", "all", rank, "steps", "number of steps", 1.0, 0.0, 0.0, 1) for rank in ("worker0", "worker1")]
    records["worker0"]["steps"].pop()  # as long as its baseline now
    assert [m.rank for m in ddp.judge.compare(records, expected, DDP, 1).mismatches] == ["worker1"]


def test_the_ddp_judge_counts_a_missing_parameter_in_the_never_compared_line():
    records, expected = ddp_faithful()
    del records["worker1"]["steps"][1]["params"]["net2.bias"]
    result = ddp.judge.compare(records, expected, DDP, 1)
    assert result.checked == result.expected
    assert result.details["params_checked"] == result.details["params_expected"] - 1
    assert [(m.step, m.rank, m.param, m.what) for m in result.mismatches] == [
        (1, "worker1", "net2.bias (missing in the distributed run)", "parameter"),
        ("all", "worker0, worker1", "1 of the 24 parameter tensors the baseline has (never compared)", "parameter")]
    never = result.mismatches[-1]
    assert (never.scenario, never.max_abs, never.max_rel, never.seed) == ("ddp", float("inf"), float("inf"), 1)
    assert (never.atol, never.rtol) == (0.0, 0.0)
    slack = ddp.Config(steps=3, atol=0.5, rtol=0.25)
    assert [(m.atol, m.rtol) for m in ddp.judge.compare(records, expected, slack, 1).mismatches][-1] == (0.5, 0.25)


def test_the_ddp_replay_starts_from_the_first_ranks_initial_then_its_parameters_after_each_step():
    records, _ = ddp_faithful()
    shuffled = {"worker1": records["worker1"], "worker0": records["worker0"]}
    points = ddp.judge.replay_points(shuffled)
    first = records["worker0"]
    assert len(points) == DDP.steps
    assert points[0] is first["init"] and points[1] is first["steps"][0]["params"]
    assert points[2] is first["steps"][1]["params"]


def test_the_ddp_judge_takes_the_ranks_in_their_rank_order_not_their_names():
    # Names sort otherwise from ten ranks on ("worker10" < "worker2"): here
    # the two ranks' numbers are swapped, so worker1 is the first rank.
    records, expected = ddp_faithful()
    records["worker0"]["rank"], records["worker1"]["rank"] = 1, 0
    first = records["worker1"]
    points = ddp.judge.replay_points(records)
    assert points[0] is first["init"] and points[1] is first["steps"][0]["params"]
    first["device"], records["worker0"]["device"] = "cuda:0", "cuda:1"  # each rank its own GPU
    assert ddp.judge.device_of(records) == "cuda:0"
    del first["device"], records["worker0"]["device"]
    for record in records.values():
        del record["steps"][0]["params"]["net1.bias"]
    assert [m.rank for m in ddp.judge.compare(records, expected, DDP, 1).mismatches] == [
        "worker1", "worker0", "worker1, worker0"]
    records, expected = ddp_faithful()
    records["worker0"]["rank"], records["worker1"]["rank"] = 1, 0
    first = records["worker1"]
    for step in records["worker0"]["steps"]:  # the second rank's loss stuck: not the one the outcome reads
        step["params"] = records["worker0"]["init"]
    assert ddp.judge.outcome(records, expected, DDP).ok
    for step in first["steps"]:
        step["params"] = first["init"]
    assert not ddp.judge.outcome(records, expected, DDP).ok


def test_the_ddp_held_out_loss_of_a_faithful_run_falls_and_is_the_models_own():
    records, expected = ddp_faithful()
    result = ddp.judge.outcome(records, expected, DDP)
    model = ddp.build_model(DDP, 1)
    x, y = ddp.model.held_out_batch(DDP, 1)
    with torch.no_grad():
        assert result.history[0] == pytest.approx(float(ddp.loss_fn(model(x), y)), rel=1e-6)
    assert result.ok and len(result.history) == DDP.steps + 1 and result.steps == DDP.steps
    assert result.history[-1] < result.history[0] and result.metric == result.history[-1]
    assert result.baseline_history == pytest.approx(result.history, rel=1e-6)
    assert result.note == (f"held-out loss {result.history[0]:.4f} -> {result.history[-1]:.4f} over "
                           f"{DDP.steps} steps")
    assert result.history[2] == pytest.approx(
        ddp.judge.held_out_loss(DDP, 1, records["worker0"]["steps"][1]["params"]), rel=1e-6)
    assert len(set(result.history)) == len(result.history)


def test_a_ddp_run_whose_loss_did_not_fall_or_took_too_few_steps_fails_its_outcome():
    records, expected = ddp_faithful()
    for step in records["worker0"]["steps"]:
        step["params"] = records["worker0"]["init"]
    stuck = ddp.judge.outcome(records, expected, DDP)
    assert not stuck.ok and stuck.note.startswith("the held-out loss did not fall: ")
    assert stuck.note.endswith(f"over {DDP.steps} steps")
    assert stuck.baseline_history[1:] != stuck.history[1:]  # the baseline's own steps, not the run's
    records, expected = ddp_faithful()
    for record in records.values():
        record["steps"] = record["steps"][:2]
    assert ddp.judge.outcome(records, expected, DDP).ok  # two steps: three points, enough
    for record in records.values():
        record["steps"] = record["steps"][:1]
    short = ddp.judge.outcome(records, expected, DDP)
    assert short.history[1] < short.history[0] and not short.ok  # fell, but one step says nothing


def losses(*values):
    """A run's (or a baseline's) steps whose parameters are their held-out loss."""
    return [{"params": {"loss": value}} for value in values]


def falling(init, *steps, baseline=()):
    return _collective.falling_loss({"init": {"loss": init}, "steps": losses(*steps)}, {"steps": losses(*baseline)},
                                    lambda params: params["loss"])


def test_the_loss_must_end_below_where_it_began_not_merely_fall_on_the_way():
    dipped = falling(1.0, 0.5, 1.25, baseline=(0.75, 0.5))
    assert not dipped.ok and dipped.note == "the held-out loss did not fall: 1.0000 -> 1.2500 over 2 steps"
    assert (dipped.history, dipped.baseline_history) == ([1.0, 0.5, 1.25], [1.0, 0.75, 0.5])
    assert (dipped.metric, dipped.steps) == (1.25, 2)
    rose_back = falling(1.0, 0.5, 0.75)  # fell most at the first step, then rose a little: it fell
    assert rose_back.ok and rose_back.note == "held-out loss 1.0000 -> 0.7500 over 2 steps"
    assert not falling(1.0, 0.5).ok, "one step says nothing"


def test_the_first_loss_is_of_the_initial_parameters_as_the_records_give_them():
    seen = []
    _collective.falling_loss({"init": None, "steps": losses(0.5, 0.25)}, {"steps": []},
                             lambda params: seen.append(params) or (1.0 if params is None else params["loss"]))
    assert seen == [None, {"loss": 0.5}, {"loss": 0.25}]


def ddp_world(ranks, faults=""):
    return rpc_harness.WorldResult(names=ddp.names(len(ranks)), seed=0, faults=rpc_harness.FaultPlan.parse(faults),
                                   deadline=60.0, ranks=ranks)


def rank(index, status=OK, value=None, events=()):
    return rpc_harness.RankOutcome(index, f"worker{index}", status=status, value=value, events=list(events))


def test_the_ddp_records_are_every_ranks_value_only_when_every_rank_finished():
    finished = ddp_world([rank(0, value={"rank": 0}), rank(1, value={"rank": 1})])
    assert ddp.judge.records(finished) == {"worker0": {"rank": 0}, "worker1": {"rank": 1}}
    finished.ranks[1].value = None
    assert ddp.judge.records(finished) is None
    raised = ddp_world([rank(0, value={"rank": 0}), rank(1, RAISED, value={"rank": 1})])
    assert ddp.judge.records(raised) is None


def test_the_ddp_contract_is_the_collective_one():
    kill = "kill:worker1@ddp.step#2"
    fired = FaultFired(100.0, 1, kill, "kill", "ddp.step", 2).as_event()
    killed = ddp_world([rank(0, STOPPED), rank(1, KILLED, events=[fired])], faults=kill)
    verdict = ddp.judge.contract(killed, None, DDP)
    assert verdict == _verdicts.collective_contract(killed)
    assert verdict.ok and verdict.note.startswith("worker1 killed as planned at ddp.step #2")
    assert not ddp.judge.contract(ddp_world([rank(0), rank(1)], faults=kill), None, DDP).ok


def test_the_ddp_contract_names_the_step_a_kill_inside_a_collective_struck_in():
    kill = "kill:worker1@c10d.all_reduce#5"
    events = [{"kind": HITS, "hits": {"ddp.step": 3, "c10d.all_reduce": 5}},
              FaultFired(100.0, 1, kill, "kill", "c10d.all_reduce", 5).as_event()]
    verdict = ddp.judge.contract(ddp_world([rank(0, STOPPED), rank(1, KILLED, events=events)], faults=kill), None, DDP)
    assert verdict.ok and verdict.details["during"] == "ddp.step #3"
    assert verdict.note.startswith("worker1 killed as planned at c10d.all_reduce #5, during ddp.step #3")


def test_the_process_group_is_gloo_over_the_worlds_folder_and_made_once(tmp_path, monkeypatch):
    import types

    import torch.distributed as dist

    assert not dist.is_initialized()
    ctx = types.SimpleNamespace(workdir=str(tmp_path), rank=0, world_size=1)
    try:
        _collective.process_group(ctx)
        assert dist.is_initialized() and dist.get_backend() == "gloo"
        assert (dist.get_rank(), dist.get_world_size()) == (0, 1)
        assert (tmp_path / "process_group").exists()  # the FileStore of its init_method
        made = []
        monkeypatch.setattr(dist, "init_process_group", lambda *a, **k: made.append(a))
        _collective.process_group(ctx)  # a world that made its own group keeps it
        assert made == []
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


class _TwoLayers(torch.nn.Module):
    """A used Linear, an unused one (a branch no sample takes) and a frozen one."""

    def __init__(self):
        super().__init__()
        self.used = torch.nn.Linear(2, 1)
        self.unused = torch.nn.Linear(2, 1)
        self.frozen = torch.nn.Parameter(torch.ones(1), requires_grad=False)
        with torch.no_grad():
            self.used.weight.copy_(torch.tensor([[1.0, -2.0]]))
            self.used.bias.fill_(0.5)

    def forward(self, x):
        return self.used(x) * self.frozen


def test_the_magnitude_sums_each_samples_absolute_gradient_scaled_one_sample_at_a_time():
    model = _TwoLayers()
    inputs = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 1.0]])
    targets = torch.tensor([[0.0], [0.0], [3.0]])

    def squared(output, target):
        return ((output - target) ** 2).sum()

    total = _collective.per_sample_magnitude(model, squared, inputs, targets, 0.5)
    assert set(total) == {"used.weight", "used.bias", "unused.weight", "unused.bias"}  # not the frozen one
    # Each sample's d/dw of 0.5 * (w.x + b - y)^2 is (w.x + b - y) * x: residuals 1.5, -1.5, -2.5.
    residuals = torch.tensor([1.5, -1.5, -2.5], dtype=torch.float64)
    expected_w = (residuals.abs()[:, None] * inputs.double()).sum(0, keepdim=True)
    assert torch.equal(total["used.weight"], expected_w)  # |(1.5, 0)| + |(0, -1.5)| + |(-5, -2.5)|
    assert torch.equal(total["used.bias"], residuals.abs().sum().reshape(1))  # 5.5, not |1.5 - 1.5 - 2.5|
    assert total["used.weight"].dtype == torch.float64
    assert torch.equal(total["unused.weight"], torch.zeros(1, 2, dtype=torch.float64))
    # Targets of one number a sample (class labels): each is made a batch of one along dim 0.
    labels = _collective.per_sample_magnitude(model, squared, inputs, targets.squeeze(1), 0.5)
    assert torch.equal(labels["used.weight"], expected_w)
    with pytest.raises(ValueError):  # a batch whose inputs and targets differ in length is refused
        _collective.per_sample_magnitude(model, squared, inputs, targets[:2], 0.5)


def within(actual, expected, bounds, **options):
    return _collective.compare_within(actual, expected, bounds, scenario="s", step=1, rank="r", seed=7,
                                      what="gradient", **options)


def test_compare_within_names_a_tensor_missing_on_either_side_or_of_another_shape():
    expected = {"a": torch.zeros(2), "b": torch.zeros(2)}
    actual = {"b": torch.zeros(3), "c": torch.zeros(2)}
    bounds = {name: torch.ones(2, dtype=torch.float64) for name in ("a", "b", "c")}
    diff, ratio, bad = within(actual, expected, bounds, atol=0.25, rtol=0.5)
    assert [m.param for m in bad] == ["a (missing in the distributed run)", "b (shape (3,), baseline (2,))",
                                      "c (missing in the baseline)"]
    assert all((m.scenario, m.step, m.rank, m.seed, m.what) == ("s", 1, "r", 7, "gradient") for m in bad)
    assert all((m.max_abs, m.max_rel, m.atol, m.rtol) == (float("inf"), float("inf"), 0.25, 0.5) for m in bad)
    assert (diff, ratio) == (0.0, 0.0)
    # What was compared is named on every kind of line, not only on a gradient's.
    bad = _collective.compare_within(actual, expected, bounds, scenario="s", step=1, rank="r", seed=7,
                                     what="parameter")[2]
    assert [m.what for m in bad] == ["parameter"] * 3


def test_compare_within_allows_no_difference_where_the_bound_is_zero_and_counts_empty_tensors():
    zero = {"w": torch.zeros(2, dtype=torch.float64)}
    same = within({"w": torch.tensor([0.0, 5.0])}, {"w": torch.tensor([0.0, 5.0])}, zero)
    assert same == (0.0, 0.0, [])  # 0/0: no difference, not NaN
    diff, ratio, bad = within({"w": torch.tensor([0.0, 5.5])}, {"w": torch.tensor([0.0, 5.0])}, zero)
    assert diff == 0.5 and ratio == float("inf") and [m.atol for m in bad] == [0.0]
    # rtol scales with the baseline's own value: 0.1 of 5 allows 0.5
    assert within({"w": torch.tensor([0.0, 5.5])}, {"w": torch.tensor([0.0, 5.0])}, zero, rtol=0.1)[2] == []
    assert within({"w": torch.tensor([0.0, 5.5])}, {"w": torch.tensor([0.0, 5.0])}, zero, rtol=0.09)[2] != []
    empty = {"w": torch.zeros(0)}
    assert within(empty, empty, {"w": torch.zeros(0, dtype=torch.float64)}) == (0.0, 0.0, [])
    nan = within({"w": torch.tensor([float("nan"), 5.0])}, {"w": torch.tensor([0.0, 5.0])},
                 {"w": torch.ones(2, dtype=torch.float64)})
    assert nan[1] == float("inf") and len(nan[2]) == 1


def test_compare_within_keeps_the_worst_over_tensors_and_the_owner_names_the_rank():
    expected = {"a": torch.zeros(3), "b": torch.zeros(3)}
    bounds = {name: torch.full((3,), 2.0, dtype=torch.float64) for name in expected}
    actual = {"a": torch.tensor([0.0, 1.0, 0.0]), "b": torch.tensor([0.0, 0.0, 0.5])}
    diff, ratio, bad = within(actual, expected, bounds)
    assert (diff, ratio, bad) == (1.0, 0.5, [])  # a's, not the last tensor's
    actual = {"a": torch.tensor([0.0, 4.0, 0.0]), "b": torch.tensor([0.0, 0.0, 1.0])}
    seen = []

    def owner(mask):
        seen.append(mask.tolist())
        return "worker9"

    diff, ratio, bad = within(actual, expected, bounds, owner=owner)
    assert (diff, ratio) == (4.0, 2.0) and seen == [[False, True, False]]
    assert [(m.rank, m.param, m.max_abs, m.atol) for m in bad] == [("worker9", "a", 4.0, 2.0)]


def test_compare_run_on_the_cpu_is_compare_within_with_every_option_and_its_owner():
    expected = {"w": torch.ones(4)}
    bounds = {"w": torch.full((4,), 0.5, dtype=torch.float64)}
    actual = {"w": torch.tensor([1.0, 1.0, 3.0, 1.0])}
    options = {"scenario": "s", "step": 2, "rank": "r", "seed": 7, "what": "parameter", "atol": 0.25, "rtol": 0.5,
               "owner": lambda mask: f"worker{int(mask.nonzero()[0])}"}
    got = _collective.compare_run(actual, expected, bounds, device="cpu", start={"w": torch.zeros(4)}, **options)
    assert got == _collective.compare_within(actual, expected, bounds, **options)
    (m,) = got[2]
    assert (m.scenario, m.step, m.rank, m.param, m.seed, m.what) == ("s", 2, "worker2", "w", 7, "parameter")
    assert (m.atol, m.rtol) == (1.25, 0.5)  # 0.5 + 0.25 + 0.5 * 1: each option reached the bound


def test_compare_within_reports_every_field_of_a_mismatch_at_its_worst_element():
    expected = {"w": torch.tensor([1.0, 1.0, 2.0])}
    bounds = {"w": torch.tensor([0.5, 0.01, 0.25], dtype=torch.float64)}  # the worst ratio is the middle one
    actual = {"w": torch.tensor([1.25, 1.02, 2.0])}
    diff, ratio, bad = within(actual, expected, bounds, rtol=0.0)
    assert diff == 0.25 and ratio == pytest.approx(2.0)
    (m,) = bad
    assert (m.scenario, m.step, m.rank, m.param, m.seed, m.what) == ("s", 1, "r", "w", 7, "gradient")
    assert (m.max_abs, m.max_rel) == (0.25, 0.25)  # the largest differences, wherever they are
    assert m.atol == pytest.approx(0.01) and m.rtol == 0.0  # the bound where the ratio is worst


def test_compare_within_takes_a_difference_exactly_at_its_bound_as_within():
    # 0.75 - 0.5 and the bound 0.25 are exact in binary: diff == allowed.
    assert within({"w": torch.tensor([0.75])}, {"w": torch.tensor([0.5])},
                  {"w": torch.tensor([0.25], dtype=torch.float64)}) == (0.25, 1.0, [])
    assert within({"w": torch.tensor([0.75])}, {"w": torch.tensor([0.5])},
                  {"w": torch.tensor([0.125], dtype=torch.float64)}, atol=0.125)[2] == []


def test_the_bound_of_an_empty_tensor_is_empty():
    bound = _collective.reassociation_bound(torch.zeros(0, 3), terms=4, fan_in=2)
    assert bound.shape == (0, 3) and bound.dtype == torch.float64
    assert torch.equal(_collective.reassociation_bound(torch.tensor([3.0]), terms=1, fan_in=1, unit=0.5),
                       torch.tensor([2 * 2 * 0.5 * 3.0], dtype=torch.float64))


def test_parameters_and_gradients_are_copies_by_name_and_only_existing_gradients():
    model = _TwoLayers()
    model.used(torch.ones(1, 2)).sum().backward()
    params, grads = _collective.parameters(model), _collective.gradients(model)
    assert list(params) == ["frozen", "used.weight", "used.bias", "unused.weight", "unused.bias"]
    assert list(grads) == ["used.weight", "used.bias"]  # the unused branch has none: absent, as in the baseline
    assert torch.equal(params["used.weight"], torch.tensor([[1.0, -2.0]]))
    assert torch.equal(grads["used.weight"], torch.ones(1, 2)) and torch.equal(grads["used.bias"], torch.ones(1))
    assert not params["used.weight"].requires_grad and not grads["used.bias"].requires_grad
    with torch.no_grad():
        model.used.weight.add_(1.0)
        model.used.weight.grad.add_(1.0)
    assert torch.equal(params["used.weight"], torch.tensor([[1.0, -2.0]])), "a copy, not the parameter itself"
    assert torch.equal(grads["used.weight"], torch.ones(1, 2)), "a copy, not the gradient itself"


class _OnGpu:
    """A stand-in for a parameter (and its gradient) on a GPU, which this
    machine may not have: what ``to`` was asked for, and a copy that says where it went."""

    def __init__(self, asked: list) -> None:
        self.asked = asked
        self.grad = self  # its gradient: on the GPU too

    def detach(self) -> _OnGpu:
        return self

    def to(self, *args, **kwargs) -> str:
        self.asked.append((args, kwargs))
        return f"copy on {args[0] if args else kwargs.get('device')}"


def test_parameters_and_gradients_of_a_model_on_a_gpu_are_copied_to_the_cpu():
    asked = []

    class OnGpu(torch.nn.Module):
        def named_parameters(self, *args, **kwargs):
            return iter([("w", _OnGpu(asked))])

    assert _collective.parameters(OnGpu()) == {"w": "copy on cpu"}
    assert _collective.gradients(OnGpu()) == {"w": "copy on cpu"}
    assert asked == [(("cpu",), {"copy": True})] * 2
