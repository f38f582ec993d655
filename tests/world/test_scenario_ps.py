"""The parameter-server scenario: real worlds checked gradient for gradient
against the single-process baseline, under kills and message faults, plus a
planted perturbation that the check must catch."""

from __future__ import annotations

import pytest

import rpc_harness
from rpc_harness.scenarios import parameter_server as ps

CI = ps.Config()
N_PARAMS = 8  # conv1, conv2, fc1, fc2: weight and bias each


# One of the suite's slowest (pytest --durations): real training on the CPU, checked gradient for
# gradient against the single-process baseline, at 4 ranks as at 2.
@pytest.mark.parametrize("world_size", [2, 4])
def test_every_gradient_matches_the_baseline(world_size):
    report = ps.run(CI, world_size=world_size, seed=11)
    ps.check(report)
    trainers = ps.trainer_names(world_size)
    assert report.steps == len(trainers) * CI.batches
    assert report.grads_checked == report.steps * N_PARAMS
    # Steps were serial: each began at the version left by the one before.
    log = report.world["parameter_server"].value["steps"]
    assert [s["version"] for s in log] == [s["index"] for s in log] == list(range(report.steps))
    assert all(report.world[t].status == "ok" for t in trainers)
    assert sorted(report.details["order"]) == sorted(
        (t, i) for t in trainers for i in range(CI.batches)
    )
    assert report.metric > CI.min_accuracy
    assert report.details["baseline_accuracy"] == report.metric
    assert report.details["trainer_accuracy"] == {t: report.metric for t in trainers}
    assert report.history == pytest.approx(report.baseline_history, rel=1e-5)


@pytest.mark.parametrize("world_size", [3, 4])
def test_killed_trainer_leaves_the_others_finishing_with_matching_gradients(world_size):
    report = ps.run(CI, world_size=world_size, seed=5, faults="kill:trainer2@trainer.step#3")
    ps.check(report)
    world = report.world
    assert world["trainer2"].status == "killed"
    assert all(o.status == "ok" for o in world if o.name != "trainer2")
    # trainer2 died at the start of its third batch: its first two were applied.
    assert report.steps == (world_size - 2) * CI.batches + 2
    assert [b for t, b in report.details["order"] if t == "trainer2"] == [0, 1]
    assert report.details["reaped"] == ["trainer2"]


def test_trainer_killed_holding_the_step_lease_does_not_block_the_server():
    # trainer1 dies after its second backward, before its optimizer step: the
    # server must reap it, drop the unapplied step and let trainer2 go on.
    report = ps.run(CI, world_size=3, seed=7, faults="kill:trainer1@optimizer.step#2")
    ps.check(report)
    assert report.world["trainer1"].status == "killed"
    assert report.world["trainer2"].status == "ok"
    assert report.steps == CI.batches + 1
    assert report.details["reaped"] == ["trainer1"]
    assert [(d["trainer"], d["batch"]) for d in report.details["dropped_steps"]] == [
        ("trainer1", 1)
    ]


def test_a_frozen_trainer_is_reaped_and_the_others_finish():
    # Frozen, trainer2 keeps its connections open: the server's pings to it
    # time out instead of failing (the schedule of the intermittent hang).
    # Three timeouts in a row with no call from it make it dead.
    config = ps.Config(batches=8, ping_timeout=1.0)
    report = ps.run(config, world_size=4, seed=5, faults="freeze:trainer2@trainer.step#3")
    ps.check(report)
    world = report.world
    assert world["trainer2"].status == "killed" and "frozen (SIGSTOP)" in world["trainer2"].describe()
    assert report.details["reaped"] == ["trainer2"]
    assert [b for t, b in report.details["order"] if t == "trainer2"] == [0, 1]
    reaped = [e for e in world["parameter_server"].events if e.get("name") == "ps.reaped"]
    frozen_at = world["trainer2"].fired_faults()[0].t
    assert reaped[0]["t"] - frozen_at >= 3 * config.ping_timeout, "three pings timed out first"


# One of the suite's slowest (pytest --durations): the server's rule gives up on a frozen trainer
# after its pings' timeouts (9 s): the waiting is what is tested.
def test_a_rule_that_takes_timeouts_for_life_waits_on_a_frozen_trainer_until_it_gives_up():
    # The rule before the fix counted a timed-out ping as "alive but busy":
    # against a frozen trainer it never concludes (its give-up, 120 s, was
    # past the world's deadline: a bare hang). ping_attempts this high is that rule.
    config = ps.Config(batches=8, ping_timeout=1.0, ping_attempts=10**6)
    report = ps.run(config, world_size=4, seed=5, faults="freeze:trainer2@trainer.step#3", deadline=12)
    assert not report.ok and not report.world.timed_out
    server = report.world["parameter_server"]
    assert server.status == "raised" and "trainers ['trainer2'] neither finished nor died within 9s" in server.error


def test_killed_server_makes_trainers_fail_fast_naming_it():
    report = ps.run(CI, world_size=3, seed=3, faults="kill:parameter_server@ps.forward#4")
    ps.check(report)
    assert report.contract_ok, report.contract_note
    world = report.world
    assert world["parameter_server"].status == "killed"
    raised = [o for o in world if o.status == "raised"]
    assert raised and all("'parameter_server'" in o.error for o in raised)
    assert not world.timed_out
    assert "attribution_s" in report.details


def test_retried_message_failures_still_give_matching_gradients():
    # torch resends a failed RREF_USER_DELETE after ~1 s; nothing may be lost.
    plan = "msgfail:trainer1@RREF_USER_DELETE=1"
    report = ps.run(CI, world_size=3, seed=2, faults=plan)
    ps.check(report)
    assert report.steps == 2 * CI.batches
    assert all(o.status == "ok" for o in report.world)
    # The fault did fail trainer1's deletes, each once: of the server's RRef,
    # of the parameters' and of the optimizer made on the server.
    world = report.world
    assert world.fault_counts() == {plan: 1 + N_PARAMS + 1}
    assert {(f.rank, f.point, f.attempt) for f in world.fired_faults()} == {
        (world.names.index("trainer1"), "RREF_USER_DELETE", 1)}


def test_planted_unrecorded_update_is_caught_with_a_readable_message():
    # After step 3 the server nudges the parameters without logging it. Steps
    # 0..3 still match; step 4's gradient, taken at parameters the replay does
    # not know, and the final parameters must not.
    config = ps.Config(perturb_step=3)
    report = ps.run(config, world_size=2, seed=1)
    assert not report.ok and report.contract_ok and report.outcome_ok
    grad_steps = {m.step.split(" ")[0] for m in report.mismatches if m.what == "gradient"}
    assert "4" in grad_steps and not grad_steps & {"0", "1", "2", "3"}
    assert any(m.what == "parameter" and m.step.startswith("final") for m in report.mismatches)
    with pytest.raises(rpc_harness.GradientMismatch) as caught:
        ps.check(report)
    message = str(caught.value)
    first = next(m for m in report.mismatches if m.step.startswith("4 "))
    for part in (
        "ps: gradient of",
        "on trainer1 at step 4 (trainer1 batch 4, parameter version 4)",
        repr(first.param),
        "max abs diff",
        "tolerance atol=1e-06, rtol=1e-05",
        "seed 1",
        "Replay: rpc-harness replay rpch1_",
        "or: import rpc_harness; rpc_harness.run_scenario('ps', {'perturb_step': 3}, world_size=2, seed=1)",
    ):
        assert part in message, part
