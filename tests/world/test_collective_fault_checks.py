"""The fault checks ``rpc-harness run`` runs for the collective scenarios
(``ddp``, ``fsdp``, ``ddp_rpc``), each plan taken from the scenario as the
command takes it, at the sizes and budgets the command allows: a rank slow
inside the collectives its model issues changes nothing, and a rank killed
inside one ends the world with a verdict naming the rank, the collective
and the step, the victim placed inside that collective."""

from __future__ import annotations

import pytest
from collective_reports import ranks_inside

import rpc_harness
from rpc_harness.scenarios import ddp, ddp_rpc, fsdp

STEP = {"ddp": "ddp.step", "fsdp": "fsdp.step", "ddp_rpc": "trainer.step"}
# The collective each scenario's kill check aims at: the one its model issues.
COLLECTIVE = {"ddp": "c10d.all_reduce", "fsdp": "c10d.reduce_scatter_tensor",
              "ddp_rpc": f"c10d.all_reduce:{ddp_rpc.TRAINER_GROUP}"}
PACKAGES = {"ddp": ddp, "fsdp": fsdp, "ddp_rpc": ddp_rpc}


def plan(name, world_size, config, label):
    return PACKAGES[name].SCENARIO.fault_checks(world_size, config)[label]


def victim(name, world_size):
    """The rank each check aims at: the last rank (ddp_rpc: the last trainer)."""
    return (ddp_rpc.trainer_names(world_size) if name == "ddp_rpc" else PACKAGES[name].names(world_size))[-1]


# Each scenario at the smallest budget run allows and at its defaults; ddp
# with a gradient bucket per parameter (four all-reduces a step) too.
WORLDS = [
    ("ddp", 2, ddp.Config(steps=ddp.MIN_STEPS)),
    ("ddp", 3, ddp.Config(steps=4, bucket_cap_mb=1e-4)),
    ("fsdp", 2, fsdp.Config(steps=fsdp.MIN_STEPS, layers=1)),
    ("fsdp", 3, fsdp.Config()),
    ("ddp_rpc", 3, ddp_rpc.Config(steps=ddp_rpc.MIN_STEPS)),
    ("ddp_rpc", 4, ddp_rpc.Config()),
]
IDS = [f"{name}-w{size}-steps{config.steps}" for name, size, config in WORLDS]


@pytest.mark.parametrize(("name", "world_size", "config"), WORLDS, ids=IDS)
def test_runs_slow_check_delays_a_collective_the_model_issues_and_changes_nothing(name, world_size, config):
    report = rpc_harness.run_scenario(name, config, world_size=world_size, seed=11,
                                      faults=plan(name, world_size, config, "slow"))
    PACKAGES[name].check(report)  # every gradient as the baseline's, the contract kept
    assert report.grads_checked == report.grads_expected > 0
    last = report.world.names.index(victim(name, world_size))
    at = {f.point for f in report.world.fired_faults() if f.rank == last}
    # The victim was delayed inside the collective the kill check aims at (fsdp: its all-gathers too).
    assert COLLECTIVE[name] in at, report.world.fired_faults()


@pytest.mark.parametrize(("name", "world_size", "config"), WORLDS, ids=IDS)
def test_runs_kill_check_kills_inside_a_collective_and_the_verdict_names_it_and_the_step(name, world_size, config):
    kill = plan(name, world_size, config, "kill")
    report = rpc_harness.run_scenario(name, config, world_size=world_size, seed=12, faults=kill)
    PACKAGES[name].check(report)  # the contract: the kill was planned, and the world ended as it should
    world, dead = report.world, victim(name, world_size)
    assert not world.timed_out and world[dead].status == "killed"
    [fired] = world[dead].fired_faults()
    assert (fired.kind, fired.point) == ("kill", COLLECTIVE[name]), fired
    # In one of the first three steps (fsdp and ddp_rpc: a collective a unit
    # or a bucket a step, aimed at step min(3, steps)).
    step = world[dead].hits[STEP[name]]
    assert 1 <= step <= min(3, config.steps)
    if name != "ddp" or config.bucket_cap_mb == ddp.Config().bucket_cap_mb:
        assert step == min(3, config.steps)
    assert report.contract_note.startswith(
        f"{dead} killed as planned at {COLLECTIVE[name]} #{fired.hit}, during {STEP[name]} #{step}"), report.contract_note
    assert (report.details["origin"], report.details["during"]) == (dead, f"{STEP[name]} #{step}")
    # The world's report places the victim inside that collective: entered, never completed.
    op = COLLECTIVE[name].removeprefix("c10d.").partition(":")[0]
    inside = ranks_inside([line.partition(": ")[2] if line.startswith("group ") else line
                           for line in world.collectives], op)
    assert world.names.index(dead) in inside, world.collectives
    assert report.grads_checked == 0 and "not checked" in report.outcome_note


def test_with_one_rank_ddps_slow_check_still_delays_its_all_reduce_and_fsdps_its_step():
    # DDP all-reduces even alone; FSDP2 with one rank issues no collective
    # (a delay there would never fire and fail the world), and has no kill check.
    for name, config in (("ddp", ddp.Config(steps=2)), ("fsdp", fsdp.Config(steps=2))):
        assert "kill" not in PACKAGES[name].SCENARIO.fault_checks(1, config)
        report = rpc_harness.run_scenario(name, config, world_size=1, seed=13, faults=plan(name, 1, config, "slow"))
        PACKAGES[name].check(report)
        expected = {"ddp": "c10d.all_reduce", "fsdp": "fsdp.step"}[name]
        assert {f.point for f in report.world.fired_faults()} == {expected}
