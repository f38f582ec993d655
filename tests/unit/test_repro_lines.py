"""The replay lines of a world, built from its spec without running it: the
Python call, the token, the pytest line, a scenario's call. (Until mutation
testing, tools/mutation.py, only world tests printed them: a unit run left
most of repro.py's lines unchecked.)"""

from __future__ import annotations

import ast
import enum
import math
import pathlib

import pytest

from rpc_harness import repro as R
from rpc_harness.errors import ReplayError
from rpc_harness.faults import FaultPlan
from rpc_harness.options import COMMAND_LINE_DEADLINE
from rpc_harness.spec import make_spec

ENTRY = f"{__name__}:anything"
# This module is imported from tests/, which pytest put on sys.path: every
# Python line of its entries puts it there first, or the line fails when run
# from any other folder.
TESTS = str(pathlib.Path(__file__).resolve().parents[1])
ON_PATH = f"import rpc_harness, sys; sys.path[:0] = [{TESTS!r}]; "


def anything(ctx, *args, **kwargs):
    return None


def spec(world_size=2, **kwargs):
    return make_spec(ENTRY, world_size, seed=5, **kwargs)


FULL = dict(
    names=["a", "b"],
    args=(1, "x"),
    kwargs={"k": [1, 2]},
    faults="kill:b@x.y",
    fuzz=0.1,
    env={"A": "1"},
)


def test_the_python_call_of_a_run_world_names_everything_it_was_given_in_order():
    assert (
        R.python_call(spec())
        == ON_PATH + f"rpc_harness.run_world({ENTRY!r}, names=['worker0', 'worker1'], seed=5)"
    )
    assert R.python_call(spec(**FULL)) == ON_PATH + (
        f"rpc_harness.run_world({ENTRY!r}, names=['a', 'b'], args=(1, 'x'), kwargs={{'k': [1, 2]}}, "
        "seed=5, faults='kill:b@x.y#1', fuzz=0.1, env={'A': '1'})"
    )


def test_the_python_call_preloads_the_modules_the_run_had_imported_first():
    assert R.python_call(spec(**FULL), modules=[("m1", "/f"), ("m2", "/g")]).startswith(
        ON_PATH + f"rpc_harness.preload('m1', 'm2'); rpc_harness.run_world({ENTRY!r}, names=['a', 'b'],"
    )


def test_the_python_call_puts_first_on_sys_path_only_the_folders_this_process_added(monkeypatch, tmp_path):
    # A test in tests/ is imported from there because pytest put the folder on
    # sys.path; a Python line without it failed from the repository's root
    # with "cannot import module 'test_kill'" (outside-user trial). A
    # module's folder that is not on sys.path here (found through an import
    # hook) or one of the interpreter's own needs nothing.
    helpers = tmp_path / "helpers"
    helpers.mkdir()
    monkeypatch.syspath_prepend(str(helpers))
    line = R.python_call(spec(), modules=[("extra_setup", str(helpers)), ("m1", "/not/on/sys/path")])
    assert line.startswith(f"import rpc_harness, sys; sys.path[:0] = [{TESTS!r}, {str(helpers)!r}]; "
                           "rpc_harness.preload('extra_setup', 'm1'); rpc_harness.run_world("), line
    assert R.python_call(make_spec("json:dumps", 2, seed=5)) == (
        "import rpc_harness; rpc_harness.run_world('json:dumps', names=['worker0', 'worker1'], seed=5)"), \
        "json is the interpreter's own"


def test_the_python_call_of_a_spawned_program_has_its_args_nprocs_and_any_names_given():
    assert R.python_call(spec(3, spawned=True, args=(4,))) == ON_PATH + (
        f"rpc_harness.spawn({ENTRY!r}, args=(4,), nprocs=3, seed=5)"
    )
    assert R.python_call(spec(spawned=True, args=(4,), names=["a", "b"])) == ON_PATH + (
        f"rpc_harness.spawn({ENTRY!r}, args=(4,), nprocs=2, names=['a', 'b'], seed=5)"
    )


