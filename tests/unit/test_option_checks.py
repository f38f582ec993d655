"""Each world option's check, on its own: what it refuses, what its message
says, and what it hands back. (Found missing by mutation testing,
tools/mutation.py: a check that raised with no message, or accepted a string
as a list of names, passed every other test.)"""

from __future__ import annotations

import argparse
import sys
import types

import pytest

from rpc_harness import WorldSpecError
from rpc_harness import options as O
from rpc_harness.entry import EntryRef

LIMIT = sys.get_int_max_str_digits()


@pytest.mark.parametrize("value", ["x.step", {"x.step"}, 5, ["x.step", 3]])
def test_failpoints_must_be_a_list_of_names_and_the_message_shows_what_came(value):
    with pytest.raises(
        WorldSpecError, match=r"^here: failpoints must be a list of failpoint names, got "
    ):
        O.check_failpoints(value, "here")
    with pytest.raises(
        WorldSpecError, match=rf"got {O.clip(value)!s}$".replace("[", r"\[").replace("{", r"\{")
    ):
        O.check_failpoints(value, "here")


def test_failpoints_come_back_as_a_tuple_of_the_names_in_order():
    assert O.check_failpoints(["b", "a"], "here") == ("b", "a")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (["A=1"], "here: env must map str to str, got list"),
        (
            [("A", "1")],
            "here: env must map str to str, got list",
        ),  # pairs, but not the checked form
        ((("A", "1", "x"),), "here: env must map str to str, got tuple"),
        ({"A": 1}, "here: env must map str to str, got 'A': 1"),
        ({1: "A"}, "here: env must map str to str, got 1: 'A'"),
        ({"OMP_NUM_THREADS": "0"}, "here: env OMP_NUM_THREADS='0' is not a positive whole number"),
        (
            {"OMP_NUM_THREADS": "-1"},
            "here: env OMP_NUM_THREADS='-1' is not a positive whole number",
        ),
        ({"OMP_NUM_THREADS": "²"}, "here: env OMP_NUM_THREADS='²' is not a positive whole number"),
    ],
)
def test_env_is_refused_with_a_message_naming_the_bad_entry(value, message):
    with pytest.raises(WorldSpecError) as raised:
        O.check_env(value, "here")
    assert str(raised.value) == message


def test_env_takes_a_mapping_or_its_own_checked_form_and_gives_sorted_pairs():
    assert O.check_env({"B": "2", "A": "1", "OMP_NUM_THREADS": "1"}, "here") == (
        ("A", "1"),
        ("B", "2"),
        ("OMP_NUM_THREADS", "1"),
    )
    assert O.check_env((("B", "2"), ("A", "1")), "here") == (("A", "1"), ("B", "2"))
    assert O.check_env({}, "here") == ()


@pytest.mark.parametrize("value", [1, "yes", None])
def test_isolate_takes_only_a_bool_and_names_what_came(value):
    with pytest.raises(WorldSpecError) as raised:
        O.check_isolate(value, "here")
    assert str(raised.value) == f"here: isolate must be True, False or None, got {value!r}"


def test_isolate_gives_back_the_bool():
    assert O.check_isolate(True, "here") is True
    assert O.check_isolate(False, "here") is False


def takes_an_argument(x):
    return x


def takes_nothing():
    return None


def test_a_setup_function_that_needs_an_argument_is_refused_given_by_object_or_by_name():
    message = rf"^here: setup {__name__}:takes_an_argument must be callable with no arguments$"
    with pytest.raises(WorldSpecError, match=message):
        O.check_setup(takes_an_argument, "here")
    with pytest.raises(WorldSpecError, match=message):
        O.check_setup(f"{__name__}:takes_an_argument", "here")


def test_a_setup_function_that_takes_nothing_is_kept_as_its_reference():
    assert O.check_setup(takes_nothing, "here") == EntryRef(__name__, "takes_nothing")
    assert O.check_setup(f"{__name__}:takes_nothing", "here") == EntryRef(__name__, "takes_nothing")
    ref = EntryRef(__name__, "takes_an_argument")
    assert O.check_setup(ref, "here") is ref  # already checked: kept as it is


def test_a_bad_setup_reference_is_refused_naming_the_door_and_setup():
    with pytest.raises(WorldSpecError, match=r"^here: setup: 'no_colon' is not of the form"):
        O.check_setup("no_colon", "here")


def test_a_setup_in_a_script_runs_the_script_once_in_the_parent_and_is_not_loaded_again(tmp_path):
    ran = tmp_path / "ran"
    script = tmp_path / "script.py"
    script.write_text(f"open({str(ran)!r}, 'a').write('ran')\n\ndef setup(x):\n    pass\n")
    ref = O.check_setup(f"{script}:setup", "here")
    assert ref.main_file == str(script)
    assert ran.read_text() == "ran", "the script ran more than once in the parent"


