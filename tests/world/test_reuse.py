"""Reused worlds (``rpc_world_module``, ``rpc_world_session``), seen from a
user's test suite (pytester): one live world per shape, each entry checked
clean after it, every rule's breach failing its own test, and a world that
an entry ended rebuilt for the next, which says why."""

from __future__ import annotations

import glob
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import pytest

# Imported before any in-process session, as in test_plugin: torch imported
# twice in one process crashes it, and one forkserver serves every session.
import torch  # noqa: F401
from conftest import wait_gone

import rpc_harness  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

ENTRIES = """
import os, threading, time
import pytest
import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
import rpc_harness

KEPT = []


class Box:
    def __init__(self):
        self.value = 1


def pid(ctx):
    return os.getpid()


def seeded(ctx):
    return (ctx.world_seed, torch.rand(1).item(), os.getpid())


def clean_rref(ctx):
    if ctx.rank == 0:
        box = rpc.remote(ctx.names[1], Box)
        assert box.to_here().value == 1
    return os.getpid()


def keeps_an_rref(ctx):
    if ctx.rank == 0:
        KEPT.append(rpc.remote(ctx.names[1], Box))
        KEPT[-1].to_here()
    return os.getpid()


def leaves_a_context_open(ctx):
    KEPT.append(dist_autograd.context())
    KEPT[-1].__enter__()
    return os.getpid()


def forgets_a_future(ctx):
    if ctx.rank == 0:
        rpc.rpc_async(ctx.names[1], time.sleep, (30,))
    return os.getpid()


def leaves_a_thread(ctx):
    if ctx.rank == 1:
        threading.Thread(target=time.sleep, args=(30,), name="left-behind", daemon=True).start()
    return os.getpid()


def steps(ctx):
    for _ in range(3):
        rpc_harness.failpoint("demo.step")
    return os.getpid()


def shuts_down(ctx):
    rpc.shutdown()
"""


def run(pytester, *args):
    """The inner session, in this process (its worlds fork from this
    worker's forkserver); every world in it has a deadline."""
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", *args)


def pids_in(out, test):
    """The pids a passing test printed (``PIDS test [..]``)."""
    found = re.search(rf"PIDS {test} (\[[0-9, ]+\])", out)
    assert found, f"{test} printed no pids:\n{out}"
    return eval(found[1])


def failure_section(out, test):
    """The text of ``test``'s failure section alone (with CI set, pytest's
    short summary repeats each failure's message whole)."""
    start = out.index(f"_ {test} _")
    end = re.search(r"\n(_{3,} \S+ _{3,}|={3,} (short test summary|\d+ (failed|passed)))", out[start:])
    return out[start:start + end.start()] if end else out[start:]


def test_entries_of_one_shape_share_a_world_and_each_gets_its_own_seed(pytester):
    pytester.makepyfile(ENTRIES + """
def test_a(rpc_world_module):
    result = rpc_world_module.run(seeded, world_size=2)
    print("PIDS test_a", [v[2] for v in result.values])
    print("SEED test_a", result.seed, rpc_world_module.seed_for(0))

def test_b(rpc_world_module, rpc_world):
    result = rpc_world_module.run(seeded, world_size=2)
    print("PIDS test_b", [v[2] for v in result.values])
    print("SEED test_b", result.seed, rpc_world_module.seed_for(0))
    assert "entry 2 of it" in result.reuse
    # Every RNG seeded again for the entry: as a fresh world of that seed.
    fresh = rpc_world.run(seeded, world_size=2, seed=result.seed)
    assert [v[:2] for v in fresh.values] == [v[:2] for v in result.values]

def test_other_shape(rpc_world_module):
    result = rpc_world_module.run(pid, world_size=3)
    print("PIDS test_other_shape", result.values)
""")
    result = run(pytester, "-s")
    result.assert_outcomes(passed=3)
    out = result.stdout.str()
    assert pids_in(out, "test_a") == pids_in(out, "test_b")  # one live world
    assert not set(pids_in(out, "test_other_shape")) & set(pids_in(out, "test_a"))
    seeds = dict(re.findall(r"SEED (test_\w) (\d+ \d+)", out))
    for test in ("test_a", "test_b"):
        world, expected = seeds[test].split()
        assert world == expected  # the seed rpc_world would give this test's first world
    assert seeds["test_a"] != seeds["test_b"]


