"""The rpc-harness command without a world: bad input exits 2 naming it, the timeline command."""

from __future__ import annotations

import json
import re

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
        # Each config check names its own field and value; NaN tolerances passed before.
        (["run", "ps", "--set", "lr=nan"], "--set: ps config: lr must be > 0, got nan"),
        (["run", "ps", "--set", "rtol=nan"], "--set: ps config: rtol must be >= 0, got nan"),
        (["run", "ps", "--set", "ping_attempts=0"], "--set: ps config: ping_attempts must be >= 1, got 0"),
        (["run", "rnn", "--set", "atol=-1"], "--set: rnn config: atol must be >= 0, got -1.0"),
        (["run", "rl", "--set", "gamma=2"], "--set: rl config: gamma must be in [0, 1], got 2.0"),
        (["run", "rl", "--set", "rtol=nan"], "--set: rl config: rtol must be >= 0, got nan"),
        (["run", "ps", "--faults", "kill:trainer2@trainer.step#0"], "'kill:trainer2@trainer.step#0': hit must be >= 1"),
        (["replay", "rpch9_x"], "format version '9'"),
        (["run", "ps", "--schedule", "sometimes"], "argument --schedule: invalid schedule 'sometimes'"),
        (["run", "ps", "--schedule", "pct:0"], "pct's depth is a whole number 1..20"),
        (["replay", "12345"], "12345 is a seed, not a repro token: run it with `rpc-harness run SCENARIO --seed 12345`"),
        # Issue 28: an empty plan ran the clean world alone, labelled "faults",
        # and dropped the scenario's fault checks without a word.
        (["run", "ps", "--faults", ""], "--faults: the plan is empty; give a fault plan"),
        (["run", "ps", "--faults", " , "], "or --no-fault-checks to run only the clean world"),
        (["run", "ps", "--faults", "kill:trainer1@trainer.step#2,kill:trainer1@trainer.step#2"],
         "--faults: duplicate fault 'kill:trainer1@trainer.step#2' (fault 2 of the plan)"),
        # Issue 38: a bare number is seconds; this delay could not end before the deadline.
        (["run", "ps", "--faults", "delay:trainer1@trainer.step=1000"],
         "--faults: delay:trainer1@trainer.step#1+=1000s waits 1000 s (a number without a unit is seconds: did "
         "you mean 1000ms?); it is not optional, so it must fire, and the world cannot end before its deadline "
         "(a bring-up budget of 60 s, then a deadline of 300 s)"),
        (["run", "ps", "--deadline", "10", "--faults", "delay:trainer1@trainer.step=80s"],
         "(a bring-up budget of 60 s, then a deadline of 10 s)"),
    ],
)
def test_bad_input_exits_2_naming_the_problem(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["run", "--seed", "abc"], "rpc-harness run: error: argument --seed: invalid seed 'abc'; use a whole number "
                                   "0..2**63-1 (see rpc-harness run --help)"),
        (["run", "--device", "tpu"], "rpc-harness run: error: argument --device: invalid devices 'tpu'; use cpu, cuda, "
                                     "or a list of cuda:N (cpu and cuda stand alone) (see rpc-harness run --help)"),
        (["run", "--process-group", "mpi"], "rpc-harness run: error: argument --process-group: invalid process_group "
                                            "'mpi'; use one of: 'gloo' (on the CPU (and CUDA tensors)); 'nccl' (one GPU "
                                            "a rank) (see rpc-harness run --help)"),
        (["run", "--rpc", "maybe"], "rpc-harness run: error: argument --rpc: rpc must be True or False (yes or no in "
                                    "a flag or an ini key), got 'maybe' (see rpc-harness run --help)"),
        (["--bogus"], "rpc-harness: error: unrecognized arguments: --bogus (see rpc-harness --help)"),
        (["run", "--bogus-flag"], "rpc-harness: error: unrecognized arguments: --bogus-flag (see rpc-harness --help)"),
        ([], "rpc-harness: error: no command given; one of run, replay, timeline, bench, list "
             "(see rpc-harness --help)"),
    ],
)
def test_what_argparse_refuses_is_one_line_naming_it(argv, line, capsys):
    # argparse's own refusals printed the whole usage first (seven lines), and
    # a bad option before the command was reported as a missing command.
    assert main(argv) == 2
    assert capsys.readouterr().err == line + "\n"


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
     ('{"traceEvents": 5}', "no list of traceEvents"), ("7", "no list of traceEvents"),
     # An empty picture with exit 0 before (outside-user trial).
     ("[]", "has nothing to draw: no event with a pid, a time (ts)"),
     ('{"traceEvents": [{"ph": "X"}]}', "has nothing to draw"),
     ('{"traceEvents": [{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "r"}}]}', "has nothing to draw")],
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


DIGITS = "9" * 5000


