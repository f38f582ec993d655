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
from rpc_harness.gradcheck import Mismatch
from rpc_harness.result import HUNG, KILLED, OK, RAISED
from rpc_harness.scenarios import rnn
from rpc_harness.scenarios._device import GPU_ATOL, GPU_RTOL
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
    verdict = contract(world([rank(i) for i in range(4)]), None, rnn.Config())
    assert (verdict.ok, verdict.note) == (True, "every rank finished")
    assert verdict.ok is True


def test_a_trainer_killed_as_planned_is_excused():
    verdict = contract(world([rank(0), rank(1), rank(2), rank(3, KILLED)]), None, rnn.Config())
    assert (verdict.ok, verdict.note) == (
        True,
        "killed as planned: trainer1; every other rank finished",
    )


def test_trainers_killed_as_planned_are_all_named():
    verdict = contract(
        world([rank(0), rank(1), rank(2, KILLED), rank(3, KILLED)]), None, rnn.Config()
    )
    assert verdict.ok is True
    assert verdict.note == "killed as planned: trainer0, trainer1; every other rank finished"


def test_failed_ranks_without_a_killed_server_are_all_named():
    w = world([rank(0), rank(1), rank(2, RAISED, error="ValueError: x"), rank(3, HUNG)])
    verdict = contract(w, None, rnn.Config())
    assert verdict.ok is False
    assert verdict.note == "; ".join(r.describe() for r in w.ranks[2:])


