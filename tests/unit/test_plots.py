"""rpc_harness.plots: hand-written SVG training curves, checked by parsing them."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

from hypothesis import given, settings
from hypothesis import strategies as st

from rpc_harness.plots import render_curves, write_curves

SVG = "{http://www.w3.org/2000/svg}"
NAN, INF = float("nan"), float("inf")


def parse(text):
    root = ET.fromstring(text)
    assert root.tag == f"{SVG}svg"
    x0, y0, width, height = map(float, root.get("viewBox").split())
    return root, (x0, y0, x0 + width, y0 + height)


def series_groups(root):
    return {g.get("data-name"): g for g in root.iter(f"{SVG}g") if g.get("class") == "series"}


def points(polyline):
    return [tuple(map(float, p.split(","))) for p in polyline.get("points").split()]


def legend_texts(root):
    legend = next(g for g in root.iter(f"{SVG}g") if g.get("class") == "legend")
    return [t.text for t in legend.iter(f"{SVG}text")]


def tick_values(root, axis):
    group = next(g for g in root.iter(f"{SVG}g") if g.get("class") == axis)
    return [float(t.text) for t in group.iter(f"{SVG}text") if re.fullmatch(r"-?[\d.e+-]+", t.text or "")]


def every_coordinate(root):
    """Every x/y a drawing element puts on the canvas."""
    for el in root.iter():
        if el.tag == f"{SVG}polyline":
            yield from points(el)
        elif el.tag == f"{SVG}circle":
            yield float(el.get("cx")), float(el.get("cy"))
        elif el.tag in (f"{SVG}line", f"{SVG}text") and el.get("x1", el.get("x")) is not None:
            if el.tag == f"{SVG}line":
                yield float(el.get("x1")), float(el.get("y1"))
                yield float(el.get("x2")), float(el.get("y2"))
            else:
                yield float(el.get("x")), float(el.get("y"))


def assert_inside(root, box):
    x0, y0, x1, y1 = box
    for x, y in every_coordinate(root):
        assert math.isfinite(x) and math.isfinite(y), (x, y)
        assert x0 <= x <= x1 and y0 <= y <= y1, (x, y, box)


def test_distributed_against_baseline(tmp_path):
    history = [0.5 * k + math.sin(k) for k in range(30)]
    baseline = [v + 0.1 for v in history]
    path = write_curves(str(tmp_path / "deep" / "rl.svg"), "rl, world 3, seed 5", "running reward",
                        {"distributed": history, "baseline": baseline})
    assert path == str(tmp_path / "deep" / "rl.svg")
    root, box = parse(open(path).read())
    groups = series_groups(root)
    assert list(groups) == ["distributed", "baseline"]
    lines = {name: g.findall(f"{SVG}polyline") for name, g in groups.items()}
    assert [len(v) for v in lines.values()] == [1, 1]
    assert legend_texts(root) == ["distributed", "baseline"]
    assert root.find(f"{SVG}title").text == "rl, world 3, seed 5"
    assert any(t.text == "running reward" for t in root.iter(f"{SVG}text"))
    assert_inside(root, box)

    dist = points(lines["distributed"][0])
    base = points(lines["baseline"][0])
    assert len(dist) == len(history)
    xs = [x for x, _ in dist]
    assert xs == sorted(xs) and len(set(xs)) == len(xs)
    # Higher values are drawn higher (smaller y), point by point.
    for (_, y_dist), (_, y_base), value in zip(dist, base, history, strict=True):
        assert y_base < y_dist, value
    ordered = sorted(range(len(history)), key=history.__getitem__)
    assert [dist[i][1] for i in ordered] == sorted((dist[i][1] for i in ordered), reverse=True)
    # The drawn line and the baseline are told apart: dashes or colour.
    a, b = lines["distributed"][0], lines["baseline"][0]
    assert (a.get("stroke"), a.get("stroke-dasharray")) != (b.get("stroke"), b.get("stroke-dasharray"))
    ticks = tick_values(root, "y-axis")
    assert ticks == sorted(ticks) and ticks[0] <= min(history) and ticks[-1] >= max(baseline)
    x_ticks = tick_values(root, "x-axis")
    assert x_ticks[0] >= 1 and x_ticks[-1] <= 30 and all(t == int(t) for t in x_ticks)


def test_no_series_at_all_is_an_empty_chart():
    root, box = parse(render_curves("nothing", "loss", {}))
    assert not series_groups(root) and not list(root.iter(f"{SVG}polyline"))
    assert any(t.text == "no data to plot" for t in root.iter(f"{SVG}text"))
    assert_inside(root, box)


def test_empty_one_point_and_all_nan_series():
    root, box = parse(render_curves("edges", "loss", {"empty": [], "one": [2.5], "gone": [NAN, INF]}))
    groups = series_groups(root)
    assert not groups["empty"].findall(f"{SVG}polyline") and not groups["gone"].findall(f"{SVG}polyline")
    dots = groups["one"].findall(f"{SVG}circle")
    assert len(dots) == 1
    assert legend_texts(root) == ["empty (empty)", "one", "gone (no finite values)"]
    assert tick_values(root, "x-axis") == [1.0, 2.0]  # the longest series, NaNs included
    assert_inside(root, box)

    # Alone, the single point sits in the middle of the x axis, inside the y range.
    root, box = parse(render_curves("one", "loss", {"one": [2.5]}))
    (dot,) = series_groups(root)["one"].findall(f"{SVG}circle")
    assert float(dot.get("cx")) == (box[0] + box[2]) / 2 + (72 - 24) / 2  # the plot's centre
    ticks = tick_values(root, "y-axis")
    assert ticks[0] < 2.5 < ticks[-1] and tick_values(root, "x-axis") == [1.0]
    assert_inside(root, box)


def test_a_constant_series_is_a_flat_line_inside_the_plot():
    root, box = parse(render_curves("flat", "accuracy", {"distributed": [0.75] * 5}))
    (line,) = series_groups(root)["distributed"].findall(f"{SVG}polyline")
    ys = {y for _, y in points(line)}
    assert len(ys) == 1
    axes = next(el for el in root.iter(f"{SVG}path") if el.get("class") == "axes")
    _, top, bottom = map(float, re.match(r"M([\d.]+),([\d.]+) V([\d.]+)", axes.get("d")).groups())
    assert top < ys.pop() < bottom
    ticks = tick_values(root, "y-axis")
    assert ticks[0] < 0.75 < ticks[-1]
    assert_inside(root, box)


def test_nan_and_inf_break_the_line_and_are_counted():
    root, box = parse(render_curves("gaps", "loss", {"loss": [1.0, NAN, 3.0, 4.0, INF, -INF, 2.0, None]}))
    lines = series_groups(root)["loss"].findall(f"{SVG}polyline")
    assert [len(points(line)) for line in lines] == [1, 2, 1]
    assert legend_texts(root) == ["loss (4 non-finite skipped)"]
    assert "nan" not in ET.tostring(root, encoding="unicode").lower().replace("non-finite", "")
    assert_inside(root, box)


def test_text_is_escaped_and_many_series_wrap_the_legend():
    names = {f"series <{k}> & more": [k, k + 1.0] for k in range(8)}
    root, box = parse(render_curves('title <b>&"', "m&m", names))
    assert root.find(f"{SVG}title").text == 'title <b>&"'
    assert legend_texts(root) == list(names)
    assert len(series_groups(root)) == 8
    rows = {float(t.get("y")) for g in root.iter(f"{SVG}g") if g.get("class") == "legend" for t in g.iter(f"{SVG}text")}
    assert len(rows) > 1
    assert_inside(root, box)


def test_extreme_magnitudes_stay_finite_and_readable():
    root, box = parse(render_curves("huge", "x", {"a": [1e308, -1e308, 0.0]}))
    assert_inside(root, box)
    root, box = parse(render_curves("tiny", "x", {"a": [1e-9, 3e-9, 2e-9]}))
    labels = [t.text for g in root.iter(f"{SVG}g") if g.get("class") == "y-axis" for t in g.iter(f"{SVG}text")]
    assert any("e-09" in label for label in labels), labels
    assert_inside(root, box)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(
    st.text(min_size=1, max_size=12),  # control characters too: not valid XML as they are
    st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), max_size=60),
    max_size=4,
))
def test_any_series_gives_valid_svg_inside_its_viewbox(series):
    root, box = parse(render_curves("any", "metric", series))
    groups = [g for g in root.iter(f"{SVG}g") if g.get("class") == "series"]
    assert len(groups) == len(series)
    for group, values in zip(groups, series.values(), strict=True):
        drawn = sum(len(points(line)) for line in group.findall(f"{SVG}polyline"))
        assert drawn == sum(1 for v in values if math.isfinite(v))
    assert_inside(root, box)
