"""Training curves as hand-written SVG: no matplotlib, no dependencies.

``rpc-harness run --out DIR`` draws each scenario's metric per step, the
distributed run against its single-process baseline. The chart has axes with
"nice" ticks (1, 2, 2.5 or 5 times a power of ten), one line per series and a
legend. Series may be empty, one point long, constant, or hold NaN and
infinities: non-finite points are left out (the line breaks there) and the
legend says how many were; a series with no finite point is listed as such.
Later series are drawn dashed over earlier ones, so two identical curves --
a bit-exact distributed run and its baseline -- both stay visible.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping, Sequence
from xml.sax.saxutils import escape, quoteattr

from . import _svg
from ._svg import FONT

WIDTH, HEIGHT = 640, 400
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 72, 24, 64, 48
# (colour, dash pattern): colour-blind-safe hues; dashes tell overlapping lines apart.
STYLES = (
    ("#1f77b4", ""),
    ("#ff7f0e", "7 4"),
    ("#2ca02c", "2 3"),
    ("#d62728", "9 3 2 3"),
    ("#9467bd", "4 2"),
    ("#8c564b", "1 2"),
)
MARKERS_UP_TO = 40  # series this short also get a dot per point


def write_curves(path: str, title: str, metric_name: str, series: Mapping[str, Sequence[float]]) -> str:
    """Write an SVG line chart of ``series`` (name -> metric per step) to
    ``path`` (folders created); return the path."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    with open(path, "w", encoding="utf-8") as file:
        file.write(render_curves(title, metric_name, series))
    return path


def render_curves(title: str, metric_name: str, series: Mapping[str, Sequence[float]]) -> str:
    """The SVG document :func:`write_curves` writes."""
    title, metric_name = _svg.xml_text(title), _svg.xml_text(metric_name)
    # A list, not a dict: two names may read the same once made XML-safe.
    clean = [(_svg.xml_text(str(name)), [_as_float(v) for v in values]) for name, values in series.items()]
    finite = [v for _, values in clean for v in values if math.isfinite(v)]
    steps = max((len(values) for _, values in clean), default=0)

    x_lo, x_hi, x_ticks = _x_axis(steps)
    y_lo, y_hi, y_ticks = _y_axis(min(finite, default=0.0), max(finite, default=1.0))
    left, right, bottom = MARGIN_LEFT, WIDTH - MARGIN_RIGHT, HEIGHT - MARGIN_BOTTOM
    legend = _legend_layout(clean, left, right)
    # A legend that wraps onto more rows pushes the plot down.
    top = MARGIN_TOP + max(0, max((y for _, y, _ in legend), default=0) - _LEGEND_Y)

    def px(step: float) -> float:
        return left + (step - x_lo) / (x_hi - x_lo) * (right - left)

    def py(value: float) -> float:
        # Halved first (exact), so that spans near the float limit do not overflow.
        return bottom - (value / 2 - y_lo / 2) / (y_hi / 2 - y_lo / 2) * (bottom - top)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" {FONT} font-size="12">',
        f"<title>{escape(title)}</title>",
        f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{WIDTH / 2:g}" y="22" text-anchor="middle" font-size="15" font-weight="bold">{escape(title)}</text>',
    ]
    # Grid and ticks first, so the lines are drawn over them.
    out.append('<g class="y-axis">')
    decimals = _svg.decimals(y_ticks)
    for value in y_ticks:
        y = py(value)
        out.append(f'<line x1="{left}" y1="{y:.2f}" x2="{right}" y2="{y:.2f}" stroke="#e5e5e5"/>')
        out.append(f'<line x1="{left - 5}" y1="{y:.2f}" x2="{left}" y2="{y:.2f}" stroke="black"/>')
        out.append(f'<text x="{left - 8}" y="{y + 4:.2f}" text-anchor="end">{_label(value, decimals)}</text>')
    mid_y = (top + bottom) / 2
    out.append(
        f'<text x="16" y="{mid_y:.2f}" text-anchor="middle" transform="rotate(-90 16 {mid_y:.2f})">'
        f"{escape(metric_name)}</text>"
    )
    out.append("</g>")
    out.append('<g class="x-axis">')
    for step in x_ticks:
        x = px(step)
        out.append(f'<line x1="{x:.2f}" y1="{bottom}" x2="{x:.2f}" y2="{bottom + 5}" stroke="black"/>')
        out.append(f'<text x="{x:.2f}" y="{bottom + 18}" text-anchor="middle">{step:g}</text>')
    out.append(f'<text x="{(left + right) / 2:.2f}" y="{HEIGHT - 8}" text-anchor="middle">step</text>')
    out.append("</g>")
    out.append(
        f'<path d="M{left},{top} V{bottom} H{right}" fill="none" stroke="black" class="axes"/>'
    )
    if not finite:
        out.append(
            f'<text x="{(left + right) / 2:.2f}" y="{mid_y:.2f}" text-anchor="middle" fill="#777">'
            "no data to plot</text>"
        )

    for index, (name, values) in enumerate(clean):
        colour, dash = STYLES[index % len(STYLES)]
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(f'<g class="series" data-name={quoteattr(name)}>')
        for run in _finite_runs(values):
            points = " ".join(f"{px(i + 1):.2f},{py(v):.2f}" for i, v in run)
            out.append(
                f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"'
                f'{dash_attr} stroke-linejoin="round"/>'
            )
            if len(run) == 1 or len(values) <= MARKERS_UP_TO:
                # A one-point run draws no line: the dot is all there is of it.
                out += [f'<circle cx="{px(i + 1):.2f}" cy="{py(v):.2f}" r="2.5" fill="{colour}"/>' for i, v in run]
        out.append("</g>")

    out += _legend_svg(legend)
    out.append("</svg>")
    return "\n".join(out) + "\n"


