"""Repro tokens, and Hypothesis strategies that shrink towards the smallest world."""

from __future__ import annotations

import base64
import json
import re
import zlib

import pytest
from hypothesis import find, settings

from rpc_harness import ReplayError
from rpc_harness import strategies as hs
from rpc_harness.repro import Repro, decode

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_tokens_round_trip():
    repro = Repro(world_size=3, seed=42, scenario="ps", names=("parameter_server", "trainer1", "trainer2"),
                  config={"steps": 4}, options={"faults": "kill:trainer2@trainer.step#3", "fuzz": 0.01})
    token = repro.token()
    assert token.startswith("rpch1_")
    assert decode(token) == repro
    assert repro.command() == f"rpc-harness replay {token}"


@pytest.mark.parametrize(
    ("token", "message"),
    [
        ("hello", "not an rpc-harness repro token"),
        ("rpch9_abc", "format version '9'; this rpc-harness reads version 1"),
        ("rpch1_!!!!", "corrupt repro token"),
    ],
)
def test_bad_tokens_say_what_is_wrong(token, message):
    with pytest.raises(ReplayError, match=re.escape(message)):
        decode(token)


def test_a_token_with_a_bad_plan_is_refused_before_running():
    # A Repro checks its plan when made, but a token can carry one that does
    # not parse (a damaged or hand-made token): decode refuses it, naming the field.
    for plan, message in (("boom:w0@x.step", "unknown fault kind 'boom' in 'boom:w0@x.step'"),
                          ("kill:w0", "cannot parse fault 'kill:w0'")):
        raw = json.dumps({"n": 2, "seed": 1, "e": "m:f", "f": plan}).encode()
        bad = "rpch1_" + base64.urlsafe_b64encode(zlib.compress(raw)).decode().rstrip("=")
        with pytest.raises(ReplayError, match=re.escape(f"repro token field 'f': faults: {message}")):
            decode(bad)
    good = Repro(world_size=2, seed=1, entry="m:f", options={"faults": "kill:w0@x.step#2"}).token()
    assert decode(good).plan.faults[0].hit == 2


def test_world_strategy_shrinks_to_the_smallest_failing_world():
    case = find(hs.worlds(min_size=1, max_size=8), lambda c: c.world_size >= 3)
    assert case.world_size == 3
    assert case.names == ("worker0", "worker1", "worker2")
    assert case.seed == 0


def test_fault_plans_shrink_to_fewer_earlier_milder_faults():
    names = ["ps", "trainer1", "trainer2"]
    plan = find(hs.fault_plans(names, ["trainer.step", "ps.forward"], max_faults=3), lambda p: len(p) >= 1)
    assert len(plan) == 1
    (fault,) = plan
    assert (fault.kind, fault.target, fault.point, fault.hit) == ("delay", "ps", "trainer.step", 1)


def test_strategies_only_draw_failpoint_kinds():
    with pytest.raises(ValueError, match="failpoint kinds"):
        hs.faults(["a"], ["x"], kinds=("msgfail",))


def test_profiles_are_registered_and_bounded():
    chosen = hs.world_settings()
    assert chosen.deadline is None
    # The CI profile, unless the command line loaded rpc-thorough.
    thorough_loaded = getattr(settings, "_current_profile", None) == hs.THOROUGH_PROFILE
    assert chosen.max_examples == (60 if thorough_loaded else 6)
    assert chosen.suppress_health_check == settings.get_profile(hs.CI_PROFILE).suppress_health_check
    thorough = settings.get_profile(hs.THOROUGH_PROFILE)
    assert thorough.max_examples == 60 and thorough.deadline is None
    assert hs.world_settings(max_examples=2).max_examples == 2, "overrides win"
