"""The parameter-server judge on hand-made worlds, clause by clause: which
records it reads, each verdict of the contract with its whole note, the
comparison's counts and details, and the accuracy outcome. (Found unchecked
by mutation testing, tools/mutation.py: the world tests only see the
verdicts of worlds that behave.)"""

from __future__ import annotations

import pytest
import torch

import rpc_harness
from rpc_harness.events import FaultFired
from rpc_harness.gradcheck import Mismatch
from rpc_harness.result import HUNG, KILLED, OK, RAISED
from rpc_harness.scenarios import parameter_server as ps
from rpc_harness.scenarios._device import GPU_ATOL, GPU_RTOL
from rpc_harness.scenarios.parameter_server.baseline import BaselineRun, BaselineStep
from rpc_harness.scenarios.parameter_server.judge import compare, contract, outcome, records

J = ps.judge
PS = J.PS_NAME  # "parameter_server"


def rank(index, name, status=OK, value=None, error=None, events=(), output=""):
    return rpc_harness.RankOutcome(
        index, name, status=status, value=value, error=error, events=list(events), output=output
    )


# Twelve lines a failed rank printed: a failing verdict's report shows its last ten.
TWELVE_LINES = "".join(f"printed line {i:02}\n" for i in range(1, 13))


def shows_the_last_ten_printed_lines(note):
    return "printed line 03" in note and "printed line 02" not in note


def world(ranks, faults="", deadline=60.0, timed_out=False):
    return rpc_harness.WorldResult(
        names=tuple(r.name for r in ranks),
        seed=0,
        faults=rpc_harness.FaultPlan.parse(faults),
        deadline=deadline,
        ranks=ranks,
        timed_out=timed_out,
    )


def log(steps, dead=(), accuracy=0.9, final=None):
    return {
        "steps": [
            {"index": k, "version": k, "trainer": trainer, "batch": batch, "loss": 1.0, "grads": {}}
            for k, (trainer, batch) in enumerate(steps)
        ],
        "dead": list(dead),
        "dropped": [],
        "accuracy": accuracy,
        "final": final or {},
    }


SERIAL = [("trainer1", 0), ("trainer2", 0), ("trainer1", 1), ("trainer2", 1)]
CONFIG = ps.Config(batches=2)


def test_records_are_the_servers_log_and_the_finished_trainers_values():
    server_log = log(SERIAL)
    w = world(
        [
            rank(0, PS, value=server_log),
            rank(1, "trainer1", value={"accuracy": 0.9}),
            rank(2, "trainer2", status=KILLED),
            rank(3, "trainer3", value="not a dict"),
        ]
    )
    found = records(w)
    assert found.log is server_log and found.trainers == {"trainer1": {"accuracy": 0.9}}
    assert found.order == SERIAL


@pytest.mark.parametrize(
    ("status", "value"), [(KILLED, None), (RAISED, None), (OK, ["not", "a", "log"])]
)
def test_no_records_without_the_servers_log(status, value):
    assert records(world([rank(0, PS, status=status, value=value), rank(1, "trainer1")])) is None


def test_a_live_server_with_a_serial_complete_log_meets_the_contract_naming_the_planned_kills():
    w = world([rank(0, PS), rank(1, "trainer1", value={}), rank(2, "trainer2", value={})])
    verdict = contract(w, J.Records(log(SERIAL), {"trainer1": {}, "trainer2": {}}), CONFIG)
    assert (verdict.ok, verdict.note) == (True, "2 trainer(s) finished")
    killed = world(
        [rank(0, PS), rank(1, "trainer1"), rank(2, "trainer2", status=KILLED)],
        faults="kill:trainer2@trainer.step#1",
    )
    only_one = [("trainer1", 0), ("trainer1", 1)]
    verdict = contract(
        killed, J.Records(log(only_one, dead=["trainer2"]), {"trainer1": {}}), CONFIG
    )
    assert (verdict.ok, verdict.note) == (True, "1 trainer(s) finished; trainer2 killed as planned")