_LEGEND_Y = 44  # baseline of the legend's first row
_LEGEND_ROW = 16
_CHAR_WIDTH = 6.5  # a 12px sans-serif character, roughly: enough to keep entries apart


def _legend_svg(legend: Sequence[tuple[float, int, str]]) -> list[str]:
    """The legend laid out by :func:`_legend_layout`: a line sample in each
    series' style, then its name."""
    out = ['<g class="legend">']
    for index, (x, y, text) in enumerate(legend):
        colour, dash = STYLES[index % len(STYLES)]
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(f'<line x1="{x}" y1="{y - 4}" x2="{x + 24}" y2="{y - 4}" stroke="{colour}" stroke-width="2"{dash_attr}/>')
        out.append(f'<text x="{x + 30}" y="{y}">{escape(text)}</text>')
    out.append("</g>")
    return out


def _legend_layout(series: Sequence[tuple[str, list[float]]], left: int, right: int) -> list[tuple[float, int, str]]:
    """(x, y, text) of each entry: one row under the title, wrapped."""
    entries = []
    x, y = float(left), _LEGEND_Y
    for name, values in series:
        skipped = sum(1 for v in values if not math.isfinite(v))
        if not values:
            text = f"{name} (empty)"
        elif skipped == len(values):
            text = f"{name} (no finite values)"
        elif skipped:
            text = f"{name} ({skipped} non-finite skipped)"
        else:
            text = name
        width = 30 + _CHAR_WIDTH * len(text)
        if x + width > right and x > left:
            x, y = float(left), y + _LEGEND_ROW
        entries.append((x, y, text))
        x += width + 16
    return entries


# -- axes ----------------------------------------------------------------------------------


def _x_axis(steps: int) -> tuple[float, float, list[float]]:
    """Steps are numbered from 1. A single step sits in the middle."""
    if steps <= 1:
        return 0.5, 1.5, [1.0]
    size = int(_svg.nice_step((steps - 1) / 6, integer=True))
    ticks = [float(t) for t in range(size, steps + 1, size) if t > 1]
    if not ticks or ticks[0] - 1 >= 0.75 * size:  # mark step 1 unless a tick crowds it
        ticks.insert(0, 1.0)
    return 1.0, float(steps), ticks


def _y_axis(lo: float, hi: float) -> tuple[float, float, list[float]]:
    """Axis bounds that hold [lo, hi] on tick marks, and the ticks."""
    if hi - lo <= abs(hi) * 1e-12:  # a constant: give it room around its value
        pad = abs(lo) * 0.1 or 1.0
        lo, hi = max(lo - pad, -sys.float_info.max), min(hi + pad, sys.float_info.max)
    try:
        step = _svg.nice_step((hi / 2 - lo / 2) / 2.5)  # the span / 5, without overflowing
        ticks = [_svg.tidy(k * step) for k in range(math.floor(lo / step), math.ceil(hi / step) + 1)]
    except OverflowError:
        ticks = []
    if len(ticks) < 2 or not all(math.isfinite(t) for t in ticks):
        return lo, hi, [lo, hi]  # near the float limit: mark the ends only
    return ticks[0], ticks[-1], ticks


def _label(value: float, decimals: int) -> str:
    if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-4):
        return f"{value:.4g}"
    return f"{value:.{decimals}f}"


# -- data --------------------------------------------------------------------------------------


def _as_float(value: object) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


def _finite_runs(values: Sequence[float]) -> list[list[tuple[int, float]]]:
    """Maximal runs of consecutive finite points, as (index, value)."""
    runs: list[list[tuple[int, float]]] = []
    current: list[tuple[int, float]] = []
    for index, value in enumerate(values):
        if math.isfinite(value):
            current.append((index, value))
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return runs


# -- growth charts ----------------------------------------------------------------------------


