"""What a failed world's report says: a planned kill that no survivor ran
past, a stale file:// store, an error lost in a future nobody waited for,
a kill's report with each stack once. Each test runs a program of the shape
that once hid it (tests/programs/, none of which imports the harness; found
by outside trials, issue 28), and failed before its fix, for the reason its
name gives."""

from __future__ import annotations

import re

import pytest
from programs import dropped_future, echo, own_file_store, tutorial_ps, tutorial_rl

from rpc_harness import WorldFailed, WorldTimeout
from rpc_harness.result import UNFINISHED

# -- a planned kill of the rank the program needs most -------------------------------------

KILL_AGENT = "kill:agent@rpc.call:Observer.run_episode#1"


def test_a_planned_kill_that_no_survivor_ran_past_fails_the_world_naming_it(rpc_world):
    # The agent drives the RL tutorial; its observers only serve (init_rpc,
    # then straight into rpc.shutdown()). Killed at its first call, it takes
    # the whole program with it, and the observers end "ok".
    with pytest.raises(WorldFailed) as caught:
        rpc_world.spawn(tutorial_rl.run_worker, args=(3, 2, 10), nprocs=3, faults=KILL_AGENT, deadline=30)
    result = caught.value.result
    assert [r.status for r in result] == ["killed", "ok", "ok"], "precondition: the observers shut down"
    assert not result.ok
    assert result.problems and result.problems[0].startswith(f"{UNFINISHED} rank 0 (agent): "), result.problems
    assert "rank 1 (obs1), rank 2 (obs2) only served" in result.problems[0]
    assert "expect='unfinished'" in result.problems[0], "says how to accept it"
    assert str(caught.value).startswith("rpc world failed: a planned kill ended its program")


def test_a_test_that_expects_the_kill_to_end_the_program_says_so(rpc_world):
    result = rpc_world.spawn(tutorial_rl.run_worker, args=(3, 2, 10), nprocs=3, faults=KILL_AGENT, deadline=30,
                             expect="unfinished")
    assert result.ok and [r.status for r in result] == ["killed", "ok", "ok"]


def test_a_kill_that_a_survivor_ran_past_is_still_expected(rpc_world):
    # worker2 calls worker0 from its own code, and returns: the program went
    # on without worker1, whichever of the two finished first.
    result = rpc_world.spawn(echo.run_worker, args=(3,), nprocs=3, faults="kill:worker1@rpc.call:echo#2",
                             deadline=30)
    assert result.ok and [r.status for r in result] == ["ok", "killed", "ok"]


# -- a stale file:// store -----------------------------------------------------------------


def test_a_store_an_earlier_run_left_behind_is_named_in_the_error(rpc_world, tmp_path, monkeypatch):
    store = tmp_path / "store"
    with monkeypatch.context() as patched:  # a run that never removed its store (killed, or before this fix)
        patched.setattr("rpc_harness.rpc.stores.remove_made", lambda workdir: None)
        rpc_world.spawn(own_file_store.run_worker, args=(2, str(store)), nprocs=2, deadline=30)
    left = store.read_bytes()
    assert left, "precondition: the first run left its store behind"
    with pytest.raises(WorldFailed) as caught:  # unchecked, it would hang in its bring-up: bounded
        rpc_world.spawn(own_file_store.run_worker, args=(2, str(store)), nprocs=2, deadline=30, bringup=20)
    result = caught.value.result
    assert [r.status for r in result] == ["raised", "raised"], "every rank refuses it, before its bring-up"
    assert all(r.error.startswith("StaleStore: ") for r in result), [r.error for r in result]
    assert f"{store} is a store left behind by an earlier run" in result[0].error
    assert f"{len(left)} bytes, last written" in result[0].error and "Remove the file" in result[0].error
    assert store.read_bytes() == left, "the harness does not remove what it did not make"


def test_a_programs_own_store_goes_with_its_world_so_the_next_run_comes_up(rpc_world, tmp_path):
    store = tmp_path / "store"
    for _ in range(2):  # the second is what a replay does
        result = rpc_world.spawn(own_file_store.run_worker, args=(2, str(store)), nprocs=2, deadline=30)
        assert result.values == [None, 1]
        assert not store.exists()


