"""The pytest plugin, seen from another repo's test suite (pytester)."""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import time

import pytest

# Imported here, before any in-process session: pytester drops the modules a
# session imported when it ends, and torch imported a second time in one
# process crashes it (measured: a segfault in the next session).
import torch  # noqa: F401
from conftest import wait_gone

import rpc_harness  # noqa: F401 - likewise: one forkserver per worker, not one per session
from rpc_harness.interrupts import children

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

ENTRIES = """
import os, signal, time
import pytest
import torch
import rpc_harness

def ok(ctx):
    return ctx.rank

def rank1_dies(ctx):
    if ctx.rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return ctx.rank

def hangs(ctx):
    rpc_harness.failpoint("demo.step")

def skips(ctx):
    if ctx.rank == 1:
        pytest.skip("no GPU in rank 1")
    time.sleep(30)

def seeded(ctx):
    return (ctx.world_seed, torch.rand(1).item())

def prints_then_raises(ctx):
    print(f"log line of {ctx.name}", flush=True)
    if ctx.rank == 0:
        time.sleep(0.5)  # let worker1's line land before the world stops
        raise RuntimeError(f"bad {ctx.name}")
    time.sleep(30)
"""


def run(pytester, *args, fresh=False, timeout=120):
    """The inner session, in this process unless ``fresh``: its worlds then
    fork from this worker's running forkserver instead of starting their own
    (~7 s of imports a session on 2 cores). In-process runs are bounded by
    their worlds' deadlines; a fresh process is needed where the test is
    about the process itself (its imports, xdist, signals)."""
    if fresh:
        return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=timeout)
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", *args)


def test_fixture_works_without_conftest_and_checks_every_rank(pytester):
    pytester.makepyfile(
        ENTRIES
        + """
def test_ok(rpc_world):
    assert rpc_world.run(ok, world_size=3).values == [0, 1, 2]

def test_rank1_dies(rpc_world):
    rpc_world.run(rank1_dies, world_size=3)
"""
    )
    result = run(pytester)
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "rank 1 (worker1): killed by SIGKILL" in out
    assert re.search(r"Replay: pytest .*::test_rank1_dies --rpc-seed=\d+", out)
    assert "rpc-harness: session seed" in out


def test_hang_fails_at_the_deadline_with_all_stacks_and_the_session_goes_on(pytester):
    pytester.makepyfile(
        ENTRIES
        + """
import pytest

@pytest.mark.rpc_world(world_size=2, deadline=1, faults="hang:worker0@demo.step")
def test_hangs(rpc_world):
    rpc_world.run(hangs)

def test_after(rpc_world):
    assert rpc_world.run(ok, world_size=2).values == [0, 1]
"""
    )
    result = run(pytester)
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "rpc world hung: deadline of 1s passed" in out
    assert "rank 0 (worker0) stacks at the deadline" in out
    assert "rank 1 (worker1) stacks at the deadline" in out
    assert 'rpc_harness.failpoint("demo.step")' in out
    # The token does not carry the deadline: its line does, or a replay of
    # the hang waits out the replay's 300 s (outside-user trial).
    assert re.search(r"or: rpc-harness replay rpch1_\S+ --deadline 1$", out, re.M), out


def test_skip_inside_a_rank_skips_the_test(pytester):
    pytester.makepyfile(ENTRIES + "\ndef test_skips(rpc_world):\n    rpc_world.run(skips, world_size=2)\n")
    result = run(pytester, "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*rank 1 (worker1): no GPU in rank 1*"])


def test_failures_show_each_ranks_output_as_a_report_section(pytester):
    pytester.makepyfile(ENTRIES + "\ndef test_raises(rpc_world):\n    rpc_world.run(prints_then_raises, world_size=2)\n")
    result = run(pytester)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert re.search(r"-+ rpc rank 0 \(worker0\) \[raised\] -+", out)
    assert re.search(r"-+ rpc rank 1 \(worker1\) \[stopped\] -+", out)
    assert "log line of worker1" in out
    assert "RuntimeError: bad worker0" in out
    assert "rpc-harness replay" in out


def test_marker_sets_world_options_and_call_arguments_win(pytester):
    pytester.makepyfile(
        ENTRIES
        + """
import pytest

@pytest.mark.rpc_world(world_size=3, names="node{rank}")
def test_marker(rpc_world):
    result = rpc_world.run(ok)
    assert result.names == ("node0", "node1", "node2")
    assert rpc_world.run(ok, world_size=2, names=["a", "b"]).names == ("a", "b")
"""
    )
    run(pytester).assert_outcomes(passed=1)


