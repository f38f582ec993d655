"""A world's trace as one SVG picture: which rank did what, when, and where it broke.

:mod:`rpc_harness.trace` writes Chrome trace-event JSON, which takes Perfetto or
chrome://tracing to read. This module draws the same document as hand-written
SVG (no dependencies) that any browser opens, fit to attach to a CI run or a
bug report: one row per rank with its phases (init_rpc, entry, shutdown) as
bars, the RPCs it issued in a thin lane under them and the ones it served in
a second lane (failed ones in their own colour), under a controlled schedule
the steps its tasks ran as a band along the top of the phase bar, and its
faults, hits of armed failpoints, errors, fuzz delays, user events and death
as markers. Faults, deaths and errors are labelled, since they are what a
reader looks for; every marker carries a ``<title>`` with its full name and
args, shown on hover.

Traces come from dying worlds, so any document draws. Events of unknown kinds
or with unusable timestamps are skipped; an RPC whose end never came (its rank
died) runs to the rank's last event; RPCs and markers past a per-rank cap are
sampled evenly, and labels that would overlap are left out, the footnotes
saying how many. Same document, same bytes.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from . import _svg
from ._svg import FONT

WIDTH = 960
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP = 168, 24, 56
ROW_HEIGHT = 58
# Inside a row, from its top: two lines for labels, the phase bar, the RPC sub-lanes.
LABEL_BASELINES = (10, 20)
BAR_TOP, BAR_HEIGHT = 23, 12
RPC_TOP, RPC_LANE, RPC_LANES = 37, 3, 3
SERVE_TOP = RPC_TOP + RPC_LANE * RPC_LANES + 1  # served RPCs: a second lane of the same sub-lanes
MAX_RPCS = 2000  # drawn per rank; more are sampled evenly
MAX_MARKERS = 2000  # drawn per rank and kind of marker
MAX_LABEL_CHARS = 48
MAX_NOTES = 12
ROW_LABEL_CHARS = 23  # what fits left of the plot at 12px
_CHAR_WIDTH = 6.5  # a 12px sans-serif character, roughly (as in plots.py)
_SMALL_CHAR_WIDTH = 5.6  # the same at 10px
_MAX_US = 1e15  # 31 years in microseconds: anything further is not a world's time

PHASE_COLOURS = {"init_rpc": "#f1ce63", "entry": "#59a14f", "shutdown": "#a0cbe8"}
# Phases the harness does not write get these, in the order of their names.
OTHER_PHASE_COLOURS = ("#b07aa1", "#9c755f", "#ff9da7", "#bab0ac", "#86bcb6", "#d4a6c8")
RPC_COLOUR, FAILED_RPC_COLOUR, OPEN_RPC_COLOUR = "#4e79a7", "#e377c2", "#9467bd"
SERVE_COLOUR = "#76b7b2"
STEP_COLOUR, PREEMPT_COLOUR, STEP_HEIGHT = "#333333", "#d62728", 5
FAULT_COLOUR, ERROR_COLOUR, DEATH_COLOUR = "#d62728", "#ff7f0e", "#000000"
FUZZ_COLOUR, USER_COLOUR = "#8c8c8c", "#3b3b98"
MARKER_KINDS = ("death", "fault", "error", "user", "failpoint", "fuzz")  # the first is drawn on top
LABELLED = ("death", "fault", "error")  # label priority, highest first
_LABEL_FILL = {"death": DEATH_COLOUR, "fault": FAULT_COLOUR, "error": "#b34700"}


def write_timeline(
    document_or_path: Mapping[str, Any] | str | os.PathLike[str],
    path: str | os.PathLike[str],
    title: str = "",
) -> str:
    """Write the SVG timeline of a trace document -- the dict, or the path of a
    ``.trace.json`` file -- to ``path`` (folders created); return the path."""
    if isinstance(document_or_path, (str, os.PathLike)):
        with open(document_or_path, encoding="utf-8") as file:
            document = json.load(file)
    else:
        document = document_or_path
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as file:
        file.write(render_timeline(document, title))
    return path


def timed_events(document: Any) -> int:
    """How many events of ``document`` the timeline can place in time (a
    pid, a ``ts``, a kind it draws): 0 means an empty picture."""
    return len(_read(document).times)


def render_timeline(document: Mapping[str, Any], title: str = "") -> str:
    """The SVG document of a Chrome trace-event document as
    :func:`rpc_harness.trace.write_trace` writes it (``{"traceEvents": [...],
    "otherData": {...}}``; a bare list of events works too)."""
    trace = _read(document)
    lo, hi, unit, ticks = _time_axis(trace.times)
    left, right = MARGIN_LEFT, WIDTH - MARGIN_RIGHT
    rows_bottom = MARGIN_TOP + ROW_HEIGHT * max(len(trace.rows), 1)

    def px(t: float) -> float:
        return left + (t - lo) / (hi - lo) * (right - left)

    out = _heading(title or "rpc world timeline", _subtitle(trace.other))
    # Stripes and grid first, so that everything else is drawn over them.
    out.append('<g class="grid">')
    for index in range(1, len(trace.rows), 2):
        y = MARGIN_TOP + index * ROW_HEIGHT
        out.append(f'<rect x="0" y="{y}" width="{WIDTH}" height="{ROW_HEIGHT}" fill="#f6f6f6"/>')
    for value in ticks:
        out.append(_line(px(value * unit), MARGIN_TOP, px(value * unit), rows_bottom, "#e5e5e5", 1))
    out.append("</g>")

    hidden_labels = 0
    notes: list[str] = []
    for index, row in enumerate(trace.rows):
        y0 = MARGIN_TOP + index * ROW_HEIGHT
        label = row.label
        out.append(f'<g class="row" data-pid={_attr(row.key)} data-label={_attr(label)}>')
        out.append(
            f'<g class="row-label"><title>{_text(label)}</title><text x="{left - 8}" '
            f'y="{y0 + BAR_TOP + BAR_HEIGHT - 2}" text-anchor="end">'
            f"{_text(_fit(label, ROW_LABEL_CHARS))}</text></g>"
        )
        out += [_phase_bar(phase, y0, px, label, trace.phase_colours) for phase in row.phases]
        out += _step_band(row, y0, px)
        out += _rpc_lane(row, y0, px, notes)
        out += _rpc_lane(row, y0, px, notes, served=True)
        markers, labels, hidden = _markers(row, y0, px, notes)
        hidden_labels += hidden
        out += markers + labels  # labels over every marker of the row
        out.append("</g>")
    if not trace.rows:
        out.append(
            f'<text x="{(left + right) / 2:.2f}" y="{MARGIN_TOP + ROW_HEIGHT / 2 + 4:.2f}" '
            'text-anchor="middle" fill="#777" class="empty">no events to draw</text>'
        )

    axis_y = rows_bottom + 4
    out.append('<g class="x-axis">')
    out.append(_line(left, axis_y, right, axis_y, "black", 1))
    decimals = _svg.decimals(ticks)
    for value in ticks:
        x = px(value * unit)
        out.append(_line(x, axis_y, x, axis_y + 5, "black", 1))
        out.append(
            f'<text x="{x:.2f}" y="{axis_y + 18}" text-anchor="middle">{value:.{decimals}f}</text>'
        )
    out.append(
        f'<text x="{(left + right) / 2:.2f}" y="{axis_y + 34}" text-anchor="middle">'
        f"time since the world started ({_UNIT_NAMES[unit]})</text>"
    )
    out.append("</g>")

    legend, y = _legend(trace.phase_colours, axis_y + 56)
    out += legend
    if hidden_labels:
        notes.append(
            f"{hidden_labels} fault/death/error labels left out where they would overlap: "
            "hover the markers for their names"
        )
    if trace.unusable:
        notes.append(f"{trace.unusable} events with unusable timestamps left out")
    if len(notes) > MAX_NOTES:
        notes[MAX_NOTES - 1 :] = [f"... and {len(notes) - MAX_NOTES + 1} more notes like these"]
    if notes:
        out.append('<g class="notes">')
        for note in notes:
            y += 15
            out.append(f'<text x="{left}" y="{y}" font-size="11" fill="#555">{_text(note)}</text>')
        out.append("</g>")
    out.append("</svg>")

    # Only now is the height known: the legend and the notes may wrap.
    height = y + 14
    return (
        "\n".join(
            [
                f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
                f'viewBox="0 0 {WIDTH} {height}" {FONT} font-size="12">',
                f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="white"/>',
                *out,
            ]
        )
        + "\n"
    )


def _heading(title: str, subtitle: list[tuple[str, str]]) -> list[str]:
    """The document's <title> and the two lines at the top of the picture."""
    plain = "".join(text for text, _ in subtitle)
    out = [
        f"<title>{_text(title + (' -- ' + plain if plain else ''))}</title>",
        f'<text x="{WIDTH / 2:g}" y="22" text-anchor="middle" font-size="15" font-weight="bold" '
        f'class="title">{_text(_fit(title, 120))}</text>',
    ]
    if subtitle:
        spans = "".join(
            f'<tspan fill="{colour}" font-weight="bold">{_text(part)}</tspan>'
            if colour
            else _text(part)
            for part, colour in subtitle
        )
        out.append(
            f'<text x="{WIDTH / 2:g}" y="40" text-anchor="middle" fill="#444" '
            f'class="subtitle">{spans}</text>'
        )
    return out