def test_a_scope_keeps_two_shapes_live_and_closes_the_least_recently_used(pytester):
    pytester.makepyfile(ENTRIES + "".join(f"""
def test_{name}(rpc_world_module):
    print("PIDS test_{name}", rpc_world_module.run(pid, world_size={size}).values)
""" for name, size in (("two", 2), ("three", 3), ("two_again", 2), ("four", 4), ("two_last", 2),
                       ("three_again", 3))))
    result = run(pytester, "-s")
    result.assert_outcomes(passed=6)
    out = result.stdout.str()
    assert pids_in(out, "test_two") == pids_in(out, "test_two_again")
    # Four closed the least recently used (three), whose ranks are gone; two was kept.
    assert not set(pids_in(out, "test_three")) & set(pids_in(out, "test_three_again"))
    assert pids_in(out, "test_two_last") == pids_in(out, "test_two")
    assert not wait_gone(pids_in(out, "test_three"))


def test_a_clean_entry_with_rrefs_keeps_the_world(pytester):
    pytester.makepyfile(ENTRIES + """
def test_a(rpc_world_module):
    print("PIDS test_a", rpc_world_module.run(clean_rref, world_size=2).values)

def test_b(rpc_world_module):
    print("PIDS test_b", rpc_world_module.run(clean_rref, world_size=2).values)
""")
    result = run(pytester, "-s")
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert pids_in(out, "test_a") == pids_in(out, "test_b")


# Each rule: the entry that breaks it, and what its failure must say.
RULES = {
    "rrefs": ("keeps_an_rref", [r"rule rrefs", r"rank 0 \(worker0\) still holds \(owner worker1\) UserRRef",
                                r"held by the global test_\w+\.KEPT", r"rank 1 \(worker1\) owns 1 RRef"]),
    "dist_autograd": ("leaves_a_context_open", [r"rule dist_autograd",
                                                r"rank 0 \(worker0\) has 1 dist_autograd context\(s\) open"]),
    "futures": ("forgets_a_future", [r"rule futures", r"rank 0 \(worker0\) waits for the answers of 1 RPC",
                                     r"rule idle .*: rank 1 \(worker1\) is still serving 1 RPC"]),
    "idle": ("leaves_a_thread", [r"rule idle", r"rank 1 \(worker1\) still runs 1 thread\(s\) the entry "
                                               r"started: 'left-behind'"]),
}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_an_entry_that_breaks_a_rule_fails_its_own_test_and_the_next_gets_a_fresh_world(pytester, rule):
    entry, patterns = RULES[rule]
    pytester.makepyfile(ENTRIES + f"""
def test_before(rpc_world_module):
    print("PIDS test_before", rpc_world_module.run(pid, world_size=2).values)

def test_dirty(rpc_world_module):
    rpc_world_module.run({entry}, world_size=2)

def test_after(rpc_world_module):
    result = rpc_world_module.run(pid, world_size=2)
    print("PIDS test_after", result.values)
""")
    result = run(pytester, "-s", "-rP")
    result.assert_outcomes(passed=2, failed=1)
    out = result.stdout.str()
    failure = failure_section(out, "test_dirty")
    assert "rpc world failed: the entry left the reused world dirty" in failure
    for pattern in patterns:
        assert re.search(pattern, failure), f"{pattern!r} not in:\n{failure}"
    assert "ran in a reused world, entry 2 of it" in failure
    # The check looks at every object of a rank (deprecated ones too): none
    # of its warnings reach the ranks' output (seen: torch's reduce_op, by
    # every rank, in a user's report). pytest's own warnings summary after it
    # is not the ranks': in a whole-suite run the in-process pytester session
    # may warn that rpc_harness was imported before its rewrite hook (seen in
    # CI runs, depending on which tests ran before in the worker; not found).
    assert "Warning" not in failure.split(" warnings summary ")[0], failure
    # Replayed alone, in a fresh world; or after the entries before it.
    assert re.search(r"Replay: pytest \S+::test_dirty --rpc-seed=\d+", failure)
    assert re.search(r"or, after the entry its world ran before it: pytest \S+::test_before \S+::test_dirty",
                     failure)
    assert not set(pids_in(out, "test_after")) & set(pids_in(out, "test_before"))
    assert re.search(rf"the one before ended: \S+::test_dirty left it dirty \(rule [^)]*\b{rule}\b", out)