def test_the_same_rpc_seed_replays_the_same_worlds(pytester):
    pytester.makepyfile(
        ENTRIES
        + """
def test_seeded(rpc_world):
    first = rpc_world.run(seeded, world_size=2).values
    second = rpc_world.run(seeded, world_size=2).values
    assert first != second, "two worlds of one test get different seeds"
    print("VALUES", first, second)
"""
    )
    outs = []
    for seed in ("11", "11", "12"):
        result = run(pytester, "-s", f"--rpc-seed={seed}")
        result.assert_outcomes(passed=1)
        outs.append([line.split("VALUES", 1)[1] for line in result.stdout.lines if "VALUES" in line])
    assert all(len(out) == 1 for out in outs)
    assert outs[0] == outs[1]
    assert outs[0] != outs[2]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rpc-seed=abc"], "--rpc-seed: invalid seed 'abc'; use a whole number 0..2**63-1"),
        (["--rpc-seed=-1"], "--rpc-seed: invalid seed -1; use a whole number 0..2**63-1"),
        (["--rpc-deadline=soon"], "--rpc-deadline: invalid deadline 'soon'"),
        (["--rpc-deadline=-1"], "--rpc-deadline: invalid deadline '-1'; use seconds > 0"),
        (["--rpc-call-timeout=0"], "--rpc-call-timeout: invalid rpc_timeout '0'; use seconds > 0"),
        (["--rpc-fuzz=5"], "--rpc-fuzz: invalid fuzz '5'; use the largest delay in seconds, 0..1"),
        # The ini file's read as the flags are, with the harness's words, not
        # Python's ("invalid literal for int() with base 10"; outside-user trial).
        (["ini", "rpc_seed = abc"], "ini rpc_seed: invalid seed 'abc'; use a whole number 0..2**63-1"),
        (["ini", "rpc_deadline = soon"], "ini rpc_deadline: invalid deadline 'soon'; use seconds > 0"),
        (["ini", "rpc_fuzz = 1e999"], "ini rpc_fuzz: invalid fuzz inf; use the largest delay"),
    ],
)
def test_bad_command_line_values_are_usage_errors(pytester, args, message):
    pytester.makepyfile(ENTRIES + "\ndef test_ok(rpc_world):\n    rpc_world.run(ok, world_size=2)\n")
    if args[0] == "ini":
        if pytest.version_tuple < (9, 2):  # a key typed int or float: pytest's words, and which key
            pytest.skip("pytest reads an ini number itself before 9.2 (no union ini types)")
        pytester.makeini(f"[pytest]\n{args[1]}\n")
        args = []
    result = run(pytester, *args)
    assert result.ret != 0
    assert message in result.stderr.str() + result.stdout.str()


@pytest.mark.skipif(pytest.version_tuple < (9, 2), reason="pytest reads an ini number itself before 9.2")
@pytest.mark.parametrize("config", ["[pytest]\nrpc_seed = 0x10\n", '[tool.pytest]\nrpc_seed = "0x10"\n',
                                    "[tool.pytest]\nrpc_seed = 16\n"])
def test_an_ini_seed_is_read_as_the_flags_is_in_hex_too(pytester, config):
    # --rpc-seed=0x10 was read, the ini's 0x10 refused with Python's words (outside-user trial).
    if config.startswith("[pytest]"):
        pytester.makeini(config)
    else:
        pytester.makepyprojecttoml(config)
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = run(pytester)
    result.assert_outcomes(passed=1)
    assert "rpc-harness: session seed 16 (replay with --rpc-seed=16)" in result.stdout.str()


@pytest.mark.parametrize("config", ['[tool.pytest]\nrpc_devices = ["cpu"]\n', "[pytest]\nrpc_devices = cpu\n",
                                    '[tool.pytest]\nrpc_devices = ["cuda:x", "cuda:0"]\n'])
def test_rpc_devices_in_a_native_toml_config_takes_a_list(pytester, config):
    # pytest checks a native TOML value against its key's one type, text for
    # rpc_devices: a list was refused ("expects a string, got list"; outside-user trial).
    if config.startswith("[pytest]"):
        pytester.makeini(config)
    else:
        pytester.makepyprojecttoml(config)
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = run(pytester)
    if "cuda:x" in config:  # read, and checked as the flag's list is
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        assert "ini rpc_devices: invalid devices 'cuda:x'; use cpu, cuda, or a list of cuda:N" in result.stderr.str()
    else:
        result.assert_outcomes(passed=1)


@pytest.mark.parametrize("where", ["command line", "ini"])
def test_every_session_options_default_given_explicitly_runs_worlds_as_without_it(pytester, where):
    # A value given there is checked at start-up and the checked value again
    # in each world: --rpc-devices=cpu broke every world so ("cpu" became (),
    # and () was refused the second time).
    from rpc_harness.options import WorldOptions
    from rpc_harness.pytest_plugin import SESSION_OPTIONS

    texts = {}
    for name, option in SESSION_OPTIONS.items():
        default = WorldOptions.__dataclass_fields__[name].default
        if default is not None:
            texts[option.flag] = "cpu" if name == "devices" else str(option.plain(default))
    assert {"--rpc-deadline", "--rpc-fuzz", "--rpc-rendezvous", "--rpc-schedule", "--rpc-devices"} <= set(texts)
    pytester.makepyfile(ENTRIES + """
def on_device(ctx):
    return str(ctx.device)

def test_ok(rpc_world):
    assert rpc_world.run(on_device, world_size=2).values == ["cpu", "cpu"]
""")
    if where == "ini":
        pytester.makeini("[pytest]\n" + "".join(f"{flag[2:].replace('-', '_')} = {text}\n"
                                                 for flag, text in texts.items()))
        result = run(pytester)
    else:
        result = run(pytester, *(f"{flag}={text}" for flag, text in texts.items()))
    result.assert_outcomes(passed=1)


@pytest.mark.skipif(rpc_harness.cuda_available(), reason="the refusal is for machines without CUDA")
def test_session_devices_this_machine_lacks_are_one_usage_error(pytester):
    pytester.makepyfile(ENTRIES + "\ndef test_ok(rpc_world):\n    rpc_world.run(ok, world_size=2)\n")
    result = run(pytester, "--rpc-devices=cuda")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--rpc-devices: devices='cuda' asks for CUDA, but CUDA is not available here" in result.stderr.str()