# -- reading the document ----------------------------------------------------------------------


@dataclass
class _Span:
    start: float
    end: float
    name: str
    args: Any = None
    open: bool = False
    error: str | None = None  # what an RPC's end said went wrong


@dataclass
class _Instant:
    t: float
    name: str
    args: Any = None


@dataclass
class _Row:
    key: Any
    name: str | None = None
    sort_index: float | None = None
    phases: list[_Span] = field(default_factory=list)
    rpcs: list[_Span] = field(default_factory=list)
    serves: list[_Span] = field(default_factory=list)
    steps: list[_Span] = field(default_factory=list)  # a controlled schedule's steps this rank ran
    markers: dict[str, list[_Instant]] = field(default_factory=dict)
    last: float | None = None

    @property
    def label(self) -> str:
        return self.name if self.name is not None else f"pid {self.key}"

    def saw(self, t: float) -> None:
        self.last = t if self.last is None else max(self.last, t)


@dataclass
class _Trace:
    rows: list[_Row]
    other: Mapping[str, Any]
    times: list[float]
    phase_colours: dict[str, str]
    unusable: int


def _read(document: Any) -> _Trace:
    if isinstance(document, Mapping):
        events = document.get("traceEvents")
        other = document.get("otherData")
    else:
        events, other = document, None
    if not isinstance(events, Sequence) or isinstance(events, (str, bytes)):
        events = []
    rows: dict[Any, _Row] = {}
    open_rpcs: dict[tuple[Any, str], list[_Span]] = {}
    times: list[float] = []
    unusable = 0
    for event in events:
        if not isinstance(event, Mapping) or event.get("pid") is None:
            continue
        key = _pid_key(event["pid"])
        row = rows.get(key)
        if row is None:
            row = rows[key] = _Row(key)
        ph, cat, name = event.get("ph"), event.get("cat"), _name(event.get("name"))
        args = event.get("args")
        if ph == "M":
            if (
                name == "process_name"
                and isinstance(args, Mapping)
                and args.get("name") is not None
            ):
                row.name = _name(args["name"])
            elif name == "process_sort_index" and isinstance(args, Mapping):
                row.sort_index = _number(args.get("sort_index"))
            continue
        if ph not in ("X", "b", "e", "i", "I", "C"):
            continue
        ts = _time(event.get("ts"))
        if ts is None:
            unusable += 1
            continue
        row.saw(ts)
        times.append(ts)
        if ph == "X" and cat in ("phase", "step"):
            end = ts + max(_time(event.get("dur")) or 0.0, 0.0)
            row.saw(end)
            times.append(end)
            (row.phases if cat == "phase" else row.steps).append(_Span(ts, end, name, args))
        elif ph == "b" and cat in ("rpc", "serve"):
            span = _Span(ts, ts, name, args, open=True)
            (row.serves if cat == "serve" else row.rpcs).append(span)
            open_rpcs.setdefault((key, _id(event)), []).append(span)
        elif ph == "e" and cat in ("rpc", "serve", None):
            waiting = open_rpcs.get((key, _id(event)))
            if waiting:
                span = waiting.pop(0)  # ids may be reused: the oldest open one ends
                span.end, span.open = max(ts, span.start), False
                if isinstance(args, Mapping) and args.get("error"):
                    span.error = _name(args["error"])
        elif ph in ("i", "I") and cat in MARKER_KINDS:
            row.markers.setdefault(cat, []).append(_Instant(ts, name, args))
    for row in rows.values():
        for span in row.rpcs + row.serves:
            if span.open:
                span.end = max(row.last if row.last is not None else span.start, span.start)
    ordered = sorted(rows.values(), key=_row_order)
    extra = sorted({p.name for r in ordered for p in r.phases} - set(PHASE_COLOURS))
    colours = dict(PHASE_COLOURS)
    colours.update(
        (name, OTHER_PHASE_COLOURS[i % len(OTHER_PHASE_COLOURS)]) for i, name in enumerate(extra)
    )
    return _Trace(ordered, other if isinstance(other, Mapping) else {}, times, colours, unusable)


