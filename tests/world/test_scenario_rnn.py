"""The distributed RNN scenario: real worlds at several sizes, every gradient
against the single-process baseline, the loss falling, and the fault
contracts (a killed parameter server is named fast; message failures and a
slow server change no gradient). The first tests need no world at all."""

from __future__ import annotations

import pytest

from rpc_harness import GradientMismatch
from rpc_harness.scenarios import rnn

# Small enough that a world is about a second; still several epochs, both
# dropout paths and a two-layer LSTM.
SMALL = rnn.Config(sentences=120, epochs=3)


# -- no world -------------------------------------------------------------------


@pytest.mark.parametrize("world_size", [2, 3])
def test_gradients_match_baseline(world_size):
    report = rnn.run(SMALL, world_size=world_size, seed=world_size)
    rnn.check(report)
    plan = rnn.layout(world_size)
    # Every rank's gradients were read in its own autograd context and compared.
    tensors = report.details["tensors"]
    assert f"{plan.embedding}/encoder.weight" in tensors
    assert f"{plan.decoder}/decoder.weight" in tensors and f"{plan.decoder}/decoder.bias" in tensors
    assert "trainer/rnn.weight_ih_l1" in tensors
    steps = len(rnn.batches(SMALL, world_size, 0, 1)) * SMALL.epochs
    assert report.steps == steps
    # every step, every parameter: its gradient and its value after the step
    assert report.grads_checked == report.details["params_checked"] == steps * len(tensors)
    assert report.max_grad_diff <= SMALL.atol and report.details["max_param_diff"] <= SMALL.atol
    assert report.history == pytest.approx(report.baseline_history, rel=1e-5)
    losses = report.details["epoch_losses"]["trainer"]
    assert len(losses) == SMALL.epochs and losses[-1] < losses[0]


def test_several_trainers_share_the_servers():
    config = rnn.Config(sentences=120, epochs=2)
    report = rnn.run(config, world_size=4, seed=4)
    rnn.check(report)
    assert set(report.details["epoch_losses"]) == {"trainer0", "trainer1"}
    tensors = report.details["tensors"]
    assert "trainer0/rnn.weight_hh_l0" in tensors and "trainer1/rnn.weight_hh_l0" in tensors


def test_planted_gradient_bug_is_caught():
    report = rnn.run(rnn.Config(sentences=120, epochs=2, perturb=1e-3), world_size=2, seed=5)
    assert report.contract_ok and not report.ok
    first = report.mismatches[0]
    # The perturbation touches exactly one gradient on step 0.
    assert (first.step, first.rank, first.param, first.what) == (
        0,
        "ps",
        "ps/decoder.bias",
        "gradient",
    )
    assert [m for m in report.mismatches if m.step == 0 and m.what == "gradient"] == [first]
    with pytest.raises(GradientMismatch) as caught:
        rnn.check(report)
    text = str(caught.value)
    for part in (
        "'ps/decoder.bias' on ps at step 0",
        "max abs diff",
        "atol=1e-06, rtol=1e-05",
        "seed 5",
        "Replay: rpc-harness replay rpch1_",
        "or: import rpc_harness; rpc_harness.run_scenario('rnn', {'sentences': 120, 'epochs': 2, 'perturb': 0.001}, world_size=2, seed=5)",
    ):
        assert part in text


@pytest.mark.parametrize(("world_size", "victim"), [(2, "ps"), (3, "ps1")])
def test_killed_parameter_server_is_named_fast(world_size, victim):
    report = rnn.run(SMALL, world_size=world_size, seed=1, faults=f"kill:{victim}@ps.forward#3")
    rnn.check(report)  # contract_ok: attributed, fast, nothing else failed
    world = report.world
    assert report.details["killed_servers"] == [victim]
    assert [f.kind for f in world[victim].fired_faults()] == ["kill"]
    trainer = world["trainer"]
    assert trainer.status == "raised"
    assert f"parameter server {victim!r} died" in trainer.error
    assert not world.timed_out
    assert report.details["ps_lost"][0]["server"] == victim
    others = [o for o in world if o.name not in (victim, "trainer")]
    assert all(o.status in ("ok", "stopped") and not o.fired_faults() for o in others)


@pytest.mark.parametrize(
    ("world_size", "faults", "per_step", "once"),
    [
        # The trainer drops six RRefs: the two remote modules, their three
        # parameters and the optimizer made on the server.
        (2, "msgfail:trainer@RREF_USER_DELETE=1", 0, 6),
        # One a step: the step's cleanup messages to the two servers carry the
        # same payload, its context id, and torch counts failures per payload.
        (3, "msgfail:trainer@CLEANUP_AUTOGRAD_CONTEXT_REQ=1", 1, 0),
        # Sent by a server for every call that passes it one of its RRefs: four
        # a step (forward, gradients, parameters, optimizer step), three at set-up.
        (3, "msgfail:ps1@RREF_CHILD_ACCEPT=1", 4, 3),
    ],
)
def test_retried_message_failures_change_nothing(world_size, faults, per_step, once):
    report = rnn.run(SMALL, world_size=world_size, seed=6, faults=faults)
    rnn.check(report)
    assert report.world.ok and report.grads_checked > 0
    # The fault did fail sends, as many as the program sends of that type,
    # each once (the count), all from its target.
    world = report.world
    fault = world.faults.faults[0]
    sends = per_step * report.steps + once
    assert world.fault_counts() == {faults: sends}
    fired = world.fired_faults()
    assert {(f.rank, f.point, f.attempt) for f in fired} == {(world.names.index(fault.target), fault.point, 1)}
    assert sorted(f.hit for f in fired) == list(range(1, sends + 1))


def test_slow_parameter_server_gives_the_same_gradients():
    config = rnn.Config(sentences=120, epochs=2)
    report = rnn.run(config, world_size=2, seed=9, faults="delay:ps@ps.forward=0.01s")
    rnn.check(report)
    fired = report.world.fired_faults()
    assert len(fired) == 2 * report.steps  # embedding and decoder forward, every step
    ps = report.world.names.index("ps")
    assert {(f.rank, f.point, f.fault) for f in fired} == {(ps, "ps.forward", "delay:ps@ps.forward#1+=0.01s")}
    assert sorted(f.hit for f in fired) == list(range(1, 2 * report.steps + 1))
    assert report.grads_checked > 0


def test_live_server_that_raises_is_not_reported_dead():
    # The contract must not be met by blaming whichever server a failed call
    # went to: a server that raised is alive, and the world simply failed.
    report = rnn.run(SMALL, world_size=2, seed=2, faults="raise:ps@ps.forward#2")
    assert not report.contract_ok and not report.ok
    trainer = report.world["trainer"]
    assert trainer.status == "raised" and "InjectedFault" in trainer.error
    assert "died" not in trainer.error
    with pytest.raises(AssertionError, match="contract: rank 1 \\(trainer\\): raised"):
        rnn.check(report)
