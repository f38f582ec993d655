"""The stacks of a failed or hung world's ranks: asked for without crashing
a busy rank, and still had from a rank that cannot answer."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import time

import pytest
import worlds

import rpc_harness
from rpc_harness import WorldTimeout
from rpc_harness._rank import stackdump as _stackdump


def pids_of(result):
    return [next(e["pid"] for e in rank.events if e["kind"] == "start") for rank in result.ranks]


def test_survivors_whose_threads_come_and_go_give_their_stacks_and_are_not_crashed(assert_gone):
    # faulthandler's dump, which the supervisor used to ask for, crashed such a
    # survivor now and then; it was then reported as dead of its own.
    for _ in range(3):
        result = rpc_harness.run_world(worlds.survivors_churn_threads_when_rank0_fails, world_size=4, args=(8,),
                                   check=False)
        assert [r.status for r in result] == ["raised", "stopped", "stopped", "stopped"], result.describe()
        for survivor in result.ranks[1:]:
            assert " in _churn" in survivor.stacks, survivor.stacks
            # Thread names in the headers: the rank's own dump answered, not faulthandler.
            assert '"MainThread" (most recent call first)' in survivor.stacks, survivor.stacks
            assert "_rank/stackdump.py" not in survivor.stacks, "the answering thread is left out"
        assert_gone(pids_of(result))


def test_a_rank_holding_the_gil_in_c_still_gets_its_stacks(assert_gone):
    with pytest.raises(WorldTimeout) as caught:
        rpc_harness.run_world(worlds.holds_the_gil_in_c, world_size=2, deadline=3)
    result = caught.value.result
    assert result[1].status == "hung"
    # No thread of rank 1 can answer: faulthandler's dump is the fallback, in
    # its own form (no thread names). Its signal ends the sleep, so the rank's
    # own answer may follow it.
    assert re.search(r'^(Current )?[Tt]hread 0x[0-9a-f]+ \(most recent call first\):\n'
                     r'  File "[^"]+", line \d+ in holds_the_gil_in_c$', result[1].stacks, re.M), result[1].stacks
    assert "_rank/stackdump.py" not in result[1].stacks, "the answering thread is left out of faulthandler's dump too"
    assert '"MainThread" (most recent call first)' in result[0].stacks, "rank 0 answered the safe way"
    assert_gone(pids_of(result))


# A process that arms the dump and keeps threads starting and ending, as
# torch's RPC thread pool does. faulthandler's all-threads dump on SIGUSR1
# killed such a process (8 threads) with SIGSEGV within 1 to 27 dumps, 20
# times in 20.
CHURNING = textwrap.dedent("""
    import sys, threading, time
    from rpc_harness._rank import stackdump as _stackdump

    def churn():
        while True:
            thread = threading.Thread(target=sum, args=(range(100),))
            thread.start()
            thread.join()

    _stackdump.arm(open(sys.argv[1], "w"), sys.argv[2])
    for _ in range(16):  # a dump of ~14 KB: past a file object's 8 KB buffer
        threading.Thread(target=churn, daemon=True).start()
    print("ready", flush=True)
    time.sleep(120)
""")


def test_asking_200_times_never_crashes_a_process_whose_threads_come_and_go(tmp_path):
    stacks, fifo = tmp_path / "stacks", str(tmp_path / "dump")
    proc = subprocess.Popen([sys.executable, "-c", CHURNING, str(stacks), fifo], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        for asked in range(1, 201):
            size = stacks.stat().st_size
            assert _stackdump.request(fifo)
            until = time.monotonic() + 30
            # As the supervisor waits: for the answer's end line, not for growth.
            while not _stackdump.answered(stacks.read_text()[size:]) and proc.poll() is None \
                    and time.monotonic() < until:
                time.sleep(0.001)
            assert proc.poll() is None, f"the process died (exit {proc.returncode}) at request {asked}"
            new = stacks.read_text()[size:]
            assert _stackdump.answered(new), f"request {asked} got no whole answer in 30 s: {len(new)} characters"
            assert new.count('"MainThread" (most recent call first)') == 1, f"request {asked}: not one dump"
        text = stacks.read_text()
        assert text.count('"MainThread" (most recent call first)') == 200
        assert " in churn" in text and " in <module>" in text
        assert "rpc-harness-stacks" not in text, "the answering thread leaves itself out"
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def test_a_survivor_dying_by_its_own_hand_as_the_world_is_stopped_is_not_labelled_stopped(assert_gone):
    # The supervisor gives the survivors a grace after their stacks and before
    # SIGKILL (50 ms): rank 1 aborts 25 ms after it was asked, within it.
    result = rpc_harness.run_world(worlds.aborts_when_asked_for_stacks, world_size=2, check=False)
    assert result[0].status == "raised"
    assert result[1].signal == "SIGABRT" and result[1].status == "died", result[1].describe()
    assert "stopped by the harness" not in result[1].describe()
    assert_gone(pids_of(result))
