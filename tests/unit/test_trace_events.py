"""A world's Chrome trace (rpc_harness.trace) from hand-made event logs:
every event a rank can log, each turned into its trace event, compared whole
(tests/world/test_trace.py writes the trace of real worlds)."""

from __future__ import annotations

import json

import pytest

from rpc_harness.faults import FaultPlan
from rpc_harness.result import RankOutcome, WorldResult
from rpc_harness.schedule import Step
from rpc_harness.trace import trace_events, write_trace

T0 = 100.0  # the world's first event; every other is T0 plus a binary fraction, exact in microseconds


def log(offset: float, kind: str, rank: int = 0, **fields) -> dict:
    return {"t": T0 + offset, "rank": rank, "kind": kind, "tid": 77, **fields}


def a_world() -> WorldResult:
    w0 = RankOutcome(
        0,
        "w0",
        status="ok",
        events=[
            log(0.0, "start"),
            log(0.4375, "init_rpc"),
            log(0.5, "entry_start"),
            # 2**-22 s past .5625: a quarter of a microsecond, kept to a tenth.
            log(
                0.5625 + 2**-22,
                "fault",
                fault="raise:w1@a.b#1=x",
                fault_kind="raise",
                point="a.b",
                hit=1,
            ),
            log(0.625, "failpoint", point="a.b", hit=2),
            log(0.6875, "fuzz", point="send", seconds=0.25),
            log(0.75, "event", name="epoch 1", loss=0.5),
            log(0.8125, "raised", error="ValueError: x"),
            log(
                0.875,
                "progress",
                done=1,
                total=4,
                unit="batches",
                metrics={"loss": 0.25, "acc": 0.5},
            ),
            log(0.9375, "rpc_begin", id=1, api="rpc_sync", to="w1", func="f"),
            log(1.0, "rpc_end", id=1, error="boom"),
            log(1.0, "rpc_end", id=9),  # begun before recording started: no span
            log(1.0625, "serve_begin", id=1, func="g"),
            log(1.125, "serve_end", id=1),
            log(1.125, "serve_end", id=8),
            log(1.1875, "event", name="served"),
            log(1.25, "entry_done"),
            log(1.5, "shutdown_start"),
            log(1.75, "hits", hits={"a.b": 2}),  # not drawn, but the rank's last word
        ],
    )
    w1 = RankOutcome(
        1,
        "w1",
        status="killed",
        signal="SIGKILL",
        events=[
            log(0.125, "start", rank=1),
            log(0.25, "entry_start", rank=1),
            log(0.3125, "progress", rank=1, done=0, total=4, unit="steps"),
            log(0.375, "shutdown_start", rank=1),
            log(0.375, "shutdown_done", rank=1),
        ],
    )
    w2 = RankOutcome(2, "w2")  # stopped before it logged anything
    schedule = [
        Step(
            0, 0, "w0", "w0", "main", "a.b", preempted=True, start=T0 + 0.5, end=T0 + 0.5, clock=0.5
        ),
        Step(1, 1, "w1", "w1/1", "serving f (w0/1)", "end", start=T0 + 0.25, end=T0 + 0.3125),
    ]
    return WorldResult(
        names=("w0", "w1", "w2"),
        seed=7,
        faults=FaultPlan.parse("kill:w1@a.b#2"),
        deadline=30.0,
        ranks=[w0, w1, w2],
        schedule=schedule,
        schedule_label="random(7)",
    )


def meta(pid: int, name: str) -> list[dict]:
    return [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}},
        {
            "ph": "M",
            "name": "process_sort_index",
            "pid": pid,
            "tid": 0,
            "args": {"sort_index": pid},
        },
    ]