def _pid_key(pid: Any) -> Any:
    if isinstance(pid, (int, str)) and not isinstance(pid, bool):
        return pid
    if isinstance(pid, float) and math.isfinite(pid):
        return int(pid) if pid.is_integer() else pid
    return _json(pid)


def _row_order(row: _Row) -> tuple:
    key = row.key
    by_key = (0, key, "") if isinstance(key, (int, float)) else (1, 0, key)
    if row.sort_index is None:
        return (1, 0.0, by_key)
    return (0, row.sort_index, by_key)


def _id(event: Mapping[str, Any]) -> str:
    # The async id; with none, the name pairs the ends (an "e" then needs one).
    if "id" in event:
        ident = event["id"]
        return f"id:{ident!r}" if isinstance(ident, (str, int)) else "id:" + _json(ident)
    return "name:" + _name(event.get("name"))


def _name(value: Any) -> str:
    return value if isinstance(value, str) else ("" if value is None else str(value))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        value = float(value)
    except OverflowError:  # an int past the floats: JSON allows it
        return None
    return value if math.isfinite(value) else None


def _time(value: Any) -> float | None:
    value = _number(value)
    return value if value is not None and abs(value) <= _MAX_US else None


def _json(value: Any) -> str:
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):  # keys json cannot sort, circular values
        return repr(value)