def test_a_setup_function_of_a_scripts_main_is_checked_for_its_arguments(tmp_path, monkeypatch):
    # A script run as __main__ (an xdist worker's own __main__ has no file).
    script = tmp_path / "script.py"
    script.write_text("def main_function(x):\n    return x\n")
    main = types.ModuleType("__main__")
    main.__file__ = str(script)
    exec(compile(script.read_text(), str(script), "exec"), main.__dict__)
    monkeypatch.setitem(sys.modules, "__main__", main)
    main_function = main.main_function
    assert main_function.__module__ == "__main__"
    with pytest.raises(WorldSpecError, match="must be callable with no arguments"):
        O.check_setup(main_function, "here")


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (["cuda:0", 3], "['cuda:0', 3]"),
        (0, "0"),
        ({"cuda": 0}, "{'cuda': 0}"),
    ],
)
def test_devices_of_the_wrong_shape_are_refused_showing_the_value(value, shown):
    with pytest.raises(WorldSpecError) as raised:
        O.check_devices(value, "here")
    assert str(raised.value) == f"here: invalid devices {shown}; use cpu, cuda, or a list of cuda:N"


@pytest.mark.parametrize("value", ["cpu", " cpu ", ["cpu"], (), [], "", "  "])
def test_cpu_and_no_devices_at_all_are_the_default(value):
    assert O.check_devices(value, "here") == ()


def test_devices_that_are_not_cuda_indices_are_named_all_of_them():
    with pytest.raises(WorldSpecError) as raised:
        O.check_devices("cuda:0,gpu,cpu", "here")
    assert str(raised.value) == (
        "here: invalid devices 'gpu, cpu'; use cpu, cuda, "
        "or a list of cuda:N (cpu and cuda stand alone)"
    )


def test_an_unknown_expectation_is_refused_listing_the_known_ones():
    with pytest.raises(WorldSpecError) as raised:
        O.check_expect("finished", "here")
    known = "; ".join(f"{name!r} ({meaning})" for name, meaning in O.EXPECTATIONS.items())
    assert "'nothing'" in known and str(raised.value) == f"here: invalid expect 'finished'; use one of: {known}"


@pytest.mark.parametrize(
    ("text", "value"), [("0x10", 16), ("0o10", 8), ("1_000", 1000), ("-7", -7)]
)
def test_whole_numbers_in_ini_files_take_python_literals(text, value):
    assert O.parse_whole(text) == value


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "-" + "1" * (LIMIT + 1),
            f"a whole number of {LIMIT + 1:,} digits, past the {LIMIT} digits",
        ),
        (
            "+" + "1_" * LIMIT + "1",
            f"a whole number of {LIMIT + 1:,} digits, past the {LIMIT} digits",
        ),
        (
            " " + "1" * (LIMIT + 1) + " ",
            f"a whole number of {LIMIT + 1:,} digits, past the {LIMIT} digits",
        ),
        ("X" + "1" * (LIMIT + 1), "is not a valid int"),
        ("1__" + "1" * (LIMIT - 1), "is not a valid int"),  # bad underscores, not too long
    ],
)
def test_a_whole_number_says_when_it_has_more_digits_than_python_reads(text, message):
    with pytest.raises(ValueError, match=message):
        O.whole_number(text)


def test_a_failed_text_form_is_refused_again_naming_where_it_came_from():
    with pytest.raises(WorldSpecError, match=r"^--rpc-deadline: invalid deadline 'soon'"):
        O.DECLARED["deadline"].read("soon", "--rpc-deadline")
    with pytest.raises(WorldSpecError, match=r"^--rpc-deadline: invalid deadline '0'"):
        O.DECLARED["deadline"].read("0", "--rpc-deadline")


def test_unknown_options_are_refused_listing_the_known_ones_comma_separated():
    with pytest.raises(WorldSpecError, match=f"; world options: {', '.join(O.NAMES)}$"):
        O.WorldOptions.from_values({"sed": 1}, where="here")


def test_a_seed_left_to_chance_is_drawn_once_and_kept():
    options = O.WorldOptions.from_values({}, where="here")
    assert isinstance(options.seed, int) and 0 <= options.seed <= O.MAX_SEED


def test_given_lists_only_the_options_that_differ_from_their_defaults():
    options = O.WorldOptions.from_values(
        {"seed": 3, "fuzz": 0.5, "deadline": O.DEFAULT_DEADLINE}, where="here"
    )
    assert list(options.given()) == [("seed", 3), ("fuzz", 0.5)]


def parser_with(name, **kwargs):
    parser = argparse.ArgumentParser(prog="prog", exit_on_error=False)
    O.add_option(parser, name, **kwargs)
    return parser


def test_a_command_flag_reads_and_checks_its_value_and_says_what_is_wrong_without_the_door():
    assert parser_with("deadline").parse_args(["--deadline", "5"]).deadline == 5.0
    with pytest.raises(argparse.ArgumentError) as raised:
        parser_with("deadline").parse_args(["--deadline", "0"])
    assert str(raised.value).startswith(
        "argument --deadline: invalid deadline '0'; use seconds > 0"
    )
    with pytest.raises(argparse.ArgumentError) as raised:
        parser_with("faults").parse_args(["--faults", "kill:"])
    assert str(raised.value).startswith("argument --faults: cannot parse fault 'kill:'")


def test_a_command_flag_has_the_options_help_unless_given_and_may_be_required():
    assert parser_with("fuzz")._option_string_actions["--fuzz"].help == O.DECLARED["fuzz"].help
    assert parser_with("fuzz", help="mine")._option_string_actions["--fuzz"].help == "mine"
    assert parser_with("fuzz")._option_string_actions["--fuzz"].required is False
    assert parser_with("fuzz", required=True)._option_string_actions["--fuzz"].required is True
