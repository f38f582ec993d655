"""Progress: what ranks report, what the supervisor hands on, how bars draw it."""

from __future__ import annotations

import io

import pytest
import worlds

import harness
from harness import Progress, ProgressBar, WorldFailed, WorldTimeout
from harness.progress import WORLD_ENDED, WORLD_UP, check_progress


def test_updates_reach_the_callback_from_entries_and_rpc_handlers():
    updates = []
    harness.run_world(worlds.progress_main_and_handler, 2, seed=1, on_progress=updates.append)
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
    harness.run_world(worlds.progress_in_a_tight_loop, 2, seed=1, on_progress=updates.append)
    for rank in (0, 1):
        mine = [u for u in updates if u.rank == rank]
        assert mine[-1].done == 20_000
        assert len(mine) < 20_000  # held back between intervals, not one message per call
        assert [u.done for u in mine] == sorted(u.done for u in mine)


def test_progress_outside_a_world_is_a_no_op():
    harness.progress(1, 2, "items", loss=0.5)


@pytest.mark.parametrize(
    ("done", "total", "unit", "metrics", "message"),
    [
        (5, 3, "items", {}, "done must be between 0 and total=3, got 5"),
        (-1, 3, "items", {}, "done must be between 0 and total=3, got -1"),
        (1, 0, "items", {}, "total must be positive, got 0"),
        (1.5, 3, "items", {}, "done must be an int, got 1.5"),
        (True, 3, "items", {}, "done must be an int, got True"),
        (1, 3, "", {}, "unit must be a non-empty str"),
        (1, 3, "items", {"loss": "low"}, "metric loss='low' is not a number"),
    ],
)
def test_bad_progress_calls_name_what_was_wrong(done, total, unit, metrics, message):
    with pytest.raises((TypeError, ValueError), match="progress\\(\\): " + message.replace("(", "\\(").replace(")", "\\)")):
        check_progress(done, total, unit, metrics)


def test_a_bad_call_fails_the_rank_that_made_it():
    with pytest.raises(WorldFailed, match="done must be between 0 and total=3, got 5"):
        harness.run_world(worlds.progress_beyond_total, 2, seed=1, deadline=30)


def test_a_hung_rank_is_described_with_how_far_it_had_come():
    with pytest.raises(WorldTimeout) as info:
        harness.run_world(worlds.progress_then_hang, 2, seed=1, deadline=3)
    assert "rank 1 (worker1): hung: still in entry (after 3/10 items) at the deadline" in str(info.value)


def test_a_callback_that_raises_stops_the_world_and_leaves_no_rank(tmp_path, assert_gone):
    reported = set()

    def explode(update):
        if update.rank is not None:
            reported.add(update.rank)
        if reported == {0, 1}:  # both ranks wrote their pid before reporting
            raise RuntimeError("the display broke")

    with pytest.raises(RuntimeError, match="the display broke"):
        harness.run_world(worlds.pid_then_progress_then_sleep, 2, seed=1, deadline=60,
                          args=(str(tmp_path),), on_progress=explode)
    pids = [int((tmp_path / f"{rank}.pid").read_text()) for rank in (0, 1)]
    assert_gone(pids)


# -- the bar ---------------------------------------------------------------------------


def _update(rank, done, total, unit="batches", **metrics):
    return Progress(rank, f"trainer{rank}", done, total, unit, metrics)


def test_lines_mode_prints_each_quarter_once_and_the_verdict_last():
    out = io.StringIO()
    bar = ProgressBar("ps w3", out, live=False)
    bar(Progress(None, "world", note=WORLD_UP))
    bar(_update(1, 0, 4))  # each trainer announces its total first, as the scenarios do
    bar(_update(2, 0, 4))
    for done in range(1, 9):  # two trainers, four batches each, interleaved
        bar(_update(1 + done % 2, (done + 1) // 2, 4, loss=1.0 / done))
    bar(Progress(None, "world", note=WORLD_ENDED))
    bar.finish("ok")
    lines = out.getvalue().splitlines()
    assert [line.split("]")[1].split()[0] for line in lines] == ["2/8", "4/8", "6/8", "8/8"]
    assert lines[-1].startswith("  ps w3  [########################]  8/8 batches  ")
    assert lines[-1].endswith("  ok  loss 0.125")
    assert "\r" not in out.getvalue()


def test_the_bar_sums_ranks_and_keeps_each_ranks_latest_count():
    bar = ProgressBar("ps", io.StringIO(), live=False)
    assert bar.fraction is None and "[....." in bar.line()
    bar(_update(1, 3, 4))
    bar(_update(2, 1, 4))
    bar(_update(1, 4, 4))
    assert bar.fraction == pytest.approx(5 / 8)
    assert "5/8 batches" in bar.line()


def test_live_mode_redraws_in_place_and_its_ticker_stops_at_finish(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    out = io.StringIO()
    bar = ProgressBar("rl w3", out, live=True, after_world="comparing with the baseline")
    bar(_update(0, 1, 4, "episodes", running_reward=2.5))
    bar(Progress(None, "world", note=WORLD_ENDED))
    bar.finish("FAILED")
    bar.finish("FAILED")  # idempotent: an error path may finish twice
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")
    draws = text.rstrip("\n").split("\r")[1:]
    assert all(d.endswith("\x1b[K") for d in draws)
    assert "running reward 2.5" in draws[0]
    assert "  FAILED" in draws[-1]
    assert bar._ticker is not None and not bar._ticker.is_alive()


def test_a_narrow_terminal_cuts_metrics_before_the_verdict(monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    out = io.StringIO()
    bar = ProgressBar("ps w3", out, live=True)
    bar(_update(1, 2, 4, loss=0.5, accuracy=0.25))
    bar.finish("FAILED")
    last = out.getvalue().rstrip("\n").split("\r")[-1]
    assert len(last.removesuffix("\x1b[K")) <= 59
    assert "FAILED" in last


def test_the_fixture_hands_progress_on(rpc_world):
    updates = []
    rpc_world.run(worlds.progress_main_and_handler, world_size=2, on_progress=updates.append)
    assert [u.done for u in updates if u.rank == 0][-1] == 5
    assert updates[-1].note == WORLD_ENDED