# -- time axis -----------------------------------------------------------------------------


_UNIT_NAMES = {1.0: "µs", 1e3: "ms", 1e6: "s"}


def _time_axis(times: Sequence[float]) -> tuple[float, float, float, list[float]]:
    """(lo, hi) in microseconds, the unit the ticks count in, and the ticks in that unit.
    The axis starts at the world's start (0) and ends on a tick."""
    lo = min(0.0, min(times, default=0.0))
    hi = max(times, default=0.0)
    if hi - lo < 1.0:  # under the trace's resolution (1 us; 5e-324 made a 0 tick step)
        hi = lo + 1000.0  # a world of no length: show its instant on a 1 ms axis
    span = hi - lo
    unit = 1e6 if span >= 1e6 else 1e3 if span >= 1e3 else 1.0
    step = _svg.nice_step(span / unit / 8)
    first = math.floor(lo / unit / step + 1e-9)
    last = math.ceil(hi / unit / step - 1e-9)
    ticks = [_svg.tidy(k * step) for k in range(first, last + 1)]
    return ticks[0] * unit, ticks[-1] * unit, unit, ticks


def _human(us: float) -> str:
    if abs(us) >= 1e6:
        return f"{us / 1e6:.3f} s"
    if abs(us) >= 1e3:
        return f"{us / 1e3:.3f} ms"
    return f"{us:.1f} µs"


