"""Worlds ended from outside the harness: a test timeout (pytest-timeout),
a session interrupted while its first world comes up (issue 28).

The first world of a session starts the forkserver, which imports torch and
the session's modules before it forks any rank: seconds, more on a loaded
machine. The tests here hold it there with an ``rpc_preload`` module that
sleeps, so that "during bring-up" is a state, not a matter of timing.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest
import pytest_timeout  # noqa: F401 - the sessions these tests start need it (the test extra)
from conftest import wait_gone

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# Imported by the forkserver (ini rpc_preload): it says who it is, then holds
# the forkserver in its imports. With FIRE, it then fires pytest-timeout's
# timer in the session (its parent): SIGALRM is what the signal method arms.
SLOW_PRELOAD = """
import os, signal, time

with open(os.path.join({pids!r}, str(os.getpid())), "w"):
    pass
if {fire!r}:
    os.kill(os.getppid(), signal.SIGALRM)
time.sleep(600)
"""

ENTRY = """
import os, signal, time
import pytest

def waits_in_its_entry(ctx, folder, session):
    open(os.path.join(folder, str(ctx.rank)), "w").close()
    if ctx.rank == 0:
        while len(os.listdir(folder)) < ctx.world_size:
            time.sleep(0.01)
        os.kill(session, signal.SIGALRM)  # pytest-timeout's timer fires now, every rank inside its entry
    time.sleep(600)

def ok(ctx):
    return ctx.rank

@pytest.mark.timeout(300)
def test_times_out(rpc_world, tmp_path):
    rpc_world.run(waits_in_its_entry, world_size=2, deadline=600, args=(str(tmp_path), os.getpid()))

def test_comes_up(rpc_world):
    rpc_world.run(ok, world_size=2)

def test_comes_up_too(rpc_world):
    rpc_world.run(ok, world_size=2)
"""


# A job that a shell without job control starts in the background (`pytest
# -n auto &` in a script: how one whole-suite run that failed here was
# started) has SIGINT ignored, and so has every process it starts; Python
# then leaves it ignored (it turns SIGINT into KeyboardInterrupt only where
# it finds it at its default). A session interrupted there never saw its
# Ctrl-C, and its controller ran on until killed 120 s later (issue 38). The
# sessions here start as a terminal starts them: SIGINT at its default,
# whoever started this suite and how.
_SIGINT_AT_DEFAULT = ("-c", "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                            "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])")


def start(pytester, tmp, *args, files=("test_worlds.py",)):
    """A pytest session of the test file above (or ``files``), in a process
    group of its own, with ``tmp`` as its temp folder and SIGINT at its
    default; its output goes to ``session.log``."""
    log = open(pytester.path / "session.log", "w")  # noqa: SIM115 - closed by finish()
    proc = subprocess.Popen(
        [sys.executable, *_SIGINT_AT_DEFAULT, "-m", "pytest", "-p", "no:cacheprovider", *args,
         *(str(pytester.path / name) for name in files)],
        cwd=pytester.path, env=dict(os.environ, TMPDIR=str(tmp)), stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    proc.log = log
    return proc


def finish(pytester, proc, pids_folder):
    """Whatever a test left: the session's group, the forkservers it named."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    proc.log.close()
    for name in os.listdir(pids_folder):
        try:
            os.kill(int(name), signal.SIGKILL)
        except ProcessLookupError:
            pass


def forkservers(pytester, *, fire=False):
    """The folder where each forkserver writes its pid, once it is held in its imports."""
    pids = pytester.path / "forkservers"
    pids.mkdir()
    pytester.makepyfile(slow_preload=SLOW_PRELOAD.format(pids=str(pids), fire=fire), test_worlds=ENTRY)
    pytester.makeini("[pytest]\nrpc_preload = slow_preload\n")
    return pids


def wait_for(condition, proc, pytester, within=120):
    until = time.monotonic() + within
    while not condition() and time.monotonic() < until and proc.poll() is None:
        time.sleep(0.1)
    assert condition(), f"never got there (exit code {proc.poll()}):\n{(pytester.path / 'session.log').read_text()[-4000:]}"


