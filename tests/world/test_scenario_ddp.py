"""The DDP tutorial scenario: real worlds, every rank's gradients and
parameters at every step against one process on the global batch, DDP's
options, planted bugs named by parameter and step, and the fault contracts
(a slow rank changes nothing; a killed or raising rank is named), at the
scenario's step and inside the all-reduce DDP's reducer issues from C++."""

from __future__ import annotations

import pytest
from collective_reports import ranks_inside

from rpc_harness import GradientMismatch
from rpc_harness.scenarios import ddp

CI = ddp.Config()
N_PARAMS = 4  # net1 and net2: weight and bias each


@pytest.mark.parametrize("world_size", [1, 3])
def test_every_gradient_and_parameter_matches_the_baseline_at_every_step(world_size):
    report = ddp.run(CI, world_size=world_size, seed=3)
    ddp.check(report)
    # Every rank, every step, every parameter: counted from the baseline.
    assert report.grads_expected == report.grads_checked == world_size * CI.steps * N_PARAMS
    assert report.details["params_checked"] == report.details["params_expected"] == report.grads_checked
    # Within the derived bound, with room to spare (a bug is 10**4 times over it: the planted ones below).
    assert report.details["worst_grad_ratio"] < 1 and report.details["worst_param_ratio"] < 1
    assert report.steps == CI.steps and report.history[-1] < report.history[0]
    assert report.history == pytest.approx(report.baseline_history, rel=1e-5)


@pytest.mark.parametrize("options", [
    {"bucket_cap_mb": 1e-4, "gradient_as_bucket_view": True},  # a bucket per parameter, viewed
    {"static_graph": True},
    {"accumulate": 3},  # no_sync for two micro-batches of three
    {"find_unused_parameters": True, "static_graph": True},
], ids=lambda options: ",".join(options))
def test_ddp_options_train_as_the_baseline_does(options):
    report = ddp.run(ddp.Config(steps=3, **options), world_size=2, seed=4)
    ddp.check(report)
    assert report.grads_checked == 2 * 3 * N_PARAMS


def test_an_unused_branch_has_no_gradient_and_its_parameters_stay_put():
    report = ddp.run(ddp.Config(steps=3, find_unused_parameters=True), world_size=2, seed=4)
    ddp.check(report)
    record = report.world["worker1"].value
    assert "unused.weight" in record["init"] and all("unused.weight" not in s["grads"] for s in record["steps"])
    # its parameters are compared too: six tensors a step where four have gradients
    assert report.details["params_checked"] == 2 * 3 * 6 and report.grads_checked == 2 * 3 * N_PARAMS


@pytest.mark.parametrize(("plant", "rank", "param", "what"), [
    ("shifted_shard", "worker0", "net1.bias", "gradient"),  # the reduced gradient is wrong on every rank
    ("loss_scale", "worker0", "net1.bias", "gradient"),
    ("skip_bucket", "worker0", "net1.bias", "gradient"),  # one bucket: all of it left unreduced
    ("rank_lr", "worker1", "net1.bias", "parameter"),  # gradients right, the last rank's update wrong
])
def test_a_planted_bug_is_named_by_parameter_and_step(plant, rank, param, what):
    report = ddp.run(ddp.Config(steps=2, plant=plant), world_size=2, seed=5)
    assert report.contract_ok and not report.ok
    first = report.mismatches[0]
    assert (first.step, first.rank, first.param, first.what) == (0, rank, param, what)
    assert first.max_abs > 1e3 * first.atol  # far past the bound, which the line names
    with pytest.raises(GradientMismatch) as caught:
        ddp.check(report)
    text = str(caught.value)
    assert f"{what} of {param!r} on {rank} at step 0 differs from the baseline" in text
    assert f"or: import rpc_harness; rpc_harness.run_scenario('ddp', {{'steps': 2, 'plant': {plant!r}}}, world_size=2, seed=5)" in text


def test_a_slow_rank_changes_no_gradient():
    report = ddp.run(ddp.Config(steps=3), world_size=2, seed=6, faults="delay:worker1@ddp.step=0.05s")
    ddp.check(report)
    fired = report.world.fired_faults()
    assert [(f.rank, f.point, f.hit) for f in fired] == [(1, "ddp.step", hit) for hit in (1, 2, 3)]
    assert report.grads_checked == 2 * 3 * N_PARAMS and not report.mismatches


def test_a_rank_slow_in_the_reducers_all_reduce_changes_no_gradient():
    # DDP's reducer issues it from C++ inside backward(), once a step (one bucket).
    report = ddp.run(ddp.Config(steps=3), world_size=2, seed=6, faults="delay:worker1@c10d.all_reduce=0.05s")
    ddp.check(report)
    fired = report.world.fired_faults()
    assert [(f.rank, f.point, f.hit) for f in fired] == [(1, "c10d.all_reduce", hit) for hit in (1, 2, 3)]
    assert report.grads_checked == 2 * 3 * N_PARAMS and not report.mismatches
    assert report.details["params_checked"] == 2 * 3 * N_PARAMS


def test_a_rank_killed_inside_the_reducers_all_reduce_ends_the_world_naming_it_the_collective_and_the_step():
    report = ddp.run(CI, world_size=3, seed=7, faults="kill:worker1@c10d.all_reduce#2")
    ddp.check(report)  # the contract: the kill was planned, and the world ended as it should
    world = report.world
    assert not world.timed_out and world["worker1"].status == "killed"
    assert [(f.kind, f.point, f.hit) for f in world["worker1"].fired_faults()] == [("kill", "c10d.all_reduce", 2)]
    assert report.contract_note.startswith("worker1 killed as planned at c10d.all_reduce #2, during ddp.step #2")
    assert (report.details["origin"], report.details["during"]) == ("worker1", "ddp.step #2")
    # No survivor hung or finished: each raised from its all-reduce or was stopped.
    assert {world[name].status for name in ("worker0", "worker2")} <= {"raised", "stopped"}
    # The world's report places the victim inside that all-reduce: entered, never completed.
    assert 1 in ranks_inside(world.collectives, "all_reduce"), world.collectives
    assert "rank 1 (worker1): killed by SIGKILL as the fault plan asked" in world.report()


def test_a_killed_rank_ends_the_world_named_and_nobody_hangs():
    report = ddp.run(CI, world_size=3, seed=7, faults="kill:worker1@ddp.step#3")
    ddp.check(report)  # the contract: the kill was planned, and the world ended as it should
    world = report.world
    assert not world.timed_out and world["worker1"].status == "killed"
    assert [(f.kind, f.hit) for f in world["worker1"].fired_faults()] == [("kill", 3)]
    assert report.contract_note.startswith("worker1 killed as planned at ddp.step #3")
    assert report.details["origin"] == "worker1"
    # The survivors were in a collective with it: each raised from there or was stopped, none finished.
    assert {world[name].status for name in ("worker0", "worker2")} <= {"raised", "stopped"}
    assert report.grads_checked == 0 and "not checked" in report.outcome_note


def test_a_raise_in_one_ranks_step_is_reported_from_that_rank():
    report = ddp.run(CI, world_size=3, seed=8, faults="raise:worker2@ddp.step#2")
    ddp.check(report)
    world = report.world
    assert world["worker2"].status == "raised" and "InjectedFault" in world["worker2"].error
    assert report.details["origin"] == "worker2"
    assert report.contract_note.startswith("worker2 raised as planned at ddp.step #2")
    # The peers' errors come after it, as consequences, never as the origin.
    for name in ("worker0", "worker1"):
        assert world[name].status in ("raised", "stopped")
        assert f"{name} raised as planned" not in report.contract_note