def test_a_live_server_without_a_log_fails_the_contract_saying_why():
    w = world([rank(0, PS, status=RAISED, error="ValueError: x"), rank(1, "trainer1")])
    verdict = contract(w, None, CONFIG)
    assert not verdict.ok
    assert verdict.note.startswith(
        "rank 0 (parameter_server): raised ValueError: x (while starting); the server returned no log\n"
    )
    ok_but_no_log = world([rank(0, PS), rank(1, "trainer1")])
    verdict = contract(ok_but_no_log, None, CONFIG)
    assert verdict.note.startswith("rank 0 (parameter_server): ok; the server returned no log\n")


def test_a_hung_world_fails_the_contract_with_its_report():
    w = world(
        [rank(0, PS), rank(1, "trainer1", status=HUNG), rank(2, "trainer2")],
        deadline=7,
        timed_out=True,
    )
    verdict = contract(w, J.Records(log(SERIAL), {}), CONFIG)
    assert not verdict.ok
    first, _, report = verdict.note.partition("\n")
    assert first.startswith(
        "the world hung until its deadline of 7s; rank 1 (trainer1): had not joined"
    )
    assert "trainer1 finished" not in first and report, "the report follows"


def test_log_problems_alone_fail_the_contract_without_a_report():
    w = world([rank(0, PS), rank(1, "trainer1"), rank(2, "trainer2")])
    verdict = contract(w, J.Records(log(SERIAL[:3]), {}), CONFIG)
    assert (verdict.ok, verdict.note) == (
        False,
        "trainer2 finished but only 1 of 2 batches were applied",
    )


def test_a_live_server_without_a_log_in_a_hung_world_names_every_problem_and_appends_the_report():
    w = world(
        [
            rank(0, PS),
            rank(1, "trainer1", status=HUNG, output=TWELVE_LINES),
            rank(2, "trainer2"),
        ],
        deadline=7,
        timed_out=True,
    )
    verdict = contract(w, None, CONFIG)
    assert verdict.ok is False
    assert verdict.note == (
        "the world hung until its deadline of 7s; rank 1 (trainer1): had not joined the RPC world "
        "when the bring-up budget ran out; the server returned no log\n" + w.report(output_lines=10)
    )
    assert shows_the_last_ten_printed_lines(verdict.note)


def test_a_failed_trainer_beside_a_live_server_fails_the_contract_with_the_report():
    w = world(
        [
            rank(0, PS),
            rank(1, "trainer1"),
            rank(2, "trainer2", status=RAISED, error="ValueError: x", output=TWELVE_LINES),
        ]
    )
    only_one = [("trainer1", 0), ("trainer1", 1)]
    verdict = contract(w, J.Records(log(only_one), {"trainer1": {}}), CONFIG)
    assert verdict.ok is False
    assert verdict.note == (
        "rank 2 (trainer2): raised ValueError: x (while starting)\n" + w.report(output_lines=10)
    )
    assert shows_the_last_ten_printed_lines(verdict.note)


def test_trainers_killed_as_planned_are_all_named():
    w = world(
        [
            rank(0, PS),
            rank(1, "trainer1"),
            rank(2, "trainer2", status=KILLED),
            rank(3, "trainer3", status=KILLED),
        ]
    )
    only_one = [("trainer1", 0), ("trainer1", 1)]
    verdict = contract(
        w, J.Records(log(only_one, dead=["trainer2", "trainer3"]), {"trainer1": {}}), CONFIG
    )
    assert verdict.ok is True
    assert verdict.note == "1 trainer(s) finished; trainer2, trainer3 killed as planned"


def killed_server(
    raise_after,
    error="RuntimeError: 'parameter_server' died",
    deadline=60.0,
    status=RAISED,
    kill=True,
    output="",
):
    fired = FaultFired(100.0, 0, "kill:parameter_server@ps.step#1", "kill", "ps.step", 1).as_event()
    raised = {"t": 100.0 + raise_after, "rank": 1, "kind": "raised", "error": error}
    return world(
        [
            rank(0, PS, status=KILLED, events=[fired] if kill else []),
            rank(1, "trainer1", status=status, error=error, events=[raised], output=output),
            rank(2, "trainer2"),
        ],
        faults="kill:parameter_server@ps.step#1",
        deadline=deadline,
    )


