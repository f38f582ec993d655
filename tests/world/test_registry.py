"""A fourth scenario from another package: one module and one entry-point
line, and `rpc-harness run`, `replay`, `bench` and the Hypothesis strategies
treat it exactly as they treat the built-in three."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

TESTS = pathlib.Path(__file__).resolve().parents[1]


def install_tiny(site: pathlib.Path) -> dict[str, str]:
    """``tiny_scenario`` as an installed distribution would leave it: the
    module, and a dist-info folder whose entry points register it."""
    site.mkdir()
    shutil.copy(TESTS / "torchrun_scenario.py", site / "tiny_scenario.py")
    dist = site / "tiny_scenario-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tiny-scenario\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[rpc_harness.scenarios]\ntiny = tiny_scenario:SCENARIO\n")
    return dict(os.environ, PYTHONPATH=str(site))


def run(env, cwd, *args, timeout=300):
    return subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def test_a_scenario_registered_by_another_package_runs_replays_benches_and_draws(tmp_path):
    env = install_tiny(tmp_path / "site")

    listing = run(env, tmp_path, "-m", "rpc_harness", "list")
    assert listing.returncode == 0, listing.stderr
    assert "tiny: an owner's weight, workers' distributed autograd steps through it" in listing.stdout
    assert "--steps sets steps; metric: loss" in listing.stdout

    ok = run(env, tmp_path, "-m", "rpc_harness", "run", "tiny", "-n", "3", "--seed", "4", "--progress", "off")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert re.search(r"^tiny +3 +clean +3 +loss ", ok.stdout, re.M), ok.stdout

    failing = run(env, tmp_path, "-m", "rpc_harness", "run", "tiny", "-n", "2", "--seed", "4", "--progress", "off",
                  "--faults", "raise:owner@tiny.step#2")
    assert failing.returncode == 1, failing.stdout + failing.stderr
    token = re.search(r"Replay: rpc-harness replay (rpch1_\S+)", failing.stdout)[1]
    again = run(env, tmp_path, "-m", "rpc_harness", "replay", token, "--progress", "off")
    assert again.returncode == 1 and "the failure reproduced" in again.stdout, again.stdout + again.stderr

    figures = tmp_path / "bench.json"
    bench = run(env, tmp_path, "-m", "rpc_harness", "bench", "--only", "scenarios", "--scenario", "tiny",
                "--json", str(figures))
    assert bench.returncode == 0, bench.stdout + bench.stderr
    rows = json.loads(figures.read_text())["scenarios"]
    assert [(r["scenario"], r["world_size"], r["ok"]) for r in rows] == [("tiny", 2, True)]

    drawn = run(env, tmp_path, "-c", (
        "from hypothesis import find\n"
        "from harness import strategies as hs\n"
        "case = find(hs.scenario_worlds('tiny', max_size=5, points=['tiny.step'], kinds=('delay',)),\n"
        "            lambda c: c.world_size >= 3 and len(c.faults) >= 1)\n"
        "print(case.names, str(case.faults))\n"))
    assert drawn.returncode == 0, drawn.stderr
    assert drawn.stdout.strip() == "('owner', 'worker1', 'worker2') delay:owner@tiny.step#1+=0.001s"


def test_without_the_package_the_scenario_is_unknown_by_name(tmp_path):
    result = run(dict(os.environ), tmp_path, "-m", "rpc_harness", "run", "tiny")
    assert result.returncode == 2
    assert "unknown scenario 'tiny'; registered scenarios: ps, rl, rnn" in result.stderr
