"""The FSDP2 scenario: a small transformer under fully_shard, its gathered
gradients, AdamW state and parameters at every step against one process on
the global batch; fully_shard's options; planted bugs named by parameter,
step and the rank whose shard holds them; the fault contracts."""

from __future__ import annotations

import pytest

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