def _token(fields):
    import base64
    import zlib

    return "rpch1_" + base64.urlsafe_b64encode(zlib.compress(json.dumps(fields).encode())).decode().rstrip("=")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "ps", "--set", f"batches={DIGITS}"],
         "(5,008 characters, cut): a whole number of 5,000 digits, past the 4300 digits Python reads as an int"),
        (["run", "ps", "--set", f"batches=x{DIGITS}"], "is not a valid int"),
        (["run", "ps", "--set", f"nope{DIGITS}=1"], "ps config has no field 'nope999"),
        (["run", "ps", "--seed", DIGITS], "argument --seed: invalid seed '9999"),
        (["run", "ps", "-n", DIGITS], "argument --world-size/-n: a whole number of 5,000 digits"),
        (["run", "ps", "--steps", DIGITS], "argument --steps: a whole number of 5,000 digits"),
        (["run", "ps", "--repeat", f"x{DIGITS}"], "argument --repeat: 'x999"),
        (["run", "ps", "--deadline", DIGITS], "argument --deadline: invalid deadline '999"),
        (["run", "ps", "--schedule", "x" * 100_000], "argument --schedule: invalid schedule 'xxx"),
        (["run", "ps", "--faults", "kill:" + "t" * 100_000 + "@trainer.step"], "targets unknown worker 'ttt"),
        (["run", "c" * 100_000], "unknown scenario 'ccc"),
        (["replay", _token({"n": 2, "seed": 1, "s": "x" * 100_000})], "repro token field 's' must be a scenario"),
        (["replay", _token({"n": DIGITS, "seed": 1, "s": "ps"})], "repro token field 'n' must be a whole number"),
    ],
)
def test_long_input_is_cut_in_the_message(argv, message, capsys):
    # Issue 28: messages echoed input in full (a 200 KB error for a long
    # plan) and called a 5,000-digit number "not a valid int", twice.
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err) < 1200, (len(err), err[-600:])
    assert err.count("characters, cut") <= 2


def test_the_summary_counts_optimizer_steps_not_the_steps_budget(capsys):
    # Issue 28: the table's "steps" column did not mean --steps (rnn: 3
    # epochs read as 81 steps). It is named for what it counts.
    from rpc_harness import FaultPlan
    from rpc_harness import scenario as registry
    from rpc_harness.apps.cli import Job, print_outcome, summary_table
    from rpc_harness.repro import Repro

    sc = registry.load("rnn")
    repro = Repro(world_size=3, seed=1, scenario="rnn", names=sc.names(3), options={"faults": FaultPlan()})
    report = registry.ScenarioReport(scenario="rnn", world_size=3, seed=1, metric_name="loss", steps=81, metric=2.5,
                                     grads_checked=10, grads_expected=10)
    table = summary_table([(Job(sc, repro, "clean"), report)]).splitlines()
    assert table[0].split("  ")[3] == "optimizer steps" and "optimizer steps" in table[0]
    assert " 81 " in table[2]
    print_outcome(report, Job(sc, repro, "clean"))
    assert "loss 2.5 after 81 optimizer steps" in capsys.readouterr().out


def test_a_nan_row_says_why_and_what_its_ok_rests_on(capsys):
    # Issue 28: rows whose metric is nan read "ok" with no word that only
    # the contract held. A killed server's rnn world: the trainers name the
    # dead server (the contract), and leave no records to compare.
    import math

    from rpc_harness import scenario as registry
    from rpc_harness.apps.cli import Job, print_outcome, summary_table
    from rpc_harness.repro import Repro

    from .test_contracts import rnn_server_killed

    sc = registry.load("rnn")
    world = rnn_server_killed(0.02, "RuntimeError: parameter server 'ps1' died: eof")
    report = registry.judge(sc, world, sc.config_type())
    assert report.ok and math.isnan(report.metric) and report.grads_checked == 0
    repro = Repro(world_size=3, seed=0, scenario="rnn", names=world.names, options={"faults": world.faults})
    job = Job(sc, repro, "server-kill")
    table = summary_table([(job, report)]).splitlines()
    assert "loss nan [1]" in table[2] and table[2].split()[-1] == "ok"
    assert table[4] == (
        "[1] rnn world 3 (server-kill): loss is nan, not checked: the world left no records to compare (see the "
        "contract). ok rests on its fault contract alone (no gradient compared, no outcome judged); the contract "
        "held: trainer failed 0.02s after 'ps1' was killed, naming it")
    print_outcome(report, job)
    out = capsys.readouterr().out
    assert "    contract: trainer failed 0.02s after 'ps1' was killed, naming it\n" in out
    assert "    outcome: not checked: the world left no records to compare (see the contract)\n" in out


@pytest.mark.parametrize("argv", [
    ["run", "ps", "--steps", "100000000000000000000"],
    ["run", "ps", "--steps", "1000001"],
    ["run", "ps", "--set", "batches=100000000000000000000"],
])
def test_a_training_budget_past_any_real_run_is_refused_before_any_world(argv, capsys):
    # 10**20 steps reached the ranks and overflowed torch's shapes in every trainer.
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "1,000,000" in err and len(err.splitlines()) == 1, err


