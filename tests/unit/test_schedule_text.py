"""The schedule option's text and the schedules' own forms, to the letter:
whole refusals, the edges of pct's numbers, exact blobs and digests, and a
long schedule's summary. (Found unchecked by mutation testing,
tools/mutation.py.)"""

from __future__ import annotations

import pytest

from rpc_harness import schedule as S
from rpc_harness.errors import WorldSpecError

USE = "use free, controlled, random, pct, pct:D, dpor, dfs or replay:..."


@pytest.mark.parametrize(
    ("value", "where", "message"),
    [
        (3, "here", f"here: invalid schedule 3; {USE}"),
        ("sometimes", "here", f"here: invalid schedule 'sometimes'; {USE}"),
        ("pct:0", "here", "here: invalid schedule 'pct:0'; pct's depth is a whole number 1..20"),
        (
            "pct:2:0",
            "here",
            "here: invalid schedule 'pct:2:0'; pct:DEPTH:STEPS takes a whole number of steps 1..1000000",
        ),
        (
            "pct:2:1000001",
            "here",
            "here: invalid schedule 'pct:2:1000001'; pct:DEPTH:STEPS takes a whole number of "
            "steps 1..1000000",
        ),
        ("sometimes", None, f"schedule: invalid schedule 'sometimes'; {USE}"),
    ],
)
def test_a_bad_schedule_is_refused_whole_naming_where_and_what_it_got(value, where, message):
    with pytest.raises(WorldSpecError) as raised:
        S.parse(value) if where is None else S.parse(value, where=where)
    assert str(raised.value) == message
    if where is not None:
        with pytest.raises(WorldSpecError) as raised:
            S.check(value, where)
        assert str(raised.value) == message


@pytest.mark.parametrize(
    ("text", "length"), [("pct:2:1", 1), ("pct:2:1000000", 1_000_000), ("pct:2", 0)]
)
def test_pcts_steps_are_taken_from_one_to_a_million(text, length):
    assert S.parse(text) == S.ScheduleSpec("pct", depth=2, length=length)


def test_the_checked_schedule_is_its_text_stripped():
    assert S.check(" pct:2 ", "here") == "pct:2"


def test_a_guide_parses_to_its_choices():
    guide = S.without([("a", "x"), ("b", "y")], 0)
    assert guide == "guide:eNqrVkpWsoqOVkpU0lGqUNIx1FFKUoqNrQUAR2UGBg"
    assert S.parse(guide) == S.ScheduleSpec("guide", prefs=(("a", "x", 1, "b"),))
    assert S.parse(guide).label == "guide"


# The exact forms: a replay line printed by one run must read the same in every later one.
REPLAYS = [
    (
        [("a", "x"), ("b", "y"), ("a", "x")],
        "replay:eNqrVipRsopWSlTSUUpSitVRKgDxKoC8ShCvGMiLNtAxiNWJNtQxBJIgNlA8RclKKdHQ0sgoLcUixczI2Mg8yVKpFgDbgxMS",
    ),
    (
        [("a", "x")],
        "replay:eNqrVipRsopWSlSK1VEqALEqQKxiICvaQMcgFshOUbJSsjRNtjAwTjSzTDVPMjNPTVGqBQCdjw6x",
    ),
]


@pytest.mark.parametrize(("steps", "text"), REPLAYS)
def test_a_replay_schedule_has_one_exact_form(steps, text):
    assert S.replay_schedule(steps) == text
    as_steps = [S.Step(i, 0, "w", task, "main", point) for i, (task, point) in enumerate(steps)]
    assert S.replay_schedule(as_steps) == text
    assert S.parse(text).steps == tuple(steps)


def test_a_digest_is_sixteen_hex_digits_of_the_tasks_and_points():
    assert S.digest([("a", "x")]) == "95c803a69e7b67ed"
    assert S.digest([S.Step(0, 0, "w", "a", "main", "x", start=1.0)]) == "95c803a69e7b67ed"


def test_a_replay_whose_steps_are_not_text_is_refused():
    blob = S._encode({"t": [1], "p": ["x"], "s": [[0, 0]], "d": "d"})
    with pytest.raises(
        WorldSpecError,
        match=r"^here: a replay schedule that cannot be read \(not a schedule\); copy",
    ):
        S.parse("replay:" + blob, where="here")
    blob = S._encode({"t": ["a"], "p": [2], "s": [[0, 0]], "d": "d"})
    with pytest.raises(WorldSpecError, match=r"\(not a schedule\)"):
        S.parse("replay:" + blob, where="here")
    blob = S._encode({"t": ["a"], "p": ["x"], "s": [[0, 0]], "d": 5})
    with pytest.raises(WorldSpecError, match=r"\(not a schedule\)"):
        S.parse("replay:" + blob, where="here")


def test_a_blob_that_inflates_past_its_limit_is_cut_and_refused():
    blob = S._encode({"t": ["a" * (S._MAX_BLOB + 10)], "p": [], "s": [], "d": ""})
    with pytest.raises(WorldSpecError, match="a replay schedule that cannot be read"):
        S.parse("replay:" + blob)


def runs(count):
    """``count`` runs of one step each, alternating two tasks."""
    return [S.Step(i, i % 2, f"w{i % 2}", f"t{i % 2}", "main", f"p{i}") for i in range(count)]


def test_a_long_schedule_keeps_its_first_and_last_runs_and_counts_the_rest():
    lines = S.summary(runs(50))
    assert len(lines) == 41
    assert lines[:20] == S.summary(runs(20))
    assert lines[20] == "... 10 more runs ..."
    assert lines[21] == "w0 (main): 1 step, up to p30"
    assert lines[-1] == "w1 (main): 1 step, up to p49"
    assert S.summary(runs(40)) == S.summary(runs(40), limit=40) and len(S.summary(runs(40))) == 40
    odd = S.summary(runs(50), limit=5)
    assert odd == [
        "w0 (main): 1 step, up to p0",
        "w1 (main): 1 step, up to p1",
        "... 45 more runs ...",
        "w1 (main): 1 step, up to p47",
        "w0 (main): 1 step, up to p48",
        "w1 (main): 1 step, up to p49",
    ]


def test_a_blob_ending_in_a_letter_that_pads_nothing_keeps_it():
    blob = S.replay_schedule([("a", "x")] * 442)
    assert blob == (
        "replay:eNqrVipRsopWSlSK1VEqALEqQKxiICvaQMcgVmeUHCVHyVFylBwlR8lRcpQcJSkmgS3MFCUrJQsL49QUM5MkUxNTcwNDy0SlWgDd4IhX"
    )
    assert S.parse(blob).steps == (("a", "x"),) * 442