_Px = Callable[[float], float]  # microseconds -> x on the canvas


# -- drawing -------------------------------------------------------------------------------


def _phase_bar(phase: _Span, y0: float, px: _Px, label: str, colours: Mapping[str, str]) -> str:
    x, x_end = px(phase.start), px(phase.end)
    width = max(x_end - x, 1.0)
    colour = colours.get(phase.name, OTHER_PHASE_COLOURS[0])
    tip = (
        f"{label}: {phase.name} from {_human(phase.start)} to {_human(phase.end)} "
        f"({_human(phase.end - phase.start)})"
    )
    text = ""
    if width >= len(phase.name) * _SMALL_CHAR_WIDTH * 0.9 + 6:
        text = (
            f'<text x="{x + width / 2:.2f}" y="{y0 + BAR_TOP + BAR_HEIGHT - 3}" '
            f'text-anchor="middle" font-size="9" pointer-events="none">{_text(phase.name)}</text>'
        )
    return (
        f'<rect x="{x:.2f}" y="{y0 + BAR_TOP}" width="{width:.2f}" height="{BAR_HEIGHT}" '
        f'fill="{colour}" stroke="#555" stroke-width="0.5" class="phase" '
        f"data-name={_attr(phase.name)}>"
        f"<title>{_text(tip)}</title></rect>{text}"
    )


def _step_band(row: _Row, y0: float, px: _Px) -> list[str]:
    """A controlled schedule's steps, as a band along the top of the phase
    bar: where this rank's tasks ran, one at a time in the whole world; a
    step that preempted a task that could have gone on starts with a tick."""
    if not row.steps:
        return []
    out = ['<g class="steps">']
    for step in row.steps[:MAX_RPCS]:
        x, end = px(step.start), px(step.end)
        args = step.args if isinstance(step.args, Mapping) else {}
        # Drawn where it ran on the real clock; its time on the schedule's
        # (which sleeps and timeouts move on, not the steps) is in its title.
        title = step.name + (f" (at {args['clock']:g} s on the schedule's clock)" if "clock" in args else "")
        out.append(
            f'<rect x="{x:.2f}" y="{y0 + BAR_TOP}" width="{max(end - x, 1.5):.2f}" height="{STEP_HEIGHT}" '
            f'fill="{STEP_COLOUR}"><title>{_text(title)}</title></rect>'
        )
        if args.get("preempted"):
            out.append(_line(x, y0 + BAR_TOP - 2, x, y0 + BAR_TOP + BAR_HEIGHT, PREEMPT_COLOUR, 1.2))
    out.append("</g>")
    return out