def test_the_replay_line_of_an_entry_of_a_reused_world_fails_again_alone_in_a_fresh_one(pytester):
    pytester.makepyfile(ENTRIES + """
def draws_and_fails(ctx):
    raise AssertionError(f"drew {torch.rand(1).item()!r} from world seed {ctx.world_seed}")

def test_a(rpc_world_module):
    rpc_world_module.run(pid, world_size=2)

def test_b(rpc_world_module):
    rpc_world_module.run(keeps_an_rref, world_size=2)

def test_c(rpc_world_module):
    rpc_world_module.run(pid, world_size=2)

def test_d(rpc_world_module):
    rpc_world_module.run(draws_and_fails, world_size=2)
""")
    out = run(pytester).stdout.str()
    for test, expect in (("test_b", r"rule rrefs .*: rank 1 \(worker1\) owns 1 RRef"), ("test_d", r"drew \S+ from world seed \d+")):
        failure = failure_section(out, test)
        line = re.search(rf"Replay: pytest (\S+::{test}) (--rpc-seed=\d+)", failure)
        assert line, failure
        first = re.search(expect, failure)
        assert first and "entry 2 of it" in failure, failure
        again = run(pytester, line[1], line[2]).stdout.str()
        replayed = failure_section(again, test)
        assert first[0] in replayed, replayed  # the same rule broken, the same draw from the same seed
        assert "brought up for this entry" in replayed


def test_the_token_of_an_entry_that_broke_a_rule_replays_it_in_a_reused_world(pytester, tmp_path):
    # The token ran the entry in a fresh world, where no rule is checked: it
    # passed, and said "does not reproduce", read as a flaky test (outside-user trial).
    pytester.makepyfile(ENTRIES + """
def test_dirty(rpc_world_module):
    rpc_world_module.run(keeps_an_rref, world_size=2)
""")
    failure = failure_section(run(pytester).stdout.str(), "test_dirty")
    token = re.search(r"or: rpc-harness replay (rpch1_\S+)", failure)[1]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run([sys.executable, "-m", "rpc_harness", "replay", token, "--deadline", "60"],
                          cwd=elsewhere, capture_output=True, text=True, timeout=240)
    assert done.returncode == 1, done.stdout + done.stderr  # 1: the failure reproduced
    assert re.search(r"rule rrefs .*: rank 1 \(worker1\) owns 1 RRef", done.stdout), done.stdout
    assert "replay: the failure reproduced" in done.stdout, done.stdout
    # The Python line runs the entry with run_world, in a fresh world: it says so.
    assert re.search(r"^E\s+or: .*rpc_harness\.run_world\(.*\)  # in a fresh world, where no rule of a reused "
                     r"world is checked$", failure, re.M), failure