def test_a_killed_server_named_fast_meets_the_contract_with_its_latency():
    verdict = contract(killed_server(0.25), None, CONFIG)
    assert (verdict.ok, verdict.note) == (
        True,
        "server killed; trainer1 failed fast naming 'parameter_server'",
    )
    assert verdict.details == {"attribution_s": 0.25}


@pytest.mark.parametrize(
    ("w", "problem"),
    [
        (killed_server(10.5), "the first trainer named the dead server only 10.50s after the kill"),
        (
            killed_server(2.5, deadline=8.0),
            "the first trainer named the dead server only 2.50s after the kill",
        ),
        (
            killed_server(0.1, error="RuntimeError: eof"),
            "rank 1 (trainer1) raised without naming 'parameter_server': RuntimeError: eof",
        ),
        (killed_server(0.1, kill=False), "the kill or the trainers' errors left no timestamps"),
        (killed_server(0.1, status=OK), "no trainer reported the dead parameter server"),
    ],
)
def test_a_killed_server_breaks_the_contract_when_named_late_wrongly_or_not_at_all(w, problem):
    verdict = contract(w, None, CONFIG)
    assert not verdict.ok
    assert verdict.note.startswith(problem), verdict.note


def test_a_killed_server_named_late_and_wrongly_fails_with_both_problems_its_latency_and_the_report():
    w = killed_server(10.5, error="RuntimeError: eof", output=TWELVE_LINES)
    verdict = contract(w, None, CONFIG)
    assert verdict == J.Verdict(
        False,
        "rank 1 (trainer1) raised without naming 'parameter_server': RuntimeError: eof; "
        "the first trainer named the dead server only 10.50s after the kill\n"
        + w.report(output_lines=10),
        {"attribution_s": 10.5},
    )
    assert verdict.ok is False and shows_the_last_ten_printed_lines(verdict.note)


def test_a_killed_server_named_fast_by_two_trainers_names_both_and_times_the_first():
    w = killed_server(0.5)
    raised = {
        "t": 100.25,
        "rank": 2,
        "kind": "raised",
        "error": "RuntimeError: 'parameter_server' died",
    }
    w.ranks[2] = rank(2, "trainer2", status=RAISED, error=raised["error"], events=[raised])
    assert contract(w, None, CONFIG) == J.Verdict(
        True,
        "server killed; trainer1, trainer2 failed fast naming 'parameter_server'",
        {"attribution_s": 0.25},
    )


def test_a_killed_server_at_exactly_the_bound_still_meets_it():
    assert contract(killed_server(2.0, deadline=8.0), None, CONFIG).ok
    assert contract(killed_server(10.0, deadline=100.0), None, CONFIG).ok


def test_a_killed_server_and_a_hung_world_or_a_dead_trainer_break_the_contract():
    w = killed_server(0.1)
    w.timed_out = True
    assert contract(w, None, CONFIG).note.startswith("the world hung until its deadline of 60s")
    w = killed_server(0.1)
    w.ranks[2] = rank(2, "trainer2", status=HUNG)
    assert contract(w, None, CONFIG).note.startswith("rank 2 (trainer2): had not joined")


def grads(value):
    return {"w": torch.full((2,), value)}


def baseline(values, losses, final=0.0, accuracy=0.5):
    steps = [
        BaselineStep(k, t, b, k, grads(v), loss)
        for k, ((t, b), v, loss) in enumerate(zip(SERIAL, values, losses, strict=True))
    ]
    return BaselineRun(steps, {"w": torch.full((2,), final)}, accuracy)


def actual(values, losses, final=0.0, device="cpu"):
    server_log = log(SERIAL, final={"w": torch.full((2,), final)})
    for step, value, loss in zip(server_log["steps"], values, losses, strict=True):
        step["grads"], step["loss"] = grads(value), loss
    server_log["device"] = device
    return J.Records(server_log, {})


