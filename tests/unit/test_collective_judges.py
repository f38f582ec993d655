"""The collective scenarios' judges on hand-made records (no world): the
bound, every tensor counted from the baseline, and a difference named by
parameter, step and rank."""

from __future__ import annotations

import copy

import pytest
import torch

from rpc_harness.scenarios import _collective, ddp, fsdp


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


def test_the_ddp_judge_holds_the_initial_parameters_bit_for_bit():
    config = ddp.Config(steps=2)
    records = perfect_ddp_run(config, 2, 1)
    records["worker1"]["init"]["net1.weight"][0, 0] += 1e-7  # the replay starts from worker0's
    mismatches = judge_ddp(records, config, 1).mismatches
    assert [(m.step, m.rank, m.param, m.what) for m in mismatches] == [
        ("init", "worker1", "net1.weight", "initial parameter")]


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
