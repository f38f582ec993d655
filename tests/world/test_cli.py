"""The rpc-harness command on real worlds: the summary table, files written, traces, replay."""

from __future__ import annotations

import json
import re

import pytest

from rpc_harness.apps.cli import main
from rpc_harness.repro import Repro

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_run_writes_table_traces_curves_and_summary(tmp_path, capsys):
    # Eight batches a trainer: with four, held-out accuracy ends near the
    # 0.5 bar, above or below it depending on the trainers' interleaving.
    code = main(["run", "ps", "-n", "3", "--steps", "8", "--seed", "1", "--progress", "off",
                 "--faults", "delay:trainer2@trainer.step#2=0.001s", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "ps w3  [" not in out  # --progress off
    assert "scenario  world  faults" in out and "outcome metric" in out
    assert re.search(r"^ps +3 +faults: delay:trainer2@trainer.step#2=0.001s ", out, re.M), out
    trace = json.loads((tmp_path / "ps-w3-faults.trace.json").read_text())
    tracks = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    assert tracks == {0: "rank 0 (parameter_server)", 1: "rank 1 (trainer1)", 2: "rank 2 (trainer2)"}
    faults = [e for e in trace["traceEvents"] if e.get("cat") == "fault"]
    assert [(e["pid"], e["args"]["fault"]) for e in faults] == [(2, "delay:trainer2@trainer.step#2=0.001s")]
    assert all({"ph", "pid", "tid", "name"} <= set(e) for e in trace["traceEvents"])
    assert any(e["ph"] == "X" and e["name"] == "entry" for e in trace["traceEvents"])
    # RPCs the trainers issued, named by the method the tutorial's helper calls.
    rpcs = {(e["pid"], e["name"]) for e in trace["traceEvents"] if e["ph"] == "b"}
    assert (1, "rpc_sync -> parameter_server: call_method(ParameterServer.get_dist_gradients)") in rpcs
    # DistributedOptimizer's step, by the name this torch gives it (torch 2.14 steps functional optimizers).
    assert rpcs & {(2, f"rpc_async -> parameter_server: _{kind}_local_optimizer_step") for kind in ("script", "functional")}
    assert (tmp_path / "ps-w3-faults.curves.svg").read_text().startswith("<svg")
    timeline = (tmp_path / "ps-w3-faults.timeline.svg").read_text()
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
    code = main(["run", "rl", "ps", "-n", "3", "--steps", "8", "--seed", "3", "--progress", "lines",
                 "--no-fault-checks"])
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


def test_run_also_runs_each_scenarios_fault_checks_and_labels_their_rows(capsys):
    code = main(["run", "ps", "-n", "3", "--steps", "2", "--seed", "5", "--progress", "off"])
    out = capsys.readouterr().out
    assert code == 0, out
    rows = {line.split()[2].rstrip(":"): line.split()[-1] for line in out.splitlines()
            if re.match(r"^ps +3 +", line)}
    assert rows == {"clean": "ok", "slow": "ok", "kill": "ok", "server-kill": "ok"}, out
    assert re.search(r"contract: server killed; .*trainer\d failed fast naming 'parameter_server'", out), out
    assert "trainer2 killed as planned" in out
    # The killed server's world leaves no gradients: said so, never shown as a perfect match.
    assert re.search(r"ok: ps world 3 \(server-kill\): .* no gradients compared", out), out
    assert not re.search(r"over 0 tensors", out), out


def test_a_failing_run_exits_1_with_a_replay_line_that_reproduces(capsys):
    code = main(["run", "ps", "-n", "2", "--steps", "3", "--seed", "2", "--faults", "raise:trainer1@trainer.step#2"])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAILED" in out
    token = out.split("Replay: rpc-harness replay ")[1].split()[0]
    assert main(["replay", token]) == 1
    assert "the failure reproduced" in capsys.readouterr().out


def test_a_token_replay_that_passes_prints_no_replay_line(capsys):
    # A world that did not fail printed "Replay: ..." all the same, as if it
    # were a failure's report (outside-user trial).
    token = Repro(world_size=2, seed=1, entry="worlds:identity").token()
    assert main(["replay", token, "--deadline", "30"]) == 0
    out = capsys.readouterr().out
    assert "rpc world ok" in out and "the failure does not reproduce from this token" in out, out
    assert "Replay:" not in out, out


def test_a_sigtermed_run_stops_its_world_and_exits_130_leaving_nothing(short_tmp):
    import os
    import signal
    import subprocess
    import sys
    import time

    from conftest import wait_gone

    from rpc_harness.context import read_event_lines

    tmp = short_tmp
    proc = subprocess.Popen([sys.executable, "-m", "rpc_harness", "run", "ps", "-n", "3", "--steps", "500",
                             "--no-fault-checks", "--progress", "off"], env=dict(os.environ, TMPDIR=str(tmp)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        pids, until = [], time.monotonic() + 120
        while len(pids) < 3 and time.monotonic() < until and proc.poll() is None:
            time.sleep(0.1)
            starts = [e for f in tmp.glob("rpc-world-*/rank*.events") for e in read_event_lines(str(f))
                      if e.get("kind") == "entry_start"]
            pids = [e["pid"] for f in tmp.glob("rpc-world-*/rank*.events") for e in read_event_lines(str(f))
                    if e.get("kind") == "start"] if len(starts) == 3 else []
        if len(pids) < 3:
            proc.kill()
            out, err = proc.communicate(timeout=60)
            raise AssertionError(f"the world never came up (exit code {proc.returncode}):\n{out[-2000:]}{err[-3000:]}")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130 and "interrupted; every rank was stopped" in err, err
    assert not wait_gone(pids, within=30)
    assert [p for p in os.listdir(tmp) if not p.startswith("torchinductor_")] == []


def test_run_under_a_controlled_schedule_explores_the_schedules_it_is_asked_for(capsys):
    code = main(["run", "rnn", "--schedule", "controlled", "--repeat", "2", "--seed", "3", "--no-fault-checks",
                 "--set", "epochs=2", "--set", "sentences=24", "--progress", "off"])
    out = capsys.readouterr().out
    assert code == 0, out
    digests = re.findall(r"schedule: controlled \(controlled\), \d+ steps, digest ([0-9a-f]{16})", out)
    assert len(digests) == 2 and digests[0] != digests[1], out
    assert "rnn world 3 (clean): explored 2 controlled schedule(s), 2 distinct: 2 ran controlled to the end\n" \
           "no schedule failed\n" in out, out


NO_TORCH_DRIVER = """
import json, sys
from rpc_harness.apps.cli import main
from rpc_harness.repro import Repro
seen = []
for argv in json.loads(sys.argv[1]):
    code = main(["run", *argv, "--progress", "off"])
    seen.append([argv, code, "torch" in sys.modules])
print("SEEN" + json.dumps(seen))
"""


def test_run_refuses_bad_input_before_importing_torch(tmp_path):
    # Issue 28: `run -n 0` was refused only after loading the scenarios had
    # imported torch (15 s under load). A fresh interpreter: the test
    # process has torch already. Each refusal must come with torch absent.
    import subprocess
    import sys

    cases = [["-n", "0"], ["rnn", "-n", "0"], ["ps", "-n", "600"], ["--steps", "0"], ["rl", "--faults", ""],
             ["--set", "epochs"], ["chess"], ["all", "--repeat", "0"], ["ps", "--faults", "boom:x@y"],
             ["ps", "--seed", "-1"], ["ps", "-n", "x"]]
    proc = subprocess.run([sys.executable, "-c", NO_TORCH_DRIVER, json.dumps(cases)], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert "SEEN" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    seen = json.loads(proc.stdout.split("SEEN", 1)[1])
    assert [code for _, code, _ in seen] == [2] * len(cases), seen
    assert [argv for argv, _, torch in seen if torch] == [], proc.stderr
    assert "Traceback" not in proc.stderr