def test_the_comparison_of_equal_runs_counts_every_gradient_and_has_its_details():
    result = compare(actual([1.0] * 4, [0.5] * 4), baseline([1.0] * 4, [0.5] * 4), CONFIG, seed=3)
    assert (result.max_diff, result.checked, result.expected, result.mismatches) == (0.0, 4, 4, [])
    assert result.details == {
        "order": SERIAL,
        "dropped_steps": [],
        "reaped": [],
        "tolerance": {"rtol": CONFIG.rtol, "atol": CONFIG.atol, "norm": False, "device": "cpu"},
    }


def test_the_comparison_finds_a_different_gradient_loss_and_final_parameter():
    result = compare(
        actual([1.0, 1.5, 1.0, 1.0], [0.5, 0.5, 0.7, None], final=2.0),
        baseline([1.0] * 4, [0.5] * 4),
        CONFIG,
        seed=3,
    )
    assert result.max_diff == 2.0
    assert [m.what for m in result.mismatches] == ["gradient", "loss", "parameter"]
    assert "1 (trainer2 batch 0, parameter version 1)" in result.mismatches[0].step
    assert result.mismatches[2].step == "final (after 4 steps)" and result.mismatches[2].rank == PS


def test_a_step_only_one_side_has_is_a_mismatch_not_a_crash():
    run = actual([1.0] * 4, [0.5] * 4)
    short = baseline([1.0] * 4, [0.5] * 4)
    short.steps.pop()  # the run has a step the baseline lacks
    result = compare(run, short, CONFIG, seed=3)
    assert [(m.step, m.rank, m.param) for m in result.mismatches] == [
        ("3 (trainer2 batch 1, parameter version 3)", "trainer2", "w (missing in the baseline)")]
    assert (result.checked, result.expected) == (3, 3)
    run.log["steps"].pop()  # and the other way round
    result = compare(run, baseline([1.0] * 4, [0.5] * 4), CONFIG, seed=3)
    assert [(m.step, m.param) for m in result.mismatches] == [
        ("3 (trainer2 batch 1, parameter version 3)", "w (missing in the distributed run)")]
    assert (result.checked, result.expected) == (3, 4)


def test_every_mismatch_names_the_scenario_step_rank_and_seed_and_the_configs_tolerances():
    config = ps.Config(batches=2, rtol=1e-3, atol=1e-4)
    result = compare(
        actual([1.0, 1.5, 1.0, 1.0], [0.5, 0.5, 0.75, None], final=2.0),
        baseline([1.0] * 4, [0.5] * 4, final=1.0),
        config,
        seed=3,
    )
    tolerance = {"atol": 1e-4, "rtol": 1e-3, "seed": 3}
    assert result.mismatches == [
        Mismatch(
            "ps",
            "1 (trainer2 batch 0, parameter version 1)",
            "trainer2",
            "w",
            0.5,
            0.5,
            **tolerance,
        ),
        Mismatch(
            "ps",
            "2 (trainer1 batch 1, parameter version 2)",
            "trainer1",
            "loss",
            0.25,
            0.5,
            **tolerance,
            what="loss",
        ),
        Mismatch("ps", "final (after 4 steps)", PS, "w", 1.0, 1.0, **tolerance, what="parameter"),
    ]
    assert result.max_diff == 1.0
    assert result.details["tolerance"] == {"rtol": 1e-3, "atol": 1e-4, "norm": False, "device": "cpu"}


