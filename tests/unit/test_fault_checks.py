"""Each check of a fault and a plan, on its own: the whole message of each
refusal, and the edges of what is accepted. (Found missing by mutation
testing, tools/mutation.py: messages that lost their values, and edges that
moved by one, passed every other test.)"""

from __future__ import annotations

import pytest

from rpc_harness.errors import FaultPlanError
from rpc_harness.faults import (
    FAULT_KINDS,
    MAX_POINT,
    Fault,
    FaultPlan,
    format_seconds,
    is_code_point,
    parse_duration,
    parse_fault,
    uses_faulty_agent,
)

REFUSALS = {
    "bad duration": (
        lambda: parse_duration(" x ", where="here"),
        "here: bad duration ' x '; use seconds like 10, 10s or 200ms",
    ),
    "infinite duration": (
        lambda: parse_duration("1e999", where="here"),
        "here: bad duration '1e999'; use seconds like 10, 10s or 200ms",
    ),
    "not a plan": (
        lambda: FaultPlan.coerce(5, where="here"),
        "here: expected a fault plan, its text form or a list of Fault objects, got int",
    ),
    "not faults": (
        lambda: FaultPlan.coerce(["kill:a@b"], where="here"),
        "here: expected Fault objects, got 'kill:a@b'",
    ),
    "default where of a plan": (
        lambda: FaultPlan.parse("kill:a@b#0"),
        "fault plan: 'kill:a@b#0': hit must be >= 1 (hits count from 1), got 0",
    ),
    "default where of a fault": (
        lambda: parse_fault("kill:a@b#0"),
        "fault plan: 'kill:a@b#0': hit must be >= 1 (hits count from 1), got 0",
    ),
    "a hit on a message fault": (
        lambda: parse_fault("msgfail:a@RREF_FORK_REQUEST#2", where="here"),
        "here: 'msgfail:a@RREF_FORK_REQUEST#2': msgfail takes no #HIT; message faults apply to every send",
    ),
    "a bad argument": (
        lambda: parse_fault("delay:a@x.y=zz", where="here"),
        "here: 'delay:a@x.y=zz': bad duration 'zz'; use seconds like 10, 10s or 200ms",
    ),
    "no argument": (
        lambda: parse_fault("delay:a@x.y", where="here"),
        "here: 'delay:a@x.y': delay needs a duration, e.g. =0.2s",
    ),
    "an argument to a kind without one": (
        lambda: parse_fault("kill:a@x.y=1", where="here"),
        "here: 'kill:a@x.y=1': kill takes no =ARG",
    ),
    "a bad count": (
        lambda: parse_fault("msgfail:a@RREF_FORK_REQUEST=x", where="here"),
        "here: 'msgfail:a@RREF_FORK_REQUEST=x': msgfail's count must be a whole number >= 1",
    ),
    "unknown kind": (
        lambda: Fault("boom", "a", "b"),
        "'boom:a@b': unknown fault kind 'boom'; allowed kinds: "
        "delay, kill, raise, hang, freeze, msgfail, msgdelay",
    ),
    "a target not text": (
        lambda: Fault("kill", 3, "b"),
        "'kill:3@b': a fault's target and point are text, got 3, 'b'",
    ),
    "a point not text": (
        lambda: Fault("kill", "a", 3),
        "'kill:a@3': a fault's target and point are text, got 'a', 3",
    ),
    "bad target": (
        lambda: Fault("kill", "a b", "b"),
        "'kill:a b@b': bad target 'a b'; worker names use letters, digits, _ - :",
    ),
    "a bool hit": (
        lambda: Fault("kill", "a", "b", hit=True),
        "'kill:a@b': hit must be >= 1 (hits count from 1), got True",
    ),
    "a failpoint name too long": (
        lambda: Fault("kill", "a", "b" * (MAX_POINT + 1)),
        f"is longer than {MAX_POINT} characters",
    ),
    "bad failpoint": (
        lambda: Fault("kill", "a", "b c"),
        "'kill:a@b c': bad failpoint name 'b c'; use a name like trainer.step, "
        "rpc.call:NAME, rpc.serve:NAME, call:package.module:Qualified.name or c10d.all_reduce",
    ),
    "a message type a delay cannot see": (
        lambda: Fault("msgdelay", "a", "RREF_FORK_REQUEST", arg=1.0),
        "'msgdelay:a@RREF_FORK_REQUEST': msgdelay cannot use message type 'RREF_FORK_REQUEST' "
        "(torch sends the others from C++, where a delay could not be counted); allowed: PYTHON_REMOTE_CALL, "
        "SCRIPT_REMOTE_CALL, PYTHON_CALL, SCRIPT_CALL, PYTHON_RREF_FETCH_CALL, SCRIPT_RREF_FETCH_CALL",
    ),
    "a message type torch does not retry": (
        lambda: Fault("msgfail", "a", "PYTHON_CALL", arg=1),
        "'msgfail:a@PYTHON_CALL': msgfail cannot use message type 'PYTHON_CALL' (torch retries only these); "
        "allowed: RREF_FORK_REQUEST, RREF_CHILD_ACCEPT, RREF_USER_DELETE, CLEANUP_AUTOGRAD_CONTEXT_REQ",
    ),
    "repeat not a bool": (
        lambda: Fault("kill", "a", "b", repeat=1),
        "'kill:a@b': repeat and optional are True or False",
    ),
    "optional not a bool": (
        lambda: Fault("kill", "a", "b", optional=1),
        "'kill:a@b': repeat and optional are True or False",
    ),
    "an argument of a kind without one": (
        lambda: Fault("kill", "a", "b", arg=1),
        "'kill:a@b': kill takes no argument, got 1",
    ),
    "a delay out of range": (
        lambda: Fault("delay", "a", "b", arg=-1.0),
        "'delay:a@b': delay needs a duration in seconds (0..3600), got -1.0",
    ),
    "a count out of range": (
        lambda: Fault("msgfail", "a", "RREF_FORK_REQUEST", arg=0),
        "'msgfail:a@RREF_FORK_REQUEST': msgfail's count must be a whole number >= 1, got 0",
    ),
    "a message with a comma": (
        lambda: Fault("raise", "a", "b", arg="x,y"),
        "'raise:a@b': raise's message must be printable text without commas or outer spaces, got 'x,y'",
    ),
    "a duplicate": (
        lambda: FaultPlan.parse("kill:a@x.y,kill:a@x.y").validate(["a"]),
        "fault plan: duplicate fault 'kill:a@x.y#1' (fault 2 of the plan) repeats 'kill:a@x.y#1' (fault 1): "
        "one kind at one worker, point and hit fires once; give it once",
    ),
    "unknown worker": (
        lambda: FaultPlan.parse("kill:a@x.y").validate(["b", "c"]),
        "fault plan: 'kill:a@x.y#1' targets unknown worker 'a'; this world's workers are b, c",
    ),
    "unknown failpoint": (
        lambda: FaultPlan.parse("kill:a@x.y").validate(["a"], failpoints=["p.q", "r.s"]),
        "fault plan: 'kill:a@x.y#1' names unknown failpoint 'x.y'; known failpoints: p.q, r.s",
    ),
    "two counts on one rank": (
        lambda: FaultPlan.parse(
            "msgfail:a@RREF_FORK_REQUEST=2,msgfail:a@RREF_CHILD_ACCEPT=3"
        ).validate(["a"]),
        "fault plan: msgfail faults on a use different counts [2, 3]; "
        "one rank's message faults must share one count",
    ),
}


