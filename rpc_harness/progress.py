"""How far a world has come: progress updates from ranks, and a terminal bar.

Rank code reports with ``rpc_harness.progress(done, total, unit, **metrics)``; the
supervisor hands every update to an ``on_progress`` callback as a
:class:`Progress`, together with two updates about the world itself ("up"
once every rank joined RPC, "ended" once every rank is gone).

:class:`ProgressBar` is such a callback: one bar per world, summed over the
ranks that report (a parameter server's trainers each report their own
batches; each reports ``0`` of its total when it starts, so that the sum
covers every rank's total from the start). On a terminal it redraws in
place; elsewhere (CI logs, pipes) it prints a line each time another quarter
is done, so a log shows progress without thousands of lines.
"""

from __future__ import annotations

import math
import shutil
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TextIO

WORLD_UP = "up"  # every rank finished init_rpc
WORLD_ENDED = "ended"  # every rank exited or was stopped


@dataclass(frozen=True)
class Progress:
    """One progress update: a rank's (``rank`` set) or the world's (``note`` set)."""

    rank: int | None
    name: str
    done: int = 0
    total: int = 0
    unit: str = "steps"
    metrics: Mapping[str, float] = field(default_factory=dict)
    note: str = ""
    elapsed: float = 0.0  # seconds since every rank was forked


def check_progress(done: object, total: object, unit: object, metrics: Mapping[str, object]) -> dict[str, float]:
    """Validate a ``progress()`` call in the rank that made it; return the
    metrics as floats. Errors name the argument that was wrong."""
    for label, value in (("done", done), ("total", total)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"progress(): {label} must be an int, got {value!r}")
    assert isinstance(done, int) and isinstance(total, int)
    if total <= 0:
        raise ValueError(f"progress(): total must be positive, got {total}")
    if not 0 <= done <= total:
        raise ValueError(f"progress(): done must be between 0 and total={total}, got {done}")
    if not isinstance(unit, str) or not unit:
        raise TypeError(f"progress(): unit must be a non-empty str, got {unit!r}")
    out = {}
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"progress(): metric {key}={value!r} is not a number")
        out[key] = float(value)
    return out


class ProgressBar:
    """A progress callback that draws one world's progress on ``stream``."""

    REDRAW_EVERY = 0.1  # seconds between in-place redraws on a terminal

    def __init__(self, label: str, stream: TextIO | None = None, *, live: bool | None = None,
                 width: int = 24, after_world: str = "world ended") -> None:
        self.label = label
        self.after_world = after_world  # what the bar says once the ranks are gone
        self.stream = stream if stream is not None else sys.stdout
        self.live = _is_terminal(self.stream) if live is None else live
        self.width = width
        self.started = time.monotonic()
        self.stage = "starting"
        self.unit = ""
        self.metrics: dict[str, float] = {}
        self._counts: dict[int, tuple[int, int]] = {}  # rank -> (done, total)
        self._quarters_shown = 0
        self._last_draw = 0.0
        self._lock = threading.Lock()  # the supervisor's updates and the ticker both draw
        self._finished = threading.Event()
        self._ticker: threading.Thread | None = None
        if self.live:
            # Redraws the elapsed time while nobody reports: the forkserver's
            # first start, init_rpc, the baseline after the world.
            self._ticker = threading.Thread(target=self._tick, name="rpc-harness-progress", daemon=True)
            self._ticker.start()

    def __call__(self, update: Progress) -> None:
        with self._lock:
            self._update(update)

    def _update(self, update: Progress) -> None:
        if update.rank is None:
            self.stage = {WORLD_UP: "running", WORLD_ENDED: self.after_world}.get(update.note, update.note)
        else:
            self._counts[update.rank] = (update.done, update.total)
            self.unit = update.unit
            self.metrics.update(update.metrics)
            self.stage = "running"
        self._show()

    def finish(self, verdict: str) -> None:
        """Draw the bar a last time with ``verdict`` and end its line."""
        with self._lock:
            if self._finished.is_set():
                return
            self._finished.set()
            self.stage = verdict
            if self.live:
                self._redraw()
                self.stream.write("\n")
            else:
                self.stream.write(self.line() + "\n")
            self.stream.flush()
        if self._ticker is not None and self._ticker is not threading.current_thread():
            self._ticker.join()  # it wakes at once: the event is set

    def _tick(self) -> None:
        while not self._finished.wait(0.5):
            with self._lock:
                if not self._finished.is_set():
                    self._redraw()

    @property
    def fraction(self) -> float | None:
        """Done over total, summed over the reporting ranks; None before any report."""
        total = sum(t for _, t in self._counts.values())
        return sum(d for d, _ in self._counts.values()) / total if total else None

    def line(self, fit: int | None = None) -> str:
        """The bar as one line of text; at most ``fit`` characters if given
        (metrics go first, then the bar narrows, then the line is cut)."""
        metrics = [f"{name.replace('_', ' ')} {value:.4g}" for name, value in self.metrics.items()]
        full = self._line(self.width, metrics)
        if fit is None or len(full) <= fit:
            return full
        bare = self._line(self.width, [])
        width = max(self.width - (len(bare) - fit), 5)
        return self._line(min(width, self.width), [])[:fit]

    def _line(self, width: int, metrics: list[str]) -> str:
        fraction = self.fraction
        parts = [f"  {self.label}"]
        if fraction is None:
            parts.append("[" + "." * width + "]")
        else:
            filled = math.floor(fraction * width)
            parts.append("[" + "#" * filled + "-" * (width - filled) + "]")
            done = sum(d for d, _ in self._counts.values())
            total = sum(t for _, t in self._counts.values())
            # Summed over the ranks that report: said so, or a data-parallel
            # world's 6 steps on 2 ranks read as 12 (outside-user trial).
            over = f" over {len(self._counts)} ranks" if len(self._counts) > 1 else ""
            parts.append(f"{done}/{total} {self.unit}{over}")
        parts.append(f"{time.monotonic() - self.started:.1f}s")
        parts.append(self.stage)
        return "  ".join(parts + metrics)

    def _show(self) -> None:
        if self.live:
            now = time.monotonic()
            if now - self._last_draw >= self.REDRAW_EVERY:
                self._redraw()
            return
        # Quarters one to three: the last line is finish()'s, with the verdict.
        fraction = self.fraction
        quarters = min(math.floor(fraction * 4), 3) if fraction is not None else 0
        if quarters > self._quarters_shown:
            self._quarters_shown = quarters
            self.stream.write(self.line() + "\n")
            self.stream.flush()

    def _redraw(self) -> None:
        # A line longer than the terminal wraps, and "\r" then redraws only
        # its last part: cut it to fit.
        columns = shutil.get_terminal_size((100, 24)).columns
        self.stream.write("\r" + self.line(fit=max(columns - 1, 20)) + "\x1b[K")
        self.stream.flush()
        self._last_draw = time.monotonic()


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