def write_growth(path: str, title: str, x_label: str, y_label: str,
                 series: Mapping[str, Sequence[tuple[float, float]]], notes: Sequence[str] = ()) -> str:
    """Write an SVG chart of how ``series`` (name -> (x, y) points, both
    positive) grow, on logarithmic axes (a world of 256 ranks next to one of
    2); return the path. ``notes`` are lines printed under the plot."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    with open(path, "w", encoding="utf-8") as file:
        file.write(render_growth(title, x_label, y_label, series, notes))
    return path


def render_growth(title: str, x_label: str, y_label: str,
                  series: Mapping[str, Sequence[tuple[float, float]]], notes: Sequence[str] = ()) -> str:
    """The SVG document :func:`write_growth` writes."""
    clean = [(_svg.xml_text(str(name)), sorted((float(x), float(y)) for x, y in points
                                               if x > 0 and y > 0 and math.isfinite(x) and math.isfinite(y)))
             for name, points in series.items()]
    xs = [x for _, points in clean for x, _ in points] or [1.0, 10.0]
    ys = [y for _, points in clean for _, y in points] or [1.0, 10.0]
    x_ticks = _log_ticks(min(xs), max(xs), base=2 if max(xs) / min(xs) <= 4096 else 10)
    y_ticks = _log_ticks(min(ys), max(ys), base=10, subdivide=True)
    height = HEIGHT + 16 * len(notes)
    left, right, top, bottom = MARGIN_LEFT, WIDTH - MARGIN_RIGHT, MARGIN_TOP, HEIGHT - MARGIN_BOTTOM

    def px(x: float) -> float:
        return left + (math.log(x) - math.log(x_ticks[0])) / (math.log(x_ticks[-1]) - math.log(x_ticks[0])) * (right - left)

    def py(y: float) -> float:
        return bottom - (math.log(y) - math.log(y_ticks[0])) / (math.log(y_ticks[-1]) - math.log(y_ticks[0])) * (bottom - top)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" {FONT} font-size="12">',
        f"<title>{escape(_svg.xml_text(title))}</title>",
        f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="white"/>',
        f'<text x="{WIDTH / 2:g}" y="22" text-anchor="middle" font-size="15" font-weight="bold">'
        f"{escape(_svg.xml_text(title))}</text>",
        '<g class="y-axis">',
    ]
    for value in y_ticks:
        y = py(value)
        out.append(f'<line x1="{left}" y1="{y:.2f}" x2="{right}" y2="{y:.2f}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{left - 8}" y="{y + 4:.2f}" text-anchor="end">{value:g}</text>')
    mid_y = (top + bottom) / 2
    out.append(f'<text x="16" y="{mid_y:.2f}" text-anchor="middle" transform="rotate(-90 16 {mid_y:.2f})">'
               f"{escape(_svg.xml_text(y_label))}</text></g>")
    out.append('<g class="x-axis">')
    for value in x_ticks:
        x = px(value)
        out.append(f'<line x1="{x:.2f}" y1="{top}" x2="{x:.2f}" y2="{bottom}" stroke="#f0f0f0"/>')
        out.append(f'<text x="{x:.2f}" y="{bottom + 18}" text-anchor="middle">{value:g}</text>')
    out.append(f'<text x="{(left + right) / 2:.2f}" y="{HEIGHT - 8}" text-anchor="middle">'
               f"{escape(_svg.xml_text(x_label))}</text></g>")
    out.append(f'<path d="M{left},{top} V{bottom} H{right}" fill="none" stroke="black" class="axes"/>')
    for index, (name, points) in enumerate(clean):
        colour, dash = STYLES[index % len(STYLES)]
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(f'<g class="series" data-name={quoteattr(name)}>')
        if len(points) > 1:
            path = " ".join(f"{px(x):.2f},{py(y):.2f}" for x, y in points)
            out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash_attr}/>')
        for number, (x, y) in enumerate(points):
            out.append(f'<circle cx="{px(x):.2f}" cy="{py(y):.2f}" r="3" fill="{colour}">'
                       f"<title>{escape(name)}: {x:g} -> {y:.3g}</title></circle>")
            # Curves rise to the right: a value goes above-left of its point,
            # clear of the next segment and inside the frame; the first one
            # below-right, clear of the y axis.
            if number == 0:
                below = min(py(y) + 14, bottom - 4)  # above the x axis, right of the point
                where = f'x="{px(x) + 8:.2f}" y="{max(below, py(y) + 4):.2f}"'
            else:
                where = f'x="{px(x) - 6:.2f}" y="{py(y) - 6:.2f}" text-anchor="end"'
            out.append(f'<text {where} font-size="10" fill="{colour}">{y:.3g}</text>')
        out.append("</g>")
    legend = _legend_layout([(name, [1.0]) for name, _ in clean], left, right)
    out += _legend_svg(legend)
    for number, note in enumerate(notes):
        out.append(f'<text x="{left}" y="{HEIGHT + 10 + 16 * number}" fill="#444">{escape(_svg.xml_text(note))}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _log_ticks(lo: float, hi: float, *, base: int, subdivide: bool = False) -> list[float]:
    """Powers of ``base`` from one at or below ``lo`` to one at or above
    ``hi`` (with 2x and 5x between decades when ``subdivide``)."""
    first = math.floor(math.log(lo, base) + 1e-9)
    last = math.ceil(math.log(hi, base) - 1e-9)
    if last <= first:
        last = first + 1
    ticks = []
    for power in range(first, last + 1):
        ticks.append(float(base) ** power)
        if subdivide and base == 10 and power < last:
            ticks += [2.0 * 10.0 ** power, 5.0 * 10.0 ** power]
    ticks = sorted(t for t in ticks if t <= float(base) ** last)
    return ticks