@pytest.mark.parametrize("refusal", list(REFUSALS))
def test_each_refusal_says_where_what_and_why_in_full(refusal):
    make, message = REFUSALS[refusal]
    with pytest.raises(FaultPlanError) as raised:
        make()
    assert str(raised.value) == message or str(raised.value).endswith(message)


def test_a_failpoint_name_of_the_longest_length_is_accepted():
    assert Fault("kill", "a", "b" * MAX_POINT).point == "b" * MAX_POINT


@pytest.mark.parametrize(("value", "text"), [(100.0, "100"), (1e-7, "0.0000001"), (0.25, "0.25")])
def test_seconds_print_in_plain_decimals(value, text):
    assert format_seconds(value) == text


def test_one_count_shared_by_a_ranks_message_faults_is_accepted_as_are_other_ranks_counts():
    FaultPlan.parse(
        "msgfail:a@RREF_FORK_REQUEST=2,msgfail:a@RREF_CHILD_ACCEPT=2,msgfail:b@RREF_FORK_REQUEST=3"
    ).validate(["a", "b"])


def test_only_failpoints_written_in_the_code_are_checked_against_the_known_ones():
    assert is_code_point("trainer.step") and not is_code_point("rpc.call:f")
    FaultPlan.parse("kill:a@rpc.call:f,kill:a@call:m:f,raise:a@x.y").validate(
        ["a"], failpoints=["x.y"]
    )