def _rpc_lane(row: _Row, y0: float, px: _Px, notes: list[str], *, served: bool = False) -> list[str]:
    """The RPCs the rank issued (or, ``served``, ran for peers) as thin bars."""
    spans = sorted(row.serves if served else row.rpcs, key=lambda s: (s.start, s.end))
    if not spans:
        return []
    what = "served RPCs" if served else "RPCs"
    drawn = _sample(spans, MAX_RPCS)
    if len(drawn) < len(spans):
        notes.append(
            f"{row.label}: drew {len(drawn)} of {len(spans)} {what}, sampled evenly in time order"
        )
    unanswered = sum(1 for s in spans if s.open)
    if unanswered:
        ending = "never finished" if served else "never answered"
        notes.append(
            f"{row.label}: {unanswered} {what[:-1] if unanswered == 1 else what} {ending} "
            "before the rank's trace ends"
        )
    top = SERVE_TOP if served else RPC_TOP
    out = [f'<g class="{"serves" if served else "rpcs"}" fill-opacity="0.75">']
    lane_ends = [-math.inf] * RPC_LANES
    for span in drawn:
        # The first free sub-lane; with none free, the one that frees soonest (overdrawn).
        lane = next(
            (i for i, end in enumerate(lane_ends) if end <= span.start),
            min(range(RPC_LANES), key=lambda i: lane_ends[i]),
        )
        lane_ends[lane] = max(lane_ends[lane], span.end)
        x = px(span.start)
        width = max(px(span.end) - x, 1.0)
        tip = f"{row.label}: {span.name} at {_human(span.start)}, "
        kind = "serve" if served else "rpc"
        if span.open:
            tip += "never finished: the rank's trace ends first" if served else "never answered: the rank's trace ends first"
            colour, cls = OPEN_RPC_COLOUR, f"{kind} unanswered"
        else:
            tip += f"took {_human(span.end - span.start)}"
            colour, cls = (SERVE_COLOUR if served else RPC_COLOUR), kind
        if span.error is not None:
            tip += f"\nfailed: {_fit(span.error, 400)}"
            colour, cls = FAILED_RPC_COLOUR, f"{kind} failed"
        if span.args:
            tip += f"\nargs: {_fit(_json(span.args), 400)}"
        out.append(
            f'<rect x="{x:.2f}" y="{y0 + top + lane * RPC_LANE}" width="{width:.2f}" '
            f'height="{RPC_LANE - 0.5}" fill="{colour}" class="{cls}">'
            f"<title>{_text(tip)}</title></rect>"
        )
    out.append("</g>")
    return out


def _markers(row: _Row, y0: float, px: _Px, notes: list[str]) -> tuple[list[str], list[str], int]:
    """The row's markers, their labels, and how many labels found no room."""
    drawn: dict[str, list[_Instant]] = {}
    for kind in MARKER_KINDS:
        instants = sorted(row.markers.get(kind, ()), key=lambda m: m.t)
        drawn[kind] = _sample(instants, MAX_MARKERS)
        if len(drawn[kind]) < len(instants):
            notes.append(
                f"{row.label}: drew {len(drawn[kind])} of {len(instants)} {kind} markers, "
                "sampled evenly in time order"
            )
    out = []
    for kind in reversed(MARKER_KINDS):
        for marker in drawn[kind]:
            out.append(_marker(kind, marker, y0, px(marker.t), row.label))

    labels, hidden = [], 0
    taken: list[list[tuple[float, float]]] = [[] for _ in LABEL_BASELINES]
    for kind in LABELLED:
        for marker in drawn[kind]:
            placed = _place_label(kind, marker, row.label, px(marker.t), taken)
            if placed is None:
                hidden += 1
                continue
            level, x, anchor, text = placed
            width = len(text) * _SMALL_CHAR_WIDTH
            baseline = y0 + LABEL_BASELINES[level]
            # A white ground under the label keeps it readable over fault lines.
            labels.append(
                f'<rect x="{x if anchor == "start" else x - width:.2f}" y="{baseline - 8}" '
                f'width="{width:.2f}" height="10" fill="white" fill-opacity="0.8"/>'
                f'<text x="{x:.2f}" y="{baseline}" text-anchor="{anchor}" font-size="10" '
                f'fill="{_LABEL_FILL[kind]}" class="label {kind}">{_text(text)}</text>'
            )
    return out, labels, hidden


def _marker(kind: str, marker: _Instant, y0: float, x: float, label: str) -> str:
    tip = f"{label}: {marker.name} at {_human(marker.t)}"
    if marker.args:
        tip += f"\nargs: {_fit(_json(marker.args), 400)}"
    mid = y0 + BAR_TOP + BAR_HEIGHT / 2
    if kind == "fault":  # a line through the whole row: the thing a reader looks for
        stem = _line(x, y0 + 2, x, y0 + ROW_HEIGHT - 2, FAULT_COLOUR, 1.5)
    elif kind in ("death", "error"):  # up to the label line
        stem = _line(x, y0 + 2, x, mid, _GLYPH_COLOUR[kind], 0.75)
    else:
        stem = ""
    return f'<g class="marker {kind}"><title>{_text(tip)}</title>{stem}{_glyph(kind, x, mid)}</g>'


