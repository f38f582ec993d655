"""The rpc-harness command: exit codes, the summary table, files written, traces."""

from __future__ import annotations

import json

import pytest

from harness.cli import main

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_run_writes_table_traces_curves_and_summary(tmp_path, capsys):
    # Eight batches a trainer: with four, held-out accuracy ends near the
    # 0.5 bar, above or below it depending on the trainers' interleaving.
    code = main(["run", "ps", "-n", "3", "--steps", "8", "--seed", "1", "--progress", "off",
                 "--faults", "delay:trainer2@trainer.step#2=0.001s", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "ps w3  [" not in out  # --progress off
    assert "scenario  world  steps  outcome metric" in out
    assert "ps        3" in out
    trace = json.loads((tmp_path / "ps-w3.trace.json").read_text())
    tracks = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    assert tracks == {0: "rank 0 (parameter_server)", 1: "rank 1 (trainer1)", 2: "rank 2 (trainer2)"}
    faults = [e for e in trace["traceEvents"] if e.get("cat") == "fault"]
    assert [(e["pid"], e["args"]["fault"]) for e in faults] == [(2, "delay:trainer2@trainer.step#2=0.001s")]
    assert all({"ph", "pid", "tid", "name"} <= set(e) for e in trace["traceEvents"])
    assert any(e["ph"] == "X" and e["name"] == "entry" for e in trace["traceEvents"])
    # RPCs the trainers issued, named by the method the tutorial's helper calls.
    rpcs = {(e["pid"], e["name"]) for e in trace["traceEvents"] if e["ph"] == "b"}
    assert (1, "rpc_sync -> parameter_server: call_method(ParameterServer.get_dist_gradients)") in rpcs
    assert (2, "rpc_async -> parameter_server: _script_local_optimizer_step") in rpcs
    assert (tmp_path / "ps-w3.curves.svg").read_text().startswith("<svg")
    timeline = (tmp_path / "ps-w3.timeline.svg").read_text()
    assert timeline.startswith("<svg") and "rank 2 (trainer2)" in timeline and "trainer.step#2" in timeline
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["seed"] == 1 and summary["worlds"][0]["ok"] is True


def _bars(out, label):
    """(done, total, unit, line) of each progress line drawn for ``label``."""
    found = []
    for line in out.splitlines():
        if line.strip().startswith(label + "  ["):
            count, unit = line.split("]")[1].split()[:2]
            done, total = map(int, count.split("/"))
            found.append((done, total, unit, line.strip()))
    return found


def test_run_draws_a_progress_bar_per_scenario_from_what_the_ranks_report(capsys):
    code = main(["run", "rl", "ps", "-n", "3", "--steps", "8", "--seed", "3", "--progress", "lines"])
    out = capsys.readouterr().out
    assert code == 0, out
    for label, total, unit, metric in (("rl w3", 8, "episodes", "running reward"), ("ps w3", 16, "batches", "loss")):
        bars = _bars(out, label)
        # Lines mode: at most a line per quarter, then the verdict. Which
        # count a quarter line shows depends on timing (reports are
        # throttled); that each is a later quarter than the last does not.
        quarters = [done * 4 // total for done, _, _, _ in bars[:-1]]
        assert quarters == sorted(set(quarters)) and all(1 <= q <= 3 for q in quarters), bars
        assert all(t == total and u == unit for _, t, u, _ in bars), bars
        assert bars[-1][0] == total, "the last report is never held back"
        assert metric in bars[-1][3] and "  ok  " in bars[-1][3]


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
        (["replay", "12345"], "12345 is a seed, not a repro token: run it with `rpc-harness run SCENARIO --seed 12345`"),
    ],
)
def test_bad_input_exits_2_naming_the_problem(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_timeline_draws_a_trace_file(tmp_path, capsys):
    trace = tmp_path / "w.trace.json"
    trace.write_text(json.dumps({"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "rank 0 (agent)"}},
        {"ph": "X", "name": "entry", "cat": "phase", "pid": 0, "tid": 0, "ts": 0, "dur": 1000},
    ]}))
    assert main(["timeline", str(trace)]) == 0
    picture = tmp_path / "w.timeline.svg"
    assert f"wrote {picture}" in capsys.readouterr().out
    assert "rank 0 (agent)" in picture.read_text()


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "cannot read the trace"), ("{not json", "is not JSON"), ('{"events": []}', "no traceEvents")],
)
def test_timeline_names_a_bad_trace(tmp_path, capsys, content, message):
    trace = tmp_path / "bad.trace.json"
    if content is not None:
        trace.write_text(content)
    assert main(["timeline", str(trace)]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "bad.timeline.svg").exists()
