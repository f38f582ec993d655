"""The regression corpus: every world in fixtures/regressions.txt replays clean."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rpc_harness.apps.cli import main
from rpc_harness.repro import decode

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "regressions.txt"


def corpus() -> list:
    cases = []
    for number, line in enumerate(CORPUS.read_text().splitlines(), start=1):
        token, _, why = line.partition("#")
        if token.strip():
            cases.append(pytest.param(token.strip(), why.strip(), id=f"line{number}"))
    return cases


def test_the_corpus_is_not_empty_and_every_token_decodes():
    cases = corpus()
    assert len(cases) >= 3
    for case in cases:
        decode(case.values[0])


# One of the suite's slowest (pytest --durations): each regression's world replayed whole through
# the CLI, its faults (delays and kills among them) acting as planned.
@pytest.mark.parametrize(("token", "why"), corpus())
def test_regression_world_replays_clean_with_its_faults_fired_where_planned(token, why, capsys, tmp_path):
    code = main(["replay", token, "--deadline", "30", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, f"regression came back ({why}):\n{out}"
    # Clean under its faults only if they acted: each fired on its target at
    # its point, a kill or a freeze once, on the hit it names.
    repro = decode(token)
    (trace,) = tmp_path.glob("*.trace.json")
    fired = [e for e in json.loads(trace.read_text())["traceEvents"] if e.get("cat") == "fault"]
    for fault in repro.plan:
        events = [e for e in fired if e["args"]["fault"] == str(fault)]
        assert events, f"{fault} never fired ({why})"
        assert {(e["pid"], e["args"]["point"]) for e in events} == {(repro.names.index(fault.target), fault.point)}
        if fault.kind in ("kill", "freeze"):
            assert [e["args"]["hit"] for e in events] == [fault.hit]
