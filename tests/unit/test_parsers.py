"""Every parser of user input -- fault plans (as text and as any Python
value), repro tokens, ``--set`` pairs -- either accepts its input or raises
the project's own error naming it; and plans print in a form that parses
back to the same plan, durations included."""

from __future__ import annotations

import base64
import json
import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from rpc_harness import Fault, FaultPlan, FaultPlanError, ReplayError, WorldSpecError
from rpc_harness import scenario as registry
from rpc_harness.faults import DELAYABLE_MESSAGE_TYPES, FAILPOINT_KINDS, RETRYABLE_MESSAGE_TYPES
from rpc_harness.options import MAX_WORLD_SIZE
from rpc_harness.repro import Repro, decode

NAMES = st.sampled_from(["w0", "trainer2", "observer1", "ps"])
POINTS = st.sampled_from(["x", "trainer.step", "rpc.call:Agent.select_action", "rpc.serve:Observer.run_episode",
                          "call:programs.tutorial_rl:Agent.finish_episode"])
SECONDS = st.floats(min_value=0, max_value=3600, allow_nan=False)


@st.composite
def any_fault(draw) -> Fault:
    kind = draw(st.sampled_from(FAILPOINT_KINDS + ("msgfail", "msgdelay")))
    target = draw(NAMES)
    optional = draw(st.booleans())
    if kind == "msgfail":
        return Fault(kind, target, draw(st.sampled_from(RETRYABLE_MESSAGE_TYPES)), arg=draw(st.integers(1, 10)),
                     optional=optional)
    if kind == "msgdelay":
        return Fault(kind, target, draw(st.sampled_from(DELAYABLE_MESSAGE_TYPES)), arg=draw(SECONDS),
                     optional=optional)
    hit, repeat = draw(st.integers(1, 10**6)), draw(st.booleans())
    arg = None
    if kind == "delay":
        arg = draw(SECONDS)
    elif kind == "raise":
        arg = draw(st.one_of(st.none(), st.text(alphabet=st.characters(categories=["L", "N"]), min_size=1)))
    return Fault(kind, target, draw(POINTS), hit, repeat, arg, optional)


@settings(max_examples=300)
@given(st.lists(any_fault(), max_size=4, unique_by=lambda f: (f.target, f.kind)))
def test_every_plan_prints_as_text_that_parses_back_to_it(faults):
    plan = FaultPlan(tuple(faults))
    assert FaultPlan.parse(str(plan)) == plan


def test_durations_print_exactly_and_never_in_exponent_form():
    for seconds in (0.00001, 21.0970481, 1e-300, 3599.9999999999995, 0.1 + 0.2):
        fault = Fault("delay", "a", "x", repeat=True, arg=seconds)
        assert "e" not in str(fault).split("=")[1]
        assert FaultPlan.parse(str(fault)).faults[0].seconds == seconds


@settings(max_examples=500)
@given(st.text())
def test_any_text_is_a_plan_or_a_fault_plan_error(text):
    try:
        FaultPlan.parse(text, where="--faults")
    except FaultPlanError as error:
        assert str(error).startswith("--faults: ")


@settings(max_examples=300)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                    lambda inner: st.lists(inner) | st.tuples(inner) | st.dictionaries(st.text(), inner),
                    max_leaves=8))
def test_any_python_value_is_a_plan_or_a_fault_plan_error(value):
    try:
        FaultPlan.coerce(value, where="faults=")
    except FaultPlanError as error:
        assert str(error).startswith("faults=")


@settings(max_examples=500)
@given(st.text())
def test_any_text_is_a_token_or_a_replay_error(text):
    for candidate in (text, "rpch1_" + text):
        try:
            decode(candidate)
        except ReplayError:
            pass


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                    max_leaves=10)
FIELDS = st.sampled_from(["n", "seed", "s", "e", "k", "names", "f", "z", "c", "p", "a", "w", "x"])


def _token(data) -> str:
    raw = json.dumps(data).encode()
    return "rpch1_" + base64.urlsafe_b64encode(zlib.compress(raw)).decode().rstrip("=")


@settings(max_examples=500)
@given(st.one_of(JSON, st.dictionaries(FIELDS, JSON)))
def test_a_crafted_token_is_valid_field_by_field_or_refused(data):
    try:
        repro = decode(_token(data))
    except ReplayError:
        return
    assert isinstance(repro.world_size, int) and not isinstance(repro.world_size, bool) and 1 <= repro.world_size <= MAX_WORLD_SIZE
    assert isinstance(repro.seed, int) and not isinstance(repro.seed, bool)
    assert all(isinstance(name, str) for name in repro.names)
    assert isinstance(repro.faults, str) and isinstance(repro.plan, FaultPlan)
    assert isinstance(repro.fuzz, float) and 0 <= repro.fuzz <= 1


def test_ill_typed_token_fields_are_refused_by_name():
    good = {"n": 2, "seed": 1, "e": "m:f"}
    decode(_token(good))
    for field, value, message in [("n", -1, "'n' must be a whole number"), ("n", True, "'n' must be a whole number"),
                                  ("names", "ab", "'names' must be a list"), ("seed", 1.5, "field 'seed': invalid seed 1.5"),
                                  ("z", "fast", "field 'z': invalid fuzz 'fast'"),
                                      ("f", "boom:x@y", "field 'f': faults: unknown fault kind 'boom'"),
                                  ("e", "no colon", "'e' must be"), ("extra", 1, "unknown field")]:
        try:
            decode(_token(dict(good, **{field: value})))
        except ReplayError as error:
            assert message in str(error), (field, str(error))
        else:
            raise AssertionError(f"{field}={value!r} was accepted")


def test_a_repro_round_trips_with_spawned_arguments():
    repro = Repro(world_size=3, seed=9, entry="programs.echo:run_worker", spawned=True, args=(3, "x"),
                  kwargs={"calls": 2}, options={"faults": "kill:worker1@rpc.call:echo#2?", "rpc_timeout": 7,
                                                "env": {"A": "1"}, "failpoints": ["x.step"]})
    assert decode(repro.token()) == repro


@settings(max_examples=200)
@given(st.lists(st.text(max_size=30), max_size=4), st.one_of(st.none(), st.integers()))
def test_any_set_pairs_are_overrides_or_a_world_spec_error(pairs, steps):
    for name in ("ps", "rl", "rnn"):
        try:
            registry.parse_overrides(registry.load(name), pairs, steps)
        except WorldSpecError as error:
            assert str(error).startswith(("--set", "--steps"))
