"""The DDP + RPC tutorial scenario: trainers' DDP Linear over a RemoteModule
embedding on a parameter server, every trainer's gradients and parameters
at every step against one process; planted bugs named by parameter, step
and trainer; the fault contracts."""

from __future__ import annotations

import re

import pytest

from rpc_harness import GradientMismatch
from rpc_harness.scenarios import ddp_rpc

CI = ddp_rpc.Config()
N_PARAMS = 3  # the embedding's weight, the Linear's weight and bias


@pytest.mark.parametrize("world_size", [3, 4])
def test_every_trainers_gradients_and_parameters_match_the_baseline_at_every_step(world_size):
    report = ddp_rpc.run(CI, world_size=world_size, seed=3)
    ddp_rpc.check(report)
    trainers = world_size - 2
    assert report.grads_expected == report.grads_checked == trainers * CI.steps * N_PARAMS
    assert report.details["params_checked"] == report.details["params_expected"] == report.grads_checked
    assert report.details["worst_grad_ratio"] < 1 and report.details["worst_param_ratio"] < 1
    assert report.history[-1] < report.history[0]
    # The master drove the trainers; the server answered their lookups.
    assert set(report.world["master"].value["trainers"]) == set(ddp_rpc.trainer_names(world_size))


def test_every_rank_is_in_the_worlds_group_and_ddp_runs_over_the_trainers_subgroup_of_it():
    report = ddp_rpc.run(ddp_rpc.Config(steps=2), world_size=5, seed=4)
    ddp_rpc.check(report)
    world = report.world
    trainers = {world.names.index(name) for name in ddp_rpc.trainer_names(5)}
    for record in world["master"].value["trainers"].values():
        assert record["groups"] == {"default": [0, 1, 2, 3, 4], "ddp": sorted(trainers)}


@pytest.mark.parametrize(("plant", "rank", "param", "what"), [
    ("shifted_shard", "trainer0", "fc.bias", "gradient"),  # DDP's average carries the shift to every trainer
    ("loss_scale", "trainer0", "embedding.weight", "gradient"),
    # The last trainer's optimizer steps the server's embedding too: every trainer reads it wrong.
    ("rank_lr", "trainer0", "embedding.weight", "parameter"),
])
def test_a_planted_bug_is_named_by_parameter_step_and_trainer(plant, rank, param, what):
    report = ddp_rpc.run(ddp_rpc.Config(steps=2, plant=plant), world_size=4, seed=5)
    assert report.contract_ok and not report.ok
    first = report.mismatches[0]
    assert (first.step, first.rank, first.param, first.what) == (0, rank, param, what)
    assert first.max_abs > 1e3 * first.atol
    with pytest.raises(GradientMismatch, match=f"{what} of {param!r} on {rank} at step 0 differs"):
        ddp_rpc.check(report)


def test_a_slow_parameter_server_changes_nothing():
    report = ddp_rpc.run(ddp_rpc.Config(steps=2), world_size=4, seed=6, faults="delay:ps@ps.forward=0.02s")
    ddp_rpc.check(report)
    fired = report.world.fired_faults()
    assert len(fired) == 2 * 2 and {(f.rank, f.point) for f in fired} == {(1, "ps.forward")}  # a lookup a step
    assert report.grads_checked == 2 * 2 * N_PARAMS


def test_a_trainer_slow_at_its_ddp_all_reduce_changes_nothing():
    # DDP's gradient all-reduce, in the trainers' group alone: once a step (one bucket).
    plan = f"delay:trainer0@c10d.all_reduce:{ddp_rpc.TRAINER_GROUP}=0.05s"
    report = ddp_rpc.run(ddp_rpc.Config(steps=3), world_size=4, seed=9, faults=plan)
    ddp_rpc.check(report)
    fired = report.world.fired_faults()
    assert [(f.rank, f.point, f.hit) for f in fired] == [(2, "c10d.all_reduce:trainers", hit) for hit in (1, 2, 3)]
    assert report.grads_checked == report.grads_expected == 2 * 3 * N_PARAMS
    assert report.details["params_checked"] == report.grads_checked


def test_a_trainer_killed_inside_its_ddp_all_reduce_ends_the_world_naming_it_and_the_collective():
    plan = f"kill:trainer1@c10d.all_reduce:{ddp_rpc.TRAINER_GROUP}#2"
    report = ddp_rpc.run(ddp_rpc.Config(steps=3), world_size=4, seed=10, faults=plan, deadline=60)
    ddp_rpc.check(report)  # the contract: the kill was planned, and the world ended as it should
    world = report.world
    assert not world.timed_out and world["trainer1"].status == "killed"
    assert report.contract_note.startswith("trainer1 killed as planned at c10d.all_reduce:trainers #2")
    assert report.details["origin"] == "trainer1"
    # The collective world ended at the death, naming it, and says where it died.
    assert world.ended_by.startswith("rank 3 (trainer1) was killed by the fault plan")
    # DDP's one bucket: the Linear's 16 x 8 weight and 8 biases. trainer0
    # waits in it for trainer1, or has seen it fail (gloo's peer closed)
    # when the harness stops it: which comes first is the OS's; stopped at
    # once, its completion is not written.
    [inside] = [line for line in world.collectives if line.startswith("group 1 (trainers): ")]
    assert re.fullmatch(r"group 1 \(trainers\): every rank at all_reduce#\d+ \(collective #\d+, float32 \[136\]\); "
                        r"not completed on (ranks 2, 3|rank 3, failed on rank 2|"
                        r"rank 3, completion not written \(stopped first, or stuck before it could\) on rank 2)", inside), world.collectives
    assert report.grads_checked == 0 and "not checked" in report.outcome_note


def test_a_killed_trainer_ends_the_world_named_and_nobody_hangs():
    report = ddp_rpc.run(CI, world_size=4, seed=7, faults="kill:trainer1@trainer.step#3")
    ddp_rpc.check(report)
    world = report.world
    assert not world.timed_out and world["trainer1"].status == "killed"
    assert report.contract_note.startswith("trainer1 killed as planned at trainer.step #3")


def test_a_raise_in_a_trainer_is_reported_from_it_through_the_master_at_once():
    # trainer1, not trainer0: the master once waited on trainer0 first, which
    # sat in DDP's all-reduce waiting for trainer1 until the RPC timeout (the
    # deadline): the world hung (found by the property test).
    report = ddp_rpc.run(CI, world_size=4, seed=8, faults="raise:trainer1@optimizer.step#2", deadline=30)
    ddp_rpc.check(report)
    assert not report.world.timed_out and report.details["origin"] == "trainer1"
    assert report.contract_note.startswith(
        "trainer1 raised as planned at optimizer.step #2, during trainer.step #2 (reported by master")
    assert "InjectedFault" in report.world["master"].error and "trainer1" in report.world["master"].error