_GLYPH_COLOUR = {
    "fault": FAULT_COLOUR,
    "death": DEATH_COLOUR,
    "error": ERROR_COLOUR,
    "user": USER_COLOUR,
    "fuzz": FUZZ_COLOUR,
    "failpoint": FAULT_COLOUR,
}


def _glyph(kind: str, x: float, mid: float, edge: float = BAR_HEIGHT / 2) -> str:
    """A marker's shape around (x, mid), the middle of the phase bar, whose
    edges are ``edge`` above and below; the legend draws the same with none."""
    colour, r = _GLYPH_COLOUR[kind], BAR_HEIGHT / 2
    if kind == "fault":
        return (
            f'<path d="M{x:.2f},{mid - r - 1:.2f} l5,{r + 1:g} l-5,{r + 1:g} l-5,-{r + 1:g} z" '
            f'fill="{colour}" stroke="white" stroke-width="0.75"/>'
        )
    if kind == "death":
        return (
            f'<path d="M{x - r:.2f},{mid - r:.2f} L{x + r:.2f},{mid + r:.2f} '
            f'M{x - r:.2f},{mid + r:.2f} L{x + r:.2f},{mid - r:.2f}" stroke="{colour}" '
            'stroke-width="2.5" stroke-linecap="round"/>'
        )
    if kind == "error":
        return (
            f'<circle cx="{x:.2f}" cy="{mid:.2f}" r="4.5" fill="{colour}" stroke="white" '
            'stroke-width="0.75"/>'
        )
    if kind == "user":  # on the bar's top edge
        return (
            f'<circle cx="{x:.2f}" cy="{mid - edge:.2f}" r="2.5" fill="{colour}" stroke="white" '
            'stroke-width="0.5"/>'
        )
    if kind == "failpoint":  # an armed point reached on a hit its fault skips: hollow, small
        return (
            f'<path d="M{x:.2f},{mid - 4:.2f} l3,4 l-3,4 l-3,-4 z" fill="white" '
            f'stroke="{colour}" stroke-width="1"/>'
        )
    return _line(x, mid + edge - 3, x, mid + edge + 2, colour, 1)  # fuzz: on the bottom edge


def _line(x1: float, y1: float, x2: float, y2: float, colour: str, width: float) -> str:
    return (
        f'<line x1="{x1:.2f}" y1="{y1:.2f}" x2="{x2:.2f}" y2="{y2:.2f}" stroke="{colour}" '
        f'stroke-width="{width:g}"/>'
    )


def _place_label(
    kind: str, marker: _Instant, row_label: str, x: float, taken: list[list[tuple[float, float]]]
) -> tuple[int, float, str, str] | None:
    """(level, x, anchor, text) of a label beside its marker on the first of the
    row's label lines where it overlaps no other, or None."""
    text = marker.name
    prefix = f"end: {row_label}: "
    if kind == "death" and text.startswith(prefix):
        text = "end: " + text[len(prefix) :]  # the row already says which rank
    text = _fit(text, MAX_LABEL_CHARS)
    room_right, room_left = WIDTH - 4 - (x + 4), (x - 4) - MARGIN_LEFT
    width = len(text) * _SMALL_CHAR_WIDTH
    if width > room_right and width > room_left:
        text = _fit(text, int(max(room_right, room_left) / _SMALL_CHAR_WIDTH))
        width = len(text) * _SMALL_CHAR_WIDTH
        if len(text) < 6:
            return None
    if width <= room_right:
        start, anchor, at = x + 4, "start", x + 4
    else:
        start, anchor, at = x - 4 - width, "end", x - 4
    for level, spans in enumerate(taken):
        if all(start + width + 6 <= a or b + 6 <= start for a, b in spans):
            spans.append((start, start + width))
            return level, at, anchor, text
    return None