def test_no_python_call_is_printed_for_an_argument_without_a_literal_form_and_the_sentence_names_it():
    line = R.python_call(spec(args=(object(),)), modules=[("m1", "/f")])
    assert line == (
        "(no Python line can replay this world: args[0] is a builtins.object, which has no literal form; "
        f"call rpc_harness.run_world({ENTRY!r}, ...) again with the same arguments and "
        "names=['worker0', 'worker1'], seed=5)"
    )
    nested = R.python_call(spec(args=([1, {"z": {1, 2}}],), kwargs={"q": (1, math.nan)}))
    assert nested.startswith(
        "(no Python line can replay this world: kwargs['q'][1] is a builtins.float, which has no literal "
        f"form; call rpc_harness.run_world({ENTRY!r}, ...) again with the same arguments and "
        "names=['worker0', 'worker1'], args=([1, {'z': {1, 2}}],), seed=5)"
    )


def test_a_worlds_token_carries_its_shape_arguments_folder_modules_and_options():
    repro = R.world_token(spec(**FULL), path="/p", modules=[("m1", "/f")])
    assert repro == R.Repro(
        world_size=2,
        seed=5,
        entry=ENTRY,
        names=("a", "b"),
        path="/p",
        args=(1, "x"),
        kwargs={"k": [1, 2]},
        modules=(("m1", "/f"),),
        options={"faults": "kill:b@x.y", "fuzz": 0.1, "env": {"A": "1"}},
    )
    assert R.decode(repro.token()) == repro


def test_the_token_of_an_entry_of_a_reused_world_says_so_and_reads_back_so():
    # Replayed in a fresh world, a broken rule of a reused world passed: the
    # token says "does not reproduce", read as a flaky test (outside-user trial).
    reused = R.world_token(spec(), reused=True)
    assert reused.reused and R.decode(reused.token()) == reused
    plain = R.world_token(spec())
    assert not plain.reused and not R.decode(plain.token()).reused and plain.token() != reused.token()


def test_a_spawned_worlds_token_keeps_names_only_when_they_were_given():
    assert R.world_token(spec(3, spawned=True, args=(4,))).names == ()
    named = R.world_token(spec(spawned=True, args=(4,), names=["a", "b"]))
    assert named.names == ("a", "b") and named.spawned


def test_a_world_whose_arguments_are_not_plain_data_has_no_token():
    assert R.world_token(spec(args=(object(),))) is None
    assert R.world_token(spec(kwargs={"q": (1, 2)})) is not None  # a tuple comes back a list: alike
    assert R.world_token(spec(kwargs={"q": {1, 2}})) is None


def test_the_pytest_line_quotes_the_node_and_carries_the_flags_given():
    assert R.pytest_line("tests/a b.py::t[1]", 9) == "pytest 'tests/a b.py::t[1]' --rpc-seed=9"
    assert R.pytest_line(
        "t.py::t", 9, [("--rpc-schedule", "pct:2"), ("--rpc-schedule-strict", None)]
    ) == ("pytest t.py::t --rpc-seed=9 --rpc-schedule=pct:2 --rpc-schedule-strict")


def test_a_scenario_call_has_its_config_first_then_size_seed_and_options():
    repro = R.Repro(
        world_size=3,
        seed=4,
        scenario="ps",
        config={"batches": 2},
        options={"faults": "kill:trainer1@x.y", "fuzz": 0.0},
    )
    assert R.scenario_call(repro) == (
        "import rpc_harness; "
        "rpc_harness.run_scenario('ps', {'batches': 2}, world_size=3, seed=4, faults='kill:trainer1@x.y#1')"
    )
    assert R.scenario_call(R.Repro(world_size=3, seed=4, scenario="ps")) == (
        "import rpc_harness; rpc_harness.run_scenario('ps', world_size=3, seed=4)"
    )


def test_a_repro_gives_its_options_with_the_defaults_of_those_it_leaves_out():
    repro = R.Repro(
        world_size=3, seed=4, scenario="ps", options={"faults": "kill:a@x.y", "fuzz": 0.5}
    )
    assert repro.world_options() == {
        "seed": 4,
        "faults": FaultPlan.parse("kill:a@x.y"),
        "fuzz": 0.5,
    }
    assert (repro.faults, repro.fuzz, repro.schedule) == ("kill:a@x.y#1", 0.5, "free")
    bare = R.Repro(world_size=3, seed=4, scenario="ps")
    assert (bare.plan, bare.faults, bare.fuzz, bare.schedule) == (FaultPlan(), "", 0.0, "free")
    assert bare.world_options() == {"seed": 4}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"seed": 3}, "a repro cannot carry the world option 'seed'"),
        ({"isolate": True}, "a repro cannot carry the world option 'isolate'"),
        ({"nope": 1}, "a repro cannot carry the world option 'nope'"),
    ],
)
def test_a_repro_refuses_options_a_token_cannot_carry(options, message):
    with pytest.raises(ReplayError, match=f"^{message}$"):
        R.Repro(world_size=2, seed=1, entry=ENTRY, options=options)