def test_every_logged_event_becomes_its_trace_event_on_its_ranks_track():
    rpc = {"cat": "rpc", "id": "0.rpc.1", "name": "rpc_sync -> w1: f", "pid": 0, "tid": 0}
    serve = {"cat": "serve", "id": "0.serve.1", "name": "serve g", "pid": 0, "tid": 0}
    assert trace_events(a_world()) == [
        *meta(0, "rank 0 (w0)"),
        {
            "ph": "X",
            "name": "init_rpc",
            "cat": "phase",
            "pid": 0,
            "tid": 0,
            "ts": 0.0,
            "dur": 437500.0,
        },
        {
            "ph": "X",
            "name": "entry",
            "cat": "phase",
            "pid": 0,
            "tid": 0,
            "ts": 500000.0,
            "dur": 750000.0,
        },
        # No shutdown_done: the span lasts to the rank's last event.
        {
            "ph": "X",
            "name": "shutdown",
            "cat": "phase",
            "pid": 0,
            "tid": 0,
            "ts": 1500000.0,
            "dur": 250000.0,
        },
        {
            "ph": "i",
            "s": "p",
            "name": "fault raise:w1@a.b#1=x (hit 1)",
            "cat": "fault",
            "pid": 0,
            "tid": 0,
            "ts": 562500.2,
            "args": {"fault": "raise:w1@a.b#1=x", "fault_kind": "raise", "point": "a.b", "hit": 1},
        },
        {
            "ph": "i",
            "s": "p",
            "name": "failpoint a.b (hit 2)",
            "cat": "failpoint",
            "pid": 0,
            "tid": 0,
            "ts": 625000.0,
            "args": {"point": "a.b", "hit": 2},
        },
        {
            "ph": "i",
            "s": "p",
            "name": "fuzz send +250.0ms",
            "cat": "fuzz",
            "pid": 0,
            "tid": 0,
            "ts": 687500.0,
            "args": {"point": "send", "seconds": 0.25},
        },
        {
            "ph": "i",
            "s": "p",
            "name": "epoch 1",
            "cat": "user",
            "pid": 0,
            "tid": 0,
            "ts": 750000.0,
            "args": {"name": "epoch 1", "loss": 0.5},
        },
        {
            "ph": "i",
            "s": "p",
            "name": "raised ValueError: x",
            "cat": "error",
            "pid": 0,
            "tid": 0,
            "ts": 812500.0,
            "args": {"error": "ValueError: x"},
        },
        {
            "ph": "C",
            "name": "progress (batches)",
            "cat": "progress",
            "pid": 0,
            "tid": 0,
            "ts": 875000.0,
            "args": {"done": 1, "total": 4},
        },
        {
            "ph": "C",
            "name": "loss",
            "cat": "progress",
            "pid": 0,
            "tid": 0,
            "ts": 875000.0,
            "args": {"loss": 0.25},
        },
        {
            "ph": "C",
            "name": "acc",
            "cat": "progress",
            "pid": 0,
            "tid": 0,
            "ts": 875000.0,
            "args": {"acc": 0.5},
        },
        {"ph": "b", **rpc, "ts": 937500.0},
        {"ph": "e", **rpc, "ts": 1000000.0, "args": {"error": "boom"}},
        {"ph": "b", **serve, "ts": 1062500.0},
        {"ph": "e", **serve, "ts": 1125000.0},
        {
            "ph": "i",
            "s": "p",
            "name": "served",
            "cat": "user",
            "pid": 0,
            "tid": 0,
            "ts": 1187500.0,
            "args": {"name": "served"},
        },
        {
            "ph": "X",
            "name": "step 0: main -> a.b",
            "cat": "step",
            "pid": 0,
            "tid": 0,
            "ts": 500000.0,
            "dur": 1.0,
            "args": {"task": "w0", "point": "a.b", "preempted": True, "clock": 0.5},
        },
        *meta(1, "rank 1 (w1)"),
        # No init_rpc nor entry_done: to the last event; a span of no time is drawn a microsecond long.
        {
            "ph": "X",
            "name": "init_rpc",
            "cat": "phase",
            "pid": 1,
            "tid": 0,
            "ts": 125000.0,
            "dur": 250000.0,
        },
        {
            "ph": "X",
            "name": "entry",
            "cat": "phase",
            "pid": 1,
            "tid": 0,
            "ts": 250000.0,
            "dur": 125000.0,
        },
        {
            "ph": "X",
            "name": "shutdown",
            "cat": "phase",
            "pid": 1,
            "tid": 0,
            "ts": 375000.0,
            "dur": 1.0,
        },
        {
            "ph": "C",
            "name": "progress (steps)",
            "cat": "progress",
            "pid": 1,
            "tid": 0,
            "ts": 312500.0,
            "args": {"done": 0, "total": 4},
        },
        {
            "ph": "X",
            "name": "step 1: serving f (w0/1) -> end",
            "cat": "step",
            "pid": 1,
            "tid": 0,
            "ts": 250000.0,
            "dur": 62500.0,
            "args": {"task": "w1/1", "point": "end", "preempted": False, "clock": 0.0},
        },
        {
            "ph": "i",
            "s": "p",
            "name": "end: rank 1 (w1): killed by SIGKILL as the fault plan asked",
            "cat": "death",
            "pid": 1,
            "tid": 0,
            "ts": 375000.0,
        },
        *meta(2, "rank 2 (w2)"),
        {
            "ph": "i",
            "s": "p",
            "name": "end: rank 2 (w2): stopped by the harness (SIGKILL) after the world failed",
            "cat": "death",
            "pid": 2,
            "tid": 0,
            "ts": 0.0,
        },
    ]