def test_bad_marker_and_bad_world_input_fail_clearly(pytester):
    pytester.makepyfile(
        ENTRIES
        + """
import pytest

@pytest.mark.rpc_world(world_sise=2)
def test_typo(rpc_world):
    rpc_world.run(ok, world_size=2)

@pytest.mark.rpc_world(deadline=-1)
def test_bad_deadline(rpc_world):
    rpc_world.run(ok, world_size=2)

def test_bad_names(rpc_world):
    rpc_world.run(ok, world_size=3, names=["a", "b"])
"""
    )
    result = run(pytester)
    out = result.stdout.str()
    assert "marker rpc_world got unknown option(s) ['world_sise']" in out
    assert "invalid deadline -1" in out and "deadline from marker rpc_world" in out
    assert "2 names given for world_size=3" in out
    result.assert_outcomes(failed=2, errors=1)


def test_an_entry_whose_module_is_not_there_fails_its_test_with_the_users_line_and_the_refusal_alone(pytester):
    # ~40 lines of the harness's and importlib's frames came first (outside-user trial).
    pytester.makepyfile('def test_nomodule(rpc_world):\n    rpc_world.run("nomodule:fn", world_size=2)\n')
    result = run(pytester)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    report = out[out.index("_ test_nomodule _"):out.index("short test summary")]
    assert "importlib" not in report and "entry.py" not in report, report
    assert [line for line in report.splitlines() if line.startswith(("E ", ">"))] == [
        '>       rpc_world.run("nomodule:fn", world_size=2)',
        "E       rpc_harness.errors.WorldSpecError: rpc_world.run() in test_an_entry_whose_module_is_not_there_fails_"
        "its_test_with_the_users_line_and_the_refusal_alone.py::test_nomodule: entry: cannot import module "
        "'nomodule': No module named 'nomodule'"], report


@pytest.mark.parametrize("deadline", ["1", "1000ms"])
def test_ini_deadline_applies(pytester, deadline):
    # Issue 38: a duration takes the same forms at every door, the ini file's too.
    if not deadline.isdigit() and pytest.version_tuple < (9, 2):
        pytest.skip("an ini key typed as a number or text needs pytest 9.2")
    pytester.makeini(f"[pytest]\nrpc_deadline = {deadline}\n")
    pytester.makepyfile(
        ENTRIES + '\ndef test_hangs(rpc_world):\n    rpc_world.run(hangs, world_size=2, faults="hang:worker1@demo.step")\n'
    )
    result = run(pytester)
    result.assert_outcomes(failed=1)
    assert "deadline of 1s passed" in result.stdout.str()


def test_ini_keys_are_typed_so_a_toml_config_gives_numbers_as_numbers(pytester):
    # pytest's native TOML config checks each value against its key's type:
    # keys typed "string" refused `rpc_deadline = 2` ("expects a string, got int").
    units = pytest.version_tuple >= (9, 2)  # a key typed as a number or text (rpc_bringup = "30s")
    pytester.makepyprojecttoml('[tool.pytest]\nrpc_deadline = 1\nrpc_call_timeout = 30\nrpc_fuzz = 0\n'
                               'rpc_seed = 7\nrpc_schedule = "free"\n' + ('rpc_bringup = "30s"\n' if units else ''))
    pytester.makepyfile(
        ENTRIES + '\ndef test_hangs(rpc_world):\n    rpc_world.run(hangs, world_size=2, faults="hang:worker1@demo.step")\n'
    )
    result = run(pytester, "--strict-config")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "deadline of 1s passed" in out, out
    assert "rpc-harness: session seed 7 " in out, out
    help_text = run(pytester, "--help").stdout.str()
    # From pytest 9.2 a number key takes text too, which the harness reads as it reads the flag's.
    number = " | string" if pytest.version_tuple >= (9, 2) else ""
    for key, kind in [("rpc_seed", "int" + number), ("rpc_deadline", "float" + number),
                      ("rpc_bringup", "float" + number), ("rpc_call_timeout", "float" + number),
                      ("rpc_fuzz", "float" + number), ("rpc_schedule", "string"),
                      ("rpc_trace_dir", "string"), ("rpc_preload", "linelist")]:
        assert re.search(rf"^  {key} \({re.escape(kind)}\):", help_text, re.M), (key, kind)


def test_help_does_not_import_torch(pytester):
    pytester.makeconftest(
        """
import sys
def pytest_unconfigure(config):
    with open("imported.txt", "w") as f:
        f.write(str("torch" in sys.modules))
"""
    )
    result = run(pytester, "--help", fresh=True)
    assert result.ret == 0
    assert "--rpc-seed" in result.stdout.str() and "--rpc-deadline" in result.stdout.str()
    assert (pytester.path / "imported.txt").read_text() == "False"


RECORDS_SEEDS = """
import json, os
import pytest

def world_seed(ctx):
    return ctx.world_seed

@pytest.mark.parametrize("n", [1, 2])
def test_records(rpc_world, request, n):
    seeds = [rpc_world.run(world_seed, world_size=2).values[0] for _ in range(2)]
    record = {{"seeds": seeds, "in_worker": hasattr(request.config, "workerinput")}}
    with open(os.path.join({folder!r}, request.node.nodeid.replace("/", "_") + ".json"), "w") as file:
        json.dump(dict(record, nodeid=request.node.nodeid), file)
"""