def test_a_repro_names_exactly_one_of_a_scenario_or_an_entry():
    for kwargs in ({}, {"scenario": "ps", "entry": ENTRY}):
        with pytest.raises(ReplayError, match="exactly one of a scenario or an entry"):
            R.Repro(world_size=2, seed=1, **kwargs)


def test_replaying_swaps_only_the_schedule_for_the_recorded_steps():
    original = spec(**FULL)
    again = R.replaying(original, [("a", "x"), ("b", "y")])
    assert again.options.schedule.startswith("replay:")
    assert (
        again.options.schedule == R.replaying(original, [("a", "x"), ("b", "y")]).options.schedule
    )
    assert (
        again.options.schedule != R.replaying(original, [("b", "y"), ("a", "x")]).options.schedule
    )
    assert again.options.faults == original.options.faults and again.names == original.names


@pytest.mark.parametrize(
    ("value", "literal", "plain"),
    [
        (1, True, True),
        (1.5, True, True),
        ("x", True, True),
        (None, True, True),
        (True, True, True),
        ([1, "a"], True, True),
        ((1, "a"), True, True),  # a token gives a list back; arguments treat them alike
        ({"a": [1, {"b": 2}]}, True, True),
        ({1: "a"}, True, False),  # JSON keys are text
        ({1, 2}, True, False),
        (math.nan, False, False),
        (math.inf, False, False),
        (b"x", True, False),
        (object(), False, False),
        ([1, object()], False, False),
        ({"a": object()}, False, False),
        ((1, (2, 3)), True, True),
    ],
)
def test_literal_and_plain_values_are_told_apart(value, literal, plain):
    assert R.is_literal(value) is literal
    assert R.plain_data(value) is plain


class Colour(enum.IntEnum):
    RED = 1


class Name(str):
    pass


@pytest.mark.parametrize("value", [
    0, -3, 2**200, 1.5, -0.0, 1e300, math.nan, -math.inf, "", "a'b\"c\n", b"\x00", True, None, Colour.RED,
    Name("x"), [], (), {}, [1, [2, (3, "x")]], {"a": {"b": [1.0, None]}}, {(1, 2): "t"}, [math.nan], (object(),),
    {"k": Colour.RED}, frozenset({1}), range(3), {frozenset({1}): "key"},
])
def test_the_quick_answer_of_is_literal_is_what_parsing_its_repr_says(value):
    # is_literal answers the common types without ast.literal_eval (it is
    # on every world's path): it must say what the parse would.
    try:
        parsed = R._same(ast.literal_eval(repr(value)), value)
    except (ValueError, SyntaxError):
        parsed = False
    assert R.is_literal(value) is parsed


def test_an_int_too_long_for_repr_is_no_literal():
    assert not R.is_literal(10 ** 5000)


@pytest.mark.parametrize(
    ("decoded", "original", "lists_for_tuples", "same"),
    [
        ([1, 2], (1, 2), False, False),
        ([1, 2], (1, 2), True, True),
        ((1, 2), (1, 2), False, True),
        ((1,), (1, 2), False, False),
        ((1, 3), (1, 2), False, False),
        ([[1]], ((1,),), True, True),
        ([[1]], ((1,),), False, False),
        ({"a": 1}, {"a": 1}, False, True),
        ({"a": 1}, {"b": 1}, False, False),
        ({"a": 1}, {"a": 2}, False, False),
        ({"a": [1]}, {"a": (1,)}, True, True),
        ({"a": [1]}, {"a": (1,)}, False, False),
        ([1], {"a": 1}, False, False),
        ({"a": 1}, [1], False, False),
        (1, 1.0, False, False),
        (1, True, False, False),
        (1, 1, False, True),
    ],
)
def test_sameness_is_by_type_and_value_all_the_way_down(decoded, original, lists_for_tuples, same):
    assert R._same(decoded, original, lists_for_tuples=lists_for_tuples) is same


