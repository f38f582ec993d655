"""The RNN judge on hand-made worlds and records, clause by clause: the
records it reads, each contract verdict with its whole note, the
comparison's counts, and whether the loss falls. (Found unchecked by
mutation testing, tools/mutation.py.)"""

from __future__ import annotations

import math

import pytest
import torch

import rpc_harness
from rpc_harness.events import FaultFired
from rpc_harness.result import HUNG, KILLED, OK, RAISED
from rpc_harness.scenarios import rnn
from rpc_harness.scenarios.rnn.judge import compare, contract, epoch_means, outcome, records

NAMES = rnn.names(4)  # ps0, ps1, trainer0, trainer1


def rank(i, status=OK, value=None, error=None, events=()):
    return rpc_harness.RankOutcome(
        i,
        NAMES[i],
        status=status,
        value=value,
        error=error,
        events=list(events),
        signal="SIGKILL" if status == KILLED else None,
    )


def world(ranks, deadline=60.0, timed_out=False, faults=""):
    return rpc_harness.WorldResult(
        names=NAMES,
        seed=0,
        faults=rpc_harness.FaultPlan.parse(faults),
        deadline=deadline,
        ranks=ranks,
        timed_out=timed_out,
    )


def test_records_are_the_finished_trainers_values():
    w = world(
        [
            rank(0, value={"x": 1}),
            rank(1),
            rank(2, value={"steps": []}),
            rank(3, RAISED, value={"a": 1}),
        ]
    )
    assert records(w) == {"trainer0": {"steps": []}}
    assert records(world([rank(0), rank(1), rank(2, value=[1]), rank(3, KILLED)])) is None


def test_a_world_where_every_rank_finished_meets_the_contract():
    assert (
        contract(world([rank(i) for i in range(4)]), None, rnn.Config()).note
        == "every rank finished"
    )


def test_a_trainer_killed_as_planned_is_excused():
    verdict = contract(world([rank(0), rank(1), rank(2), rank(3, KILLED)]), None, rnn.Config())
    assert (verdict.ok, verdict.note) == (
        True,
        "killed as planned: trainer1; every other rank finished",
    )


def test_a_failed_rank_without_a_killed_server_fails_the_contract_naming_it():
    verdict = contract(
        world([rank(0), rank(1), rank(2, RAISED, error="ValueError: x"), rank(3)]),
        None,
        rnn.Config(),
    )
    assert not verdict.ok and verdict.note.startswith("rank 2 (trainer0): raised ValueError: x")


def test_a_world_past_its_deadline_fails_the_contract_with_its_headline():
    w = world([rank(0), rank(1), rank(2, HUNG), rank(3)], deadline=9.0, timed_out=True)
    verdict = contract(w, None, rnn.Config())
    assert not verdict.ok
    assert verdict.note == f"the world ran past its deadline of 9s: {w.report().splitlines()[0]}"


def server_killed(*trainers, deadline=60.0, kill=True):
    """ps1 killed at t=100; each trainer: (status, error, seconds after the kill it raised, or None)."""
    fired = FaultFired(100.0, 1, "kill:ps1@ps.forward#3", "kill", "ps.forward", 3).as_event()
    ranks = [rank(0), rank(1, KILLED, events=[fired] if kill else [])]
    for i, (status, error, after) in enumerate(trainers, start=2):
        events = (
            []
            if after is None
            else [{"t": 100.0 + after, "rank": i, "kind": "raised", "error": error}]
        )
        ranks.append(rank(i, status, error=error, events=events))
    return world(ranks, deadline=deadline, faults="kill:ps1@ps.forward#3")


DIED = "RuntimeError: parameter server 'ps1' died: eof"


def test_a_killed_server_named_fast_by_the_trainers_meets_the_contract():
    verdict = contract(server_killed((RAISED, DIED, 0.5), (RAISED, DIED, 1.0)), None, rnn.Config())
    assert verdict.ok
    assert verdict.note == (
        "trainer0 failed 0.50s after 'ps1' was killed, naming it; "
        "trainer1 failed 1.00s after 'ps1' was killed, naming it"
    )
    assert verdict.details == {
        "killed_servers": ["ps1"],
        "ps_lost": [
            {"trainer": "trainer0", "server": "ps1", "seconds": 0.5},
            {"trainer": "trainer1", "server": "ps1", "seconds": 1.0},
        ],
    }


def test_a_trainer_that_finished_beside_one_that_named_the_server_is_fine():
    assert contract(server_killed((RAISED, DIED, 0.5), (OK, None, None)), None, rnn.Config()).ok


@pytest.mark.parametrize(
    ("w", "problem"),
    [
        (
            server_killed((RAISED, DIED, 20.0), (OK, None, None), deadline=60.0),
            "rank 2 (trainer0) named the dead server only 20.00s after the kill, past 0.25 of the 60s deadline: "
            "not fail-fast",
        ),
        (
            server_killed((RAISED, "RuntimeError: eof", 0.5), (OK, None, None)),
            "rank 2 (trainer0): raised RuntimeError: eof (while starting) (expected a trainer raising "
            "'parameter server 'ps1' died')",
        ),
        (
            server_killed((HUNG, DIED, None), (OK, None, None)),
            "rank 2 (trainer0): had not joined the RPC world when the bring-up budget ran out (expected a trainer "
            "raising 'parameter server 'ps1' died')",
        ),
        (
            server_killed((RAISED, DIED, None), (OK, None, None)),
            "rank 2 (trainer0) named the dead server, but the kill or the failure left no event",
        ),
        (
            server_killed((RAISED, DIED, 0.5), (OK, None, None), kill=False),
            "rank 2 (trainer0) named the dead server, but the kill or the failure left no event",
        ),
        (
            server_killed((OK, None, None), (OK, None, None)),
            "ps1 was killed but no trainer reported it (every trainer finished)",
        ),
    ],
)
def test_a_killed_server_breaks_the_contract_when_named_late_wrongly_or_not_at_all(w, problem):
    verdict = contract(w, None, rnn.Config())
    assert (verdict.ok, verdict.note) == (False, problem)


