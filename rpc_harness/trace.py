"""A world's timeline as Chrome trace-event JSON (Perfetto, chrome://tracing).

One track per rank: its phases (init_rpc, entry, shutdown) as spans; under
a controlled schedule the steps its tasks ran, as spans; the RPCs it issued
and the ones it served as async spans; faults fired (a
message fault's failed or delayed sends among them), hits of armed
failpoints that fired nothing, fuzz delays, user events and its death as
instants; what it reported through ``rpc_harness.progress`` as counters.
"""

from __future__ import annotations

import os
from typing import Any

from . import strict_json
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
        rpc_names: dict[int, str] = {}
        serve_names: dict[int, str] = {}
        for begin, end, name in _SPANS:
            if begin in first:
                stop = first[end]["t"] if end in first else last_t
                out.append({"ph": "X", "name": name, "cat": "phase", "pid": pid, "tid": 0,
                            "ts": us(first[begin]["t"]), "dur": max(us(stop) - us(first[begin]["t"]), 1.0)})
        for event in rank.events:
            kind = event["kind"]
            if kind == "fault":
                name, cat = f"fault {event['fault']} (hit {event['hit']})", "fault"
            elif kind == "failpoint":
                name, cat = f"failpoint {event['point']} (hit {event['hit']})", "failpoint"
            elif kind == "fuzz":
                name, cat = f"fuzz {event['point']} +{event['seconds'] * 1000:.1f}ms", "fuzz"
            elif kind == "event":
                name, cat = event["name"], "user"
            elif kind == "raised":
                name, cat = f"raised {event['error']}", "error"
            elif kind == "progress":
                out += _counters(pid, us(event["t"]), event)
                continue
            elif kind == "rpc_begin":
                rpc_names[event["id"]] = f"{event['api']} -> {event['to']}: {event['func']}"
                out.append(_rpc_edge("b", pid, us(event["t"]), event, rpc_names))
                continue
            elif kind == "rpc_end":
                if event["id"] in rpc_names:
                    out.append(_rpc_edge("e", pid, us(event["t"]), event, rpc_names))
                continue
            elif kind == "serve_begin":
                serve_names[event["id"]] = f"serve {event['func']}"
                out.append(_rpc_edge("b", pid, us(event["t"]), event, serve_names, cat="serve"))
                continue
            elif kind == "serve_end":
                if event["id"] in serve_names:
                    out.append(_rpc_edge("e", pid, us(event["t"]), event, serve_names, cat="serve"))
                continue
            else:
                continue
            args = {k: v for k, v in event.items() if k not in ("t", "rank", "kind", "tid")}
            out.append({"ph": "i", "s": "p", "name": name, "cat": cat, "pid": pid, "tid": 0,
                        "ts": us(event["t"]), "args": args})
        for step in (s for s in result.schedule if s.rank == rank.rank):
            out.append({"ph": "X", "name": f"step {step.index}: {step.label} -> {step.point}", "cat": "step",
                        "pid": pid, "tid": 0, "ts": us(step.start), "dur": max(us(step.end) - us(step.start), 1.0),
                        "args": {"task": step.task, "point": step.point, "preempted": step.preempted,
                                 "clock": step.clock}})
        if rank.status in ("killed", "died", "hung", "stopped"):
            out.append({"ph": "i", "s": "p", "name": f"end: {rank.describe()}", "cat": "death",
                        "pid": pid, "tid": 0, "ts": us(last_t)})
    return out


def _counters(pid: int, ts: float, event: dict[str, Any]) -> list[dict[str, Any]]:
    # One counter track for the work done, one per metric: Perfetto draws
    # each as a step line under the rank's track.
    out = [{"ph": "C", "name": f"progress ({event['unit']})", "cat": "progress", "pid": pid,
            "tid": 0, "ts": ts, "args": {"done": event["done"], "total": event["total"]}}]
    for metric, value in event.get("metrics", {}).items():
        out.append({"ph": "C", "name": metric, "cat": "progress", "pid": pid, "tid": 0, "ts": ts,
                    "args": {metric: value}})
    return out


def _rpc_edge(ph: str, pid: int, ts: float, event: dict[str, Any], names: dict[int, str],
              cat: str = "rpc") -> dict[str, Any]:
    # Async ("b"/"e") rather than complete events: RPCs overlap each other
    # freely, which complete events on one thread may not. Async ids are
    # global to the trace, hence the rank (and the kind) in them.
    edge = {"ph": ph, "cat": cat, "id": f"{pid}.{cat}.{event['id']}", "name": names[event["id"]],
            "pid": pid, "tid": 0, "ts": ts}
    if ph == "e" and event.get("error"):
        edge["args"] = {"error": event["error"]}
    return edge


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
        strict_json.dump(document, file, default=repr)  # a rank's NaN metric (a diverging loss) is null
    return path