def test_a_log_from_cuda_is_compared_with_the_gpu_tolerances_and_a_log_without_a_device_is_from_the_cpu():
    # 5e-5 off: past the CPU tolerance at 1.0 (1.1e-5), within the GPU one (1e-2 of the tensor's norm).
    close = [1.0, 1.0, 1.0, 1.0 + 5e-5]
    on_cuda = compare(
        actual(close, [0.5] * 4, device="cuda:0"), baseline([1.0] * 4, [0.5] * 4), CONFIG, seed=3
    )
    assert on_cuda.mismatches == []
    assert on_cuda.details["tolerance"] == {"rtol": GPU_RTOL, "atol": GPU_ATOL, "norm": True, "device": "cuda:0"}
    unnamed = actual(close, [0.5] * 4)
    del unnamed.log["device"]
    on_cpu = compare(unnamed, baseline([1.0] * 4, [0.5] * 4), CONFIG, seed=3)
    assert [m.step for m in on_cpu.mismatches] == ["3 (trainer2 batch 1, parameter version 3)"]
    assert on_cpu.details["tolerance"] == {
        "rtol": CONFIG.rtol,
        "atol": CONFIG.atol,
        "norm": False,
        "device": "cpu",
    }


def test_the_comparison_counts_only_the_gradients_both_have():
    run = actual([1.0] * 4, [0.5] * 4)
    run.log["steps"][0]["grads"] = {}
    result = compare(run, baseline([1.0] * 4, [0.5] * 4), CONFIG, seed=3)
    assert (result.checked, result.expected) == (3, 4)


def trainers(*accuracies):
    return {f"trainer{i + 1}": {"accuracy": a} for i, a in enumerate(accuracies)}


def test_the_outcome_judges_accuracy_above_the_bar_once_enough_steps_ran():
    config = ps.Config(batches=2, min_accuracy=0.5, min_accuracy_steps=4)
    good = outcome(
        J.Records(log(SERIAL, accuracy=0.75), trainers(0.75, 0.75)),
        baseline([1.0] * 4, [0.5] * 4),
        config,
    )
    assert (good.ok, good.note, good.metric, good.steps) == (
        True,
        "accuracy 0.750 > 0.5 after 4 steps",
        0.75,
        4,
    )
    assert good.history == [1.0] * 4 and good.baseline_history == [0.5] * 4
    assert good.details == {
        "baseline_accuracy": 0.5,
        "trainer_accuracy": {"trainer1": 0.75, "trainer2": 0.75},
    }
    at_bar = outcome(
        J.Records(log(SERIAL, accuracy=0.5), {}), baseline([1.0] * 4, [0.5] * 4), config
    )
    assert (at_bar.ok, at_bar.note) == (
        False,
        "held-out accuracy 0.500 is not above 0.5 (chance 0.1) after 4 steps",
    )


def test_the_outcome_is_not_judged_below_its_steps_and_trainers_must_agree():
    config = ps.Config(batches=2, min_accuracy=0.5, min_accuracy_steps=5)
    low = outcome(J.Records(log(SERIAL, accuracy=0.1), {}), baseline([1.0] * 4, [0.5] * 4), config)
    assert (low.ok, low.note) == (
        True,
        "accuracy 0.100 after 4 steps, not judged: the bar of 0.5 holds from 5 steps",
    )
    split = outcome(
        J.Records(log(SERIAL, accuracy=0.1), trainers(0.1, 0.2)),
        baseline([1.0] * 4, [0.5] * 4),
        config,
    )
    assert (split.ok, split.note) == (
        False,
        "trainers measured other accuracies than the server's 0.1000: {'trainer2': 0.2}",
    )


def test_a_low_accuracy_and_trainers_that_disagree_are_both_noted():
    config = ps.Config(batches=2, min_accuracy=0.5, min_accuracy_steps=4)
    result = outcome(
        J.Records(log(SERIAL, accuracy=0.5), trainers(0.5, 0.625)),
        baseline([1.0] * 4, [0.5] * 4),
        config,
    )
    assert result.ok is False
    assert result.note == (
        "held-out accuracy 0.500 is not above 0.5 (chance 0.1) after 4 steps; "
        "trainers measured other accuracies than the server's 0.5000: {'trainer2': 0.625}"
    )


def test_a_trainer_accuracy_within_1e_9_of_the_servers_agrees_with_it():
    config = ps.Config(batches=2, min_accuracy=0.5, min_accuracy_steps=5)
    result = outcome(
        J.Records(log(SERIAL, accuracy=0.0), trainers(1e-9)), baseline([1.0] * 4, [0.5] * 4), config
    )
    assert result.ok is True