def test_a_kill_a_hang_and_a_failure_each_end_the_world(pytester):
    pytester.makepyfile(ENTRIES + """
import pytest

def test_first(rpc_world_module):
    print("PIDS test_first", rpc_world_module.run(pid, world_size=2).values)

def test_killed(rpc_world_module):
    result = rpc_world_module.run(steps, world_size=2, faults="kill:worker1@demo.step#2")
    assert [o.status for o in result] == ["ok", "killed"]

def test_after_kill(rpc_world_module):
    print("PIDS test_after_kill", rpc_world_module.run(pid, world_size=2).values)

def test_frozen(rpc_world_module):
    result = rpc_world_module.run(steps, world_size=2, faults="freeze:worker0@demo.step#2")
    assert [o.status for o in result] == ["killed", "ok"]

def test_after_freeze(rpc_world_module):
    print("PIDS test_after_freeze", rpc_world_module.run(pid, world_size=2).values)

def test_hangs(rpc_world_module):
    rpc_world_module.run(steps, world_size=2, deadline=1, faults="hang:worker0@demo.step")

def test_after_hang(rpc_world_module):
    print("PIDS test_after_hang", rpc_world_module.run(pid, world_size=2).values)

def test_raises(rpc_world_module):
    rpc_world_module.run(steps, world_size=2, faults="raise:worker0@demo.step")

def test_after_raise(rpc_world_module):
    print("PIDS test_after_raise", rpc_world_module.run(pid, world_size=2).values)
""")
    result = run(pytester, "-s", "-rP")
    result.assert_outcomes(passed=7, failed=2)
    out = result.stdout.str()
    first, after_kill = pids_in(out, "test_first"), pids_in(out, "test_after_kill")
    assert not set(after_kill) & set(pids_in(out, "test_after_freeze"))
    assert re.search(r"the one before ended: \S+::test_frozen lost rank 0 \(worker0\): frozen \(SIGSTOP\)", out)
    after_hang, after_raise = pids_in(out, "test_after_hang"), pids_in(out, "test_after_raise")
    assert not set(first) & set(after_kill) and not set(after_kill) & set(after_hang)
    assert not set(after_hang) & set(after_raise)
    assert re.search(r"the one before ended: \S+::test_killed lost rank 1 \(worker1\): killed by SIGKILL", out)
    assert re.search(r"the one before ended: \S+::test_hangs hung past its deadline of 1s", out)
    assert re.search(r"the one before ended: \S+::test_raises failed: rank 0 \(worker0\): raised", out)
    assert "rpc world hung: deadline of 1s passed" in failure_section(out, "test_hangs")


def test_a_rank_that_dies_between_entries_is_seen_before_the_next(pytester):
    pytester.makepyfile(ENTRIES + """
import os, signal

def gone(pid):
    try:
        with open(f"/proc/{pid}/status") as file:
            return "State:\tZ" in file.read()
    except OSError:
        return True

def test_first(rpc_world_module):
    pids = rpc_world_module.run(pid, world_size=2).values
    print("PIDS test_first", pids)
    os.kill(pids[1], signal.SIGKILL)
    until = time.monotonic() + 10
    while not gone(pids[1]) and time.monotonic() < until:
        time.sleep(0.02)
    time.sleep(0.2)  # its exit status on its way through the forkserver

def test_next(rpc_world_module):
    print("PIDS test_next", rpc_world_module.run(pid, world_size=2).values)
""")
    result = run(pytester, "-s", "-rP")
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert not set(pids_in(out, "test_first")) & set(pids_in(out, "test_next"))
    assert re.search(r"the one before ended: a rank died while the world was idle, after \S+::test_first", out)


