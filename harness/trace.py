"""A world's timeline as Chrome trace-event JSON (Perfetto, chrome://tracing).

One track per rank: its phases (init_rpc, entry, shutdown) as spans, faults
fired, failpoint fuzz delays, user events and its death as instants.
"""

from __future__ import annotations

import json
import os
from typing import Any

from .result import WorldResult

_SPANS = (("start", "init_rpc", "init_rpc"), ("entry_start", "entry_done", "entry"),
          ("shutdown_start", "shutdown_done", "shutdown"))


def trace_events(result: WorldResult) -> list[dict[str, Any]]:
    """The trace events of a world, timestamps in microseconds from its start."""
    times = [e["t"] for r in result.ranks for e in r.events if "t" in e]
    origin = min(times) if times else 0.0
    out: list[dict[str, Any]] = []

    def us(t: float) -> float:
        return round((t - origin) * 1e6, 1)

    for rank in result.ranks:
        pid = rank.rank
        out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                    "args": {"name": f"rank {rank.rank} ({rank.name})"}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                    "args": {"sort_index": rank.rank}})
        first = {}
        for event in rank.events:
            first.setdefault(event["kind"], event)
        last_t = max((e["t"] for e in rank.events), default=origin)
        for begin, end, name in _SPANS:
            if begin in first:
                stop = first[end]["t"] if end in first else last_t
                out.append({"ph": "X", "name": name, "cat": "phase", "pid": pid, "tid": 0,
                            "ts": us(first[begin]["t"]), "dur": max(us(stop) - us(first[begin]["t"]), 1.0)})
        for event in rank.events:
            kind = event["kind"]
            if kind == "fault":
                name, cat = f"fault {event['fault']} (hit {event['hit']})", "fault"
            elif kind == "fuzz":
                name, cat = f"fuzz {event['point']} +{event['seconds'] * 1000:.1f}ms", "fuzz"
            elif kind == "event":
                name, cat = event["name"], "user"
            elif kind == "raised":
                name, cat = f"raised {event['error']}", "error"
            else:
                continue
            args = {k: v for k, v in event.items() if k not in ("t", "rank", "kind", "tid")}
            out.append({"ph": "i", "s": "p", "name": name, "cat": cat, "pid": pid, "tid": 0,
                        "ts": us(event["t"]), "args": args})
        if rank.status in ("killed", "died", "hung", "stopped"):
            out.append({"ph": "i", "s": "p", "name": f"end: {rank.describe()}", "cat": "death",
                        "pid": pid, "tid": 0, "ts": us(last_t)})
    return out


def write_trace(result: WorldResult, path: str) -> str:
    """Write ``result``'s trace to ``path`` (folders created); return the path."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    document = {
        "traceEvents": trace_events(result),
        "displayTimeUnit": "ms",
        "otherData": {"seed": result.seed, "world_size": result.world_size,
                      "faults": str(result.faults), "ok": result.ok},
    }
    with open(path, "w") as file:
        json.dump(document, file, default=repr)
    return path