# Tokens printed by this version: a token must read the same in every later
# run, so its exact form is fixed (sorted compact JSON, zlib at level 9,
# URL-safe base64 without padding).
GOLDEN = [
    (
        R.Repro(
            world_size=2,
            seed=3,
            entry="m:f",
            names=("a", "b"),
            path="/p",
            args=(1,),
            kwargs={"k": 2},
            modules=(("m", "/f"),),
            options={"fuzz": 0.5},
            spawned=True,
        ),
        "rpch1_eNoVjDsKgDAQRO_y6sUvNnuVYBExNhIJpBAM3t2xGebfiHgYVyPhZD8wTrFa4n2JZ6VBaPQHq2oXPgljTlWR1saG_KJRX6RqSjs-Gzfe_q_pNR586Jb3AzVHHH0",
    ),
    (
        R.Repro(world_size=1, seed=0, scenario="ps"),
        "rpch1_eNqrVspTsjLUUSpWslIqKFYCMlJTU5SsDGoBVZEG1Q",
    ),
    (
        R.Repro(world_size=1, seed=1, scenario="ps"),
        "rpch1_eNqrVspTsjLUUSpWslIqKFYCMlJTU4AitQBVkwbW",
    ),
]


@pytest.mark.parametrize(("repro", "token"), GOLDEN)
def test_a_token_has_one_exact_form_and_reads_back(repro, token):
    assert repro.token() == token
    assert repro.command() == f"rpc-harness replay {token}"
    assert R.decode(token) == repro


def test_the_replay_command_carries_a_deadline_other_than_the_replays_default():
    repro = R.Repro(world_size=2, seed=3, entry="m:f")
    line = f"rpc-harness replay {repro.token()}"
    assert repro.command() == repro.command(None) == repro.command(COMMAND_LINE_DEADLINE) == line
    assert repro.command(2) == f"{line} --deadline 2" and repro.command(60.5) == f"{line} --deadline 60.5"


def craft(data):
    """A token of any fields, made as tokens are."""
    import base64
    import json
    import zlib

    raw = json.dumps(data).encode()
    return "rpch1_" + base64.urlsafe_b64encode(zlib.compress(raw)).decode().rstrip("=")


VALID = {"n": 2, "seed": 1, "e": "m:f"}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([1], "corrupt repro token: its fields are a list, not a mapping"),
        ({"n": 2, "e": "m:f"}, "repro token field 'seed' is missing"),
        ({**VALID, "n": 0}, "repro token field 'n' must be a whole number in 1..512, got 0"),
        (
            {**VALID, "e": "no colon"},
            "repro token field 'e' must be 'package.module:function' or "
            "'/path/script.py:function', got 'no colon'",
        ),
        ({**VALID, "s": "ps"}, "repro token names neither a scenario nor an entry (or both)"),
        ({**VALID, "k": "run"}, "repro token field 'k' is 'run'; expected 'spawn' or nothing"),
        ({**VALID, "names": ["a", 3]}, "repro token field 'names' must be a list of worker names"),
        (
            {**VALID, "names": ["a", "b c"]},
            "repro token field 'names' must be a list of worker names",
        ),
        ({**VALID, "names": ["a"]}, "repro token has 1 names for a world of 2"),
        (
            {**VALID, "c": {"a": [1]}},
            "repro token field 'c' must map config field names to plain values",
        ),
        (
            {**VALID, "c": "x"},
            "repro token field 'c' must map config field names to plain values",
        ),
        ({**VALID, "c": [1]}, "repro token field 'c' must map config field names to plain values"),
        ({**VALID, "p": 3}, "repro token field 'p' must be a folder's path"),
        ({**VALID, "r": 1}, "repro token field 'r' is 1; expected true (an entry of a reused world) or nothing"),
        ({**VALID, "r": True, "k": "spawn"}, "repro token field 'r' marks an entry of a reused world, but the "
                                             "token names a spawned program, which no reused world runs"),
        ({"n": 2, "seed": 1, "s": "ps", "r": True}, "repro token field 'r' marks an entry of a reused world, but "
                                                    "the token names a scenario, which no reused world runs"),
    ],
)
def test_a_crafted_token_is_refused_naming_the_field(data, message):
    with pytest.raises(ReplayError) as raised:
        R.decode(craft(data))
    assert str(raised.value) == message


def test_a_crafted_token_with_every_field_valid_reads_as_its_fields():
    data = {**VALID, "n": 1, "names": ["a"], "c": {"x": None, "y": 1.5}, "p": "/p", "k": "spawn"}
    repro = R.decode(craft(data))
    assert (repro.world_size, repro.names, repro.config, repro.path, repro.spawned) == (
        1,
        ("a",),
        {"x": None, "y": 1.5},
        "/p",
        True,
    )