# Each xdist worker's own live world (rpc_world_session), beside the seeds' tests in the same
# session: six tests, so that each worker likely gets some.
LIVE_WORLDS = """
import os

def pid(ctx):
    return os.getpid()
""" + "".join(f"""
def test_{n}(rpc_world_session):
    print("PIDS test_{n}", rpc_world_session.run(pid, world_size=2).values)
""" for n in range(6))


# One of the suite's slowest (pytest --durations): an xdist session (-n 2) in processes of its own
# (three interpreters importing torch, two forkservers), then the seed given back in a session
# without xdist: the seed must replay across sessions and workers. The same xdist session shows
# that each worker keeps its own live world.
@pytest.mark.long
def test_the_session_seed_in_the_header_replays_every_world_of_an_xdist_session_and_each_worker_keeps_its_live_world(
        pytester, tmp_path):
    # Also what shows that the fixture works under xdist at all.
    def records(folder):
        return {r["nodeid"]: r for r in (json.loads(p.read_text()) for p in sorted(folder.glob("*.json")))}

    first, again = tmp_path / "first", tmp_path / "again"
    first.mkdir()
    again.mkdir()
    pytester.makepyfile(test_seeds=RECORDS_SEEDS.format(folder=str(first)), test_live=LIVE_WORLDS)
    result = run(pytester, "-n", "2", "-rP", fresh=True)  # no --rpc-seed: the session draws one
    result.assert_outcomes(passed=8)
    (seed,) = [int(m[1]) for m in map(re.compile(r"rpc-harness: session seed (\d+) ").match, result.stdout.lines)
               if m]
    drawn = records(first)
    assert len(drawn) == 2 and all(r["in_worker"] for r in drawn.values()), "both tests ran in xdist workers"
    # The workers' worlds derive from the header's seed and the test id ...
    for nodeid, record in drawn.items():
        assert record["seeds"] == [rpc_harness.derive_seed(seed, nodeid, index) for index in (0, 1)]
    # ... so that seed, given back, replays them without xdist.
    pytester.makepyfile(test_seeds=RECORDS_SEEDS.format(folder=str(again)))
    run(pytester, f"--rpc-seed={seed}", "-p", "no:xdist", "test_seeds.py").assert_outcomes(passed=2)
    replayed = records(again)
    assert {n: r["seeds"] for n, r in replayed.items()} == {n: r["seeds"] for n, r in drawn.items()}
    assert not any(r["in_worker"] for r in replayed.values())

    # One live world per worker (a worker may get no test), whose ranks end with the session.
    out = result.stdout.str()
    worlds = {tuple(eval(re.search(rf"PIDS test_{n} (\[[0-9, ]+\])", out)[1])) for n in range(6)}
    assert 1 <= len(worlds) <= 2, worlds
    assert not wait_gone([pid for world in worlds for pid in world])


SLEEPER = """
import os, time

def sleeper(ctx):
    with open(os.path.join({pid_dir!r}, f"{{os.getpid()}}.pid"), "w") as f:
        f.write(str(os.getpid()))
    time.sleep(600)

def test_sleeps(rpc_world):
    rpc_world.run(sleeper, world_size=3, deadline=300)
"""


def start_sleeping_session(pytester, tmp_path, tmp, *args):
    """A pytest session whose world sleeps, with ``tmp`` as its temp folder:
    (process, the ranks' pids, that temp folder)."""
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    pytester.makepyfile(SLEEPER.format(pid_dir=str(pid_dir)))
    log = tmp_path / "session.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args, str(pytester.path)],
            cwd=pytester.path, env=dict(os.environ, TMPDIR=str(tmp)), stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    until = time.monotonic() + 90
    while len(os.listdir(pid_dir)) < 3 and time.monotonic() < until and proc.poll() is None:
        time.sleep(0.1)
    pids = [int((pid_dir / name).read_text()) for name in os.listdir(pid_dir)]
    if len(pids) < 3:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise AssertionError(f"the world never came up (exit code {proc.returncode}):\n{log.read_text()[-4000:]}")
    time.sleep(0.3)  # all ranks are inside their entry now
    return proc, pids, tmp


# One of the suite's slowest (pytest --durations): a session (under xdist: a controller and two
# workers) in processes of their own, SIGTERMed mid-world, then waited for until every rank is gone.
@pytest.mark.long
@pytest.mark.parametrize("xdist", [False, True], ids=["alone", "under-xdist"])
def test_a_sigtermed_session_stops_its_ranks_and_leaves_no_folder(pytester, tmp_path, short_tmp, xdist):
    proc, pids, tmp = start_sleeping_session(pytester, tmp_path, short_tmp, *(["-n", "2"] if xdist else []))
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        left = wait_gone(pids, within=30)
        assert not left, f"ranks outlived the SIGTERMed session: {left}"
        # torchinductor_<user> is torch's own compile cache, kept across runs by design.
        left_behind = [p for p in os.listdir(tmp) if not p.startswith("torchinductor_")]
        assert left_behind == [], "world and multiprocessing folders are removed"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# One of the suite's slowest (pytest --durations): a session SIGKILLed mid-world, then a second
