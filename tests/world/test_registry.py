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

import pytest

from rpc_harness.scenario import available

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


# One fresh process (where the package is installed) runs every command in
# turn, as `rpc-harness` would, and hands back what each printed: one
# process instead of six, each importing torch and starting a forkserver.
DRIVER = """
import contextlib, io, json, sys
from rpc_harness.apps.cli import main

def command(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return {"code": code, "out": out.getvalue(), "err": err.getvalue()}

done = {}
done["list"] = command("list")
done["ok"] = command("run", "tiny", "-n", "3", "--seed", "4", "--progress", "off")
done["failing"] = command("run", "tiny", "-n", "2", "--seed", "4", "--progress", "off",
                          "--faults", "raise:owner@tiny.step#2")
token = done["failing"]["out"].split("Replay: rpc-harness replay ")[1].split()[0]
done["replay"] = command("replay", token, "--progress", "off")
done["bench"] = command("bench", "--only", "scenarios", "--scenario", "tiny", "--json", sys.argv[1])

from hypothesis import find
from rpc_harness import strategies as hs
case = find(hs.scenario_worlds("tiny", max_size=5, points=["tiny.step"], kinds=("delay",)),
            lambda c: c.world_size >= 3 and len(c.faults) >= 1)
done["drawn"] = [list(case.names), str(case.faults)]
print("RESULTS" + json.dumps(done))
"""


@pytest.mark.long
def test_a_scenario_registered_by_another_package_runs_replays_benches_and_draws(tmp_path):
    env = install_tiny(tmp_path / "site")
    figures = tmp_path / "bench.json"
    proc = run(env, tmp_path, "-c", DRIVER, str(figures))
    assert proc.returncode == 0 and "RESULTS" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    done = json.loads(proc.stdout.split("RESULTS", 1)[1])

    listing = done["list"]
    assert listing["code"] == 0, listing
    assert "tiny: an owner's weight, workers' distributed autograd steps through it" in listing["out"]
    assert "--steps sets steps; metric: loss" in listing["out"]

    ok = done["ok"]
    assert ok["code"] == 0, ok
    assert re.search(r"^tiny +3 +clean +3 +loss ", ok["out"], re.M), ok["out"]

    assert done["failing"]["code"] == 1, done["failing"]
    again = done["replay"]
    assert again["code"] == 1 and "the failure reproduced" in again["out"], again

    assert done["bench"]["code"] == 0, done["bench"]
    rows = json.loads(figures.read_text())["scenarios"]
    assert [(r["scenario"], r["world_size"], r["ok"]) for r in rows] == [("tiny", 2, True), ("tiny", 4, True)]

    assert done["drawn"] == [["owner", "worker1", "worker2"], "delay:owner@tiny.step#1+=0.001s"]


def test_without_the_package_the_scenario_is_unknown_by_name(tmp_path):
    result = run(dict(os.environ), tmp_path, "-m", "rpc_harness", "run", "tiny")
    assert result.returncode == 2
    assert f"unknown scenario 'tiny'; registered scenarios: {', '.join(available())}\n" in result.stderr