def test_a_rank_that_dies_during_the_check_ends_the_world_there(pytester):
    pytester.makepyfile(ENTRIES + """
def dies_a_second_later(ctx):
    if ctx.rank == 1:  # the quick look sees the timer's thread; the thorough one sees the rank die
        threading.Timer(1.0, os._exit, (3,)).start()
    return os.getpid()

def test_first(rpc_world_module):
    print("PIDS test_first", rpc_world_module.run(pid, world_size=2).values)

def test_dies(rpc_world_module):
    rpc_world_module.run(dies_a_second_later, world_size=2)

def test_next(rpc_world_module):
    print("PIDS test_next", rpc_world_module.run(pid, world_size=2).values)
""")
    result = run(pytester, "-s", "-rP")
    result.assert_outcomes(passed=2, failed=1)
    out = result.stdout.str()
    assert "rank 1 (worker1): exited with code 3" in failure_section(out, "test_dies")
    assert not set(pids_in(out, "test_first")) & set(pids_in(out, "test_next"))
    assert re.search(r"the one before ended: \S+::test_dies (failed: |lost )rank 1 \(worker1\)", out), out


def test_progress_reaches_the_caller_per_entry(pytester):
    pytester.makepyfile(ENTRIES + """
def reports(ctx):
    rpc_harness.progress(1, 1, "steps")

def test_progress(rpc_world_module):
    for _ in range(2):
        seen = []
        rpc_world_module.run(reports, world_size=2, on_progress=seen.append)
        assert [p.note for p in seen if p.note] == ["up", "ended"]
        assert sorted(p.rank for p in seen if p.rank is not None) == [0, 1]
""")
    run(pytester).assert_outcomes(passed=1)


def test_fault_plans_count_hits_per_entry(pytester):
    pytester.makepyfile(ENTRIES + """
PLAN = "delay:worker0@demo.step#3=0.01s"

def test_a(rpc_world_module):
    result = rpc_world_module.run(steps, world_size=2, faults=PLAN)
    print("PIDS test_a", result.values)
    assert result.fault_counts() == {PLAN: 1}

def test_b(rpc_world_module):
    result = rpc_world_module.run(steps, world_size=2, faults=PLAN)
    print("PIDS test_b", result.values)
    assert result.fault_counts() == {PLAN: 1}
""")
    result = run(pytester, "-s")
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert pids_in(out, "test_a") == pids_in(out, "test_b")


def test_controlled_entries_run_in_the_live_world_and_are_checked_clean_after_it(pytester):
    # The schedule is the entry's own (no part of the world's shape): free and
    # controlled entries share one live world, and an entry under control that
    # leaves state fails naming the rule, as any entry does.
    pytester.makepyfile(ENTRIES + """
def served_twice(ctx):
    if ctx.rank == 0:
        rpc.rpc_sync(ctx.names[1], os.getpid)
        rpc.rpc_sync(ctx.names[1], os.getpid)
    return os.getpid()

def test_free(rpc_world_module):
    print("PIDS test_free", rpc_world_module.run(pid, world_size=2).values)

def test_controlled(rpc_world_module):
    result = rpc_world_module.run(served_twice, world_size=2, schedule="pct:2")
    print("PIDS test_controlled", result.values)
    assert result.controlled and "entry 2 of it" in result.reuse, result.reuse
    served = [s for s in result.schedule if s.label.startswith("serving getpid")]
    assert len({s.task for s in served}) == 2, [s.describe() for s in result.schedule]

def test_dirty(rpc_world_module):
    rpc_world_module.run(keeps_an_rref, world_size=2, schedule="controlled")

def test_after(rpc_world_module):
    result = rpc_world_module.run(served_twice, world_size=2, schedule="controlled")
    print("PIDS test_after", result.values)
    assert result.controlled
""")
    result = run(pytester, "-s", "-rP")
    result.assert_outcomes(passed=3, failed=1)
    out = result.stdout.str()
    assert pids_in(out, "test_free") == pids_in(out, "test_controlled")
    failure = failure_section(out, "test_dirty")
    assert "rpc world failed: the entry left the reused world dirty" in failure, failure
    assert re.search(r"rule rrefs .*: rank 1 \(worker1\) owns 1 RRef", failure), failure
    assert "schedule=controlled" in failure and "ran in a reused world, entry 3 of it" in failure, failure
    assert re.search(r"or: rpc-harness replay rpch1_\S+", failure), "a replay line that takes its steps"
    assert not set(pids_in(out, "test_after")) & set(pids_in(out, "test_free"))
    assert re.search(r"the one before ended: \S+::test_dirty left it dirty \(rule rrefs", out)


