"""The timeline of one world, byte for byte: fixtures/timeline.svg is the
picture of the world tests/unit/test_trace_events.py builds (every kind of
event, a controlled schedule's steps, a rank killed and one stopped), with
an RPC never answered, a phase the harness does not write and an event
with no usable time added. tests/unit/test_timeline.py checks what each
piece of a picture means; this test, where every piece is drawn, so that
a change to the drawing is seen and its picture reviewed. After a change
meant to redraw it, write the new picture and look at it:

    .venv/bin/python -m tests.unit.test_timeline_picture
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from rpc_harness.timeline import render_timeline
from rpc_harness.trace import write_trace

from .test_trace_events import a_world

PICTURE = Path(__file__).resolve().parents[2] / "fixtures" / "timeline.svg"


def picture() -> str:
    with tempfile.TemporaryDirectory() as folder:
        document = json.loads(Path(write_trace(a_world(), f"{folder}/w.trace.json")).read_text())
    document["traceEvents"] += [
        {
            "ph": "b",
            "cat": "rpc",
            "id": "1.rpc.5",
            "name": "rpc_async -> w0: g",
            "pid": 1,
            "tid": 0,
            "ts": 300000.0,
        },
        {
            "ph": "X",
            "cat": "phase",
            "name": "warm-up",
            "pid": 2,
            "tid": 0,
            "ts": 0.0,
            "dur": 100000.0,
        },
        {"ph": "i", "s": "p", "cat": "user", "name": "no time", "pid": 2, "tid": 0, "ts": "soon"},
    ]
    return render_timeline(document, "a world of three ranks")


def crowded() -> dict:
    """Four ranks drawn where space runs out: RPCs issued and served four at
    a time (three lanes), unanswered, failed with a long error, with args,
    ids of every form and ends without a category; faults crowding the
    right edge, where labels go left and then have no line left; more
    notes than fit."""
    events: list[dict] = []
    for pid in range(4):
        events.append(
            {
                "ph": "M",
                "name": "process_name",
                "pid": pid,
                "args": {"name": f"rank {pid} (w{pid})"},
            }
        )
        events.append(
            {"ph": "X", "cat": "phase", "name": "entry", "pid": pid, "ts": 0, "dur": 2_000_000}
        )
        for n, ident in enumerate([1, "a", {"k": [1]}, None]):
            begin = {
                "ph": "b",
                "cat": "serve" if pid % 2 else "rpc",
                "name": f"call {n}",
                "pid": pid,
                "ts": 100_000 + n * 10_000,
                "args": {"n": n},
            }
            end = {"ph": "e", "pid": pid, "ts": 400_000 + n * 5_000, "name": f"call {n}"}
            if ident is not None:
                begin["id"] = end["id"] = ident
            if n == 1:
                end["args"] = {"error": "RuntimeError: " + "x" * 500}
            events += [begin, end] if n != 2 else [begin]
        for k in range(4):
            events.append(
                {
                    "ph": "I",
                    "cat": "fault",
                    "pid": pid,
                    "ts": 1_990_000 + k * 2_000,
                    "name": f"fault kill:w{pid}@a.b#{k} (hit {k}) with a long tail of words to it",
                }
            )
        events.append(
            {
                "ph": "i",
                "cat": "death",
                "pid": pid,
                "ts": 1_999_000,
                "name": f"end: rank {pid} (w{pid}): killed by SIGKILL as the fault plan asked",
            }
        )
        events.append(
            {"ph": "i", "cat": "error", "pid": pid, "ts": 1_000, "name": "raised " + "E" * 80}
        )
    # Ten more ranks with one RPC never answered each: more notes than fit.
    for pid in range(4, 14):
        events.append(
            {"ph": "b", "cat": "rpc", "id": 1, "name": "lost", "pid": pid, "ts": 1_500_000}
        )
    return {
        "traceEvents": events,
        "otherData": {"seed": 3, "world_size": 14, "faults": "", "ok": "maybe"},
    }


PICTURES = {
    "timeline.svg": lambda: picture(),
    "timeline-crowded.svg": lambda: render_timeline(crowded()),
    "timeline-empty.svg": lambda: render_timeline({}),
}


@pytest.mark.parametrize("name", sorted(PICTURES))
def test_the_picture_of_a_world_is_the_one_reviewed(name):
    golden = PICTURE.parent / name
    assert PICTURES[name]() == golden.read_text(encoding="utf-8"), (
        f"the timeline is drawn differently from {golden}: if that is meant, write the new "
        "pictures (python -m tests.unit.test_timeline_picture) and review them"
    )


if __name__ == "__main__":
    for name, draw in PICTURES.items():
        (PICTURE.parent / name).write_text(draw(), encoding="utf-8")
        print(f"wrote {PICTURE.parent / name}")