THREAD_METHOD = """
import time
import pytest
import rpc_harness

def sleeps_in_its_entry(ctx):
    time.sleep(600)

def ok(ctx):
    return ctx.rank

@pytest.fixture
def warm():
    rpc_harness.run_world(ok, world_size=2)  # the forkserver is up before the test's clock starts

@pytest.mark.timeout(10, method="thread", func_only=True)
def test_times_out(warm, rpc_world):
    rpc_world.run(sleeps_in_its_entry, world_size=2, deadline=600)
"""


# One of the suite's slowest (pytest --durations): a pytest session of its own (its torch import,
# its forkserver) whose world runs until pytest-timeout's thread method ends the process after 10 s:
# the timeout is the subject.
def test_a_thread_method_timeout_prints_every_ranks_stacks_and_the_replay_line_before_it_ends_pytest(
        pytester, short_tmp, monkeypatch):
    # Its thread ends the process (os._exit): no report, no fixture teardown.
    pytester.makepyfile(test_worlds=THREAD_METHOD)
    monkeypatch.setenv("TMPDIR", str(short_tmp))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=300)
    out = result.stdout.str()
    assert result.ret == 1, out
    assert "Timeout" in out, out
    for rank in (0, 1):
        assert re.search(rf"--- rank {rank} \(worker{rank}\) stacks\n(.*\n)*?.*File ", out), out
    assert re.search(r"Replay: pytest \S+::test_times_out --rpc-seed=\d+", out), out
    # The forkserver, left without its parent, sweeps what the process could not remove.
    until = time.monotonic() + 30
    while (left := [p for p in os.listdir(short_tmp) if p.startswith(("pymp-", "rpc-world-"))]) and (
            time.monotonic() < until):
        time.sleep(0.1)
    assert left == []


def test_a_test_timeout_during_bring_up_gives_the_replay_line_and_leaves_no_forkserver(pytester, short_tmp):
    pids = forkservers(pytester, fire=True)
    proc = start(pytester, short_tmp, "-k", "times_out")
    try:
        proc.wait(timeout=300)
        ended = time.monotonic()
        (forkserver,) = [int(name) for name in os.listdir(pids)]
        left = wait_gone([forkserver], within=2.0)
        gone_after = time.monotonic() - ended
        out = (pytester.path / "session.log").read_text()
        assert not left, f"the forkserver outlived pytest by more than {gone_after:.1f}s"
        assert proc.returncode == 1, out
        assert "Timeout" in out and "pytest-timeout" in out, out
        assert re.search(r"-+ rpc-harness replay -+\npytest \S+::test_times_out --rpc-seed=\d+", out), out
        assert [p for p in os.listdir(short_tmp) if p.startswith(("pymp-", "rpc-world-"))] == []
    finally:
        finish(pytester, proc, pids)


# One of the suite's slowest (pytest --durations): an xdist controller and two workers in processes
# of their own, interrupted during bring-up, then waited for until every worker and forkserver is
# gone.
@pytest.mark.long
def test_ctrl_c_to_an_xdist_controller_during_bring_up_leaves_no_folder_and_no_forkserver(pytester, short_tmp):
    # Workers that take longer to stop than xdist waits (10 s; torch's
    # teardown on a loaded machine) are killed: nothing of theirs runs again.
    # These never stop by themselves, so the controller here waits 1 s, not
    # 10, before it kills them: what follows does not depend on how long.
    pytester.makeconftest("""
import time

import xdist.workermanage

xdist.workermanage.NodeManager.EXIT_TIMEOUT = 1

def pytest_sessionfinish(session):
    if hasattr(session.config, "workerinput"):
        time.sleep(60)
""")
    pids = forkservers(pytester)
    proc = start(pytester, short_tmp, "-n", "2", "-k", "comes_up")
    try:
        wait_for(lambda: len(os.listdir(pids)) == 2, proc, pytester)
        assert sorted(p.split("-")[0] for p in os.listdir(short_tmp) if p.startswith("pymp-")) == ["pymp", "pymp"]
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
        left = wait_gone([int(name) for name in os.listdir(pids)], within=30)
        assert not left, f"forkservers outlived the interrupted session: {left}"
        assert [p for p in os.listdir(short_tmp) if p.startswith(("pymp-", "rpc-world-"))] == []
    finally:
        finish(pytester, proc, pids)