def test_worlds_a_reused_world_cannot_run_are_refused_by_name(pytester):
    pytester.makepyfile(ENTRIES + """
import pytest
from rpc_harness.errors import WorldSpecError

@pytest.mark.parametrize("how", [dict(fuzz=0.01), dict(faults="msgdelay:worker0@PYTHON_CALL=0.01s")])
def test_refused(rpc_world_session, how):
    with pytest.raises(WorldSpecError, match="cannot run in a reused world; use the rpc_world fixture"):
        rpc_world_session.run(pid, world_size=2, **how)

def test_spawn_refused(rpc_world_session):
    with pytest.raises(WorldSpecError, match="spawn"):
        rpc_world_session.spawn(pid, nprocs=2)

def test_shutdown_in_an_entry_fails_it(rpc_world_session):
    result = rpc_world_session.run(shuts_down, world_size=2, check=False)
    assert "must not call rpc.shutdown()" in result[0].error
""")
    result = run(pytester)
    result.assert_outcomes(passed=4)


@pytest.mark.parametrize(("args", "ini", "said"), [
    (["--rpc-fuzz=0.01"], "", r"schedule fuzzing .* \(set by --rpc-fuzz\): it cannot run in a reused world; use "
                              r"the rpc_world fixture for this test, or run it without --rpc-fuzz$"),
    ([], "rpc_fuzz = 0.01", r"schedule fuzzing .* \(set by ini rpc_fuzz\): it cannot run in a reused world; "
                            r".*, or run it without ini rpc_fuzz$"),
])
def test_a_session_wide_option_a_reused_world_cannot_run_is_named_where_it_was_set(pytester, args, ini, said):
    # The refusal read as the test's own doing: nothing named --rpc-fuzz (outside-user trial).
    pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makepyfile(ENTRIES + """
def test_reused(rpc_world_module):
    rpc_world_module.run(pid, world_size=2)
""")
    result = run(pytester, *args)
    result.assert_outcomes(failed=1)
    assert re.search(r"^E\s+rpc_harness.errors.WorldSpecError: rpc_world_module in \S+::test_reused: " + said,
                     result.stdout.str(), re.M), result.stdout.str()


def our_world_folders():
    """The world folders this process owns (others' sessions share the temp folder)."""
    ours = set()
    for folder in glob.glob(os.path.join(tempfile.gettempdir(), "rpc-world-*")):
        try:
            with open(os.path.join(folder, "owner")) as file:
                if int(file.read().split()[0]) == os.getpid():
                    ours.add(folder)
        except (OSError, ValueError, IndexError):
            continue
    return ours


def test_live_worlds_leave_no_process_or_folder_behind(pytester):
    before = our_world_folders()
    pytester.makepyfile(ENTRIES + """
def test_module(rpc_world_module):
    print("PIDS test_module", rpc_world_module.run(pid, world_size=2).values)

def test_session(rpc_world_session):
    print("PIDS test_session", rpc_world_session.run(pid, world_size=3).values)
""")
    result = run(pytester, "-s")
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert not wait_gone(pids_in(out, "test_module") + pids_in(out, "test_session"))
    assert our_world_folders() <= before


# Under xdist, each worker keeps its own live world: checked in the xdist session of
# test_plugin.py's test_the_session_seed_in_the_header_replays_every_world_of_an_xdist_session_and_
# each_worker_keeps_its_live_world (one such session, not two).


