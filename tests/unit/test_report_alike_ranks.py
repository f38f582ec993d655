"""Ranks that ended alike share a line in a report, but each keeps its own
stacks there: three ranks hung at their deadline are alike in how they
ended, not in where they wait (outside-user trial: the report showed rank
0's stacks alone)."""

from __future__ import annotations

from rpc_harness import FaultPlan, WorldResult
from rpc_harness.result import HUNG, RankOutcome


def stacks(line: int, call: str) -> str:
    return ('Thread 0x00007f01 "MainThread" (most recent call first):\n'
            f'  File "/proj/disagree.py", line {line} in entry\n    {call}\n')


def hung_world() -> WorldResult:
    waits = [stacks(14, "dist.broadcast(t, src=0)"), stacks(16, "dist.all_reduce(t)"), stacks(16, "dist.all_reduce(t)")]
    ranks = [RankOutcome(rank, f"worker{rank}", status=HUNG, phase="entry", stacks=waits[rank]) for rank in range(3)]
    return WorldResult(names=("worker0", "worker1", "worker2"), seed=1, faults=FaultPlan(), deadline=4.0,
                       ranks=ranks, timed_out=True)


def test_ranks_that_hung_alike_share_a_line_and_each_shows_where_it_waits():
    report = hung_world().report()
    assert "3 ranks (0, 1, 2): hung" in report, report
    assert "--- rank 0 (worker0) stacks at the deadline\n" in report and "dist.broadcast(t, src=0)" in report
    assert "--- rank 1 (worker1) stacks at the deadline\n" in report and "dist.all_reduce(t)" in report
    assert "--- rank 2 (worker2) stacks at the deadline: the same as rank 1 (worker1)'s above" in report