def test_a_world_that_failed_with_no_failed_rank_fails_the_contract_with_its_headline():
    w = world([rank(i) for i in range(4)])
    w.problems = ["kill:trainer1@trainer.step#99 never fired"]
    verdict = contract(w, None, rnn.Config())
    assert verdict.ok is False
    assert verdict.note == (
        "rpc world failed: its fault plan did not do what it says (world_size=4, seed=0)"
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
    assert verdict.ok is False
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


FAST = {"trainer": "trainer1", "server": "ps1", "seconds": 1.0}


@pytest.mark.parametrize(
    ("first", "problem"),
    [
        (
            (RAISED, "RuntimeError: eof", 0.5),
            "rank 2 (trainer0): raised RuntimeError: eof (while starting) (expected a trainer raising "
            "'parameter server 'ps1' died')",
        ),
        (
            (RAISED, DIED, None),
            "rank 2 (trainer0) named the dead server, but the kill or the failure left no event",
        ),
        (
            (RAISED, DIED, 20.0),
            "rank 2 (trainer0) named the dead server only 20.00s after the kill, past 0.25 of the 60s deadline: "
            "not fail-fast",
        ),
    ],
)
def test_a_trainer_after_one_with_a_problem_is_still_judged_and_its_report_of_the_server_kept(
    first, problem
):
    verdict = contract(server_killed(first, (RAISED, DIED, 1.0)), None, rnn.Config())
    assert verdict == rnn.judge.Verdict(
        False, problem, {"killed_servers": ["ps1"], "ps_lost": [FAST]}
    )


def test_every_trainer_that_named_the_dead_server_late_is_noted():
    verdict = contract(
        server_killed((RAISED, DIED, 20.0), (RAISED, DIED, 30.0)), None, rnn.Config()
    )
    assert verdict.ok is False
    assert verdict.note == (
        "rank 2 (trainer0) named the dead server only 20.00s after the kill, past 0.25 of the 60s deadline: "
        "not fail-fast; "
        "rank 3 (trainer1) named the dead server only 30.00s after the kill, past 0.25 of the 60s deadline: "
        "not fail-fast"
    )


def test_both_servers_killed_with_no_trainer_reporting_it_are_both_named():
    w = world([rank(0, KILLED), rank(1, KILLED), rank(2), rank(3)])
    verdict = contract(w, None, rnn.Config())
    assert (verdict.ok, verdict.note) == (
        False,
        "ps0, ps1 was killed but no trainer reported it (every trainer finished)",
    )


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
        "tolerance": {"rtol": rnn.Config().rtol, "atol": rnn.Config().atol, "norm": False, "device": "cpu"},
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


def test_every_mismatch_names_the_scenario_step_owner_and_seed_and_the_configs_tolerances():
    config = rnn.Config(rtol=1e-3, atol=1e-4)
    a = run(step(0, 1.0, tensors(ps0__w=1.0, ps1__v=2.5), tensors(ps0__w=0.75)))
    e = run(
        step(0, 2.0, tensors(ps0__w=1.0, ps1__v=2.0), tensors(ps0__w=0.5)),
        step(0, 1.0, tensors(ps0__w=1.0), tensors(ps0__w=0.5)),
    )
    param = "parameter after the optimizer step"
    tolerance = {"atol": 1e-4, "rtol": 1e-3, "seed": 5}
    assert compare(a, e, config, seed=5).mismatches == [
        Mismatch("rnn", "all", "trainer", "steps", 1.0, 0.5, 0.0, 0.0, 5, what="number of steps"),  # counts: exact
        Mismatch("rnn", 0, "ps1", "ps1/v", 0.5, 0.25, **tolerance),
        Mismatch("rnn", 0, "ps0", "ps0/w", 0.25, 0.5, **tolerance, what=param),
        Mismatch("rnn", 0, "trainer", "loss", 1.0, 0.5, **tolerance, what="loss"),
        Mismatch(
            "rnn",
            "all",
            "trainer",
            "1 of the 2 parameter tensors the baseline has (never compared)",
            math.inf,
            math.inf,
            **tolerance,
            what=param,
        ),
    ]


def test_the_owner_of_a_tensor_is_the_part_of_its_name_before_the_first_slash():
    a = run(step(0, 1.0, {"ps0/sub/w": torch.tensor([2.0], dtype=torch.float64)}))
    e = run(step(0, 1.0, {"ps0/sub/w": torch.tensor([1.0], dtype=torch.float64)}))
    assert [(m.rank, m.param) for m in compare(a, e, rnn.Config(), seed=1).mismatches] == [
        ("ps0", "ps0/sub/w")
    ]


def test_a_run_on_cuda_is_compared_with_the_gpu_tolerances_and_one_without_a_device_on_the_cpus():
    # 5e-5 off: past the CPU tolerance at 1.0 (1.1e-5), within the GPU one (1e-2 of the tensor's norm).
    a, e = run(step(0, 1.0, tensors(ps0__w=1.0 + 5e-5))), run(step(0, 1.0, tensors(ps0__w=1.0)))
    on_cpu = compare(a, e, rnn.Config(), seed=1)
    assert [m.param for m in on_cpu.mismatches] == ["ps0/w"]
    assert on_cpu.details["tolerance"]["device"] == "cpu"
    a["trainer"]["device"] = "cuda:0"
    on_cuda = compare(a, e, rnn.Config(), seed=1)
    assert on_cuda.mismatches == []
    assert on_cuda.details["tolerance"] == {"rtol": GPU_RTOL, "atol": GPU_ATOL, "norm": True, "device": "cuda:0"}
    nothing = compare({}, {}, rnn.Config(), seed=1)
    assert (nothing.checked, nothing.mismatches) == (0, [])
    assert nothing.details["tolerance"]["device"] == "cpu"


def test_on_cuda_the_number_of_steps_is_still_compared_exactly():
    # 101 steps against 100 is 1% off: within the GPU's bound for a tensor, but no GPU rounds a count.
    e = run(*[step(0, 1.0, tensors(ps0__w=1.0)) for _ in range(100)])
    a = run(*[step(0, 1.0, tensors(ps0__w=1.0)) for _ in range(101)])
    a["trainer"]["device"] = "cuda:0"
    mismatches = compare(a, e, rnn.Config(), seed=1).mismatches
    assert [(m.param, m.what, m.rtol, m.atol) for m in mismatches] == [("steps", "number of steps", 0.0, 0.0)]


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


def test_parameters_never_compared_in_a_run_of_several_trainers_name_every_trainer():
    one = step(0, 1.0, params=tensors(ps0__w=0.5))
    stopped = {t: {"trainer": t, "steps": [one]} for t in ("trainer1", "trainer0")}
    baseline = {t: {"trainer": t, "steps": [one, one]} for t in ("trainer0", "trainer1")}
    result = compare(stopped, baseline, rnn.Config(), seed=1)
    assert [(m.rank, m.param) for m in result.mismatches if m.step == "all"] == [
        ("trainer1", "steps"),
        ("trainer0", "steps"),
        ("trainer0, trainer1", "2 of the 4 parameter tensors the baseline has (never compared)"),
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


def test_a_loss_that_ends_above_its_first_epoch_did_not_fall_whatever_it_did_between():
    dipped = {"trainer0": {"steps": [step(0, 2.0), step(1, 1.0), step(2, 3.0)]}}
    result = outcome(dipped, dipped, rnn.Config())
    assert result.ok is False
    assert result.note == "trainer0: mean loss did not fall: first epoch 2.0000, last 3.0000"


def test_a_falling_loss_is_reported_from_its_first_epoch_to_its_last():
    falling = {"trainer0": {"steps": [step(0, 3.0), step(1, 2.0), step(2, 1.0)]}}
    result = outcome(falling, falling, rnn.Config())
    assert (result.ok, result.note, result.metric) == (
        True,
        "trainer0: mean loss 3.000 -> 1.000 over 3 epochs",
        1.0,
    )


def test_a_trainer_with_no_steps_fails_the_outcome_with_no_metric():
    empty = {"trainer0": {"steps": []}}
    result = outcome(empty, empty, rnn.Config())
    assert result.ok is False
    assert result.note == "trainer0: only 0 epoch, cannot tell whether the loss falls"
    assert math.isnan(result.metric) and result.steps == 0
