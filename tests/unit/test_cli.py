"""The rpc-harness command without a world: bad input exits 2 naming it, the timeline command."""

from __future__ import annotations

import json

import pytest

from rpc_harness.apps.cli import main

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "chess"], "unknown scenario 'chess'"),
        (["run", "ps", "--faults", "boom:x@y"], "unknown fault kind 'boom'"),
        (["run", "ps", "--faults", "kill:trainer9@trainer.step"], "unknown worker 'trainer9'"),
        (["run", "ps", "--set", "nope=1"], "has no field 'nope'"),
        (["run", "ps", "--set", "batches=many"], "'many' is not a valid int"),
        (["replay", "rpch9_x"], "format version '9'"),
        (["run", "ps", "--schedule", "sometimes"], "argument --schedule: invalid schedule 'sometimes'"),
        (["run", "ps", "--schedule", "pct:0"], "pct's depth is a whole number 1..20"),
        (["replay", "12345"], "12345 is a seed, not a repro token: run it with `rpc-harness run SCENARIO --seed 12345`"),
    ],
)
def test_bad_input_exits_2_naming_the_problem(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_timeline_draws_a_trace_file(tmp_path, capsys):
    trace = tmp_path / "w.trace.json"
    trace.write_text(json.dumps({"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "rank 0 (agent)"}},
        {"ph": "X", "name": "entry", "cat": "phase", "pid": 0, "tid": 0, "ts": 0, "dur": 1000},
    ]}))
    assert main(["timeline", str(trace)]) == 0
    picture = tmp_path / "w.timeline.svg"
    assert f"wrote {picture}" in capsys.readouterr().out
    assert "rank 0 (agent)" in picture.read_text()


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "cannot read the trace"), ("{not json", "is not JSON"), ('{"events": []}', "no list of traceEvents"),
     ('{"traceEvents": 5}', "no list of traceEvents"), ("7", "no list of traceEvents")],
)
def test_timeline_names_a_bad_trace(tmp_path, capsys, content, message):
    trace = tmp_path / "bad.trace.json"
    if content is not None:
        trace.write_text(content)
    assert main(["timeline", str(trace)]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "bad.timeline.svg").exists()


def test_version_names_the_harness_torch_and_python(capsys):
    import platform

    import torch

    assert main(["--version"]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("rpc-harness 0.") and f"torch {torch.__version__.split('+')[0]}" in out, out
    assert out.endswith(f"Python {platform.python_version()})"), out


def test_the_cli_runs_from_a_source_tree_never_installed(monkeypatch, capsys):
    from importlib import metadata

    def not_installed(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    assert main(["--version"]) == 0  # the parser, built for every command, asks for the versions
    assert capsys.readouterr().out.startswith("rpc-harness (not installed) (torch (not installed), Python ")