INTERRUPTED = """
import os, signal, time
import pytest

def waits_in_its_entry(ctx, folder, session):
    open(os.path.join(folder, str(ctx.rank)), "w").close()
    if ctx.rank == 0:
        while len(os.listdir(folder)) < ctx.world_size:
            time.sleep(0.01)
        os.kill(session, signal.SIGALRM)  # pytest-timeout's timer fires now, every rank inside its entry
    time.sleep(600)

def pid(ctx):
    return os.getpid()

def test_first(rpc_world_module):
    print("PIDS test_first", rpc_world_module.run(pid, world_size=2).values)

@pytest.mark.timeout(300)
def test_times_out(rpc_world_module, tmp_path):
    rpc_world_module.run(waits_in_its_entry, world_size=2, deadline=600, args=(str(tmp_path), os.getpid()))

def test_after(rpc_world_module):
    print("PIDS test_after", rpc_world_module.run(pid, world_size=2).values)

def test_waits_for_sigterm(rpc_world_session):
    print("PIDS test_waits", rpc_world_session.run(pid, world_size=3).values, flush=True)
    open(os.environ["READY_FILE"], "w").close()
    time.sleep(600)
"""


# One session (a fresh process: its forkserver's worlds are what a signal must reach) for two
# endings: a test timeout inside an entry of a module-scoped world, then a SIGTERM while a
# session-scoped world is live. The SIGTERMed session still prints its earlier tests' reports.
def test_a_test_timeout_inside_an_entry_reports_its_stacks_the_next_test_gets_a_fresh_world_and_a_sigterm_closes_the_live_one(
        pytester, tmp_path, short_tmp):
    pytester.makepyfile(test_worlds=INTERRUPTED)
    ready, log = tmp_path / "ready", tmp_path / "session.log"
    temp = short_tmp  # the forkserver's socket goes there: an AF_UNIX path holds 107 bytes
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-s", "-rP", "test_worlds.py"],
            cwd=pytester.path, env=dict(os.environ, READY_FILE=str(ready), TMPDIR=str(temp)), stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        until = time.monotonic() + 120
        while not ready.exists() and proc.poll() is None and time.monotonic() < until:
            time.sleep(0.1)
        assert ready.exists(), log.read_text()[-3000:]
        ranks = pids_in(log.read_text(), "test_waits")
        assert glob.glob(str(temp / "rpc-world-*")), "the live world's folder"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    # The SIGTERM closed the live world.
    assert not wait_gone(ranks), log.read_text()[-3000:]
    assert not glob.glob(str(temp / "rpc-world-*")), log.read_text()[-3000:]
    # The timeout before it: its stacks, and a fresh world for the test after it.
    out = log.read_text()
    assert re.search(r"=+ 1 failed, 2 passed in ", out), out[-3000:]
    failure = failure_section(out, "test_times_out")
    assert "Timeout" in failure and "in waits_in_its_entry" in failure, failure
    assert not set(pids_in(out, "test_first")) & set(pids_in(out, "test_after"))
    assert re.search(r"the one before ended: \S+::test_times_out was stopped from outside \(Failed\)", out), out


def test_no_rank_of_a_live_world_outlives_a_sigkilled_pytest(pytester, tmp_path, short_tmp):
    pytester.makepyfile(test_worlds=INTERRUPTED)
    ready, log = tmp_path / "ready", tmp_path / "session.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-s", "-k", "sigterm", "test_worlds.py"],
            cwd=pytester.path, env=dict(os.environ, READY_FILE=str(ready), TMPDIR=str(short_tmp)), stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        until = time.monotonic() + 120
        while not ready.exists() and proc.poll() is None and time.monotonic() < until:
            time.sleep(0.1)
        assert ready.exists(), log.read_text()[-3000:]
        ranks = pids_in(log.read_text(), "test_waits")  # idle in their live world, between entries
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        assert not wait_gone(ranks, within=30), "ranks of a live world outlived the SIGKILLed pytest"
        # Its forkserver, left alone, sweeps the folders of the process that started it as it ends.
        until = time.monotonic() + 30
        while glob.glob(str(short_tmp / "rpc-world-*")) and time.monotonic() < until:
            time.sleep(0.1)
        assert not glob.glob(str(short_tmp / "rpc-world-*"))
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
