"""The parameter-server scenario without a world: its baseline, its data,
input checks and the server-kill contract on hand-made results."""

from __future__ import annotations

import sys
import types

import pytest
import torch

import rpc_harness
from rpc_harness.scenarios import parameter_server as ps

CI = ps.Config()
N_PARAMS = 8  # conv1, conv2, fc1, fc2: weight and bias each


def test_wrong_seed_baseline_differs():
    # The check is only as good as its baseline's sensitivity: one seed off
    # and step 0's gradients already differ.
    config = ps.Config(batches=1)
    right = ps.baseline(config, 2, seed=4)
    again = ps.baseline(config, 2, seed=4)
    wrong = ps.baseline(config, 2, seed=5)
    same = rpc_harness.gradcheck.compare(
        right.steps[0].grads, again.steps[0].grads, scenario="ps", step=0, rank="trainer1", seed=4
    )
    diff = rpc_harness.gradcheck.compare(
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
    with pytest.raises(rpc_harness.FaultPlanError, match="unknown failpoint"):
        ps.run(CI, world_size=2, faults="kill:trainer1@trainer.stepp")
    with pytest.raises(rpc_harness.WorldSpecError, match="needs >= 2 ranks"):
        ps.names(1)


def _server_killed_world(raise_after: float, error: str) -> rpc_harness.WorldResult:
    from rpc_harness.events import FaultFired
    from rpc_harness.result import RankOutcome

    server = RankOutcome(0, "parameter_server", status="killed", signal="SIGKILL")
    server.events = [FaultFired(100.0, 0, "kill:parameter_server@ps.forward#4", "kill", "ps.forward", 4).as_event()]
    trainer = RankOutcome(1, "trainer1", status="raised", error=error)
    trainer.events = [{"t": 100.0 + raise_after, "kind": "raised", "error": error}]
    others = RankOutcome(2, "trainer2", status="stopped")
    plan = rpc_harness.FaultPlan.parse("kill:parameter_server@ps.forward#4")
    return rpc_harness.WorldResult(
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
    verdict = ps.judge.server_killed_contract(_server_killed_world(raise_after, error))
    assert verdict.ok is ok
    assert note in verdict.note


def _records(accuracy: float, steps: int):
    from rpc_harness.scenarios.parameter_server.judge import Records

    log = {"accuracy": accuracy, "steps": [{"trainer": "trainer1", "batch": i, "loss": 1.0} for i in range(steps)]}
    return Records(log, {"trainer1": {"accuracy": accuracy}})


@pytest.mark.parametrize(("accuracy", "steps", "ok"), [(0.49, 24, False), (0.51, 24, True), (0.49, 23, True)])
def test_the_accuracy_bar_judges_runs_of_the_steps_it_was_measured_at(accuracy, steps, ok):
    from rpc_harness.scenarios.parameter_server.judge import outcome

    expected = types.SimpleNamespace(steps=[types.SimpleNamespace(loss=1.0)] * steps, accuracy=accuracy)
    result = outcome(_records(accuracy, steps), expected, ps.Config(min_accuracy=0.5, min_accuracy_steps=24))
    assert result.ok is ok
    assert ("not judged" in result.note) is (steps < 24)