# session that sweeps its folder: two processes of their own, and waits until every rank is gone.
@pytest.mark.long
def test_no_rank_outlives_a_sigkilled_pytest_and_the_next_session_sweeps_its_folder(pytester, tmp_path, short_tmp):
    proc, pids, tmp = start_sleeping_session(pytester, tmp_path, short_tmp)
    # Its forkserver too (a killed CI job): alone, it would sweep its
    # parent's folders as it ends (test_interrupts.py), and no one would be
    # left to see whether the next session does.
    forkservers = [pid for pid in children(proc.pid) if "forkserver" in _cmdline(pid)]
    try:
        assert len(forkservers) == 1, forkservers
        proc.send_signal(signal.SIGKILL)
        os.kill(forkservers[0], signal.SIGKILL)
        proc.wait(timeout=10)
        left = wait_gone(pids, within=30)
        assert not left, f"ranks outlived the SIGKILLed pytest: {left}"
    finally:
        try:  # whatever outlived it (ranks, when this fails), in the group it led
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    ours = ("rpc-world-", "pymp-")  # the world's folder, and multiprocessing's (the forkserver's socket)
    orphans = sorted(p.split("-")[0] for p in os.listdir(tmp) if p.startswith(ours))
    assert orphans == ["pymp", "rpc"], "nobody could remove the folders of a SIGKILLed process"
    pytester.makepyfile(ENTRIES + "\ndef test_ok(rpc_world):\n    rpc_world.run(ok, world_size=2)\n")
    again = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(pytester.path)],
                           cwd=pytester.path, env=dict(os.environ, TMPDIR=str(tmp)), capture_output=True,
                           text=True, timeout=300)  # a cold session: torch imported anew, on a loaded machine
    assert again.returncode == 0, again.stdout + again.stderr
    assert [p for p in os.listdir(tmp) if p.startswith(ours)] == [], "its first world swept them"


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            return file.read().decode(errors="replace")
    except OSError:
        return ""


def test_a_failing_world_leaves_a_trace_and_its_picture_named_in_the_report(pytester):
    pytester.makepyfile(
        ENTRIES
        + """
def test_ok(rpc_world):
    rpc_world.run(ok, world_size=2)

def test_rank1_dies(rpc_world):
    rpc_world.run(rank1_dies, world_size=3)
"""
    )
    traces = pytester.path / "traces"
    result = run(pytester, f"--rpc-trace-dir={traces}")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    trace = re.search(r"Chrome trace \(open in Perfetto\): (\S+)", out)
    picture = re.search(r"Timeline picture: (\S+)", out)
    assert trace and picture, out
    # Only the failing world is written, where the option said.
    assert sorted(p.name for p in traces.iterdir()) == sorted(
        [os.path.basename(trace[1]), os.path.basename(picture[1])]
    )
    assert "test_rank1_dies" in trace[1]
    import json
    import xml.etree.ElementTree as ET

    events = json.loads(open(trace[1]).read())["traceEvents"]
    tracks = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert tracks == {0: "rank 0 (worker0)", 1: "rank 1 (worker1)", 2: "rank 2 (worker2)"}
    deaths = [e for e in events if e.get("cat") == "death" and e["pid"] == 1]
    assert deaths and "SIGKILL" in deaths[0]["name"]
    svg = ET.parse(picture[1]).getroot()
    assert svg.tag.endswith("svg") and "rank 1 (worker1)" in ET.tostring(svg, encoding="unicode")


@pytest.mark.parametrize("cache", [True, False], ids=["pytest-cache", "no-cache"])
def test_traces_go_to_pytests_cache_folder_by_default_not_into_the_users_tree(pytester, cache):
    pytester.makepyfile(ENTRIES + "\ndef test_rank1_dies(rpc_world):\n    rpc_world.run(rank1_dies, world_size=2)\n")
    before = set(os.listdir(pytester.path))
    if cache:  # run() turns the cache plugin off
        result = pytester.runpytest_inprocess()
        folder = pytester.path / ".pytest_cache" / "d" / "rpc-harness-traces"
    else:
        result = run(pytester, "--basetemp", str(pytester.path / "base"))
        folder = pytester.path / "base" / "rpc-harness-traces"
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    trace = re.search(r"Chrome trace \(open in Perfetto\): (\S+)", out)
    picture = re.search(r"Timeline picture: (\S+)", out)
    assert trace and picture, out
    assert sorted(p.name for p in folder.iterdir()) == sorted([os.path.basename(trace[1]), os.path.basename(picture[1])])
    assert os.path.dirname(trace[1]) == str(folder), "the report names where they are"
    # pytest-benchmark, where it is installed (the GPU machine's image has
    # it), makes its own folder in the working directory: not ours.
    made = set(os.listdir(pytester.path)) - before - {".benchmarks"}
    assert made == ({".pytest_cache"} if cache else {"base"}), f"nothing of ours in the user's tree: {made}"