def test_a_world_with_no_events_has_its_ranks_tracks_only():
    result = WorldResult(
        names=("w0",),
        seed=1,
        faults=FaultPlan(),
        deadline=5.0,
        ranks=[RankOutcome(0, "w0", status="ok")],
    )
    assert trace_events(result) == meta(0, "rank 0 (w0)")


def test_the_written_trace_is_the_events_with_the_worlds_figures(tmp_path):
    result = a_world()
    result.ranks[0].events[6]["loss"] = {0.5}  # not JSON: written as its repr
    path = tmp_path / "deep" / "er" / "w.trace.json"
    assert write_trace(result, str(path)) == str(path)
    document = json.loads(path.read_text())
    assert document["displayTimeUnit"] == "ms"
    assert document["otherData"] == {
        "seed": 7,
        "world_size": 3,
        "faults": "kill:w1@a.b#2",
        "ok": True,
    }
    assert document["traceEvents"] == json.loads(json.dumps(trace_events(result), default=repr))
    assert document["traceEvents"][8]["args"] == {"name": "epoch 1", "loss": "{0.5}"}


@pytest.mark.parametrize(
    ("status", "end"),
    [
        ("killed", "killed by SIGTERM as the fault plan asked"),
        ("died", "killed by SIGTERM in its entry; the fault plan did not kill it"),
        ("hung", "hung: still in its entry at the deadline"),
        ("stopped", "stopped by the harness (SIGKILL) after the world failed"),
        ("ok", None),
        ("raised", None),
        ("skipped", None),
    ],
)
def test_a_rank_that_did_not_end_on_its_own_has_its_end_marked(status, end):
    rank = RankOutcome(
        0, "w0", status=status, signal="SIGTERM", phase="entry", events=[log(0.5, "entry_start")]
    )
    result = WorldResult(names=("w0",), seed=1, faults=FaultPlan(), deadline=5.0, ranks=[rank])
    deaths = [event for event in trace_events(result) if event.get("cat") == "death"]
    if end is None:
        assert deaths == []
    else:
        assert deaths == [
            {
                "ph": "i",
                "s": "p",
                "name": f"end: rank 0 (w0): {end}",
                "cat": "death",
                "pid": 0,
                "tid": 0,
                "ts": 0.0,
            }
        ]