def _legend(colours: Mapping[str, str], y: float) -> tuple[list[str], float]:
    entries: list[tuple[str, str]] = [
        (f"bar:{colour}", f"{name} phase") for name, colour in colours.items()
    ]
    entries += [
        (f"rpc:{RPC_COLOUR}", "RPC issued by the rank"),
        (f"rpc:{SERVE_COLOUR}", "RPC served by the rank (lane below)"),
        (f"rpc:{FAILED_RPC_COLOUR}", "RPC failed"),
        (f"rpc:{OPEN_RPC_COLOUR}", "RPC never answered (drawn to the rank's last event)"),
        (f"step:{STEP_COLOUR}", "step of a controlled schedule (a red tick: it preempted a task)"),
        ("fault", "fault fired"),
        ("failpoint", "armed failpoint reached, no fault this hit"),
        ("error", "raised"),
        ("death", "rank ended (killed, died, hung, stopped)"),
        ("fuzz", "failpoint fuzz delay"),
        ("user", "user event"),
    ]
    out = ['<g class="legend">']
    x, left, right = float(MARGIN_LEFT), float(MARGIN_LEFT), float(WIDTH - MARGIN_RIGHT)
    for swatch, text in entries:
        width = 22 + _CHAR_WIDTH * len(text)
        if x + width > right and x > left:
            x, y = left, y + 18
        kind, _, colour = swatch.partition(":")
        if kind == "bar":
            out.append(
                f'<rect x="{x:.2f}" y="{y - 10}" width="16" height="10" fill="{colour}" '
                'stroke="#555" stroke-width="0.5"/>'
            )
        elif kind == "rpc":
            out.append(f'<rect x="{x:.2f}" y="{y - 6}" width="16" height="3" fill="{colour}"/>')
        elif kind == "step":
            out.append(f'<rect x="{x:.2f}" y="{y - 10}" width="16" height="{STEP_HEIGHT}" fill="{colour}"/>')
            out.append(_line(x + 2, y - 12, x + 2, y - 2, PREEMPT_COLOUR, 1.2))
        else:
            out.append(_glyph(kind, x + 8, y - 4, edge=0))
        out.append(f'<text x="{x + 22:.2f}" y="{y}">{_text(text)}</text>')
        x += width + 14
    out.append("</g>")
    return out, y


def _subtitle(other: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The line under the title as (text, colour or "") parts."""
    parts: list[tuple[str, str]] = []
    for key in ("seed", "world_size"):
        if other.get(key) is not None:
            parts.append((f"{key} {_fit(_name(other[key]), 30)}", ""))
    if "faults" in other:
        faults = _name(other["faults"]) or "none"
        parts.append((f"faults: {_fit(faults, 90)}", ""))
    if "ok" in other:
        ok = other["ok"]
        if isinstance(ok, bool):
            parts.append(("ok" if ok else "FAILED", "#2ca02c" if ok else FAULT_COLOUR))
        else:
            parts.append((f"ok: {_fit(_name(ok), 20)}", ""))
    out: list[tuple[str, str]] = []
    for index, part in enumerate(parts):
        if index:
            out.append((" · ", ""))
        out.append(part)
    return out


# -- small helpers -------------------------------------------------------------------------


def _sample(items: list, cap: int) -> list:
    """At most ``cap`` of ``items``, spread evenly over them (first one kept)."""
    if len(items) <= cap:
        return items
    return [items[i * len(items) // cap] for i in range(cap)]


def _fit(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: max(chars - 1, 0)] + "…"


def _text(value: Any) -> str:
    return escape(_svg.xml_text(_name(value)))


def _attr(value: Any) -> str:
    return quoteattr(_svg.xml_text(_name(value)))
