"""The event log and the RPC recorder, in process."""

from __future__ import annotations

import json


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
    from rpc_harness.rpc.hooks import _Spans

    log = _Log()
    spans = _Spans(log, 0, "rpc", cap=2)
    ids = [spans.begin("len", api="rpc_sync", to="b") for _ in range(4)]
    assert ids == [1, 2, None, None], "past the cap, calls are not recorded"
    spans.end(1, None)
    spans.end(2, TimeoutError("peer gone"))
    kinds = [kind for kind, _ in log.records]
    assert kinds == ["rpc_begin", "rpc_begin", "event", "rpc_end", "rpc_end"]
    assert log.records[0][1] == {"id": 1, "api": "rpc_sync", "to": "b", "func": "len"}
    assert log.records[2][1] == {"name": "rpc recording stopped after 2 spans"}
    assert log.records[-1][1] == {"id": 2, "error": "TimeoutError: peer gone"}


def test_the_event_log_grows_past_its_first_mapping_and_reads_back_in_order(tmp_path):
    from rpc_harness.context import EventLog, read_event_lines

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
    from rpc_harness.context import read_event_lines

    path = tmp_path / "rank0.events"
    path.write_bytes(b'{"kind": "start", "t": 1}\n{"kind": "fau' + b"\x00" * 64)
    assert read_event_lines(str(path)) == [{"kind": "start", "t": 1}]
    assert read_event_lines(str(tmp_path / "missing")) == []


def _strict(text):
    """JSON as strict parsers (jq, JSON.parse, Go) read it: no NaN, no Infinity."""
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_a_trace_with_a_nan_metric_is_json_every_parser_reads(tmp_path):
    # A diverging run reports a NaN loss; Python's json wrote it as NaN,
    # which jq, JSON.parse and trace viewers refuse (issue 38).
    from rpc_harness.faults import FaultPlan
    from rpc_harness.result import RankOutcome, WorldResult
    from rpc_harness.trace import write_trace

    nan, inf = float("nan"), float("inf")
    events = [{"t": 1000.0, "rank": 0, "kind": "start", "tid": 1},
              {"t": 1000.1, "rank": 0, "kind": "event", "tid": 1, "name": "epoch 1", "loss": nan},
              {"t": 1000.2, "rank": 0, "kind": "progress", "tid": 1, "done": 1, "total": 2, "unit": "batches",
               "metrics": {"loss": nan, "grad": inf}},
              {"t": 1000.3, "rank": 0, "kind": "entry_done", "tid": 1}]
    result = WorldResult(("w0",), 7, FaultPlan(), 30.0, [RankOutcome(0, "w0", status="ok", events=events)])
    document = _strict(open(write_trace(result, str(tmp_path / "w.trace.json"))).read())
    written = json.dumps(document)
    assert "null" in written and "loss" in written, written


def test_bench_figures_with_no_measurement_are_json_every_parser_reads(tmp_path, capsys, monkeypatch):
    from rpc_harness.apps import bench

    monkeypatch.setattr(bench, "table", lambda figures: "")  # the table's shape is not this test's
    path = tmp_path / "bench.json"
    bench._finish({"bring_up": {"median": float("nan"), "rows": [{"seconds": float("inf")}]}}, str(path))
    assert _strict(path.read_text()) == {"bring_up": {"median": None, "rows": [{"seconds": None}]}}
