"""Progress from real ranks: what they report and what the supervisor hands on."""

from __future__ import annotations

import pytest
import worlds

import rpc_harness
from rpc_harness import WorldFailed, WorldTimeout
from rpc_harness.progress import WORLD_ENDED, WORLD_UP


def test_updates_reach_the_callback_from_entries_and_rpc_handlers():
    updates = []
    rpc_harness.run_world(worlds.progress_main_and_handler, 2, seed=1, on_progress=updates.append)
    by_rank = {}
    for u in updates:
        if u.rank is not None:
            by_rank.setdefault(u.rank, []).append(u)
    assert [u.done for u in by_rank[0]][-1] == 5
    assert all(u.total == 5 and u.unit == "items" and u.name == "worker0" for u in by_rank[0])
    assert by_rank[0][-1].metrics == {"loss": pytest.approx(0.2)}
    # Rank 1 reported only from the RPC handler that rank 0 called.
    assert [(u.done, u.total, u.unit, dict(u.metrics)) for u in by_rank[1]] == [(1, 1, "calls", {"handled_by": 1.0})]
    notes = [u.note for u in updates if u.rank is None]
    assert notes == [WORLD_UP, WORLD_ENDED]
    assert updates[-1].note == WORLD_ENDED
    assert all(a.elapsed <= b.elapsed for a, b in zip(updates, updates[1:], strict=False))


def test_a_tight_loop_is_throttled_but_its_last_report_arrives():
    updates = []
    rpc_harness.run_world(worlds.progress_in_a_tight_loop, 2, seed=1, on_progress=updates.append)
    for rank in (0, 1):
        mine = [u for u in updates if u.rank == rank]
        assert mine[-1].done == 20_000
        assert len(mine) < 20_000  # held back between intervals, not one message per call
        assert [u.done for u in mine] == sorted(u.done for u in mine)


def test_a_bad_call_fails_the_rank_that_made_it():
    with pytest.raises(WorldFailed, match="done must be between 0 and total=3, got 5"):
        rpc_harness.run_world(worlds.progress_beyond_total, 2, seed=1, deadline=30)


def test_a_hung_rank_is_described_with_how_far_it_had_come():
    with pytest.raises(WorldTimeout) as info:
        rpc_harness.run_world(worlds.progress_then_hang, 2, seed=1, deadline=3)
    assert "rank 1 (worker1): hung: still in its entry (after 3/10 items) at the deadline" in str(info.value)


def test_a_callback_that_raises_stops_the_world_and_leaves_no_rank(tmp_path, assert_gone):
    reported = set()

    def explode(update):
        if update.rank is not None:
            reported.add(update.rank)
        if reported == {0, 1}:  # both ranks wrote their pid before reporting
            raise RuntimeError("the display broke")

    with pytest.raises(RuntimeError, match="the display broke"):
        rpc_harness.run_world(worlds.pid_then_progress_then_sleep, 2, seed=1, deadline=60,
                          args=(str(tmp_path),), on_progress=explode)
    pids = [int((tmp_path / f"{rank}.pid").read_text()) for rank in (0, 1)]
    assert_gone(pids)


# -- the bar ---------------------------------------------------------------------------


def test_the_fixture_hands_progress_on(rpc_world):
    updates = []
    rpc_world.run(worlds.progress_main_and_handler, world_size=2, on_progress=updates.append)
    assert [u.done for u in updates if u.rank == 0][-1] == 5
    assert updates[-1].note == WORLD_ENDED
