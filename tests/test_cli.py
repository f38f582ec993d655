"""The rpc-harness command: exit codes, the summary table, files written, traces."""

from __future__ import annotations

import json

import pytest

from harness.cli import main

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_run_writes_table_traces_curves_and_summary(tmp_path, capsys):
    code = main(["run", "ps", "-n", "3", "--steps", "4", "--seed", "1",
                 "--faults", "delay:trainer2@trainer.step#2=0.001s", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "scenario  world  steps  outcome metric" in out
    assert "ps        3" in out
    trace = json.loads((tmp_path / "ps-w3.trace.json").read_text())
    tracks = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    assert tracks == {0: "rank 0 (parameter_server)", 1: "rank 1 (trainer1)", 2: "rank 2 (trainer2)"}
    faults = [e for e in trace["traceEvents"] if e.get("cat") == "fault"]
    assert [(e["pid"], e["args"]["fault"]) for e in faults] == [(2, "delay:trainer2@trainer.step#2=0.001s")]
    assert all({"ph", "pid", "tid", "name"} <= set(e) for e in trace["traceEvents"])
    assert any(e["ph"] == "X" and e["name"] == "entry" for e in trace["traceEvents"])
    assert (tmp_path / "ps-w3.curves.svg").read_text().startswith("<svg")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["seed"] == 1 and summary["worlds"][0]["ok"] is True


def test_a_failing_run_exits_1_with_a_replay_line_that_reproduces(capsys):
    code = main(["run", "ps", "-n", "2", "--steps", "3", "--seed", "2", "--faults", "raise:trainer1@trainer.step#2"])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAILED" in out
    token = out.split("Replay: rpc-harness replay ")[1].split()[0]
    assert main(["replay", token]) == 1
    assert "the failure reproduced" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "chess"], "unknown scenario 'chess'"),
        (["run", "ps", "--faults", "boom:x@y"], "unknown fault kind 'boom'"),
        (["run", "ps", "--faults", "kill:trainer9@trainer.step"], "unknown worker 'trainer9'"),
        (["run", "ps", "--set", "nope=1"], "has no field 'nope'"),
        (["run", "ps", "--set", "batches=many"], "'many' is not a valid int"),
        (["replay", "rpch9_x"], "format version '9'"),
    ],
)
def test_bad_input_exits_2_naming_the_problem(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err