def test_the_pytest_replay_line_keeps_the_world_options_of_the_command_line(pytester):
    # A failing world under a controlled schedule: the line must replay it
    # under the same schedule, not a free one.
    pytester.makepyfile(ENTRIES + """
def test_fails(rpc_world):
    result = rpc_world.run(ok, world_size=2, check=False)
    print("NOTE", result.schedule_note.split(",")[0], "DIGEST", result.schedule_digest)
    assert False, "fail on purpose"
""")
    result = run(pytester, "-s", "--rpc-seed=3", "--rpc-schedule=pct:2", "--rpc-deadline=30", "--rpc-schedule-strict")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    line = re.search(r"^-+ rpc-harness replay -+\n(pytest .*)$", out, re.M)[1]
    # --rpc-schedule-strict too: a test that failed for a lost control must fail again so.
    assert line.endswith("test_fails --rpc-seed=3 --rpc-deadline=30 --rpc-schedule=pct:2 --rpc-schedule-strict"), line
    digest = re.search(r"NOTE controlled \(pct:2\) DIGEST (\S+)", out)[1]
    again = run(pytester, "-s", *shlex.split(line)[2:])
    assert f"NOTE controlled (pct:2) DIGEST {digest}" in again.stdout.str(), "the same schedule again"


def test_a_token_with_a_setup_function_beside_the_test_replays_from_another_folder(pytester, tmp_path):
    # The token's setup check imported its module before the token's folder
    # was on sys.path: "cannot import module 'helpers'" (outside-user trial).
    pytester.makepyfile(helpers="""
import os

def prepare():
    os.environ["PREPARED"] = "yes"

def boom(ctx):
    if ctx.rank == 1:
        raise RuntimeError("boom, prepared=" + os.environ.get("PREPARED", "no"))
""")
    pytester.makepyfile(test_uses_helpers="""
from helpers import boom

def test_fails(rpc_world):
    rpc_world.run(boom, world_size=2, setup="helpers:prepare")
""")
    result = run(pytester)
    result.assert_outcomes(failed=1)
    token = re.search(r"rpc-harness replay (rpch1_[A-Za-z0-9_\-]+)", result.stdout.str())[1]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run([sys.executable, "-m", "rpc_harness", "replay", token, "--deadline", "60"],
                          cwd=elsewhere, capture_output=True, text=True, timeout=240)
    assert done.returncode == 1, done.stderr  # 1: the failure reproduced
    assert "boom, prepared=yes" in done.stdout and "replay: the failure reproduced" in done.stdout, done.stdout


def test_the_python_line_of_a_test_in_a_tests_folder_replays_as_printed_from_the_root_and_elsewhere(
        pytester, tmp_path):
    # Run from the repository's root, the line named 'test_kill:ring' and
    # failed with "cannot import module 'test_kill'": pytest had put tests/
    # on sys.path, a Python started there has only the root (outside-user trial).
    tests = pytester.mkdir("tests")
    (tests / "test_kill.py").write_text("""
def ring(ctx):
    if ctx.rank == 1:
        raise RuntimeError("boom from rank 1")

def test_ring(rpc_world):
    rpc_world.run(ring, world_size=2)
""")
    result = run(pytester, "tests", "--rpc-seed=3")
    result.assert_outcomes(failed=1)
    line = re.search(r"^E\s+or: (.*rpc_harness\.run_world\(.*)$", result.stdout.str(), re.M)[1]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for folder in (pytester.path, elsewhere):
        done = subprocess.run([sys.executable, "-c", line], cwd=folder,
                              capture_output=True, text=True, timeout=240)
        assert "WorldFailed" in done.stderr and "boom from rank 1" in done.stderr, (folder, line, done.stderr)


def test_the_pytest_replay_line_keeps_world_options_set_with_dash_o(pytester):
    # -o rpc_fuzz=0.01 sets the ini key from the command line: a line without
    # it replays a world without fuzz (outside-user trial).
    pytester.makepyfile(ENTRIES + """
def test_fails(rpc_world):
    result = rpc_world.run(ok, world_size=2, check=False)
    print("FUZZ", result.fuzz)
    assert False, "fail on purpose"
""")
    result = run(pytester, "-s", "--rpc-seed=3", "-o", "rpc_fuzz=0.01", "-o", "rpc_call_timeout=5")
    result.assert_outcomes(failed=1)
    line = re.search(r"^-+ rpc-harness replay -+\n(pytest .*)$", result.stdout.str(), re.M)[1]
    assert line.endswith("test_fails --rpc-seed=3 --rpc-call-timeout=5 --rpc-fuzz=0.01"), line
    again = run(pytester, "-s", *shlex.split(line)[2:])
    assert "FUZZ 0.01" in again.stdout.str(), "the same fuzz again"


def test_a_hypothesis_tests_replay_section_says_where_its_failing_example_comes_back_from(pytester):
    # The session seed replays the worlds; Hypothesis draws its examples
    # afresh unless its database holds the failure (outside-user trial: the
    # line alone found it in 3 of 6 runs without .hypothesis/).
    pytester.makepyfile(ENTRIES + """
from hypothesis import HealthCheck, given, settings, strategies as st

@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None, database=None, max_examples=5)
@given(st.integers(0, 3))
def test_drawn(rpc_world, n):
    rpc_world.run(ok, world_size=2)
    assert n < 1

def test_plain(rpc_world):
    rpc_world.run(ok, world_size=2)
    assert False
""")
    result = run(pytester, "--rpc-seed=3")
    result.assert_outcomes(failed=2)
    sections = re.findall(r"^-+ rpc-harness replay -+\n((?:.+\n)+)", result.stdout.str(), re.M)
    assert len(sections) == 2, sections
    drawn, plain = sorted(sections, key=lambda text: "test_plain" in text)
    assert drawn.startswith("pytest test_a_hypothesis_tests_replay_section_says_where_its_failing_example_comes_back_"
                            "from.py::test_drawn --rpc-seed=3\n(a Hypothesis test: this line finds the failing "
                            "example again where Hypothesis's database (in pytest's cache folder) holds it"), drawn
    assert "Hypothesis" not in plain, plain


