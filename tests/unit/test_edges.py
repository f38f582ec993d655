"""Thresholds, ranges and verdicts exact at their edges, checked without a
world: the liveness rule, the bring-up budget, the command line's numeric
ranges, a scenario's "did it learn" verdict, complete gradient comparisons,
the parameter server's lease queue, the registry. Those that need real
worlds are in tests/world/test_guarantees.py. Each was seen to fail with its
guard removed (tools/plant_bugs.py plants each removal; issue 24 found them
unguarded)."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from importlib import metadata

import pytest
import torch

import rpc_harness
from rpc_harness import options as O
from rpc_harness import scenario as registry
from rpc_harness.apps import cli
from rpc_harness.errors import ReplayError
from rpc_harness.repro import Repro, decode
from rpc_harness.scenarios import _rpc, rl, rnn
from rpc_harness.scenarios import parameter_server as ps

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


# -- the liveness rule's exact threshold ---------------------------------------------------


def answers_in_turn(monkeypatch, *outcomes):
    """Make every ping answer with the next of ``outcomes`` (the last one
    again once they run out); return the list of peers pinged."""
    pinged = []

    def probe(peer, timeout=_rpc.PING_TIMEOUT):
        pinged.append(peer)
        return outcomes[min(len(pinged), len(outcomes)) - 1]

    monkeypatch.setattr(_rpc, "probe", probe)
    return pinged


def test_the_liveness_rule_is_three_timed_out_pings_of_five_seconds_as_documented():
    # README: "when 3 pings in a row time out (5 s each)"; the parameter
    # server's defaults are the rule's.
    assert (_rpc.PING_ATTEMPTS, _rpc.PING_TIMEOUT) == (3, 5.0)
    assert (ps.Config().ping_attempts, ps.Config().ping_timeout) == (_rpc.PING_ATTEMPTS, _rpc.PING_TIMEOUT)


def test_a_watched_peer_is_dead_at_exactly_the_third_timed_out_ping_in_a_row(monkeypatch):
    answers_in_turn(monkeypatch, _rpc.TIMED_OUT)
    detector = _rpc.FailureDetector()
    assert [detector.check("trainer1") for _ in range(4)] == [False, False, True, True]


@pytest.mark.parametrize("attempts", [1, 2, 5])
def test_the_threshold_is_the_attempts_given_not_one_more(monkeypatch, attempts):
    answers_in_turn(monkeypatch, _rpc.TIMED_OUT)
    detector = _rpc.FailureDetector(attempts=attempts, timeout=0.1)
    verdicts = [detector.check("trainer1") for _ in range(attempts + 1)]
    assert verdicts == [False] * (attempts - 1) + [True, True]


def test_an_answer_or_a_call_from_the_peer_starts_the_count_again(monkeypatch):
    answers_in_turn(monkeypatch, _rpc.TIMED_OUT, _rpc.TIMED_OUT, _rpc.ANSWERED, _rpc.TIMED_OUT)
    detector = _rpc.FailureDetector()
    assert [detector.check("t") for _ in range(5)] == [False, False, False, False, False]
    assert detector.check("t") is True  # the third timeout in a row since the answer
    answers_in_turn(monkeypatch, _rpc.TIMED_OUT)
    detector = _rpc.FailureDetector()
    assert [detector.check("t") for _ in range(2)] == [False, False]
    detector.heard_from("t")  # the peer called: proof of life
    assert [detector.check("t") for _ in range(3)] == [False, False, True]


def test_a_broken_connection_is_death_at_once(monkeypatch):
    answers_in_turn(monkeypatch, _rpc.FAILED)
    assert _rpc.FailureDetector().check("t") is True
    pinged = answers_in_turn(monkeypatch, _rpc.FAILED)
    assert _rpc.is_dead("t") is True and len(pinged) == 1


def test_is_dead_pings_exactly_three_times_before_calling_a_silent_peer_dead(monkeypatch):
    pinged = answers_in_turn(monkeypatch, _rpc.TIMED_OUT)
    assert _rpc.is_dead("ps") is True
    assert len(pinged) == _rpc.PING_ATTEMPTS == 3
    pinged = answers_in_turn(monkeypatch, _rpc.TIMED_OUT, _rpc.TIMED_OUT, _rpc.ANSWERED)
    assert _rpc.is_dead("ps") is False and len(pinged) == 3
    pinged = answers_in_turn(monkeypatch, _rpc.ANSWERED)
    assert _rpc.is_dead("ps") is False and len(pinged) == 1


# -- the bring-up budget -------------------------------------------------------------------


def test_the_default_bring_up_budget_is_60_s_or_half_a_second_a_rank():
    from rpc_harness.spec import make_spec

    assert [O.default_bringup(n) for n in (1, 2, 120, 121, 256)] == [60.0, 60.0, 60.0, 60.5, 128.0]
    assert make_spec("worlds:identity", 256).bringup == 128.0
    assert make_spec("worlds:identity", 2).bringup == 60.0
    assert make_spec("worlds:identity", 256, bringup=5).bringup == 5.0


# -- numeric ranges at the edges, through the rpc-harness command line ---------------------


@pytest.mark.parametrize("repeat", ["0", "-1", "-5"])
def test_run_repeat_below_one_is_bad_input_before_any_world(capsys, repeat, no_world):
    assert cli.main(["run", "ps", "--repeat", repeat, "--progress", "off"]) == 2
    err = capsys.readouterr().err
    assert f"--repeat {repeat}: use a whole number >= 1" in err and "Traceback" not in err
    assert no_world == []


@pytest.mark.parametrize("repeat", ["0", "-1"])
def test_bench_repeat_below_one_is_bad_input(capsys, repeat):
    assert cli.main(["bench", "--repeat", repeat, "--only", "failpoint"]) == 2
    assert f"--repeat {repeat}: use a whole number >= 1" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["run", "ps"], ["replay", "rpch1_x"]])
@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "0", "-1", "1e400", repr(O.MAX_SECONDS * 2), "soon"])
def test_a_deadline_out_of_range_is_bad_input_naming_the_flag(capsys, no_world, command, value):
    assert cli.main([*command, f"--deadline={value}", "--progress", "off"]) == 2
    err = capsys.readouterr().err
    assert f"argument --deadline: invalid deadline '{value}'; use seconds > 0 (at most 604800)" in err
    assert no_world == []


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--fuzz", "nan", "invalid fuzz 'nan'"), ("--fuzz", "inf", "invalid fuzz 'inf'"),
    ("--fuzz", "-0.1", "invalid fuzz '-0.1'"), ("--fuzz", "1.0001", "invalid fuzz '1.0001'"),
    ("--seed", "-1", "invalid seed '-1'"), ("--seed", str(2**63), f"invalid seed '{2**63}'"),
    ("--seed", "1.5", "invalid seed '1.5'"), ("--seed", "nan", "invalid seed 'nan'"),
    ("--steps", "0", "--steps 0: the training budget"), ("--steps", "-3", "--steps -3: the training budget"),
    ("--world-size", "0", "invalid world_size 0"), ("--world-size", "-2", "invalid world_size -2"),
    ("--world-size", "513", "invalid world_size 513; use at most 512"),
])
def test_every_numeric_flag_of_run_refuses_its_edges(capsys, no_world, flag, value, message):
    assert cli.main(["run", "ps", flag, value, "--progress", "off"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err
    assert no_world == []


@pytest.mark.parametrize(("flag", "value", "option", "expected"), [
    ("--deadline", repr(O.MAX_SECONDS), "deadline", O.MAX_SECONDS), ("--deadline", "1e-9", "deadline", 1e-9),
    ("--fuzz", "1", "fuzz", 1.0), ("--fuzz", "0", "fuzz", 0.0),
    ("--seed", str(2**63 - 1), "seed", 2**63 - 1), ("--seed", "0", "seed", 0),
])
def test_the_largest_and_smallest_accepted_values_reach_the_world_from_the_command_line(
        no_world, flag, value, option, expected):
    with pytest.raises(Started):
        cli.main(["run", "ps", flag, value, "--no-fault-checks", "--progress", "off"])
    assert no_world[0][option] == expected


def test_a_crafted_token_with_a_budget_or_fuzz_out_of_range_is_refused_naming_its_field():
    good = Repro(world_size=2, seed=1, entry="m:f", options={"rpc_timeout": O.MAX_SECONDS, "fuzz": 1.0})
    assert decode(good.token()).options == {"rpc_timeout": O.MAX_SECONDS, "fuzz": 1.0}
    for field, value in (("t", math.inf), ("t", math.nan), ("t", 0), ("t", -1.0), ("t", O.MAX_SECONDS * 2),
                         ("t", True), ("z", math.nan), ("z", -0.5), ("z", 1.5), ("z", math.inf)):
        with pytest.raises(ReplayError, match=f"repro token field '{field}': invalid"):
            decode(_token_with(good, **{field: value}))
    for value in (-1, 2**63, 1.5, True):
        with pytest.raises(ReplayError, match="repro token field 'seed': invalid seed"):
            decode(_token_with(good, seed=value))


def _token_with(repro, **fields):
    """``repro``'s token with some of its raw fields replaced (JSON allows
    Infinity and NaN, so a crafted token can carry them)."""
    import base64
    import json
    import zlib

    body = repro.token().split("_", 1)[1]
    data = json.loads(zlib.decompress(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))))
    data.update(fields)
    raw = json.dumps(data).encode()
    return "rpch1_" + base64.urlsafe_b64encode(zlib.compress(raw)).decode().rstrip("=")


# -- a scenario's "did it learn" verdict ---------------------------------------------------


def report(**fields):
    return registry.ScenarioReport(scenario="ps", world_size=3, seed=1, metric_name="accuracy", **fields)


def test_a_report_is_ok_only_when_contract_outcome_coverage_and_every_tensor_are():
    assert report().ok
    assert not report(outcome_ok=False, outcome_note="held-out accuracy 0.1 is not above 0.5").ok
    assert not report(contract_ok=False).ok
    mismatch = rpc_harness.gradcheck.Mismatch("ps", 0, "trainer1", "fc1.weight", 1.0, 1.0, 1e-6, 1e-5, 1)
    assert not report(mismatches=[mismatch]).ok
    assert not report(grads_checked=7, grads_expected=8).ok
    assert report(grads_checked=8, grads_expected=8).ok
    assert report(outcome_ok=False, outcome_note="loss did not fall").problems() == [
        "outcome: loss did not fall"]


def test_a_run_that_did_not_learn_fails_check_and_rpc_harness_run(monkeypatch, capsys):
    unlearned = report(outcome_ok=False, outcome_note="held-out accuracy 0.1 is not above 0.5 (chance 0.1)",
                       grads_checked=8, grads_expected=8, steps=24, metric=0.1)
    with pytest.raises(AssertionError, match="outcome: held-out accuracy 0.1 is not above 0.5"):
        registry.check_report(unlearned)
    monkeypatch.setattr(registry, "run_scenario", lambda *args, **kwargs: unlearned)
    assert cli.main(["run", "ps", "--no-fault-checks", "--progress", "off", "--seed", "1"]) == 1
    out = capsys.readouterr().out
    assert "FAILED: ps world 3 (clean)" in out and "outcome: held-out accuracy 0.1" in out
    assert out.rstrip().splitlines()[-1].split()[-1] == "FAILED"


class _Stub:
    """A scenario whose judge is told what to say."""

    name, metric_name = "stub", "metric"

    def __init__(self, outcome_ok=True, drop=0):
        self.outcome_ok, self.drop = outcome_ok, drop

    def records(self, world):
        return {"grads": {"a": torch.ones(1), "b": torch.ones(1)}}

    def contract(self, world, records, config):
        return registry.Verdict(True, "every rank finished")

    def baseline(self, config, world_size, seed, records):
        return {"grads": {"a": torch.ones(1), "b": torch.ones(1)}}

    def compare(self, records, expected, config, seed):
        # A judge that compares what it likes: every tensor, or all but ``drop``.
        compared = sorted(expected["grads"])[self.drop:]
        return registry.Comparison(checked=len(compared), expected=len(expected["grads"]))

    def outcome(self, records, expected, config):
        return registry.Outcome(self.outcome_ok, "learned" if self.outcome_ok else "did not learn", 0.5, 1)


def stub_world():
    return rpc_harness.WorldResult(names=("a", "b"), seed=1, faults=rpc_harness.FaultPlan(), deadline=5.0,
                               ranks=[rpc_harness.RankOutcome(0, "a", status="ok"), rpc_harness.RankOutcome(1, "b", status="ok")])


def test_the_judge_carries_the_outcome_verdict_into_the_report():
    assert registry.judge(_Stub(), stub_world(), None).ok
    failed = registry.judge(_Stub(outcome_ok=False), stub_world(), None)
    assert not failed.ok and failed.contract_ok and not failed.mismatches
    assert failed.problems() == ["outcome: did not learn"]


# -- complete gradient comparisons, in every scenario --------------------------------------


def test_a_judge_that_compares_fewer_tensors_than_the_baseline_has_fails_the_report():
    short = registry.judge(_Stub(drop=1), stub_world(), None)
    assert (short.grads_checked, short.grads_expected) == (1, 2)
    assert not short.ok and not short.mismatches
    assert short.problems() == ["gradients: compared 1 of the 2 tensors the baseline has"]
    assert registry.summary(short)["grads_expected"] == 2
    with pytest.raises(AssertionError, match="gradients: compared 1 of the 2 tensors the baseline has"):
        registry.check_report(short)


RNN = rnn.Config(sentences=60, epochs=1)


@pytest.fixture(scope="module")
def rnn_baseline():
    return rnn.SCENARIO.baseline(RNN, 3, 4, None)


def without(tensors, owner):
    return {k: v for k, v in tensors.items() if not k.startswith(owner + "/")}


@pytest.mark.parametrize("owner", ["ps0", "ps1", "trainer"])
def test_rnn_a_rank_whose_tensors_are_all_missing_from_the_run_is_still_compared(rnn_baseline, owner):
    expected = rnn_baseline
    actual = copy.deepcopy(expected)
    for step in actual["trainer"]["steps"]:
        step["grads"] = without(step["grads"], owner)
        step["params"] = without(step["params"], owner)
    whole = rnn.SCENARIO.compare(copy.deepcopy(expected), expected, RNN, 4)
    assert not whole.mismatches and whole.checked == whole.expected > 0
    assert whole.details["params_checked"] == whole.details["params_expected"] > 0
    cut = rnn.SCENARIO.compare(actual, expected, RNN, 4)
    missing = [m for m in cut.mismatches if m.rank == owner and "missing in the distributed run" in m.param]
    assert missing, f"{owner}'s tensors were never compared"
    assert {m.what for m in missing} == {"gradient", "parameter after the optimizer step"}
    per_step = sum(k.startswith(owner + "/") for k in expected["trainer"]["steps"][0]["grads"])
    assert cut.expected == whole.expected and cut.checked == whole.expected - per_step * len(actual["trainer"]["steps"])


@pytest.fixture(scope="module")
def ps_baseline():
    config = ps.Config(batches=2, test_size=16)
    base = ps.baseline(config, 3, 4)
    log = {"steps": [{"index": k, "version": k, "trainer": t, "batch": b, "grads": step.grads, "loss": step.loss}
                     for k, ((t, b), step) in enumerate(zip(ps.default_order(config, 3), base.steps, strict=True))],
           "final": base.final, "dropped": [], "dead": [], "accuracy": 1.0, "done": []}
    return config, ps.judge.Records(log, {}), base


def test_ps_a_gradient_missing_from_the_servers_log_is_compared_and_counted(ps_baseline):
    config, records, base = ps_baseline
    whole = ps.SCENARIO.compare(records, base, config, 4)
    assert not whole.mismatches and whole.checked == whole.expected == len(base.steps) * 8
    cut = copy.deepcopy(records)
    del cut.log["steps"][1]["grads"]["fc1.weight"]
    short = ps.SCENARIO.compare(cut, base, config, 4)
    assert short.expected == whole.expected and short.checked == whole.expected - 1
    assert [m.param for m in short.mismatches] == ["fc1.weight (missing in the distributed run)"]


def test_rl_a_gradient_missing_from_an_episode_is_compared_and_counted():
    config = rl.Config(episodes=2, max_steps=5)
    base = rl.baseline(config, 3, 4)
    whole = rl.SCENARIO.compare(copy.deepcopy(base), base, config, 4)
    assert not whole.mismatches and whole.checked == whole.expected == 2 * 4
    cut = copy.deepcopy(base)
    del cut.episodes[0].grads["affine2.bias"]
    short = rl.SCENARIO.compare(cut, base, config, 4)
    assert (short.checked, short.expected) == (7, 8)
    assert [m.param for m in short.mismatches] == ["affine2.bias (missing in the distributed run)"]


# -- the parameter server's lease queue ----------------------------------------------------


TRAINERS = ("trainer1", "trainer2", "trainer3", "trainer4")


@pytest.fixture
def server():
    return ps.ParameterServer(ps.Config(batches=1, test_size=16), 0, TRAINERS)


def granted(futures):
    return [name for name, future in futures.items() if future.done()]


def test_the_step_lease_is_granted_first_come_first_served(server):
    futures = {}
    for cid, trainer in enumerate(TRAINERS, start=1):
        futures[trainer] = server.begin_step(trainer, 0, cid)
    order = []
    for _ in TRAINERS:
        ready = [t for t in granted(futures) if t not in order]
        assert len(ready) == 1, f"one lease at a time: {ready}"
        order += ready
        server.end_step(ready[0], 0, TRAINERS.index(ready[0]) + 1, None)
    assert order == list(TRAINERS)


def test_a_trainer_reaped_while_its_request_is_queued_is_never_granted_the_lease(server):
    futures = {t: server.begin_step(t, 0, cid) for cid, t in enumerate(TRAINERS[:3], start=1)}
    assert granted(futures) == ["trainer1"]
    server.reap("trainer2")  # dead while queued behind trainer1
    server.end_step("trainer1", 0, 1, None)
    assert granted(futures) == ["trainer1", "trainer3"], "the lease skips the dead trainer's request"
    server.end_step("trainer3", 0, 3, None)
    assert server.report()["dead"] == ["trainer2"]
    with pytest.raises(RuntimeError, match="trainer2 was reaped as dead"):
        server.begin_step("trainer2", 1, 5)


def test_a_reaped_holder_gives_the_lease_to_the_next_in_line(server):
    futures = {t: server.begin_step(t, 0, cid) for cid, t in enumerate(TRAINERS[:3], start=1)}
    server.reap("trainer1")
    assert granted(futures) == ["trainer1", "trainer2"]
    assert [d["trainer"] for d in server.report()["dropped"]] == ["trainer1"]


# -- the registry seeing one distribution twice --------------------------------------------


def test_one_distribution_seen_twice_registers_each_scenario_once(monkeypatch):
    # An editable install and its source folder both on sys.path: without
    # importlib's own de-duplication (other importers, older Pythons, folder
    # names it does not recognise as one distribution) every entry point
    # comes twice, with the same value. That is one package, not two.
    real = list(metadata.entry_points(group=registry.ENTRY_POINT_GROUP))
    monkeypatch.setattr(metadata, "entry_points", lambda group: [*real, *real])
    assert registry.available() == tuple(sorted(p.name for p in real))
    assert registry.load("ps") is ps.SCENARIO
    assert [sc.name for sc in cli.scenarios_named(["all"])] == sorted(p.name for p in real)


def test_two_folders_holding_one_distribution_on_sys_path(tmp_path, monkeypatch):
    # The same distribution's metadata in two folders on sys.path, the way
    # importlib cannot tell they are one (a dist-info and an egg-info whose
    # folder names differ): the registry must not refuse it as two packages.
    entry = "[rpc_harness.scenarios]\nps = rpc_harness.scenarios.parameter_server:SCENARIO\n"
    for folder, meta in (("site", "rpc_harness_copy-0.1.dist-info"), ("source", "rpc-harness-copy.egg-info")):
        where = tmp_path / folder / meta
        where.mkdir(parents=True)
        (where / ("METADATA" if meta.endswith("dist-info") else "PKG-INFO")).write_text(
            "Metadata-Version: 2.1\nName: rpc-harness-copy\nVersion: 0.1\n")
        (where / "entry_points.txt").write_text(entry)
        monkeypatch.syspath_prepend(str(tmp_path / folder))
    seen = [p for p in metadata.entry_points(group=registry.ENTRY_POINT_GROUP) if p.name == "ps"]
    assert len(seen) >= 2, "importlib hands the registry the scenario more than once"
    assert registry.registry()["ps"].value == "rpc_harness.scenarios.parameter_server:SCENARIO"
    assert registry.load("ps") is ps.SCENARIO


# -- shared ---------------------------------------------------------------------------------


class Started(Exception):
    """A world would have started here."""


@pytest.fixture
def no_world(monkeypatch):
    """Make starting any world an error that records the options it was
    given, the world options left out at their defaults."""
    asked = []
    defaults = {field.name: field.default for field in dataclasses.fields(O.WorldOptions)}

    def refuse(entry, *args, **kwargs):
        asked.append({**defaults, **kwargs})
        raise Started

    monkeypatch.setattr("rpc_harness._parent.launcher.run_world", refuse)
    monkeypatch.setattr("rpc_harness._parent.launcher.spawn", refuse)
    return asked


def test_a_summary_with_no_metric_is_strict_json_with_null_in_its_place():
    # A world that recorded nothing has no metric (NaN), nor a history to
    # judge; Python's json writes NaN, which jq or JSON.parse refuse.
    report = registry.ScenarioReport("stub", 2, 1, "loss", history=[1.0, math.nan], baseline_history=[math.inf])
    assert math.isnan(report.metric)
    summary = registry.summary(report)
    assert (summary["metric"], summary["history"], summary["baseline_history"]) == (None, [1.0, None], [None])
    strict = json.loads(json.dumps(summary, allow_nan=False),
                        parse_constant=lambda name: pytest.fail(f"{name} in the summary"))
    assert strict["metric"] is None and strict["world_size"] == 2