def test_a_server_named_at_exactly_the_share_of_the_deadline_is_fail_fast():
    assert contract(server_killed((RAISED, DIED, 15.0), (OK, None, None)), None, rnn.Config()).ok


def step(epoch, loss, grads=None, params=None):
    return {
        "epoch": epoch,
        "loss": torch.tensor(loss),
        "grads": grads or {},
        "params": params or {},
    }


def tensors(**named):
    return {
        name.replace("__", "/"): torch.tensor([value], dtype=torch.float64)
        for name, value in named.items()
    }


def run(*steps):
    return {"trainer": {"trainer": "trainer", "steps": list(steps)}}


def test_the_comparison_counts_gradients_and_parameters_by_owner():
    a = run(step(0, 1.0, tensors(ps0__w=1.0, ps1__v=2.0), tensors(ps0__w=0.5)))
    result = compare(a, a, rnn.Config(), seed=1)
    assert (result.checked, result.expected, result.mismatches, result.max_diff) == (2, 2, [], 0.0)
    assert result.details == {
        "max_param_diff": 0.0,
        "params_checked": 1,
        "params_expected": 1,
        "tolerance": {"rtol": rnn.Config().rtol, "atol": rnn.Config().atol, "device": "cpu"},
        "tensors": ["ps0/w", "ps1/v"],
    }


def test_the_comparison_finds_a_gradient_a_parameter_and_a_loss_naming_the_owner():
    a = run(step(0, 1.0, tensors(ps0__w=1.0, ps1__v=2.5), tensors(ps0__w=0.75)))
    e = run(step(0, 2.0, tensors(ps0__w=1.0, ps1__v=2.0), tensors(ps0__w=0.5)))
    result = compare(a, e, rnn.Config(), seed=1)
    assert [(m.rank, m.what) for m in result.mismatches] == [
        ("ps1", "gradient"),
        ("ps0", "parameter after the optimizer step"),
        ("trainer", "loss"),
    ]
    assert result.max_diff == 0.5 and result.details["max_param_diff"] == 0.25
    assert result.mismatches[0].step == 0  # one trainer: steps by number


def test_a_run_of_another_length_or_with_parameters_never_compared_is_a_mismatch():
    e = run(
        step(0, 1.0, tensors(ps0__w=1.0), tensors(ps0__w=0.5)),
        step(0, 1.0, tensors(ps0__w=1.0), tensors(ps0__w=0.5)),
    )
    a = run(step(0, 1.0, tensors(ps0__w=1.0), tensors(ps0__w=0.5)))
    result = compare(a, e, rnn.Config(), seed=1)
    assert [m.what for m in result.mismatches] == [
        "number of steps",
        "parameter after the optimizer step",
    ]
    assert (
        result.mismatches[1].param
        == "1 of the 2 parameter tensors the baseline has (never compared)"
    )
    assert (result.checked, result.expected) == (1, 2)
    assert math.isinf(result.mismatches[1].max_abs) and result.mismatches[1].rank == "trainer"


def test_steps_of_several_trainers_are_labelled_with_the_trainer():
    both = {
        t: {"trainer": t, "steps": [step(0, 1.0, tensors(ps0__w=1.0))]}
        for t in ("trainer0", "trainer1")
    }
    other = {
        t: {"trainer": t, "steps": [step(0, 1.0, tensors(ps0__w=2.0))]}
        for t in ("trainer0", "trainer1")
    }
    assert [m.step for m in compare(both, other, rnn.Config(), seed=1).mismatches] == [
        "0 of trainer0",
        "0 of trainer1",
    ]


def test_epoch_means_are_by_epoch_in_order():
    assert epoch_means([step(1, 4.0), step(0, 1.0), step(0, 3.0)]) == [2.0, 4.0]


def test_the_outcome_is_a_falling_mean_loss_for_every_trainer():
    falling = {
        "trainer0": {"steps": [step(0, 3.0), step(0, 1.0), step(1, 1.0)]},
        "trainer1": {"steps": [step(0, 2.0), step(1, 1.0)]},
    }
    result = outcome(falling, falling, rnn.Config())
    assert result.ok and result.note == (
        "trainer0: mean loss 2.000 -> 1.000 over 2 epochs; "
        "trainer1: mean loss 2.000 -> 1.000 over 2 epochs"
    )
    assert (result.metric, result.steps) == (1.0, 3)
    assert result.history == [2.5, 1.0] and result.baseline_history == [2.5, 1.0]
    assert result.details == {"epoch_losses": {"trainer0": [2.0, 1.0], "trainer1": [2.0, 1.0]}}


def test_a_loss_that_does_not_fall_or_a_single_epoch_is_not_ok():
    flat = {
        "trainer0": {"steps": [step(0, 1.0), step(1, 1.0)]},
        "trainer1": {"steps": [step(0, 1.0)]},
    }
    result = outcome(flat, flat, rnn.Config())
    assert not result.ok
    assert result.note == (
        "trainer0: mean loss did not fall: first epoch 1.0000, last 1.0000; "
        "trainer1: only 1 epoch, cannot tell whether the loss falls"
    )
