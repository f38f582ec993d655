"""Fault plans: text form, round trips, and a clear error per bad spec."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rpc_harness import Fault, FaultPlan, FaultPlanError
from rpc_harness import strategies as hs
from rpc_harness.faults import RETRYABLE_MESSAGE_TYPES


def test_the_documented_examples_parse():
    plan = FaultPlan.parse("kill:trainer2@trainer.step#3, delay:observer1@observer.step=0.2s")
    assert plan.faults == (
        Fault("kill", "trainer2", "trainer.step", 3),
        Fault("delay", "observer1", "observer.step", 1, True, 0.2),
    )
    assert str(plan) == "kill:trainer2@trainer.step#3,delay:observer1@observer.step#1+=0.2s"


def test_defaults_and_units():
    hang, slow, fail, late, boom = FaultPlan.parse(
        "hang:agent@agent.select_action,delay:ps@ps.forward#2=150ms,msgfail:trainer1@RREF_USER_DELETE,"
        "msgdelay:trainer1@PYTHON_CALL=0.05,raise:ps@ps.forward#4+=disk full"
    )
    assert (hang.hit, hang.repeat) == (1, False)
    assert (slow.hit, slow.repeat, slow.seconds) == (2, False, 0.15)
    assert fail.arg == 1
    assert late.seconds == 0.05
    assert (boom.hit, boom.repeat, boom.arg) == (4, True, "disk full")
    assert [boom.fires_on(h) for h in (3, 4, 5)] == [False, True, True]


@given(hs.fault_plans(["agent", "observer1", "observer2"], ["agent.select_action", "observer.step"], max_faults=4,
                      kinds=("delay", "kill", "raise", "hang")))
def test_text_form_round_trips(plan):
    assert FaultPlan.parse(str(plan)) == plan


@given(st.sampled_from(RETRYABLE_MESSAGE_TYPES), st.integers(1, 5))
def test_message_faults_round_trip(kind, count):
    plan = FaultPlan.parse(f"msgfail:w1@{kind}={count},msgdelay:w0@SCRIPT_CALL=0.5s")
    assert FaultPlan.parse(str(plan)) == plan


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kill trainer2", "cannot parse fault 'kill trainer2'; expected KIND:TARGET@POINT"),
        ("explode:w0@x.step", "unknown fault kind 'explode' in 'explode:w0@x.step'; allowed kinds: delay, kill, raise, hang, freeze, msgfail, msgdelay"),
        ("kill:w0@x.step#0", "hit must be >= 1"),
        ("delay:w0@x.step", "delay needs a duration"),
        ("delay:w0@x.step=fast", "bad duration 'fast'"),
        ("delay:w0@x.step=99999s", "duration in seconds (0..3600)"),
        ("kill:w0@x.step=3", "kill takes no =ARG"),
        ("msgfail:w0@PYTHON_CALL", "msgfail cannot use message type 'PYTHON_CALL' (torch retries only these); allowed: RREF_FORK_REQUEST"),
        ("msgdelay:w0@RREF_USER_DELETE=1s", "msgdelay cannot use message type 'RREF_USER_DELETE' (torch sends the others from C++"),
        ("msgfail:w0@RREF_USER_DELETE=²", "msgfail's count must be a whole number"),
        ("kill:w0@x.step#²", "cannot parse fault"),
        ("delay:w0@x.step=nan", "bad duration 'nan'"),
        ("kill:w0@rpc.call:bad name", "cannot parse fault"),
        ("kill:w0@rpc.cal:Agent.step", "bad failpoint name 'rpc.cal:Agent.step'"),
        ("kill:w0@call:pkg.mod", "bad failpoint name 'call:pkg.mod'"),
        ("msgdelay:w0@NOT_A_TYPE=1s", "msgdelay cannot use message type 'NOT_A_TYPE'"),
        ("msgfail:w0@RREF_USER_DELETE#2", "msgfail takes no #HIT"),
        ("msgfail:w0@RREF_USER_DELETE=x", "msgfail's count must be a whole number"),
        ("kill:w0@9bad", "bad failpoint name '9bad'"),
    ],
)
def test_each_bad_spec_names_the_token_and_what_is_allowed(text, message):
    with pytest.raises(FaultPlanError) as caught:
        FaultPlan.parse(text, where="--faults")
    assert str(caught.value).startswith("--faults: ")
    assert message in str(caught.value)


def test_validation_against_the_world():
    plan = FaultPlan.parse("kill:trainer9@trainer.step")
    with pytest.raises(FaultPlanError, match="unknown worker 'trainer9'; this world's workers are ps, trainer1"):
        plan.validate(["ps", "trainer1"])
    with pytest.raises(FaultPlanError, match="unknown failpoint 'trainer.step'; known failpoints: ps.forward"):
        FaultPlan.parse("kill:ps@trainer.step").validate(["ps"], failpoints=["ps.forward"])
    with pytest.raises(FaultPlanError, match="different counts"):
        FaultPlan.parse("msgfail:ps@RREF_USER_DELETE=1,msgfail:ps@RREF_FORK_REQUEST=2").validate(["ps"])


def test_kill_targets():
    plan = FaultPlan.parse("kill:a@x#2,delay:b@x=1ms,kill:c@y")
    assert plan.kill_targets() == {"a", "c"}
    assert plan.for_target("b") == (Fault("delay", "b", "x", 1, True, 0.001),)


@pytest.mark.parametrize(
    ("text", "duplicate", "first"),
    [
        ("kill:a@x.step#3,delay:b@x.step=1ms,kill:a@x.step#3", "'kill:a@x.step#3' (fault 3 of the plan)",
         "'kill:a@x.step#3' (fault 1)"),
        ("raise:a@x.step#2=boom,raise:a@x.step#2=bang", "'raise:a@x.step#2=bang' (fault 2 of the plan)",
         "'raise:a@x.step#2=boom' (fault 1)"),
        ("msgfail:a@RREF_USER_DELETE=2,msgfail:a@RREF_USER_DELETE=2", "'msgfail:a@RREF_USER_DELETE=2' (fault 2",
         "(fault 1)"),
    ],
)
def test_a_duplicate_fault_is_refused_naming_both(text, duplicate, first):
    # Issue 28: a fault given twice was accepted silently. Two faults of one
    # kind at one worker, point and hit fire together: one of them is a mistake.
    with pytest.raises(FaultPlanError, match="duplicate fault") as caught:
        FaultPlan.parse(text).validate(["a", "b"], where="--faults")
    assert str(caught.value).startswith("--faults: duplicate fault ")
    assert duplicate in str(caught.value) and first in str(caught.value)


def test_the_same_fault_at_other_hits_or_kinds_is_not_a_duplicate():
    FaultPlan.parse("kill:a@x.step#3,delay:a@x.step#3=1ms,raise:a@x.step#1,raise:a@x.step#2,"
                    "raise:b@x.step#1").validate(["a", "b"])


@pytest.mark.parametrize(
    ("text", "names", "shows"),
    [
        ("kill:" + "t" * 100_000 + "@x.step#3", ["a"], "unknown worker 'ttttt"),
        ("kill:a@" + "p" * 100_000, ["a"], "failpoint name 'ppppp"),
        ("delay:a@x.step=" + "9" * 100_000 + "x", ["a"], "bad duration '9999"),
        ("kill:a@x.step#3=" + "x" * 100_000, ["a"], "kill takes no =ARG"),
        ("boom" * 25_000 + ":a@x.step", ["a"], "unknown fault kind 'boomboom"),
        ("kill:a@x.step#3," * 7_000 + "kill:a@x step", ["a"], "cannot parse fault 'kill:a@x step'"),
    ],
)
def test_a_long_plan_is_cut_in_its_error(text, names, shows):
    # Issue 28: a 100,000-character plan gave a 200 KB error. The message
    # keeps what shows the problem and says how long the input was.
    with pytest.raises(FaultPlanError) as caught:
        FaultPlan.parse(text, where="--faults").validate(names, failpoints=["x.step"], where="--faults")
    message = str(caught.value)
    assert shows in message and len(message) < 600, (len(message), message[:300])


def test_a_failpoint_name_longer_than_any_program_uses_is_refused_cut():
    with pytest.raises(FaultPlanError, match=r"longer than 300 characters") as refused:
        FaultPlan.parse("kill:worker1@rpc.call:" + "x" * 100_000)
    assert len(str(refused.value)) < 400
    FaultPlan.parse("kill:worker1@rpc.call:" + "x" * 250)  # a long but possible name stands


# -- a fault that cannot end before the deadline ---------------------------------------
#
# Issue 38: ``delay:worker1@rpc.call:add=200`` (a bare number, likely meant as
# milliseconds) slept 200 s in a world with a 60 s deadline, and the test
# failed a minute later as a hang. A wait that must fire and outlasts the
# bring-up budget and the deadline together cannot end in time, wherever it
# fires: it is refused before any process starts, saying what the number was
# read as.


def spec(faults, **options):
    from rpc_harness.spec import make_spec

    return make_spec("worlds:identity", 2, faults=faults, where="rpc_world.run()", **options)


@pytest.mark.parametrize("plan", ["delay:worker1@rpc.call:add=200", "msgdelay:worker0@PYTHON_CALL=500"])
def test_a_wait_that_cannot_end_before_the_deadline_is_refused_saying_what_the_number_was_read_as(plan):
    with pytest.raises(FaultPlanError) as refused:
        spec(plan)
    message = str(refused.value)
    seconds = plan.rsplit("=", 1)[1]
    assert message.startswith(f"rpc_world.run(): faults: {FaultPlan.parse(plan)} waits {seconds} s "
                              f"(a number without a unit is seconds: did you mean {seconds}ms?)"), message
    assert "(a bring-up budget of 60 s, then a deadline of 60 s)" in message, message


def test_a_wait_is_refused_from_the_bring_up_budget_and_deadline_together_and_not_before():
    # 10 s of bring-up and 5 s of deadline: a 14.9 s delay fired early in
    # bring-up can end in time, a 15 s one cannot end anywhere.
    assert spec("delay:worker1@x.step=14.9", bringup=10, deadline="5s").options.faults
    with pytest.raises(FaultPlanError, match=r"waits 15 s .*bring-up budget of 10 s, then a deadline of 5 s"):
        spec("delay:worker1@x.step=15", bringup=10, deadline="5s")
    with pytest.raises(FaultPlanError, match=r"waits 120 s .*bring-up budget of 60 s, then a deadline of 60 s"):
        spec("delay:worker1@x.step#3=120s")


@pytest.mark.parametrize("plan", [
    "delay:worker1@rpc.call:add=200ms",  # what was meant
    "delay:worker1@x.step#9?=200",  # optional: it may never fire
    "msgdelay:worker0@PYTHON_CALL?=500",
    "hang:worker1@x.step",  # never ends by design: how a test sees the deadline's report
    "freeze:worker1@x.step",  # the harness kills a frozen rank once the others are done
])
def test_what_can_end_in_time_or_is_meant_to_hang_is_accepted(plan):
    assert str(spec(plan, deadline=1).options.faults) == str(FaultPlan.parse(plan))
