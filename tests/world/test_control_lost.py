"""A world that loses control of its schedule is never silently lost: a
warning in the pytest report, a failure under --rpc-schedule-strict, a count
in what exploration says. tests/programs/held_lock.py loses control at the
same step under every seed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch  # noqa: F401 - before any in-process session (see test_plugin.py)
from programs import held_lock, spin_handoff

import rpc_harness

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

PROGRAMS = Path(__file__).parent.parent / "programs"
HELD_LOCK = (PROGRAMS / "held_lock.py").read_text()
LOSES_CONTROL = HELD_LOCK + """

def test_loses_control(rpc_world):
    result = rpc_world.spawn(run_worker, args=(2,), nprocs=2, schedule="controlled", deadline=60)
    print("LOST AT", result.control_lost_at)
"""


def run(pytester, *args):
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", "-s", *args)


def test_a_world_that_lost_control_warns_with_the_step_and_the_stacks(pytester):
    pytester.makepyfile(LOSES_CONTROL)
    result = run(pytester)
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    # Exactly one warning of the world's. (In a whole-suite run the session
    # once also showed two PytestAssertRewriteWarnings about rpc_harness,
    # left by an earlier test of its worker: counted apart, not here.)
    assert out.count("ControlLostPytestWarning: ") == 1, out
    step = re.search(r"LOST AT (\d+)", out)[1]  # 2 or 3: whichever main task the seed starts first
    assert "ControlLostPytestWarning: test_a_world_that_lost_control_warns_with_the_step_and_the_stacks.py" \
           "::test_loses_control: rpc world 0 (seed " in out, out
    assert f"lost control at step {step} and ran free from there" in out
    assert "(serving grab for caller1) has not reached its next scheduling point" in out, "what control waited for"
    assert "--- rank 0 (keeper) stacks" in out and "with lock:" in out, "where every task was"


@pytest.mark.parametrize("how", ["flag", "ini"])
def test_under_the_strict_flag_or_ini_key_a_world_that_lost_control_fails_its_test(pytester, how):
    pytester.makepyfile(LOSES_CONTROL.replace("deadline=60)", "deadline=60, check=False)"))
    if how == "ini":
        pytester.makeini("[pytest]\nrpc_schedule_strict = true\n")
    result = run(pytester, "--rpc-schedule-strict") if how == "flag" else run(pytester)
    result.assert_outcomes(failed=1)  # check=False too: it is about the ranks, this about the schedule
    out = result.stdout.str()
    assert "LOST AT" not in out, "the fixture raised before the test went on"
    assert re.search(r"^E +rpc_harness.errors.ControlLost: --rpc-schedule-strict: test_under_the_strict.*"
                     r"::test_loses_control: rpc world 0 \(seed \d+, schedule controlled\) lost control at step \d",
                     out, re.M), out
    assert "with lock:" in out and "Replay: pytest " in out, "the stacks and the replay line"
    assert "ControlLostPytestWarning" not in out, "a failure instead of the warning, not both"


def test_the_strict_ini_key_is_a_bool(pytester):
    pytester.makeini("[pytest]\nrpc_schedule_strict = sometimes\n")
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = run(pytester)
    assert result.ret != 0 and "ini rpc_schedule_strict" in result.stderr.str() + result.stdout.str()


def test_explore_counts_the_worlds_that_lost_control_and_where():
    found = rpc_harness.explore(held_lock.run_worker, 2, spawn=True, args=(2,), schedules=2, seed=1, deadline=60)
    assert not found.failed and [a.lost_at in (2, 3) for a in found.lost] == [True, True], found.attempts
    summary = found.summary()
    assert re.fullmatch(r"explored 2 controlled schedule\(s\), \d distinct: 0 ran controlled to the end, "
                        r"2 lost control \(at step \d: seeds? 1.*\)", summary[0]), summary
    assert summary[1].startswith("no schedule failed, but 2 of 2 world(s) lost control"), summary


SPIN_STALL = ("A stall of the schedule's making, not a hang of the program's: free-running, the program may pass")


def test_a_spin_on_memory_a_waiting_handler_writes_is_named_a_stall_of_the_schedule_not_a_hang():
    # Before: every seed that let the keeper's main go first spun until the
    # deadline, reported as "rpc world hung", controlled, control never lost.
    free = rpc_harness.spawn(spin_handoff.run_worker, args=(2,), nprocs=2, seed=1, deadline=60)
    assert free.ok, free.report()
    world = rpc_harness.spawn(spin_handoff.run_worker, args=(2,), nprocs=2, seed=1, schedule="controlled",
                              deadline=60, check=False)
    assert world.ok, world.report()  # run free from the stall on, it ends as free-running it does
    assert not world.controlled and world.control_lost_at == 0, world.schedule_note
    note = world.schedule_note
    assert re.match(r"no longer controlled: keeper \(main\) ran for \d+\.\d+s without reaching a scheduling point "
                    r"since start, in the same calls for the last \d+\.\d+s \(at \S+spin_handoff\.py:\d+ in run_worker\)",
                    note), note
    assert "while giver1 (main) at start waited for a turn" in note and SPIN_STALL in note, note
    assert 'while "value" not in box:' in note, "the stacks show the spin"
    assert "hung" not in world.report()


def test_under_the_strict_flag_a_spin_stall_fails_its_test_naming_it(pytester):
    pytester.makepyfile((PROGRAMS / "spin_handoff.py").read_text() + """

def test_spins(rpc_world):
    rpc_world.spawn(run_worker, args=(2,), nprocs=2, seed=1, schedule="controlled", deadline=60)
""")
    result = run(pytester, "--rpc-schedule-strict")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "rpc_harness.errors.ControlLost: --rpc-schedule-strict" in out and SPIN_STALL in out, out
