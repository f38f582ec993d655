"""One scenario shape: the registry, and every scenario behaving alike on
bad input -- one error type, one wording, before any process starts."""

from __future__ import annotations

import dataclasses
import re
from importlib import metadata

import pytest

import rpc_harness
from rpc_harness import ScenarioError, WorldSpecError
from rpc_harness import scenario as registry
from rpc_harness.apps.cli import main

BUILT_IN = ("ps", "rl", "rnn")  # the RPC scenarios: two ranks at least
COLLECTIVE = ("ddp", "fsdp", "ddp_rpc")  # the collective ones: ddp and fsdp run on one rank
EVERY = BUILT_IN + COLLECTIVE


class Started(Exception):
    """Raised by the stand-in for run_world: a world would have started."""


@pytest.fixture
def no_world(monkeypatch):
    """Make starting a world an error that records what it was asked for."""
    asked = []

    def refuse(entry, **kwargs):
        asked.append(kwargs)
        raise Started(kwargs.get("names"))

    monkeypatch.setattr("rpc_harness._parent.launcher.run_world", refuse)
    return asked


def test_the_built_in_scenarios_are_registered_by_entry_point_and_have_the_shape():
    assert set(EVERY) <= set(registry.available())
    for name in EVERY:
        sc = registry.load(name)
        assert isinstance(sc, rpc_harness.Scenario) and sc.name == name
        fields = {f.name: f.default for f in dataclasses.fields(sc.config_type)}
        assert {"rtol", "atol", sc.steps_field} <= set(fields), "tolerances live in every Config"
        assert sc.min_world_size <= sc.default_world_size
        assert len(sc.names(sc.default_world_size)) == sc.default_world_size


@pytest.mark.parametrize("name", BUILT_IN)
@pytest.mark.parametrize(
    ("size", "message"),
    [(1, "invalid world_size 1; the scenario needs >= 2 ranks"),
     (600, "invalid world_size 600; use at most 512"),
     ("3", "invalid world_size '3'; use a whole number"),
     (True, "invalid world_size True; use a whole number")],
)
def test_a_bad_world_size_is_one_error_everywhere_before_any_world(no_world, name, size, message):
    with pytest.raises(WorldSpecError, match=f"^{name}: {message}"):
        rpc_harness.run_scenario(name, world_size=size)
    with pytest.raises(WorldSpecError, match=f"^{name}: {message}"):
        registry.load(name).names(size)
    assert no_world == []


@pytest.mark.parametrize(("name", "least", "message"), [
    ("ddp", 0, "invalid world_size 0; the scenario needs >= 1 ranks (one DDP rank)"),
    ("fsdp", 0, "invalid world_size 0; the scenario needs >= 1 ranks (one FSDP rank)"),
    ("ddp_rpc", 2, "invalid world_size 2; the scenario needs >= 3 ranks (a master, a parameter server and a "
                   "trainer)"),
])
def test_a_collective_scenario_refuses_a_world_below_its_least(no_world, name, least, message):
    with pytest.raises(WorldSpecError, match=f"^{name}: {re.escape(message)}"):
        registry.load(name).names(least)
    with pytest.raises(WorldSpecError, match=f"^{name}: "):
        rpc_harness.run_scenario(name, world_size=least)
    assert no_world == []


def test_fsdp_refuses_a_reshard_size_that_does_not_divide_the_world_before_any_world(no_world):
    with pytest.raises(WorldSpecError, match="reshard_after_forward=2 must divide the world size 3"):
        rpc_harness.run_scenario("fsdp", {"reshard_after_forward": "2"}, world_size=3)
    with pytest.raises(WorldSpecError, match="reshard_after_forward must be true, false or a whole number >= 2"):
        rpc_harness.run_scenario("fsdp", {"reshard_after_forward": "sometimes"}, world_size=2)
    with pytest.raises(WorldSpecError, match="plant must be one of"):
        rpc_harness.run_scenario("ddp", {"plant": "typo"}, world_size=2)
    assert no_world == []


@pytest.mark.parametrize("name", EVERY)
def test_run_defaults_to_the_scenarios_default_world_size(no_world, name):
    sc = registry.load(name)
    with pytest.raises(Started):
        rpc_harness.run_scenario(name)
    assert no_world[0]["names"] == sc.names(sc.default_world_size)


@pytest.mark.parametrize("name", EVERY)
def test_a_bad_config_is_refused_naming_the_field(no_world, name):
    sc = registry.load(name)
    with pytest.raises(WorldSpecError, match=f"^{name} config: no field 'nope'; fields: "):
        rpc_harness.run_scenario(name, {"nope": 1})
    with pytest.raises(WorldSpecError, match=f"^{name} config: {sc.steps_field} must be a whole number >= 1, got 0"):
        rpc_harness.run_scenario(name, {sc.steps_field: 0})
    with pytest.raises(WorldSpecError, match=f"expected a {sc.config_type.__name__} or a mapping"):
        rpc_harness.run_scenario(name, 5)
    assert no_world == []


@pytest.mark.parametrize("name", BUILT_IN)
@pytest.mark.parametrize(
    ("argv", "message"),
    [(["-n", "1"], "needs >= 2 ranks"), (["-n", "600"], "use at most 512"),
     (["--steps", "-1"], "--steps -1: the training budget"), (["--steps", "0"], "must be a whole number >= 1"),
     (["--fuzz", "5"], "argument --fuzz: invalid fuzz '5'; use the largest delay in seconds, 0..1")],
)
def test_the_cli_refuses_bad_input_for_every_scenario_with_exit_2(no_world, capsys, name, argv, message):
    assert main(["run", name, "--progress", "off", *argv]) == 2
    err = capsys.readouterr().err
    # Ours say "rpc-harness: error:", argparse's (a flag's type) "rpc-harness run: error:".
    assert err.splitlines()[-1].startswith(("rpc-harness: error: ", "rpc-harness run: error: "))
    assert message in err and "Traceback" not in err
    assert no_world == []