# One session (its own process: pytest-timeout's signal and Ctrl-C are the subjects) for two ends
# of a world: first a test timeout inside one (pytest-timeout's limit passes; the session goes
# on), then Ctrl-C inside the next.
@pytest.mark.parametrize("xdist", [False, True])
def test_a_test_timeout_then_ctrl_c_inside_a_world_name_the_world_its_stacks_and_its_replay_lines(
        pytester, short_tmp, xdist):
    # pytest alone printed a bare KeyboardInterrupt and a line of
    # multiprocessing's: which world, how long it had run and how to get it
    # back were not said (outside-user trial). An xdist worker has no
    # terminal summary: it says so on its stderr, the terminal's.
    pytester.makepyfile(test_timeout=ENTRY)  # its test_times_out, run first
    ranks = pytester.path / "ranks"
    ranks.mkdir()
    pytester.makepyfile(test_worlds=f"""
import os, time

def waits(ctx):
    open(os.path.join({str(ranks)!r}, str(ctx.rank)), "w").close()
    time.sleep(600)

def test_waits(rpc_world):
    rpc_world.run(waits, world_size=3, deadline=600)
""")
    proc = start(pytester, short_tmp, "--rpc-seed=5", "-k", "times_out or waits", *(["-n", "1"] if xdist else []),
                 files=("test_timeout.py", "test_worlds.py"))
    try:
        wait_for(lambda: len(os.listdir(ranks)) == 3, proc, pytester)
        time.sleep(1.0)  # an age of at least a second, which the line must show
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the session's whole group
        proc.wait(timeout=120)
        out = (pytester.path / "session.log").read_text()
        assert proc.returncode == 2, out  # pytest's for an interrupted session
        # The test timeout: every rank's stacks when it stopped the world, and the replay line.
        assert re.search(r"=+ 1 failed(, 2 deselected)? in ", out), out
        assert "Timeout" in out and "pytest-timeout" in out, out
        for rank in (0, 1):
            section = re.search(rf"-+ rpc rank {rank} \(worker{rank}\) \[stopped\] -+\n(.*?)\n(?=-{{10,}} |=+ )", out,
                                re.S)
            assert section, out
            assert "--- stacks when the world was stopped" in section[1], section[1]
            assert "in waits_in_its_entry" in section[1], section[1]
        assert re.search(r"-+ rpc-harness replay -+\npytest \S+::test_times_out --rpc-seed=5", out), out
        # Ctrl-C: the world it stopped, its age, its replay lines.
        head = r"^\[gw0\] rpc-harness: " if xdist else r"^!+ rpc-harness: interrupted !+\n"
        said = re.search(head + r"Ctrl-C stopped rpc world 0 of test_worlds.py::test_waits "
                         r"after (\d+\.\d) s: 3 ranks \(worker0, worker1, worker2\), seed \d+\n"
                         r"Replay: pytest test_worlds.py::test_waits --rpc-seed=5\n"
                         r"    or: rpc-harness replay rpch1_\S+ --deadline 600\n"
                         r"    or: import rpc_harness, sys; .*rpc_harness.run_world\('test_worlds:waits'", out, re.M)
        assert said, out
        assert float(said[1]) >= 1.0, out
        assert out.index(said[0]) < out.index("!! KeyboardInterrupt !!"), "before pytest's own"
    finally:
        finish(pytester, proc, pytester.mkdir("no_forkservers"))  # (the ranks folder holds ranks, not pids)
