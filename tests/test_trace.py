"""The trace of a world: RPC spans, progress counters, one track per rank."""

from __future__ import annotations

import json

import pytest
import worlds

import harness
from harness.trace import trace_events, write_trace


def test_every_rpc_api_call_is_a_span_on_the_callers_track_with_failures_marked(tmp_path):
    result = harness.run_world(worlds.issue_rpcs, 2, seed=1, deadline=60)
    events = trace_events(result)
    begins = [e for e in events if e["ph"] == "b"]
    ends = {e["id"]: e for e in events if e["ph"] == "e"}
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
    # The document on disk is plain JSON a trace viewer opens.
    document = json.loads(open(write_trace(result, str(tmp_path / "w.trace.json"))).read())
    assert len([e for e in document["traceEvents"] if e["ph"] == "b"]) == 4


def test_progress_reports_become_counters_on_the_reporting_ranks_track():
    result = harness.run_world(worlds.progress_main_and_handler, 2, seed=1, deadline=60)
    counters = [e for e in trace_events(result) if e["ph"] == "C"]
    done = [(e["pid"], e["args"]["done"]) for e in counters if e["name"] == "progress (items)"]
    assert done[-1] == (0, 5) and {pid for pid, _ in done} == {0}
    losses = [e["args"]["loss"] for e in counters if e["name"] == "loss"]
    assert losses[-1] == 0.2
    handler = [e for e in counters if e["name"] == "progress (calls)"]
    assert [(e["pid"], e["args"]) for e in handler] == [(1, {"done": 1, "total": 1})]


class _Log:
    def __init__(self):
        self.records = []

    def write(self, kind, **data):
        self.records.append((kind, data))

    def append(self, line):
        record = json.loads(line)
        assert line.endswith(b"\n") and isinstance(record.pop("t"), float)
        assert record.pop("rank") == 0 and isinstance(record.pop("tid"), int)
        self.records.append((record.pop("kind"), record))


def test_rpc_recording_stops_at_its_cap_and_says_so():
    from harness._rpc_record import _Recorder

    log = _Log()
    calls = []
    sync = _Recorder(log, ("a", "b"), cap=2).wrap("rpc_sync", lambda to, func, args=(): calls.append(to) or 7)
    assert [sync(1, len, args=((),)) for _ in range(4)] == [7, 7, 7, 7]
    assert calls == [1, 1, 1, 1]  # every call still goes through
    kinds = [kind for kind, _ in log.records]
    assert kinds == ["rpc_begin", "rpc_end", "rpc_begin", "rpc_end", "event"]
    assert log.records[0][1] == {"id": 1, "api": "rpc_sync", "to": "b", "func": "len"}
    assert log.records[-1][1] == {"name": "rpc recording stopped after 2 calls"}


def test_a_failing_call_is_recorded_and_raised_unchanged():
    from harness._rpc_record import _Recorder

    log = _Log()

    def fails(to, func, args=()):
        raise TimeoutError("peer gone")

    sync = _Recorder(log, ("a",), cap=10).wrap("rpc_sync", fails)
    with pytest.raises(TimeoutError, match="^peer gone$"):
        sync("a", worlds.add, args=(1, 2))
    assert log.records[-1] == ("rpc_end", {"id": 1, "error": "TimeoutError: peer gone"})


def test_the_event_log_grows_past_its_first_mapping_and_reads_back_in_order(tmp_path):
    from harness.context import EventLog, read_event_lines

    path = str(tmp_path / "rank0.events")
    log = EventLog(path, rank=0)
    count = 3 * EventLog.INITIAL_SIZE // 100  # ~3 MB of ~100-byte lines: two doublings
    for i in range(count):
        log.write("event", name="tick", i=i)
    log.append(b'{"t": 1.0, "rank": 0, "tid": 1, "kind": "rpc_end", "id": 7}\n')
    events = read_event_lines(path)
    assert [e["i"] for e in events[:-1]] == list(range(count))
    assert events[-1]["kind"] == "rpc_end" and events[-1]["id"] == 7


def test_reading_stops_at_the_unwritten_part_and_skips_a_torn_line(tmp_path):
    from harness.context import read_event_lines

    path = tmp_path / "rank0.events"
    path.write_bytes(b'{"kind": "start", "t": 1}\n{"kind": "fau' + b"\x00" * 64)
    assert read_event_lines(str(path)) == [{"kind": "start", "t": 1}]
    assert read_event_lines(str(tmp_path / "missing")) == []


def test_an_armed_failpoint_shows_the_hits_before_its_fault_fires():
    result = harness.run_world(worlds.step_three_times, 2, seed=1, deadline=60,
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