@pytest.mark.parametrize("name", registry.available())
def test_a_budget_below_what_the_judge_needs_is_refused_before_any_world(no_world, capsys, name):
    # Issue 28: `run rnn --steps 1` ran the whole world, then failed: "only 1
    # epoch, cannot tell whether the loss falls". Every registered scenario
    # declares the least its judge needs; --steps and --set below it exit 2.
    sc = registry.load(name)
    assert isinstance(sc.min_steps, int) and sc.min_steps >= 1
    if sc.min_steps == 1:
        return  # nothing to refuse but what is refused for all (--steps 0)
    short = sc.min_steps - 1
    needs = f"{name}'s judge needs {sc.steps_field} >= {sc.min_steps} to tell whether training worked"
    for argv, door in ((["--steps", str(short)], f"--steps {short}"),
                       (["--set", f"{sc.steps_field}={short}"], f"--set '{sc.steps_field}={short}'")):
        assert main(["run", name, "--progress", "off", *argv]) == 2
        err = capsys.readouterr().err
        assert f"rpc-harness: error: {door}: {needs}; use --steps {sc.min_steps} or more" in err, err
    assert no_world == []
    with pytest.raises(Started):  # the least it needs is enough
        main(["run", name, "--progress", "off", "--no-fault-checks", "--steps", str(sc.min_steps)])


def test_the_rnn_judge_cannot_pass_below_its_min_steps():
    # What rnn's min_steps stands for: one epoch fails its outcome check
    # after the whole run (the judge compares the first epoch with the last).
    from rpc_harness.scenarios import rnn

    config = rnn.Config(sentences=60, epochs=rnn.SCENARIO.min_steps - 1)
    records = rnn.SCENARIO.baseline(config, 2, 4, None)
    outcome = rnn.SCENARIO.outcome(records, records, config)
    assert not outcome.ok and "only 1 epoch, cannot tell whether the loss falls" in outcome.note


def test_overrides_are_typed_by_field_including_optional_ones():
    ps = registry.load("ps")
    assert registry.parse_overrides(ps, ["perturb_step=3", "mnist_root=none", "lr=0.5"], steps=4) == {
        "perturb_step": 3, "mnist_root": None, "lr": 0.5, "batches": 4}
    assert registry.parse_overrides(ps, ["mnist_root=/data"]) == {"mnist_root": "/data"}
    rl = registry.load("rl")
    assert registry.parse_overrides(rl, ["stop_when_solved=no"]) == {"stop_when_solved": False}
    with pytest.raises(WorldSpecError, match="'maybe' is not a valid bool"):
        registry.parse_overrides(rl, ["stop_when_solved=maybe"])
    with pytest.raises(WorldSpecError, match="use KEY=VALUE"):
        registry.parse_overrides(rl, ["episodes"])


def test_unknown_and_broken_scenarios_are_named(monkeypatch):
    with pytest.raises(ScenarioError, match="unknown scenario 'chess'; registered scenarios: .*ps, rl, rnn"):
        registry.load("chess")
    broken = metadata.EntryPoint("broken", "no_such_module_xyz:SCENARIO", registry.ENTRY_POINT_GROUP)
    twice = metadata.EntryPoint("rl", "elsewhere:SCENARIO", registry.ENTRY_POINT_GROUP)
    real = list(metadata.entry_points(group=registry.ENTRY_POINT_GROUP))
    monkeypatch.setattr(metadata, "entry_points", lambda group: [*real, broken])
    with pytest.raises(ScenarioError, match=r"scenario 'broken' \(no_such_module_xyz:SCENARIO\) failed to load: "
                                            "ModuleNotFoundError"):
        registry.load("broken")
    monkeypatch.setattr(metadata, "entry_points", lambda group: [*real, twice])
    with pytest.raises(ScenarioError, match="two packages register the scenario 'rl'"):
        registry.available()


def test_an_object_without_the_shape_is_refused_naming_what_it_lacks():
    class Half:
        name = "half"
        summary = "half a scenario"

    with pytest.raises(ScenarioError, match=r"lacks min_world_size \(int\), .*entry\(\), names\(\), validate\(\), fault_checks\(\), records\(\)"):
        registry.check_shape(Half(), where="test")


def test_a_world_whose_plan_did_not_do_what_it_says_fails_the_contract_whatever_the_scenario_says():
    class Lenient:
        name, metric_name = "lenient", "metric"

        def records(self, world):
            return None

        def contract(self, world, records, config):
            return registry.Verdict(True, "every rank finished")

    never = "fault kill:b@x.step#9 never fired (only 3 hit(s) of x.step, the fault waits for hit 9): b reached x.step x3"
    world = rpc_harness.WorldResult(
        names=("a", "b"), seed=1, faults=rpc_harness.FaultPlan.parse("kill:b@x.step#9"), deadline=5.0,
        ranks=[rpc_harness.RankOutcome(0, "a", status="ok"), rpc_harness.RankOutcome(1, "b", status="ok")], problems=[never],
    )
    report = registry.judge(Lenient(), world, None)
    assert not report.ok and not report.contract_ok
    assert report.contract_note == never
    assert report.problems() == [f"contract: {never}"]