# -- an error lost in a future nobody waited for -------------------------------------------


def test_a_hang_after_an_injected_error_names_that_error_in_its_headline(rpc_world):
    fault = "raise:worker1@rpc.serve:store#1=disk full"
    with pytest.raises(WorldTimeout) as caught:
        rpc_world.spawn(dropped_future.run_worker, args=(2,), nprocs=2, faults=fault, deadline=3)
    headline = str(caught.value).splitlines()[0]
    assert headline.startswith("rpc world hung"), headline
    assert f"last injected error: {fault} in rank 1 (worker1) on hit 1" in headline, headline
    assert "disk full" in headline, headline


# -- a 4-rank kill's report, each stack once and none of the harness's own -----------------

KILL_TRAINER = "kill:trainer2@rpc.call:BatchUpdateParameterServer.update_and_fetch_model#3"
HARNESS_FRAME = re.compile(r"rpc_harness/(_rank/gate|_rank/lifecycle|_rank/rank|rpc/hooks)\.py")


def stack_sections(report):
    """Each '--- ... stacks ...' section's text, by its header line."""
    sections, header = {}, None
    for line in report.splitlines():
        if line.startswith("--- "):
            header = line if " stacks " in line else None
            if header is not None:
                sections[header] = []
        elif header is not None and not line.startswith(("Replay:", "(")):
            sections[header].append(re.sub(r"0x[0-9a-f]+", "0x", line))
    return {h: "\n".join(lines) for h, lines in sections.items()}


@pytest.fixture(scope="module")
def killed_trainer_world():
    # The tutorial's batch server waits for every trainer's update: with
    # trainer2 dead it never answers trainer1 and trainer3, whose stacks are alike.
    import rpc_harness

    return rpc_harness.spawn(tutorial_ps.run_worker, args=(4,), nprocs=4, faults=KILL_TRAINER, deadline=4,
                             check=False)


def test_each_stack_is_shown_once_in_a_kills_report(killed_trainer_world):
    result = killed_trainer_world
    assert result.timed_out and result["trainer2"].status == "killed", "precondition"
    report = result.report()
    shown = [text for text in stack_sections(report).values() if text]
    assert len(shown) == len(set(shown)), f"a stack shown twice:\n{report}"
    assert report.count("in train") == 1, report
    assert "--- rank 3 (trainer3) stacks at the deadline: the same as rank 1 (trainer1)'s above" in report, report


def test_the_harnesss_own_frames_are_left_out_unless_asked_for(killed_trainer_world, monkeypatch):
    monkeypatch.delenv("RPC_HARNESS_FRAMES", raising=False)
    report = killed_trainer_world.report()
    assert not HARNESS_FRAME.search(report), report
    assert "rpc.shutdown()" in report, "the program's own frames stay: trainers wait in their shutdown"
    assert "frames of the harness's own left out: RPC_HARNESS_FRAMES=1" in report
    assert HARNESS_FRAME.search(killed_trainer_world.report(harness_frames=True))
    monkeypatch.setenv("RPC_HARNESS_FRAMES", "1")
    assert HARNESS_FRAME.search(killed_trainer_world.report())


def test_a_failed_tests_sections_do_not_repeat_the_stacks_its_message_shows(pytester):
    pytester.makepyfile(
        """
import pytest
import rpc_harness

def hangs(ctx):
    rpc_harness.failpoint("demo.step")

@pytest.mark.rpc_world(world_size=2, deadline=1, faults="hang:worker0@demo.step")
def test_hangs(rpc_world):
    rpc_world.run(hangs)
"""
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    # The failure sections only: with CI set, pytest's short summary repeats
    # each failure's whole message (the report once more, by pytest's choice).
    out = result.stdout.str().split("short test summary info")[0]
    assert "rpc rank 0 (worker0) [hung]" in out or "stacks at the deadline" in out, "precondition"
    assert out.count('rpc_harness.failpoint("demo.step")') == 1, out
