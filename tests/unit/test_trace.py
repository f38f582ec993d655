"""The event log and the RPC recorder, in process."""

from __future__ import annotations

import json

import pytest
import worlds


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
