"""The stacks of a failed or hung world's ranks: asked for without crashing
a busy rank, and still had from a rank that cannot answer."""

from __future__ import annotations

import re

import pytest
import worlds

import harness
from harness import WorldTimeout


def pids_of(result):
    return [next(e["pid"] for e in rank.events if e["kind"] == "start") for rank in result.ranks]


def test_survivors_whose_threads_come_and_go_give_their_stacks_and_are_not_crashed(assert_gone):
    # faulthandler's dump, which the supervisor used to ask for, crashed such a
    # survivor now and then; it was then reported as dead of its own.
    for _ in range(3):
        result = harness.run_world(worlds.survivors_churn_threads_when_rank0_fails, world_size=4, args=(8,),
                                   check=False)
        assert [r.status for r in result] == ["raised", "stopped", "stopped", "stopped"], result.describe()
        for survivor in result.ranks[1:]:
            assert " in _churn" in survivor.stacks, survivor.stacks
            # Thread names in the headers: the rank's own dump answered, not faulthandler.
            assert '"MainThread" (most recent call first)' in survivor.stacks, survivor.stacks
            assert "_stackdump.py" not in survivor.stacks, "the answering thread is left out"
        assert_gone(pids_of(result))


def test_a_rank_holding_the_gil_in_c_still_gets_its_stacks(assert_gone):
    with pytest.raises(WorldTimeout) as caught:
        harness.run_world(worlds.holds_the_gil_in_c, world_size=2, deadline=3)
    result = caught.value.result
    assert result[1].status == "hung"
    # No thread of rank 1 can answer: faulthandler's dump is the fallback, in
    # its own form (no thread names). Its signal ends the sleep, so the rank's
    # own answer may follow it.
    assert re.search(r'^(Current )?[Tt]hread 0x[0-9a-f]+ \(most recent call first\):\n'
                     r'  File "[^"]+", line \d+ in holds_the_gil_in_c$', result[1].stacks, re.M), result[1].stacks
    assert "_stackdump.py" not in result[1].stacks, "the answering thread is left out of faulthandler's dump too"
    assert '"MainThread" (most recent call first)' in result[0].stacks, "rank 0 answered the safe way"
    assert_gone(pids_of(result))
