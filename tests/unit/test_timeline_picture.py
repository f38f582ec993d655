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


def test_the_picture_of_a_world_is_the_one_reviewed():
    assert picture() == PICTURE.read_text(encoding="utf-8"), (
        f"the timeline is drawn differently from {PICTURE}: if that is meant, write the new "
        "picture (python -m tests.unit.test_timeline_picture) and review it"
    )


if __name__ == "__main__":
    PICTURE.write_text(picture(), encoding="utf-8")
    print(f"wrote {PICTURE}")