def test_a_long_out_path_is_cut_in_its_error(tmp_path, capsys):
    assert main(["run", "ps", "--out", str(tmp_path / ("x" * 100_000))]) == 2
    err = capsys.readouterr().err
    assert len(err) < 400 and "100,0" in err, err[:400]


@pytest.mark.parametrize(("deadline", "tail"), [(["--deadline", "10"], " --deadline 10"), ([], "")])
def test_an_explored_failures_token_line_carries_the_runs_deadline(monkeypatch, capsys, deadline, tail):
    # The token does not carry the deadline: a run's other than the replay's
    # 300 s goes into its line, or a replayed hang waits the 300 s out.
    import importlib

    explore = importlib.import_module("rpc_harness.explore")  # the module: rpc_harness.explore is also a function

    def failing_at_once(run, *, seed, schedules, strategy):
        attempt = explore.Attempt(seed, strategy, None, True)
        return explore.Exploration(strategy, attempts=[attempt], found=attempt)

    monkeypatch.setattr(explore, "explore_runs", failing_at_once)
    # (a real failure's replay schedule is its recorded steps; no world ran here)
    monkeypatch.setattr(explore.Exploration, "replay_schedule", property(lambda self: "controlled"))
    code = main(["run", "rnn", "--schedule", "controlled", "--repeat", "2", "--no-fault-checks", "--progress", "off",
                 *deadline])
    out = capsys.readouterr().out
    assert code == 1, out
    line = next(line for line in out.splitlines() if "rpc-harness replay rpch1_" in line)
    assert line.endswith(tail) and (tail or "--deadline" not in line), line


def test_list_says_which_scenarios_need_an_extra_and_whether_it_is_installed(monkeypatch, capsys):
    # On a core install, `rpc-harness list` listed rl and rnn as if they ran;
    # running one then said gymnasium was missing (issue 38).
    from rpc_harness.apps import cli

    monkeypatch.setattr(cli, "installed", lambda package: package != "gymnasium")
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    blocks = {block.split(":", 1)[0]: block for block in re.split(r"\n(?=\S)", out)}
    assert "    needs gymnasium (the [scenarios] extra): not installed: pip install 'rpc-harness[scenarios]'" \
        in blocks["rl"].splitlines(), blocks["rl"]
    assert "    needs faker (the [scenarios] extra): installed" in blocks["rnn"].splitlines(), blocks["rnn"]
    assert "needs" not in blocks["ps"], blocks["ps"]


def test_run_carries_a_process_group_and_rpc_into_every_worlds_token():
    from rpc_harness.apps.cli import _parser, plan_jobs

    args = _parser().parse_args(["run", "ddp", "--no-fault-checks", "--process-group", "gloo", "--rpc", "no"])
    (job,) = plan_jobs(args, seed=1)
    assert job.repro.world_options()["process_group"] == "gloo"
    assert job.repro.world_options()["rpc"] is False
    plain = _parser().parse_args(["run", "rl", "--no-fault-checks"])
    assert "process_group" not in plan_jobs(plain, seed=1)[0].repro.options, "not given: the scenario's own"


@pytest.mark.parametrize("name", ["rl", "rnn", "ps", "ddp_rpc"])
def test_run_without_rpc_is_refused_for_an_rpc_scenario_before_any_world(name, capsys, monkeypatch):
    from rpc_harness.apps import cli

    def no_world(*args, **kwargs):
        raise AssertionError("a world was started")

    monkeypatch.setattr(cli, "run_job", no_world)
    assert main(["run", "ddp", name, "--rpc", "no", "--no-fault-checks"]) == 2
    err = capsys.readouterr().err
    assert err == (f"rpc-harness: error: --rpc no: the {name} scenario's ranks talk by RPC, so its worlds need the "
                   "RPC agent; leave the option out (RPC is the default)\n")


def test_the_collective_scenarios_take_rpc_no():
    from rpc_harness.apps.cli import _parser, plan_jobs

    jobs = plan_jobs(_parser().parse_args(["run", "ddp", "fsdp", "--rpc", "no", "--no-fault-checks"]), seed=1)
    assert [(job.scenario.name, job.repro.world_options()["rpc"]) for job in jobs] == [("ddp", False), ("fsdp", False)]


def test_run_scenario_refuses_rpc_false_for_an_rpc_scenario_before_any_world(monkeypatch):
    import rpc_harness
    from rpc_harness import WorldSpecError
    from rpc_harness._parent import launcher as _launcher

    def no_world(*args, **kwargs):
        raise AssertionError("a world was started")

    monkeypatch.setattr(_launcher, "run_world", no_world)
    with pytest.raises(WorldSpecError, match=r"^ddp_rpc: rpc=False: the ddp_rpc scenario's ranks talk by RPC"):
        rpc_harness.run_scenario("ddp_rpc", world_size=3, seed=1, rpc=False)
