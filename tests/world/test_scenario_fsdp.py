"""The FSDP2 scenario: a small transformer under fully_shard, its gathered
gradients, AdamW state and parameters at every step against one process on
the global batch; fully_shard's options; planted bugs named by parameter,
step and the rank whose shard holds them; the fault contracts, at the
scenario's step and inside the all-gathers and reduce-scatters FSDP2
issues."""

from __future__ import annotations

import pytest
from collective_reports import ranks_inside

from rpc_harness import GradientMismatch
from rpc_harness.scenarios import fsdp

SHORT = fsdp.Config(steps=2)


def tensors(config):
    return len(list(fsdp.build_model(config, 0).parameters()))


def test_every_gradient_state_and_parameter_matches_the_baseline_at_every_step():
    report = fsdp.run(fsdp.Config(steps=3), world_size=2, seed=3)
    fsdp.check(report)
    n = tensors(fsdp.Config())
    assert report.grads_expected == report.grads_checked == 3 * n
    # the parameters and both AdamW moments, every step
    assert report.details["others_checked"] == report.details["others_expected"] == 3 * 3 * n
    assert report.details["worst_grad_ratio"] < 1 and report.details["worst_param_ratio"] <= 1
    assert report.history[-1] < report.history[0]
    assert report.history == pytest.approx(report.baseline_history, rel=1e-4)


@pytest.mark.parametrize(("options", "world_size"), [
    ({"reshard_after_forward": "false", "activation_checkpointing": True}, 2),
    ({"reshard_after_forward": "2"}, 4),
    ({"mixed_precision": True}, 2),
], ids=["no-reshard,checkpointing", "reshard-to-2", "mixed-precision"])
def test_fully_shard_options_train_as_the_baseline_does(options, world_size):
    report = fsdp.run(fsdp.Config(steps=2, **options), world_size=world_size, seed=4)
    fsdp.check(report)
    assert report.grads_checked == 2 * tensors(SHORT)


@pytest.mark.parametrize(("plant", "rank", "param", "what"), [
    ("shifted_shard", "worker0", "blocks.0.down.bias", "gradient"),
    ("loss_scale", "worker0", "blocks.0.down.bias", "gradient"),
    # Gradients right; the last rank's AdamW steps its own shards wrong, and is named.
    ("rank_lr", "worker1", "blocks.0.down.bias", "parameter"),
])
def test_a_planted_bug_is_named_by_parameter_step_and_shard(plant, rank, param, what):
    report = fsdp.run(fsdp.Config(steps=2, plant=plant), world_size=2, seed=5)
    assert report.contract_ok and not report.ok
    first = report.mismatches[0]
    assert (first.step, first.rank, first.param, first.what) == (0, rank, param, what)
    assert first.max_abs > 1e3 * first.atol
    with pytest.raises(GradientMismatch, match=f"{what} of {param!r} on {rank} at step 0 differs"):
        fsdp.check(report)


def test_a_slow_rank_changes_nothing():
    report = fsdp.run(SHORT, world_size=2, seed=6, faults="delay:worker0@fsdp.step=0.05s")
    fsdp.check(report)
    assert [(f.rank, f.point, f.hit) for f in report.world.fired_faults()] == [(0, "fsdp.step", 1),
                                                                              (0, "fsdp.step", 2)]
    assert report.grads_checked == 2 * tensors(SHORT)


def test_a_killed_rank_ends_the_world_named_and_nobody_hangs():
    report = fsdp.run(SHORT, world_size=3, seed=7, faults="kill:worker2@fsdp.step#2")
    fsdp.check(report)
    world = report.world
    assert not world.timed_out and world["worker2"].status == "killed"
    assert report.contract_note.startswith("worker2 killed as planned at fsdp.step #2")
    assert {world[name].status for name in ("worker0", "worker1")} <= {"raised", "stopped"}


def test_a_rank_slow_in_fsdps_all_gathers_and_reduce_scatters_changes_nothing():
    plan = "delay:worker1@c10d.all_gather_into_tensor=0.01s,delay:worker1@c10d.reduce_scatter_tensor=0.02s"
    report = fsdp.run(SHORT, world_size=2, seed=6, faults=plan)
    fsdp.check(report)
    hits = {}
    for f in report.world.fired_faults():
        assert f.rank == 1
        hits.setdefault(f.point, []).append(f.hit)
    # fully_shard on each block and on the root: one reduce-scatter of each
    # unit's gradients a step, and at least one all-gather of its parameters.
    units = SHORT.layers + 1
    assert hits["c10d.reduce_scatter_tensor"] == list(range(1, SHORT.steps * units + 1))
    gathers = hits["c10d.all_gather_into_tensor"]
    assert gathers == list(range(1, len(gathers) + 1)) and len(gathers) >= SHORT.steps * units
    assert report.grads_checked == 2 * tensors(SHORT) and not report.mismatches
    assert report.details["others_checked"] == report.details["others_expected"] == 3 * 2 * tensors(SHORT)


def test_a_rank_killed_inside_a_reduce_scatter_ends_the_world_naming_it_the_collective_and_the_step():
    # The first reduce-scatter of the second step's backward.
    kill = f"kill:worker1@c10d.reduce_scatter_tensor#{SHORT.layers + 2}"
    report = fsdp.run(SHORT, world_size=2, seed=7, faults=kill)
    fsdp.check(report)
    world = report.world
    assert not world.timed_out and world["worker1"].status == "killed"
    assert report.contract_note.startswith(
        f"worker1 killed as planned at c10d.reduce_scatter_tensor #{SHORT.layers + 2}, during fsdp.step #2")
    assert (report.details["origin"], report.details["during"]) == ("worker1", "fsdp.step #2")
    assert world["worker0"].status in ("raised", "stopped")
    assert 1 in ranks_inside(world.collectives, "reduce_scatter_tensor"), world.collectives
    assert "rank 1 (worker1): killed by SIGKILL as the fault plan asked" in world.report()


def test_a_raise_in_one_ranks_step_is_reported_from_that_rank():
    report = fsdp.run(SHORT, world_size=3, seed=8, faults="raise:worker1@fsdp.step#2")
    fsdp.check(report)
    world = report.world
    assert world["worker1"].status == "raised" and "InjectedFault" in world["worker1"].error
    assert report.details["origin"] == "worker1"
    assert report.contract_note.startswith("worker1 raised as planned at fsdp.step #2")
    for name in ("worker0", "worker2"):  # its peers follow it, never as the origin
        assert world[name].status in ("raised", "stopped")
        assert f"{name} raised as planned" not in report.contract_note