def test_a_repro_option_is_checked_naming_it():
    with pytest.raises(Exception, match=r"^repro option fuzz: invalid fuzz 5"):
        R.Repro(world_size=2, seed=1, entry=ENTRY, options={"fuzz": 5})


def test_a_token_ending_in_a_letter_that_pads_nothing_keeps_it():
    repro = R.Repro(world_size=8, seed=999, scenario="ps")
    assert repro.token() == "rpch1_eNqrVspTsrLQUSpWslIqKFYCMlJTU5SsLC0tawFkHAdX"


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (5, "a repro token is text, got int"),
        ("rpch1abc", "not an rpc-harness repro token: 'rpch1abc' (tokens start with rpch1_)"),
        ("xyz_abc", "not an rpc-harness repro token: 'xyz_abc' (tokens start with rpch1_)"),
        (
            "x" * 60 + "_",
            f"not an rpc-harness repro token: {'x' * 40!r} (tokens start with rpch1_)",
        ),
        (
            "rpch123456789012345_abc",
            "repro token of format version '1234567890'; this rpc-harness reads version 1. "
            "Replay it with the rpc-harness version that printed it.",
        ),
        (
            "rpch1_ab$c",
            "corrupt repro token (characters that are not in a token); copy the whole token",
        ),
        (
            "rpch1_" + "A" * (R._MAX_TOKEN + 1),
            "corrupt repro token (characters that are not in a token); copy the whole token",
        ),
    ],
)
def test_a_token_that_is_not_one_is_refused_saying_why(token, message):
    with pytest.raises(ReplayError) as raised:
        R.decode(token)
    assert str(raised.value) == message


def test_a_token_of_the_longest_length_is_read_as_a_token():
    with pytest.raises(ReplayError, match=r"^corrupt repro token \(error: "):
        R.decode("rpch1_" + "A" * R._MAX_TOKEN)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"a": "x"}, "repro token fields 'a' and 'w' must be a list and a mapping of arguments"),
        ({"w": ["x"]}, "repro token fields 'a' and 'w' must be a list and a mapping of arguments"),
        ({"m": ""}, "repro token field 'm' must list [module, folder] pairs"),
        ({"m": [["a", 1]]}, "repro token field 'm' must list [module, folder] pairs"),
        ({"m": [["a b", "/f"]]}, "repro token field 'm' must list [module, folder] pairs"),
        ({"m": [["a", "/f", "x"]]}, "repro token field 'm' must list [module, folder] pairs"),
    ],
)
def test_crafted_arguments_and_modules_are_refused_naming_the_field(fields, message):
    with pytest.raises(ReplayError) as raised:
        R.decode(craft({**VALID, **fields}))
    assert str(raised.value) == message


def test_the_largest_world_reads_back():
    assert R.decode(craft({**VALID, "n": 256})).world_size == 256


def test_a_repro_names_exactly_one_of_a_scenario_or_an_entry_in_those_words():
    with pytest.raises(ReplayError, match="^a repro names exactly one of a scenario or an entry$"):
        R.Repro(world_size=2, seed=1)


def test_a_worlds_token_has_no_folder_unless_given():
    assert R.world_token(spec()).path == ""


def test_a_value_without_a_literal_form_is_named_by_its_module_and_where_it_sits():
    from fractions import Fraction

    line = R.python_call(spec(args=(Fraction(1, 3),)))
    assert "args[0] is a fractions.Fraction, which has no literal form" in line
    repro = R.Repro(world_size=3, seed=4, scenario="ps", config={"lr": 0.5})
    object.__setattr__(repro, "config", {"lr": math.nan})
    assert R.scenario_call(repro).startswith(
        "(no Python line can replay this world: config['lr'] is a builtins.float, which has no literal form; "
        "call rpc_harness.run_scenario('ps', ...) again with the same arguments and world_size=3, seed=4)"
    )


def test_a_token_holds_worlds_up_to_the_largest_and_not_past_it():
    from rpc_harness.options import MAX_WORLD_SIZE

    assert R.decode(craft(dict(VALID, n=MAX_WORLD_SIZE))).world_size == MAX_WORLD_SIZE
    with pytest.raises(ReplayError, match=f"field 'n' must be a whole number in 1..{MAX_WORLD_SIZE}"):
        R.decode(craft(dict(VALID, n=MAX_WORLD_SIZE + 1)))


def test_the_pytest_line_of_several_tests_names_each_once_in_order():
    assert R.pytest_line(["t.py::a", "t.py::b c"], 4) == "pytest t.py::a 't.py::b c' --rpc-seed=4"
