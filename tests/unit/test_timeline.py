"""rpc_harness.timeline: a trace document drawn as SVG, checked by parsing the SVG."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rpc_harness.faults import FaultPlan
from rpc_harness.result import RankOutcome, WorldResult
from rpc_harness.timeline import (
    MARGIN_LEFT,
    MARGIN_RIGHT,
    MAX_MARKERS,
    MAX_RPCS,
    WIDTH,
    render_timeline,
    write_timeline,
)
from rpc_harness.trace import trace_events

SVG = "{http://www.w3.org/2000/svg}"
LEFT, RIGHT = MARGIN_LEFT, WIDTH - MARGIN_RIGHT


# -- building documents -------------------------------------------------------------------------


def meta(pid, name, sort_index=None):
    out = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}]
    if sort_index is not None:
        args = {"sort_index": sort_index}
        out.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": args})
    return out


def phase(pid, name, ts, dur):
    return {"ph": "X", "cat": "phase", "name": name, "pid": pid, "tid": 0, "ts": ts, "dur": dur}


def instant(pid, cat, name, ts, **args):
    return dict(ph="i", s="p", cat=cat, name=name, pid=pid, tid=0, ts=ts, args=args)


def rpc(pid, ident, name, ts, end=None):
    out = [{"ph": "b", "cat": "rpc", "name": name, "pid": pid, "tid": 0, "id": ident, "ts": ts}]
    if end is not None:
        out.append(
            {"ph": "e", "cat": "rpc", "name": name, "pid": pid, "tid": 0, "id": ident, "ts": end}
        )
    return out


def document(events, **other):
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def world(kill_rank=2):
    """Three ranks with phases and RPCs; ``kill_rank`` takes a fault and dies."""
    events = []
    for pid, name in enumerate(["agent", "observer1", "observer2"]):
        events += meta(pid, f"rank {pid} ({name})", pid)
        events.append(phase(pid, "init_rpc", 0, 200_000))
        if pid == kill_rank:
            events.append(phase(pid, "entry", 200_000, 600_000))
            events += rpc(pid, f"{pid}-0", "rpc_sync -> agent: report", 300_000, 310_000)
            events.append(
                instant(
                    pid,
                    "fault",
                    f"fault kill:{name}@observer.step#3 (hit 3)",
                    800_000,
                    fault="kill",
                    point="observer.step",
                    hit=3,
                )
            )
            events.append(
                instant(
                    pid,
                    "death",
                    f"end: rank {pid} ({name}): killed by SIGKILL as the fault plan asked",
                    800_000,
                )
            )
        else:
            events.append(phase(pid, "entry", 200_000, 1_000_000))
            events.append(phase(pid, "shutdown", 1_200_000, 100_000))
            events += rpc(pid, f"{pid}-0", "rpc_sync -> observer1: select_action", 250_000, 400_000)
    return document(
        events, seed=1234, world_size=3, faults="kill:observer2@observer.step#3", ok=True
    )


# -- reading the picture ------------------------------------------------------------------------


def parse(text):
    root = ET.fromstring(text)
    assert root.tag == f"{SVG}svg"
    assert root.get("viewBox") == f"0 0 {root.get('width')} {root.get('height')}"
    return root


def rows(root):
    return [g for g in root.iter(f"{SVG}g") if g.get("class") == "row"]


def of_class(element, tag, cls):
    """Elements whose class list starts with ``cls`` ("rpc" finds "rpc failed" too)."""
    return [
        el for el in element.iter(f"{SVG}{tag}") if (el.get("class") or "").split()[:1] == [cls]
    ]


def markers(element, kind, prefix="marker "):
    return [g for g in element.iter(f"{SVG}g") if g.get("class") == f"{prefix}{kind}"]


def row_labels(row):
    return [t for g in markers(row, "row-label", prefix="") for t in g.iter(f"{SVG}text")]


def title_of(element):
    return element.find(f"{SVG}title").text


def texts(element, cls=None):
    return [t for t in element.iter(f"{SVG}text") if cls is None or t.get("class") == cls]


def notes(root):
    return [
        t.text
        for g in root.iter(f"{SVG}g")
        if g.get("class") == "notes"
        for t in g.iter(f"{SVG}text")
    ]


def assert_inside(root):
    width, height = float(root.get("width")), float(root.get("height"))
    for el in root.iter():
        tag = el.tag.removeprefix(SVG)
        coords = []
        if tag in ("rect", "text") and el.get("x") is not None:
            coords = [(float(el.get("x")), float(el.get("y")))]
            if tag == "rect":
                coords.append(
                    (coords[0][0] + float(el.get("width")), coords[0][1] + float(el.get("height")))
                )
        elif tag == "line":
            coords = [
                (float(el.get("x1")), float(el.get("y1"))),
                (float(el.get("x2")), float(el.get("y2"))),
            ]
        elif tag == "circle":
            coords = [(float(el.get("cx")), float(el.get("cy")))]
        for x, y in coords:
            assert math.isfinite(x) and math.isfinite(y), (tag, x, y)
            assert 0 <= x <= width and 0 <= y <= height, (tag, x, y, width, height)


# -- tests --------------------------------------------------------------------------------------


def test_one_labelled_row_per_rank_in_sort_order():
    # Listed out of order, with sort indexes that disagree with the pids.
    events = meta(7, "rank 2 (c)", 2) + meta(3, "rank 0 (a)", 0) + [phase(5, "entry", 0, 10)]
    events += meta(5, "rank 1 (b)", 1) + [
        {"ph": "M", "name": "thread_name", "pid": 3, "tid": 0, "args": {"name": "main"}}
    ]
    root = parse(render_timeline(document(events)))
    found = rows(root)
    assert [g.get("data-label") for g in found] == ["rank 0 (a)", "rank 1 (b)", "rank 2 (c)"]
    assert [g.get("data-pid") for g in found] == ["3", "5", "7"]
    for row in found:
        (label,) = row_labels(row)
        assert (
            label.text == row.get("data-label") == title_of(markers(row, "row-label", prefix="")[0])
        )
    # Rows go down the page in that order.
    ys = [float(row_labels(g)[0].get("y")) for g in found]
    assert ys == sorted(ys) and len(set(ys)) == 3
    # A rank with no events is still a row, with nothing in it.
    assert not of_class(found[0], "rect", "phase") and len(of_class(found[1], "rect", "phase")) == 1


def test_rows_without_metadata_are_named_by_pid_and_sorted_after_indexed_ones():
    events = [phase(2, "entry", 0, 5), phase(1, "entry", 0, 5), phase("x", "entry", 0, 5)] + meta(
        9, "first", 0
    )
    root = parse(render_timeline(document(events)))
    assert [g.get("data-label") for g in rows(root)] == ["first", "pid 1", "pid 2", "pid x"]


def test_phases_are_bars_in_time_order_inside_the_plot():
    root = parse(render_timeline(world()))
    for row in rows(root):
        bars = of_class(row, "rect", "phase")
        names = [b.get("data-name") for b in bars]
        assert names[:2] == ["init_rpc", "entry"]
        xs = [float(b.get("x")) for b in bars]
        ends = [x + float(b.get("width")) for x, b in zip(xs, bars, strict=True)]
        assert xs == sorted(xs) and len(set(xs)) == len(xs)
        assert all(LEFT <= x and end <= RIGHT + 1e-6 for x, end in zip(xs, ends, strict=True))
        # Consecutive phases touch: init_rpc ends where entry starts.
        assert abs(ends[0] - xs[1]) < 0.02
        # Distinct colours per phase, and the name is written inside a bar that is wide enough.
        assert len({b.get("fill") for b in bars}) == len(bars)
        assert "entry" in [t.text for t in texts(row)]
        for bar, name in zip(bars, names, strict=True):
            assert title_of(bar).startswith(f"{row.get('data-label')}: {name} from ")
    assert_inside(root)


def test_title_line_says_seed_faults_and_outcome():
    root = parse(render_timeline(world(), title="rl-w3"))
    assert root.find(f"{SVG}title").text.startswith("rl-w3 -- seed 1234")
    (heading,) = [t for t in texts(root) if t.get("class") == "title"]
    assert heading.text == "rl-w3"
    (sub,) = [t for t in texts(root) if t.get("class") == "subtitle"]
    line = "".join(sub.itertext())
    assert (
        "seed 1234" in line
        and "faults: kill:observer2@observer.step#3" in line
        and line.endswith("ok")
    )
    failed = world()
    failed["otherData"].update(ok=False, faults="")
    (sub,) = [t for t in texts(parse(render_timeline(failed))) if t.get("class") == "subtitle"]
    assert "faults: none" in "".join(sub.itertext()) and sub.find(f"{SVG}tspan").text == "FAILED"


def test_faults_and_deaths_are_marked_labelled_and_titled():
    doc = world()
    doc["traceEvents"].append(
        instant(
            0, "fault", "fault delay:agent@agent.step=0.2s (hit 1)", 500_000, fault="delay", hit=1
        )
    )
    root = parse(render_timeline(doc))
    by_label = {g.get("data-label"): g for g in rows(root)}
    faults = [e for e in doc["traceEvents"] if e.get("cat") == "fault"]
    drawn = [m for g in rows(root) for m in markers(g, "fault")]
    assert len(drawn) == len(faults) == 2
    for event in faults:
        row = by_label[f"rank {event['pid']} ({['agent', 'observer1', 'observer2'][event['pid']]})"]
        (marker,) = markers(row, "fault")
        assert event["name"] in title_of(marker) and '"hit": ' in title_of(marker)
        assert [t.text for t in texts(row) if t.get("class") == "label fault"] == [event["name"]]

    dead = by_label["rank 2 (observer2)"]
    (death,) = markers(dead, "death")
    assert "killed by SIGKILL" in title_of(death)
    cross = death.find(f"{SVG}path").get("d")
    assert cross.count("M") == 2 and cross.count("L") == 2
    (label,) = [t.text for t in texts(dead) if t.get("class") == "label death"]
    assert label == "end: killed by SIGKILL as the fault plan asked"  # the row says which rank
    assert not markers(by_label["rank 1 (observer1)"], "death")
    # The death sits at the end of the rank's last phase.
    entry = of_class(dead, "rect", "phase")[-1]
    x = float(death.find(f"{SVG}line").get("x1"))
    assert abs(x - (float(entry.get("x")) + float(entry.get("width")))) < 0.02


def test_other_markers_fuzz_user_error_and_ignored_kinds():
    events = meta(0, "rank 0 (w0)", 0) + [
        phase(0, "entry", 0, 1000),
        instant(0, "fuzz", "fuzz w.step +1.0ms", 100, point="w.step"),
        instant(0, "failpoint", "failpoint w.step (hit 1)", 150, point="w.step", hit=1),
        instant(0, "user", "episode", 200, n=1),
        instant(0, "error", "raised ValueError('x')", 900),
        instant(0, "mystery", "not drawn", 300),
        {
            "ph": "C",
            "cat": "progress",
            "name": "progress",
            "pid": 0,
            "ts": 400,
            "args": {"done": 1, "total": 2},
        },
        {"ph": "s", "name": "flow", "pid": 0, "ts": 1, "id": 1},
        {"ph": "X", "cat": "other", "name": "not a phase", "pid": 0, "ts": 1, "dur": 5},
    ]
    root = parse(render_timeline(document(events)))
    (row,) = rows(root)
    assert [title_of(m).split(" at ")[0] for m in markers(row, "fuzz")] == [
        "rank 0 (w0): fuzz w.step +1.0ms"
    ]
    assert len(markers(row, "user")) == 1 and len(markers(row, "error")) == 1
    assert [title_of(m).split(" at ")[0] for m in markers(row, "failpoint")] == [
        "rank 0 (w0): failpoint w.step (hit 1)"
    ]
    assert [t.text for t in texts(row) if t.get("class") == "label error"] == [
        "raised ValueError('x')"
    ]
    assert "not drawn" not in render_timeline(document(events))
    assert [b.get("data-name") for b in of_class(row, "rect", "phase")] == ["entry"]


def test_rpcs_are_drawn_under_their_rank_and_overlaps_stacked():
    events = meta(0, "rank 0 (a)", 0) + [phase(0, "entry", 0, 10_000)]
    for k in range(6):  # six RPCs all in flight at once
        events += rpc(0, k, f"rpc_async -> b: f{k}", 1000 + k, 5000 + k)
    events += rpc(0, 99, "rpc_sync -> b: later", 8000, 9000)
    root = parse(render_timeline(document(events)))
    (row,) = rows(root)
    spans = of_class(row, "rect", "rpc")
    assert len(spans) == 7
    bar = of_class(row, "rect", "phase")[0]
    ys = [float(s.get("y")) for s in spans]
    assert len(set(ys)) == 3 and min(ys) > float(bar.get("y"))  # three sub-lanes under the bar
    assert all("took 4.000 ms" in title_of(s) for s in spans[:6])
    later = spans[-1]
    assert "rpc_sync -> b: later" in title_of(later) and ys[-1] == min(ys)  # a free lane again
    assert float(later.get("x")) > float(spans[0].get("x")) + 100


def test_failed_rpcs_and_reused_ids():
    events = meta(0, "rank 0 (a)", 0) + rpc(0, 1, "rpc_sync -> b: ok", 0, 10)
    events += rpc(0, 1, "rpc_sync -> b: again", 20, 30)  # the same id, later
    events += rpc(0, 2, "rpc_sync -> b: bad", 40)
    events.append(
        {"ph": "e", "cat": "rpc", "pid": 0, "id": 2, "ts": 50, "args": {"error": "RuntimeError: x"}}
    )
    (row,) = rows(parse(render_timeline(document(events))))
    spans = of_class(row, "rect", "rpc")
    assert [s.get("class") for s in spans] == ["rpc", "rpc", "rpc failed"]
    assert "took 10.0 µs" in title_of(spans[1])
    assert "failed: RuntimeError: x" in title_of(spans[2])
    assert len({s.get("fill") for s in spans}) == 2


def test_an_rpc_without_its_end_runs_to_the_ranks_last_event():
    doc = world()
    # One "b" whose rank died before its "e", one "e" with no "b".
    doc["traceEvents"] += rpc(2, "2-1", "rpc_sync -> agent: never", 700_000)
    doc["traceEvents"].append({"ph": "e", "cat": "rpc", "pid": 2, "id": "unknown", "ts": 5})
    root = parse(render_timeline(doc))
    row = next(g for g in rows(root) if g.get("data-pid") == "2")
    (open_span,) = [r for r in row.iter(f"{SVG}rect") if r.get("class") == "rpc unanswered"]
    assert "never answered" in title_of(open_span)
    (death,) = markers(row, "death")
    end = float(open_span.get("x")) + float(open_span.get("width"))
    assert abs(end - float(death.find(f"{SVG}line").get("x1"))) < 0.02
    assert any("rank 2 (observer2): 1 RPC never answered" in n for n in notes(root))
    assert len(of_class(row, "rect", "rpc")) == 2


def test_rpcs_past_the_cap_are_sampled_and_the_footnote_says_so():
    events = meta(0, "rank 0 (busy)", 0) + meta(1, "rank 1 (calm)", 1)
    for k in range(MAX_RPCS + 500):
        events += rpc(0, k, "rpc_sync -> calm: ping", k * 10, k * 10 + 5)
    events += rpc(1, 0, "rpc_sync -> busy: ping", 0, 100)
    root = parse(render_timeline(document(events)))
    busy, calm = rows(root)
    assert len(of_class(busy, "rect", "rpc")) == MAX_RPCS
    assert len(of_class(calm, "rect", "rpc")) == 1
    assert notes(root) == [
        f"rank 0 (busy): drew {MAX_RPCS} of {MAX_RPCS + 500} RPCs, sampled evenly in time order"
    ]
    # Sampled over the whole run, not just its start.
    xs = [float(r.get("x")) for r in of_class(busy, "rect", "rpc")]
    assert max(xs) > RIGHT - 20


def test_huge_numbers_of_instants_are_capped_and_counted():
    events = meta(0, "rank 0 (w)", 0) + [
        instant(0, "fuzz", f"fuzz p +{k}ms", k) for k in range(MAX_MARKERS * 3)
    ]
    events += [instant(0, "fault", f"fault delay:w@p=1s (hit {k})", 1000 + k) for k in range(40)]
    root = parse(render_timeline(document(events)))
    (row,) = rows(root)
    assert len(markers(row, "fuzz")) == MAX_MARKERS
    # Every fault keeps its marker and its title; labels that would overlap are left out.
    faults = markers(row, "fault")
    assert len(faults) == 40 and all(
        title_of(m).startswith("rank 0 (w): fault delay") for m in faults
    )
    labels = [t for t in texts(row) if t.get("class") == "label fault"]
    assert 1 <= len(labels) < 40 and len({t.get("y") for t in labels}) == 2
    assert any(f"drew {MAX_MARKERS} of {MAX_MARKERS * 3} fuzz markers" in n for n in notes(root))
    assert any(
        n.startswith(f"{40 - len(labels)} fault/death/error labels left out") for n in notes(root)
    )


def test_labels_do_not_overlap_on_a_line():
    events = meta(0, "w", 0) + [
        instant(0, "fault", f"fault number {k}", k * 37_000) for k in range(12)
    ]
    root = parse(render_timeline(document(events)))
    (row,) = rows(root)
    labels = [t for t in texts(row) if t.get("class") == "label fault"]
    assert len(labels) >= 6
    for y in {t.get("y") for t in labels}:
        spans = []
        for t in labels:
            if t.get("y") == y:
                x, width = float(t.get("x")), 5.6 * len(t.text)  # as the module reckons
                spans.append((x, x + width) if t.get("text-anchor") == "start" else (x - width, x))
        spans.sort()
        assert all(a_end <= b for (_, a_end), (b, _) in zip(spans, spans[1:], strict=False))


def test_hostile_names_are_escaped():
    hostile = "a<b>&\"c' ]]> \x00\x1b\ud800 ünï 😀"
    events = (
        meta(0, hostile, 0)
        + [
            phase(0, hostile, 0, 100_000),
            instant(0, "fault", hostile, 50, **{hostile: hostile}),
            instant(0, "death", hostile, 100_000),
        ]
        + rpc(0, hostile, hostile, 10, 20)
    )
    text = render_timeline(
        document(events, seed=hostile, faults=hostile, ok=hostile), title=hostile
    )
    text.encode("utf-8")  # no lone surrogates left
    root = parse(text)
    clean = "a<b>&\"c' ]]> \ufffd\ufffd\ufffd ünï 😀"
    (row,) = rows(root)
    assert row.get("data-label") == clean
    assert clean in title_of(markers(row, "fault")[0])
    assert of_class(row, "rect", "phase")[0].get("data-name") == clean
    assert root.find(f"{SVG}title").text.startswith(clean)
    assert_inside(root)


def test_same_document_same_bytes(tmp_path):
    doc = world()
    first = render_timeline(doc, "t")
    assert render_timeline(json.loads(json.dumps(doc)), "t") == first
    path = write_timeline(doc, str(tmp_path / "a" / "b" / "w.svg"), "t")
    assert path == str(tmp_path / "a" / "b" / "w.svg")
    assert open(path, encoding="utf-8").read() == first
    # A .trace.json path works as well as the dict.
    trace = tmp_path / "w.trace.json"
    trace.write_text(json.dumps(doc))
    assert (
        open(write_timeline(str(trace), tmp_path / "c.svg", "t"), encoding="utf-8").read() == first
    )


def test_empty_and_broken_documents_render():
    for doc in (
        {},
        {"traceEvents": []},
        [],
        {"traceEvents": "junk", "otherData": 3},
        {"traceEvents": None},
    ):
        root = parse(render_timeline(doc))
        assert not rows(root)
        assert any(t.text == "no events to draw" for t in texts(root))
        assert_inside(root)
    junk = [
        None,
        3,
        "x",
        {},
        {"ph": "X"},
        {"pid": 0},
        {"ph": "X", "cat": "phase", "pid": 0, "name": "entry"},
        phase(0, "entry", float("nan"), 5),
        phase(0, "entry", "12", 5),
        phase(0, "entry", 1e300, 5),
        phase(0, "entry", 10, -5),
        phase(0, "entry", 20, float("inf")),
        phase(0, "entry", True, 1),
        phase(0, "entry", 10**400, 1),
        {"ph": "b", "cat": "rpc", "pid": 0, "ts": 3},
        {"ph": "e", "cat": "rpc", "pid": 0, "ts": 4},
        {"ph": "i", "cat": "fault", "pid": [1, 2], "ts": 5, "name": None, "args": "not a dict"},
        {"ph": "M", "name": "process_sort_index", "pid": 0, "args": {"sort_index": "high"}},
        {"ph": "M", "name": "process_name", "pid": 0, "args": None},
    ]
    root = parse(render_timeline({"traceEvents": junk}))
    assert [g.get("data-pid") for g in rows(root)] == ["0", "[1, 2]"]
    # No ts, NaN, "12", 1e300, True and 10**400.
    assert "6 events with unusable timestamps left out" in notes(root)
    assert_inside(root)


def test_a_world_of_no_length_still_draws():
    events = meta(0, "rank 0 (a)", 0) + meta(1, "rank 1 (b)", 1)
    events += [
        phase(0, "init_rpc", 0, 0),
        phase(1, "entry", 0, 0),
        instant(1, "death", "end: rank 1 (b): died", 0),
    ]
    root = parse(render_timeline(document(events)))
    bars = [b for g in rows(root) for b in of_class(g, "rect", "phase")]
    assert len(bars) == 2 and all(
        float(b.get("x")) == LEFT and float(b.get("width")) >= 1 for b in bars
    )
    ticks = [
        t.text
        for g in root.iter(f"{SVG}g")
        if g.get("class") == "x-axis"
        for t in g.iter(f"{SVG}text")
    ]
    assert ticks[0] == "0.0" and "(ms)" in ticks[-1]
    assert_inside(root)
    # All at one later time: the axis still starts at the world's start.
    later = [dict(e, ts=5_000_000) if "ts" in e else e for e in events]
    ticks = [
        t.text
        for g in parse(render_timeline(document(later))).iter(f"{SVG}g")
        if g.get("class") == "x-axis"
        for t in g.iter(f"{SVG}text")
    ]
    assert ticks[0] in ("0", "0.0") and "(s)" in ticks[-1] and float(ticks[-2]) >= 5


def test_height_grows_with_the_ranks():
    heights = []
    for n in (1, 4, 16):
        events = [
            e
            for pid in range(n)
            for e in meta(pid, f"rank {pid}", pid) + [phase(pid, "entry", 0, 10)]
        ]
        heights.append(float(parse(render_timeline(document(events))).get("height")))
    assert heights[0] < heights[1] < heights[2]
    assert 30 <= (heights[2] - heights[1]) / 12 <= 60


def test_a_trace_written_by_harness_trace():
    def ev(t, kind, **data):
        return {"t": 1000.0 + t, "rank": 0, "kind": kind, "tid": 1, **data}

    ok = RankOutcome(
        0,
        "ps",
        status="ok",
        events=[
            ev(0.0, "start"),
            ev(0.2, "entry_start"),
            ev(0.3, "event", name="epoch 1", loss=0.5),
            ev(0.35, "fuzz", point="ps.step", seconds=0.002),
            ev(0.9, "entry_done"),
            ev(0.9, "shutdown_start"),
            ev(1.0, "shutdown_done"),
        ],
    )
    killed = RankOutcome(
        1,
        "trainer1",
        status="killed",
        signal="SIGKILL",
        events=[
            ev(0.01, "start"),
            ev(0.21, "entry_start"),
            ev(
                0.5,
                "fault",
                fault="kill:trainer1@trainer.step#2",
                fault_kind="kill",
                point="trainer.step",
                hit=2,
            ),
        ],
    )
    raised = RankOutcome(
        2,
        "trainer2",
        status="raised",
        error="RuntimeError: boom",
        events=[
            ev(0.02, "start"),
            ev(0.22, "entry_start"),
            ev(0.6, "raised", error="RuntimeError: boom"),
        ],
    )
    result = WorldResult(
        ("ps", "trainer1", "trainer2"),
        7,
        FaultPlan.parse("kill:trainer1@trainer.step#2"),
        30.0,
        [ok, killed, raised],
    )
    doc = {
        "traceEvents": trace_events(result),
        "otherData": {"seed": 7, "world_size": 3, "faults": str(result.faults), "ok": result.ok},
    }
    root = parse(render_timeline(doc, "ps-w3"))
    found = rows(root)
    assert [g.get("data-label") for g in found] == [
        "rank 0 (ps)",
        "rank 1 (trainer1)",
        "rank 2 (trainer2)",
    ]
    assert [b.get("data-name") for b in of_class(found[0], "rect", "phase")] == [
        "init_rpc",
        "entry",
        "shutdown",
    ]
    (fault,) = markers(found[1], "fault")
    assert "fault kill:trainer1@trainer.step#2 (hit 2)" in title_of(fault)
    (death,) = markers(found[1], "death")
    assert "killed by SIGKILL" in title_of(death)
    assert len(markers(found[0], "user")) == 1 and len(markers(found[0], "fuzz")) == 1
    assert len(markers(found[2], "error")) == 1 and not markers(found[2], "death")
    assert_inside(root)


event_strategy = st.fixed_dictionaries(
    {
        "ph": st.sampled_from(["X", "b", "e", "i", "I", "M", "C", "?"]),
        "pid": st.one_of(st.integers(-2, 4), st.sampled_from(["a", None])),
        "ts": st.one_of(
            st.floats(allow_nan=True, allow_infinity=True),
            st.integers(0, 10**7),
            st.sampled_from([10**400, -1, 0]),
        ),
        "name": st.one_of(
            st.text(max_size=20), st.sampled_from(["process_name", "process_sort_index", "entry"])
        ),
    },
    optional={
        "cat": st.sampled_from(
            ["phase", "rpc", "fault", "fuzz", "user", "error", "death", "other"]
        ),
        "dur": st.floats(allow_nan=True, allow_infinity=True),
        "id": st.integers(0, 3),
        "args": st.one_of(
            st.none(),
            st.dictionaries(
                st.sampled_from(["name", "sort_index", "x"]),
                st.one_of(st.integers(), st.text(max_size=5)),
            ),
        ),
    },
)


@pytest.mark.parametrize("ts", [5e-324, 1e-9, 0.5])
def test_a_trace_shorter_than_a_microsecond_gets_the_axis_of_a_world_of_no_length(ts):
    svg = render_timeline({"traceEvents": [{"ph": "X", "pid": 0, "ts": ts, "name": "x"}]})
    labels = [t.text for t in ET.fromstring(svg).iter() if t.tag.endswith("text")]
    assert ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0", "time since the world started (ms)"] == labels[2:9]


@settings(max_examples=40, deadline=None)
@given(st.lists(event_strategy, max_size=30))
def test_any_events_give_valid_deterministic_svg(events):
    text = render_timeline({"traceEvents": events})
    root = parse(text)
    assert text == render_timeline({"traceEvents": events})
    assert len(rows(root)) == len({e["pid"] for e in events if e["pid"] is not None})
    assert_inside(root)


def test_a_controlled_schedules_steps_are_drawn_on_their_ranks_with_preemptions_ticked():
    from rpc_harness.schedule import Step

    def ev(rank, t, kind):
        return {"t": 1000.0 + t, "rank": rank, "kind": kind, "tid": 1}

    ranks = [RankOutcome(r, f"w{r}", status="ok", events=[ev(r, 0.0, "start"), ev(r, 0.1, "entry_start"),
                                                         ev(r, 0.9, "entry_done")]) for r in (0, 1)]
    steps = [Step(0, 0, "w0", "w0", "main", "rpc.call:f", False, 1000.2, 1000.3),
             Step(1, 1, "w1", "w0/1", "serving f for w0", "end", True, 1000.3, 1000.5, clock=20.0)]
    world = WorldResult(names=("w0", "w1"), seed=1, faults=FaultPlan(), deadline=5.0, ranks=ranks, schedule=steps,
                        schedule_note="controlled (controlled), 2 steps")
    events = [e for e in trace_events(world) if e.get("cat") == "step"]
    assert [(e["pid"], e["name"], e["args"]["preempted"]) for e in events] == [
        (0, "step 0: main -> rpc.call:f", False), (1, "step 1: serving f for w0 -> end", True)]
    root = ET.fromstring(render_timeline(document(trace_events(world))))
    bands = [g for g in root.iter(f"{SVG}g") if g.get("class") == "steps"]
    assert len(bands) == 2, "one band per rank that ran steps"
    titles = [t.text for g in bands for t in g.iter(f"{SVG}title")]
    assert titles == ["step 0: main -> rpc.call:f (at 0 s on the schedule's clock)",
                      "step 1: serving f for w0 -> end (at 20 s on the schedule's clock)"], "and the schedule's time"
    ticks = [line for line in bands[1].iter(f"{SVG}line")]
    assert len(ticks) == 1 and not list(bands[0].iter(f"{SVG}line")), "the preempting step is ticked, only it"
