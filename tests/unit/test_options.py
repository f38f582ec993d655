"""World options are declared once (harness.options): every door reads that
declaration, and the public signatures name exactly the declared options."""

from __future__ import annotations

import inspect
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

import harness
from harness import options as O
from harness.pytest_plugin import MARKER_KEYS, SESSION_OPTIONS, RpcWorld
from harness.repro import Repro, decode

# What the public functions take besides world options: the world's shape,
# what runs, and how the call behaves.
NOT_OPTIONS = {"entry", "fn", "world_size", "nprocs", "names", "args", "kwargs", "check", "on_progress", "repro",
               "self"}


@pytest.mark.parametrize("function", [harness.run_world, harness.spawn, RpcWorld.run, RpcWorld.spawn],
                         ids=lambda f: f.__qualname__)
def test_public_signatures_name_exactly_the_declared_options(function):
    keywords = set(inspect.signature(function).parameters) - NOT_OPTIONS
    assert keywords == set(O.NAMES), "add the option to WorldOptions and to every public signature"
    for name in O.NAMES:
        assert inspect.signature(function).parameters[name].default is None, f"{name}: None means the default"


def test_every_door_is_read_from_the_declaration():
    assert set(SESSION_OPTIONS) == {name for name, spec in O.DECLARED.items() if spec.flag}
    assert MARKER_KEYS == ("world_size", "names", *(name for name, spec in O.DECLARED.items() if spec.marker))
    tokens = [spec.token for spec in O.DECLARED.values() if spec.token]
    assert len(tokens) == len(set(tokens)), "token fields are unique"
    for name, spec in O.DECLARED.items():
        assert spec.help, name
        if spec.flag or spec.command_line:
            assert spec.parse is not None, f"{name} comes as text through a flag: it needs a parser"


@pytest.mark.parametrize("name", [n for n, spec in O.DECLARED.items() if spec.check.__qualname__.startswith(
    "check_seconds")])
@pytest.mark.parametrize("value", [0, -1.0, math.inf, -math.inf, math.nan, O.MAX_SECONDS * 2, True, "5"])
def test_a_budget_out_of_range_is_refused_naming_where_it_came_from(name, value):
    what = {"bringup": "bring-up budget"}.get(name, name)
    with pytest.raises(harness.WorldSpecError, match=rf"^here: invalid {what} "):
        O.WorldOptions.from_values({name: value}, where="here")


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_seconds_are_accepted_exactly_when_finite_positive_and_at_most_a_week(value):
    ok = math.isfinite(value) and 0 < value <= O.MAX_SECONDS
    try:
        checked = O.WorldOptions.from_values({"deadline": value}, where="here").deadline
    except harness.WorldSpecError:
        assert not ok
    else:
        assert ok and checked == value


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_fuzz_is_accepted_exactly_in_zero_to_one(value):
    ok = 0 <= value <= O.MAX_FUZZ
    try:
        O.WorldOptions.from_values({"fuzz": value}, where="here")
    except harness.WorldSpecError:
        assert not ok
    else:
        assert ok


def test_the_largest_accepted_values_are_accepted_through_the_text_doors():
    assert O.DECLARED["deadline"].read(repr(O.MAX_SECONDS), "--rpc-deadline") == O.MAX_SECONDS
    assert O.DECLARED["fuzz"].read("1", "--rpc-fuzz") == 1.0
    assert O.DECLARED["seed"].read(str(2**63 - 1), "--seed") == 2**63 - 1
    for name, text in (("deadline", "inf"), ("deadline", "nan"), ("deadline", "0"), ("fuzz", "-0.1"),
                       ("seed", str(2**63)), ("seed", "-1"), ("rpc_timeout", "1e400")):
        with pytest.raises(harness.WorldSpecError, match=f"--x: invalid .*'{text}'"):
            O.DECLARED[name].read(text, "--x")


def test_token_options_round_trip_and_defaults_are_left_out():
    repro = Repro(world_size=2, seed=3, entry="m:f", options={"faults": "kill:w1@x.step#2", "fuzz": 0.0,
                                                             "rpc_timeout": 5, "env": {"B": "2", "A": "1"}})
    assert "fuzz" not in repro.options  # its default
    assert decode(repro.token()) == repro
    assert decode(repro.token()).options["env"] == (("A", "1"), ("B", "2"))


def test_unknown_world_options_are_refused():
    with pytest.raises(harness.WorldSpecError, match=r"here: unknown world option\(s\) \['deadlin'\]"):
        O.WorldOptions.from_values({"deadlin": 5}, where="here")


# One valid value of every world option: a new option must add one here,
# and the fixture test below then checks that it reaches the world.
SAMPLES = {
    "seed": 7, "deadline": 5.0, "bringup": 6.0, "rpc_timeout": 4.0, "faults": "kill:worker1@x.step#2",
    "failpoints": ["x.step"], "fuzz": 0.01, "env": {"A": "1"}, "isolate": False,
    "setup": "programs.fake_dataset:use_fake_dataset", "schedule": "pct:2",
}


class _Launched(Exception):
    pass


@pytest.mark.parametrize("how", ["run", "spawn"])
def test_every_option_given_to_the_fixture_reaches_the_world(rpc_world, monkeypatch, how):
    assert set(SAMPLES) == set(O.NAMES), "give every declared option a sample value"
    launched = []

    def launch(spec, **_):
        launched.append(spec)
        raise _Launched

    monkeypatch.setattr("harness._launcher.launch", launch)
    with pytest.raises(_Launched):
        if how == "run":
            rpc_world.run("programs.echo:echo", world_size=2, **SAMPLES)
        else:
            rpc_world.spawn("programs.echo:run_worker", args=(2,), nprocs=2, **SAMPLES)
    expected = O.WorldOptions.from_values(SAMPLES, where="test")
    assert launched[0].options == expected
