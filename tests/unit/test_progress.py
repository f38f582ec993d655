"""Progress without a world: the argument checks and how bars draw updates."""

from __future__ import annotations

import io
import os
import sys
import threading
from types import SimpleNamespace

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
        (1, 2.5, "items", {}, "total must be an int, got 2.5"),
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
    assert len(last.removesuffix("\x1b[K")) == 59, "cut to one column less than the terminal's, no shorter"
    assert "FAILED" in last


def test_nothing_done_yet_and_a_single_step_are_valid_counts():
    # Each rank reports 0 of its total first (the bar sums every total from the start).
    assert check_progress(0, 1, "step", {}) == {}
    assert check_progress(1, 1, "step", {}) == {}


def test_metrics_come_back_as_floats():
    metrics = check_progress(1, 2, "steps", {"tokens": 3, "loss": 0.5})
    assert metrics == {"tokens": 3.0, "loss": 0.5}
    assert all(type(value) is float for value in metrics.values())


class _Terminal(io.StringIO):
    def isatty(self):
        return True


class _Pipe:
    """A stream that writes and no more (no isatty)."""

    def __init__(self):
        self.text = ""

    def write(self, text):
        self.text += text

    def flush(self):
        pass


def test_a_bar_redraws_in_place_on_a_terminal_and_prints_lines_elsewhere():
    terminal = _Terminal()
    bar = ProgressBar("rl", terminal)
    bar(_update(0, 1, 4))
    bar.finish("ok")
    assert bar.live and terminal.getvalue().startswith("\r")
    closed = io.StringIO()
    closed.close()  # isatty() raises ValueError
    for stream in (_Pipe(), io.StringIO(), closed):
        assert not ProgressBar("rl", stream).live


def test_a_bar_draws_on_stdout_by_default(capsys):
    ProgressBar("rl", live=False).finish("ok")
    assert capsys.readouterr().out.startswith("  rl  [")


def test_the_bar_says_what_stage_the_world_is_at():
    bar = ProgressBar("ps", io.StringIO(), live=False)
    stages = [bar.line().rsplit("  ", 1)[1]]
    for update in (Progress(None, "world", note=WORLD_UP), Progress(None, "world", note="restarting rank 2"),
                   _update(1, 1, 4), Progress(None, "world", note=WORLD_ENDED)):
        bar(update)
        stages.append(bar.line().rsplit("  ", 1)[1])
    assert stages == ["starting", "running", "restarting rank 2", "running", "world ended"]


@pytest.fixture
def clock(monkeypatch):
    """The bar's clock, set by the test: ``clock[0]`` is now."""
    now = [100.0]
    monkeypatch.setattr(sys.modules[ProgressBar.__module__], "time", SimpleNamespace(monotonic=lambda: now[0]))
    return now


def test_the_bar_fills_a_cell_per_part_done_and_counts_seconds_from_its_start(clock):
    bar = ProgressBar("ps", io.StringIO(), live=False)
    clock[0] += 12.34
    assert bar.line() == "  ps  [" + "." * 24 + "]  12.3s  starting"
    bar(_update(1, 1, 4))
    assert bar.line() == "  ps  [" + "#" * 6 + "-" * 18 + "]  1/4 batches  12.3s  running"


def test_a_line_that_fits_keeps_its_metrics(clock):
    bar = ProgressBar("ps", io.StringIO(), live=False)
    bar(_update(1, 1, 4, loss=0.5))
    full = bar.line()
    assert bar.line(fit=len(full)) == full


def test_a_line_too_long_narrows_its_bar_just_enough(clock):
    bar = ProgressBar("ps", io.StringIO(), live=False)
    bar(_update(1, 4, 4, loss=0.5))
    bare = "  ps  [" + "#" * 24 + "]  4/4 batches  0.0s  running"
    assert bar.line(fit=len(bare) - 4) == "  ps  [" + "#" * 20 + "]  4/4 batches  0.0s  running"


def test_a_bar_keeps_five_cells_and_the_line_is_cut_past_that(clock):
    bar = ProgressBar("ps", io.StringIO(), live=False)
    bar(_update(1, 4, 4))
    assert bar.line(fit=16) == "  ps  [#####]  4"


def test_updates_redraw_a_terminal_bar_at_most_every_tenth_of_a_second(clock, monkeypatch):
    monkeypatch.setattr(ProgressBar, "_tick", lambda self: None)  # only updates draw here
    out = io.StringIO()
    bar = ProgressBar("rl", out, live=True)
    for done, now in ((1, 100.0), (2, 100.0), (3, 100.05), (4, 100.2)):
        clock[0] = now
        bar(_update(0, done, 8))
    assert [draw.split("]  ")[1].split()[0] for draw in out.getvalue().split("\r")[1:]] == ["1/8", "4/8"]
    bar.finish("ok")


def test_a_terminal_narrower_than_twenty_columns_still_shows_twenty(monkeypatch):
    monkeypatch.setenv("COLUMNS", "10")
    out = io.StringIO()
    bar = ProgressBar("ps w3", out, live=True)
    bar.finish("ok")
    assert len(out.getvalue().split("\r")[-1].removesuffix("\x1b[K\n")) == 20


def _no_terminal(*_):
    raise OSError("not a terminal")


def test_a_terminal_of_unknown_size_is_taken_as_a_hundred_columns(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(os, "get_terminal_size", _no_terminal)  # as in CI with the bar forced live
    out = io.StringIO()
    bar = ProgressBar("a label long enough to fill a hundred columns " * 3, out, live=True)
    bar.finish("ok")
    assert len(out.getvalue().split("\r")[-1].removesuffix("\x1b[K\n")) == 99


class _Signalling(io.StringIO):
    def __init__(self):
        super().__init__()
        self.written = threading.Event()

    def write(self, text):
        self.written.set()
        return super().write(text)


def test_a_terminal_bar_redraws_its_clock_while_nobody_reports():
    # The forkserver's first start and init_rpc report nothing for seconds.
    out = _Signalling()
    bar = ProgressBar("rl", out, live=True)
    try:
        assert out.written.wait(timeout=60), "the ticker never drew"
        assert "starting" in out.getvalue()
    finally:
        bar.finish("ok")


def test_the_ticker_is_a_daemon_thread_named_as_the_harnesss():
    # A bar never finished (an interrupted session) must not keep the
    # process alive; a thread dump names whose thread it is.
    bar = ProgressBar("rl", io.StringIO(), live=True)
    try:
        assert bar._ticker is not None and bar._ticker.daemon and bar._ticker.name == "rpc-harness-progress"
    finally:
        bar.finish("ok")
