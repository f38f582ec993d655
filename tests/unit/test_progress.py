"""Progress without a world: the argument checks and how bars draw updates."""

from __future__ import annotations

import io

import pytest

import rpc_harness
from rpc_harness import Progress, ProgressBar
from rpc_harness.progress import WORLD_ENDED, WORLD_UP, check_progress


def test_progress_outside_a_world_is_a_no_op(capfd):
    # What a single-process baseline sees when it runs a rank's code.
    assert rpc_harness.current_context() is None
    assert rpc_harness.progress(1, 2, "items", loss=0.5) is None
    assert rpc_harness.progress(2, 2) is None
    assert rpc_harness.current_context() is None, "no context is made up for it"
    assert capfd.readouterr() == ("", ""), "nothing is drawn or printed"


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
    pattern = "progress\\(\\): " + message.replace("(", "\\(").replace(")", "\\)")
    with pytest.raises((TypeError, ValueError), match=pattern):
        check_progress(done, total, unit, metrics)
    # Outside a world too: a baseline running a rank's code catches it.
    with pytest.raises((TypeError, ValueError), match=pattern):
        rpc_harness.progress(done, total, unit, **metrics)


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
    assert lines[-1].startswith("  ps w3  [########################]  8/8 batches over 2 ranks  ")
    assert lines[-1].endswith("  ok  loss 0.125")
    assert "\r" not in out.getvalue()


def test_the_bar_sums_ranks_and_keeps_each_ranks_latest_count():
    bar = ProgressBar("ps", io.StringIO(), live=False)
    assert bar.fraction is None and "[....." in bar.line()
    bar(_update(1, 3, 4))
    bar(_update(2, 1, 4))
    bar(_update(1, 4, 4))
    assert bar.fraction == pytest.approx(5 / 8)
    assert "5/8 batches over 2 ranks" in bar.line()


def test_one_ranks_count_is_its_own():
    bar = ProgressBar("rl", io.StringIO(), live=False)
    bar(_update(0, 3, 4, "episodes"))
    assert "3/4 episodes  " in bar.line()


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