def test_the_pytest_replay_line_runs_from_the_folder_pytest_was_started_in(pytester, monkeypatch):
    # Node ids are relative to the rootdir: run from a subfolder, the line
    # named a file that is not there (found by an outside-user trial).
    pytester.makeini("[pytest]\n")
    sub = pytester.mkpydir("suite")
    (sub / "test_sub.py").write_text(ENTRIES + """
def test_fails(rpc_world):
    rpc_world.run(ok, world_size=2)
    assert False, "fail on purpose"
""")
    monkeypatch.chdir(sub)
    result = run(pytester, "--rpc-seed=3")
    result.assert_outcomes(failed=1)
    line = re.search(r"^-+ rpc-harness replay -+\n(pytest .*)$", result.stdout.str(), re.M)[1]
    assert line == "pytest test_sub.py::test_fails --rpc-seed=3", line
    again = run(pytester, *shlex.split(line)[1:])
    again.assert_outcomes(failed=1)


def test_a_trace_folder_that_cannot_be_written_is_named_in_the_report(pytester):
    pytester.makepyfile(ENTRIES + "\ndef test_rank1_dies(rpc_world):\n    rpc_world.run(rank1_dies, world_size=2)\n")
    blocker = pytester.path / "a_file"
    blocker.write_text("")
    result = run(pytester, f"--rpc-trace-dir={blocker / 'traces'}")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "no trace or timeline picture: Not a directory" in out and str(blocker) in out, out
    assert "choose a writable folder with --rpc-trace-dir" in out
    assert "Chrome trace (open in Perfetto)" not in out


def test_the_schedule_comes_from_the_command_line_the_ini_file_and_the_marker(pytester):
    pytester.makepyfile(ENTRIES + """
def test_flag_or_ini(rpc_world):
    result = rpc_world.run(ok, world_size=2)
    print("SCHEDULE", result.schedule_note.split(",")[0], len(result.schedule) > 0)

@pytest.mark.rpc_world(schedule="pct:2")
def test_marker(rpc_world):
    result = rpc_world.run(ok, world_size=2)
    print("MARKED", result.schedule_note.split(",")[0])
""")
    result = run(pytester, "-s", "--rpc-schedule=controlled")
    result.assert_outcomes(passed=2)
    assert "SCHEDULE controlled (controlled) True" in result.stdout.str()
    assert "MARKED controlled (pct:2)" in result.stdout.str(), "the marker wins over the command line"
    pytester.makeini("[pytest]\nrpc_schedule = pct:3\n")
    result = run(pytester, "-s", "-k", "flag_or_ini")
    assert "SCHEDULE controlled (pct:3) True" in result.stdout.str()
    result = run(pytester, "--rpc-schedule=sometimes")
    assert result.ret != 0 and "--rpc-schedule: invalid schedule 'sometimes'" in result.stderr.str() + result.stdout.str()


def test_an_rpc_preload_entry_that_cannot_be_found_is_warned_about_and_the_session_goes_on(pytester):
    pytester.makeini("[pytest]\nrpc_preload =\n    json\n    jsno\n    jsno.decoder\n")
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = run(pytester)
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert "PytestConfigWarning: ini rpc_preload: no module named 'jsno'; worlds start without it" in out, out
    assert "ini rpc_preload: 'jsno.decoder' cannot be imported: ModuleNotFoundError" in out, out
    assert "'json'" not in out, "a module that exists is not warned about"


def test_a_refused_option_shows_the_users_line_and_the_message_not_the_harnesss_frames(pytester):
    pytester.makepyfile("""
import pytest

def entry(ctx):
    return 1

@pytest.mark.rpc_world(deadline=-1)
def test_bad_value(rpc_world):
    rpc_world.run(entry, world_size=2)

@pytest.mark.rpc_world(dedline=3)
def test_bad_key(rpc_world):
    rpc_world.run(entry, world_size=2)

def test_bad_plan(rpc_world):
    rpc_world.run(entry, world_size=2, faults="kill:nobody@x")
""")
    result = run(pytester)
    result.assert_outcomes(failed=2, errors=1)
    out = result.stdout.str()
    assert "invalid deadline -1; use seconds > 0" in out
    assert "marker rpc_world got unknown option(s) ['dedline']" in out
    assert "test_bad_plan" in out and "nobody" in out
    assert out.count(">       rpc_world.run(entry, world_size=2") == 2, out
    frames = [line for line in result.stdout.lines if re.search(r"rpc_harness[/\\]\w+\.py:\d+", line)]
    assert not frames, "\n".join(frames)


# -- numeric options at their edges through the marker, the pytest flags and the ini --------

WEEK = 7 * 24 * 3600
BUDGETS = {"deadline": ("--rpc-deadline", "deadline"), "bringup": ("--rpc-bringup", "bring-up budget"),
           "rpc_timeout": ("--rpc-call-timeout", "rpc_timeout"), "fuzz": ("--rpc-fuzz", "fuzz")}