def test_a_coerced_list_of_faults_is_the_plan_of_those_faults():
    faults = [Fault("kill", "a", "b"), Fault("raise", "a", "c")]
    assert FaultPlan.coerce(faults, where="here").faults == tuple(faults)


def test_a_plan_is_true_exactly_when_it_has_faults():
    assert not FaultPlan()
    assert FaultPlan.parse("kill:a@b")


@pytest.mark.parametrize(
    ("plan", "fuzz", "faulty"),
    [
        ("", 0.0, False),
        ("kill:a@b,delay:a@b=1s", 0.0, False),
        ("", 0.1, True),
        ("kill:a@b,msgfail:a@RREF_FORK_REQUEST", 0.0, True),
        ("msgdelay:a@PYTHON_CALL=1ms", 0.0, True),
    ],
)
def test_the_faulty_agent_runs_for_message_faults_or_fuzzing_only(plan, fuzz, faulty):
    assert uses_faulty_agent(FaultPlan.parse(plan), fuzz) is faulty


def test_every_kinds_argument_prints_back_as_it_parses():
    for text in (
        "delay:a@b#2+=0.5s",
        "msgfail:a@RREF_FORK_REQUEST=3",
        "raise:a@b#1?=boom",
        "kill:a@b#4",
    ):
        assert str(parse_fault(text)) == text
    assert parse_fault("raise:a@b").arg is None
    assert parse_fault("msgfail:a@RREF_FORK_REQUEST").arg == 1
    assert parse_fault("delay:a@b=150ms").arg == 0.15
    assert sorted(FAULT_KINDS) == sorted(
        ["delay", "kill", "raise", "hang", "freeze", "msgfail", "msgdelay"]
    )


@pytest.mark.parametrize(
    ("kind", "point", "arg", "accepted"),
    [
        ("delay", "b", 0, True),
        ("delay", "b", 0.5, True),
        ("delay", "b", 3600.0, True),
        ("delay", "b", 3600.5, False),
        ("delay", "b", True, False),
        ("delay", "b", "1", False),
        ("msgdelay", "PYTHON_CALL", 0.0, True),
        ("msgfail", "RREF_FORK_REQUEST", 1, True),
        ("msgfail", "RREF_FORK_REQUEST", 999_999, True),
        ("msgfail", "RREF_FORK_REQUEST", 1_000_000, False),
        ("msgfail", "RREF_FORK_REQUEST", True, False),
        ("msgfail", "RREF_FORK_REQUEST", 2.0, False),
        ("raise", "b", None, True),
        ("raise", "b", "lost it", True),
        ("raise", "b", "", False),
        ("raise", "b", " lost", False),
        ("raise", "b", "lost\n", False),
        ("raise", "b", "lo\x00st", False),
        ("raise", "b", 3, False),
        ("kill", "b", None, True),
        ("kill", "b", 0, False),
    ],
)
def test_each_kinds_argument_is_accepted_exactly_within_its_range(kind, point, arg, accepted):
    if accepted:
        assert Fault(kind, "a", point, arg=arg).arg == arg
    else:
        with pytest.raises(FaultPlanError, match=rf"^'{kind}:a@{point}': {kind}"):
            Fault(kind, "a", point, arg=arg)


@pytest.mark.parametrize(
    ("text", "arg"),
    [
        ("msgfail:a@RREF_FORK_REQUEST=7", 7),
        ("msgfail:a@RREF_FORK_REQUEST=999999", 999_999),
        ("delay:a@b=2s", 2.0),
        ("delay:a@b=0", 0.0),
        ("raise:a@b=", None),
    ],
)
def test_each_kinds_argument_text_reads_as_its_value(text, arg):
    assert parse_fault(text).arg == arg


@pytest.mark.parametrize(
    "text", ["msgfail:a@RREF_FORK_REQUEST=1000000", "msgfail:a@RREF_FORK_REQUEST=-1"]
)
def test_a_count_of_more_than_six_digits_or_a_sign_is_refused(text):
    with pytest.raises(FaultPlanError, match="msgfail's count must be a whole number >= 1$"):
        parse_fault(text)
