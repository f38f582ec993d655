"""The trace of a real world: RPC spans, progress counters, failpoint hits."""

from __future__ import annotations

import json

import worlds

import rpc_harness
from rpc_harness.trace import trace_events, write_trace


def test_every_rpc_api_call_is_a_span_on_the_callers_track_with_failures_marked(tmp_path):
    result = rpc_harness.run_world(worlds.issue_rpcs, 2, seed=1, deadline=60)
    events = trace_events(result)
    begins = [e for e in events if e["ph"] == "b" and e["cat"] == "rpc"]
    ends = {e["id"]: e for e in events if e["ph"] == "e" and e["cat"] == "rpc"}
    assert [(e["pid"], e["name"]) for e in begins] == [
        (0, "rpc_sync -> worker1: add"),
        (0, "rpc_async -> worker1: add"),
        (0, "remote -> worker1: add"),
        (0, "rpc_sync -> worker1: boom"),
    ]
    assert len({e["id"] for e in begins}) == 4 and set(ends) == {e["id"] for e in begins}
    for begin in begins:
        end = ends[begin["id"]]
        assert end["name"] == begin["name"] and end["cat"] == begin["cat"] == "rpc"
        assert end["ts"] >= begin["ts"]
    failed = [ends[b["id"]] for b in begins if "boom" in b["name"]]
    assert "KeyError" in failed[0]["args"]["error"]
    assert all("args" not in ends[b["id"]] for b in begins if "boom" not in b["name"])
    # The peer served them: the same four, as spans on its own track.
    served = [e for e in events if e["ph"] == "b" and e["cat"] == "serve"]
    assert [(e["pid"], e["name"]) for e in served] == [(1, "serve add")] * 3 + [(1, "serve boom")]
    served_ends = {e["id"]: e for e in events if e["ph"] == "e" and e["cat"] == "serve"}
    assert "KeyError" in served_ends[served[-1]["id"]]["args"]["error"]
    # The document on disk is plain JSON a trace viewer opens.
    document = json.loads(open(write_trace(result, str(tmp_path / "w.trace.json"))).read())
    assert len([e for e in document["traceEvents"] if e["ph"] == "b"]) == 8


def test_progress_reports_become_counters_on_the_reporting_ranks_track():
    result = rpc_harness.run_world(worlds.progress_main_and_handler, 2, seed=1, deadline=60)
    counters = [e for e in trace_events(result) if e["ph"] == "C"]
    done = [(e["pid"], e["args"]["done"]) for e in counters if e["name"] == "progress (items)"]
    assert done[-1] == (0, 5) and {pid for pid, _ in done} == {0}
    losses = [e["args"]["loss"] for e in counters if e["name"] == "loss"]
    assert losses[-1] == 0.2
    handler = [e for e in counters if e["name"] == "progress (calls)"]
    assert [(e["pid"], e["args"]) for e in handler] == [(1, {"done": 1, "total": 1})]


def test_an_armed_failpoint_shows_the_hits_before_its_fault_fires():
    result = rpc_harness.run_world(worlds.step_three_times, 2, seed=1, deadline=60,
                               faults="delay:worker1@test.step#3=0s")
    track = [(e["cat"], e["name"]) for e in trace_events(result)
             if e["ph"] == "i" and e["pid"] == 1 and e["cat"] in ("failpoint", "fault")]
    assert track == [
        ("failpoint", "failpoint test.step (hit 1)"),
        ("failpoint", "failpoint test.step (hit 2)"),
        ("fault", "fault delay:worker1@test.step#3=0s (hit 3)"),
    ]
    # Unarmed, rank 0's failpoints leave nothing: they cost a dict lookup.
    assert not [e for e in trace_events(result) if e["pid"] == 0 and e.get("cat") == "failpoint"]