OPTIONS_SEEN = """
import torch.distributed.rpc as rpc

def options_seen(ctx):
    return {"deadline": ctx.deadline, "rpc_timeout": rpc.get_rpc_timeout(), "fuzz": ctx.fuzz}

def test_largest(rpc_world):
    result = rpc_world.run(options_seen, world_size=2)
    assert (result.deadline, result.bringup) == (604800.0, 604800.0)
    assert result.values[0] == {"deadline": 604800.0, "rpc_timeout": 604800.0, "fuzz": FUZZ}
"""


@pytest.mark.parametrize("option", sorted(BUDGETS))
@pytest.mark.parametrize("door", ["flag", "ini"])
def test_a_budget_or_fuzz_out_of_range_at_the_flag_or_the_ini_is_a_usage_error_at_start_up(pytester, option, door):
    flag, what = BUDGETS[option]
    bad = {"deadline": "inf", "bringup": "nan", "rpc_timeout": "0", "fuzz": "1.5"}[option]
    pytester.makepyfile(ENTRIES + "\ndef test_ok(rpc_world):\n    rpc_world.run(ok, world_size=2)\n")
    if door == "flag":
        result, where, shown = run(pytester, f"{flag}={bad}"), flag, repr(bad)
    else:  # the key is typed float: pytest reads the number
        pytester.makeini(f"[pytest]\n{flag[2:].replace('-', '_')} = {bad}\n")
        result, where, shown = run(pytester), f"ini {flag[2:].replace('-', '_')}", repr(float(bad))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"{where}: invalid {what} {shown}" in result.stderr.str() + result.stdout.str()
    assert "test_ok" not in result.stdout.str(), "no test ran"


@pytest.mark.parametrize("door", ["flag", "ini"])
def test_the_largest_budgets_at_the_flags_or_the_ini_reach_the_world(pytester, door):
    # fuzz stays 0 here: at its largest every send waits up to a second.
    largest = {"deadline": WEEK, "bringup": WEEK, "rpc_timeout": WEEK}
    pytester.makepyfile(OPTIONS_SEEN.replace("FUZZ", "0.0"))
    if door == "flag":
        result = run(pytester, *(f"{BUDGETS[o][0]}={v}" for o, v in largest.items()))
    else:
        pytester.makeini("[pytest]\n" + "".join(f"{BUDGETS[o][0][2:].replace('-', '_')} = {v}\n"
                                                for o, v in largest.items()))
        result = run(pytester)
    result.assert_outcomes(passed=1)


MARKED = """
import math
import pytest

{tests}
"""


def test_every_numeric_option_of_the_marker_is_checked_at_its_edges(pytester):
    cases = [("deadline", v) for v in ("math.inf", "math.nan", "0", "-1", "604801")]
    cases += [("bringup", v) for v in ("math.inf", "-0.5")] + [("rpc_timeout", v) for v in ("math.nan", "0")]
    cases += [("fuzz", v) for v in ("-0.1", "1.5", "math.inf")] + [("seed", v) for v in ("-1", "2**63", "1.5")]
    tests = "".join(f"\n@pytest.mark.rpc_world(world_size=2, {option}={value})\ndef test_bad_{i}(rpc_world):\n"
                    "    rpc_world.run(ok)\n" for i, (option, value) in enumerate(cases))
    tests += ("\n@pytest.mark.rpc_world(world_size=2, deadline=604800, bringup=604800, rpc_timeout=604800, "
              "seed=2**63 - 1)\ndef test_largest_marked(rpc_world):\n    result = rpc_world.run(options_seen)\n"
              "    assert (result.deadline, result.bringup, result.seed) == (604800.0, 604800.0, 2**63 - 1)\n"
              "    assert result.values[0]['rpc_timeout'] == 604800.0\n")
    pytester.makepyfile(ENTRIES + OPTIONS_SEEN.split("def test_largest")[0] + MARKED.format(tests=tests))
    result = run(pytester)
    result.assert_outcomes(passed=1, failed=len(cases))
    out = result.stdout.str()
    for i, (option, value) in enumerate(cases):
        what = {"bringup": "bring-up budget"}.get(option, option)
        shown = repr(eval(value, {"math": math}))  # noqa: S307 - the test's own literals
        assert re.search(rf"test_bad_{i}\b.*\n(.*\n)*?.*invalid {re.escape(what)} {re.escape(shown)}", out), (option, value)
    assert out.count("from marker rpc_world") >= len(cases)


PRECEDENCE = """
import pytest
import torch.distributed.rpc as rpc

def seen(ctx):
    return rpc.get_rpc_timeout()

@pytest.mark.rpc_world(world_size=2, deadline=201, rpc_timeout=202)
def test_marked(rpc_world):
    result = rpc_world.run(seen, deadline=101)
    assert (result.deadline, result.values[0], result.bringup) == (101, 202, 403)  # call, marker, flag

def test_unmarked(rpc_world):
    result = rpc_world.run(seen, world_size=2)
    assert (result.deadline, result.values[0], result.bringup) == (301, 402, 403)  # ini, flag, flag
"""


def test_a_worlds_options_come_from_the_call_then_the_marker_then_the_flags_then_the_ini(pytester):
    pytester.makeini("[pytest]\nrpc_deadline = 301\nrpc_call_timeout = 302\nrpc_bringup = 303\n")
    pytester.makepyfile(PRECEDENCE)
    run(pytester, "--rpc-bringup=403", "--rpc-call-timeout=402").assert_outcomes(passed=2)
