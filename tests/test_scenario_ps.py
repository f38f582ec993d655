"""The parameter-server scenario: real worlds checked gradient for gradient
against the single-process baseline, under kills and message faults, plus a
planted perturbation that the check must catch."""

from __future__ import annotations

import sys
import types

import pytest
import torch

import harness
from scenarios import parameter_server as ps
from scenarios._common import ScenarioReport

CI = ps.Config()
N_PARAMS = 8  # conv1, conv2, fc1, fc2: weight and bias each


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
    report = ps.run(CI, world_size=3, seed=2, faults="msgfail:trainer1@RREF_USER_DELETE=1")
    ps.check(report)
    assert report.steps == 2 * CI.batches
    assert all(o.status == "ok" for o in report.world)


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
    with pytest.raises(harness.GradientMismatch) as caught:
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
        "Replay: scenarios.parameter_server.run(",
    ):
        assert part in message, part


def test_wrong_seed_baseline_differs():
    # The check is only as good as its baseline's sensitivity: one seed off
    # and step 0's gradients already differ.
    config = ps.Config(batches=1)
    right = ps.baseline(config, 2, seed=4)
    again = ps.baseline(config, 2, seed=4)
    wrong = ps.baseline(config, 2, seed=5)
    same = harness.gradcheck.compare(
        right.steps[0].grads, again.steps[0].grads, scenario="ps", step=0, rank="trainer1", seed=4
    )
    diff = harness.gradcheck.compare(
        right.steps[0].grads, wrong.steps[0].grads, scenario="ps", step=0, rank="trainer1", seed=4
    )
    assert same == (0.0, [])
    assert len(diff[1]) == N_PARAMS


def test_synthetic_digits_are_seeded_per_trainer():
    config = ps.Config(batches=2, batch_size=8)
    a = ps.trainer_batches(config, 0, "trainer1")
    assert len(a) == 2 and a[0][0].shape == (8, 1, 28, 28) and a[0][1].shape == (8,)
    assert torch.equal(a[0][0], ps.trainer_batches(config, 0, "trainer1")[0][0])
    assert not torch.equal(a[0][0], ps.trainer_batches(config, 0, "trainer2")[0][0])
    assert not torch.equal(a[0][0], ps.trainer_batches(config, 1, "trainer1")[0][0])
    x, y = ps.held_out_set(ps.Config(test_size=500), 0)
    assert set(y.tolist()) == set(range(10))


def _fake_torchvision(images: torch.Tensor, labels: torch.Tensor) -> types.ModuleType:
    class MNIST:
        def __init__(self, root, train=True, download=False):
            assert not download and root == "/data/mnist"
            self.data, self.targets = images, labels

    module = types.ModuleType("torchvision")
    module.datasets = types.SimpleNamespace(MNIST=MNIST)
    return module


def test_mnist_is_read_through_torchvision_only_when_pointed_at(monkeypatch):
    images = torch.randint(0, 256, (64, 28, 28), dtype=torch.uint8)
    labels = torch.randint(0, 10, (64,))
    monkeypatch.setitem(sys.modules, "torchvision", _fake_torchvision(images, labels))
    config = ps.Config(batches=2, batch_size=4, mnist_root="/data/mnist")
    assert ps.data_source(config) == "mnist:/data/mnist"
    x, y = ps.trainer_batches(config, 0, "trainer1")[0]
    raw = (x.squeeze(1) * 0.3081 + 0.1307) * 255.0
    matches = [
        int(torch.nonzero((images.float() - img).abs().amax(dim=(1, 2)) < 1e-3)[0]) for img in raw
    ]
    assert labels[matches].tolist() == y.tolist()
    assert ps.data_source(ps.Config()) == "synthetic"


def test_mnist_root_without_torchvision_falls_back_to_synthetic(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchvision", None)  # import raises ImportError
    config = ps.Config(batches=1, batch_size=4, mnist_root="/data/mnist")
    assert ps.data_source(config).startswith("synthetic (torchvision unavailable")
    x, _ = ps.trainer_batches(config, 0, "trainer1")[0]
    assert torch.equal(
        x, ps.trainer_batches(ps.Config(batches=1, batch_size=4), 0, "trainer1")[0][0]
    )


def test_bad_plans_and_sizes_are_refused_before_anything_starts():
    with pytest.raises(harness.FaultPlanError, match="unknown failpoint"):
        ps.run(CI, world_size=2, faults="kill:trainer1@trainer.stepp")
    with pytest.raises(ValueError, match="world_size >= 2"):
        ps.names(1)


def _server_killed_world(raise_after: float, error: str) -> harness.WorldResult:
    from harness.result import RankOutcome

    server = RankOutcome(0, "parameter_server", status="killed", signal="SIGKILL")
    server.events = [
        {"t": 100.0, "kind": "fault", "fault_kind": "kill", "point": "ps.forward", "hit": 4}
    ]
    trainer = RankOutcome(1, "trainer1", status="raised", error=error)
    trainer.events = [{"t": 100.0 + raise_after, "kind": "raised", "error": error}]
    others = RankOutcome(2, "trainer2", status="stopped")
    plan = harness.FaultPlan.parse("kill:parameter_server@ps.forward#4")
    return harness.WorldResult(
        names=ps.names(3), seed=0, faults=plan, deadline=60.0, ranks=[server, trainer, others]
    )


@pytest.mark.parametrize(
    ("raise_after", "error", "ok", "note"),
    [
        (
            0.02,
            "RuntimeError: trainer1: the parameter server 'parameter_server' (rank 0) is gone",
            True,
            "failed fast",
        ),
        (
            30.0,
            "RuntimeError: trainer1: the parameter server 'parameter_server' (rank 0) is gone",
            False,
            "30.00s after the kill",
        ),
        (
            0.02,
            "RuntimeError: eof (this error originated at tensorpipe/...)",
            False,
            "without naming 'parameter_server'",
        ),
    ],
)
def test_server_kill_contract_needs_fast_attribution(raise_after, error, ok, note):
    report = ScenarioReport(
        scenario="ps", world_size=3, seed=0, steps=0, metric_name="accuracy", metric=0.0
    )
    ps._server_killed_contract(report, _server_killed_world(raise_after, error))
    assert report.contract_ok is ok
    assert note in report.contract_note
