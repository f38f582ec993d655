"""The regression corpus: every world in fixtures/regressions.txt replays clean."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.repro import decode
from rpc_harness.cli import main

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


@pytest.mark.parametrize(("token", "why"), corpus())
def test_regression_world_replays_clean(token, why, capsys):
    code = main(["replay", token, "--deadline", "120"])
    out = capsys.readouterr().out
    assert code == 0, f"regression came back ({why}):\n{out}"
