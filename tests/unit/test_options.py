"""World options are declared once (rpc_harness.options): every door reads that
declaration, and the public signatures name exactly the declared options."""

from __future__ import annotations

import dataclasses
import inspect
import math
import typing

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import rpc_harness
from rpc_harness import options as O
from rpc_harness.durations import parse_seconds
from rpc_harness.pytest_plugin import MARKER_KEYS, SESSION_OPTIONS, RpcWorld
from rpc_harness.repro import Repro, decode

# What the public functions take besides world options: the world's shape,
# what runs, and how the call behaves.
NOT_OPTIONS = {"entry", "fn", "scenario", "config", "world_size", "nprocs", "names", "args", "kwargs", "check",
               "on_progress", "repro", "spawned", "where", "self"}
# Every door a world option comes through as a keyword.
DOORS = [rpc_harness.run_world, rpc_harness.spawn, RpcWorld.run, RpcWorld.spawn, rpc_harness.run_scenario,
         rpc_harness.make_spec]


@pytest.mark.parametrize("function", DOORS, ids=lambda f: f.__qualname__)
def test_public_signatures_name_exactly_the_declared_options(function):
    keywords = set(inspect.signature(function).parameters) - NOT_OPTIONS
    assert keywords == set(O.NAMES), "add the option to WorldOptions and to WorldArgs"
    for name in O.NAMES:
        assert inspect.signature(function).parameters[name].default is None, f"{name}: None means the default"
    # What a type checker and an editor read: the door's **options are the
    # typed keywords (PEP 692), not a signature of its own.
    source = inspect.getsource(function)
    assert "**options: Unpack[WorldArgs]" in source, function.__qualname__


def test_the_typed_keywords_are_the_declared_options_in_their_order():
    assert tuple(O.WorldArgs.__annotations__) == O.NAMES, "WorldArgs has one key per field of WorldOptions"
    assert O.WorldArgs.__total__ is False, "every option may be left out"
    # A type checker sees the door through its decorator: a decorator typed
    # Callable[..., Any] would hide every keyword (mypy: "def (*Any, **Any)").
    hints = typing.get_type_hints(O.takes_world_options)
    assert hints["return"] is hints["door"] and isinstance(hints["door"], typing.TypeVar)


@pytest.mark.parametrize("door", ["run_world", "spawn", "rpc_world.run", "rpc_world.spawn", "run_scenario"])
def test_a_misspelled_option_is_refused_by_every_door_not_dropped(rpc_world, monkeypatch, door):
    # **options takes any name: one that is no option must not be dropped
    # silently (a deadline "given" that never applies).
    monkeypatch.setattr("rpc_harness._parent.launcher.launch", lambda spec, **_: _raise())
    call = {"run_world": lambda: rpc_harness.run_world("programs.echo:echo", 2, deadlin=5),
            "spawn": lambda: rpc_harness.spawn("programs.echo:run_worker", args=(2,), nprocs=2, deadlin=5),
            "rpc_world.run": lambda: rpc_world.run("programs.echo:echo", 2, deadlin=5),
            "rpc_world.spawn": lambda: rpc_world.spawn("programs.echo:run_worker", args=(2,), nprocs=2, deadlin=5),
            "run_scenario": lambda: rpc_harness.run_scenario("ps", world_size=2, deadlin=5)}[door]
    with pytest.raises(rpc_harness.WorldSpecError, match=r"unknown world option\(s\) \['deadlin'\]; world options: "):
        call()


def test_every_door_is_read_from_the_declaration():
    assert set(SESSION_OPTIONS) == {name for name, option in O.DECLARED.items() if option.flag}
    assert MARKER_KEYS == ("world_size", "names", *(name for name, option in O.DECLARED.items() if option.marker))
    tokens = [option.token for option in O.DECLARED.values() if option.token]
    assert len(tokens) == len(set(tokens)), "token fields are unique"
    for name, option in O.DECLARED.items():
        assert option.help, name
        if option.flag or option.command_line:
            assert option.parse is not None, f"{name} comes as text through a flag: it needs a parser"


@pytest.mark.parametrize("name", [n for n, option in O.DECLARED.items() if option.check.__qualname__.startswith(
    "check_seconds")])
@pytest.mark.parametrize("value", [0, -1.0, math.inf, -math.inf, math.nan, O.MAX_SECONDS * 2, True, "5 minutes", "0s"])
def test_a_budget_out_of_range_is_refused_naming_where_it_came_from(name, value):
    what = {"bringup": "bring-up budget"}.get(name, name)
    with pytest.raises(rpc_harness.WorldSpecError, match=rf"^here: invalid {what} "):
        O.WorldOptions.from_values({name: value}, where="here")


@given(st.floats(allow_nan=True, allow_infinity=True))
@example(O.MAX_SECONDS)
@example(O.MAX_SECONDS + 1e-6)
@example(5e-324)
@example(-0.0)
def test_seconds_are_accepted_exactly_when_finite_positive_and_at_most_a_week(value):
    ok = math.isfinite(value) and 0 < value <= O.MAX_SECONDS
    try:
        checked = O.WorldOptions.from_values({"deadline": value}, where="here").deadline
    except rpc_harness.WorldSpecError:
        assert not ok
    else:
        assert ok and checked == value


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_fuzz_is_accepted_exactly_in_zero_to_one(value):
    ok = 0 <= value <= O.MAX_FUZZ
    try:
        O.WorldOptions.from_values({"fuzz": value}, where="here")
    except rpc_harness.WorldSpecError:
        assert not ok
    else:
        assert ok


def test_the_largest_accepted_values_are_accepted_through_the_text_doors():
    assert O.DECLARED["deadline"].read(repr(O.MAX_SECONDS), "--rpc-deadline") == O.MAX_SECONDS
    assert O.DECLARED["fuzz"].read("1", "--rpc-fuzz") == 1.0
    assert O.DECLARED["seed"].read(str(2**63 - 1), "--seed") == 2**63 - 1
    for name, text in (("deadline", "inf"), ("deadline", "nan"), ("deadline", "0"), ("fuzz", "-0.1"),
                       ("seed", str(2**63)), ("seed", "-1"), ("rpc_timeout", "1e400")):
        with pytest.raises(rpc_harness.WorldSpecError, match=f"--x: invalid .*'{text}'"):
            O.DECLARED[name].read(text, "--x")


def test_token_options_round_trip_and_defaults_are_left_out():
    repro = Repro(world_size=2, seed=3, entry="m:f", options={"faults": "kill:w1@x.step#2", "fuzz": 0.0,
                                                             "rpc_timeout": 5, "env": {"B": "2", "A": "1"}})
    assert "fuzz" not in repro.options  # its default
    assert decode(repro.token()) == repro
    assert decode(repro.token()).options["env"] == (("A", "1"), ("B", "2"))


def test_unknown_world_options_are_refused():
    with pytest.raises(rpc_harness.WorldSpecError, match=r"here: unknown world option\(s\) \['deadlin'\]"):
        O.WorldOptions.from_values({"deadlin": 5}, where="here")


# One valid value of every world option: a new option must add one here,
# and the fixture test below then checks that it reaches the world.
SAMPLES = {
    "seed": 7, "deadline": 5.0, "bringup": 6.0, "rpc_timeout": 4.0, "faults": "kill:worker1@x.step#2",
    "failpoints": ["x.step"], "fuzz": 0.01, "env": {"A": "1"}, "isolate": False, "rendezvous": "gloo",
    "setup": "programs.fake_dataset:use_fake_dataset", "schedule": "pct:2", "devices": "cuda",
    "expect": "unfinished", "process_group": "gloo", "rpc": False,
}


def test_every_check_reads_back_what_it_made_and_its_plain_form():
    # A value set on the command line or in the ini file is checked at
    # start-up, and that checked value again by each world; a token holds
    # its plain form. (--rpc-devices=cpu broke every world so: check_devices
    # made () of "cpu" and refused () the second time.)
    for name, option in O.DECLARED.items():
        default = O.WorldOptions.__dataclass_fields__[name].default
        values = [SAMPLES[name], *([default] if default is not None else []), *(["cpu"] if name == "devices" else [])]
        for value in values:
            checked = option.check(value, "here")
            assert option.check(checked, "again") == checked, (name, value)
            assert option.check(option.plain(checked), "token") == checked, (name, value)


class _Launched(Exception):
    pass


@pytest.mark.parametrize("how", ["run", "spawn"])
def test_every_option_given_to_the_fixture_reaches_the_world(rpc_world, monkeypatch, how):
    assert set(SAMPLES) == set(O.NAMES), "give every declared option a sample value"
    launched = []

    def launch(spec, **_):
        launched.append(spec)
        raise _Launched

    monkeypatch.setattr("rpc_harness._parent.launcher.launch", launch)
    # devices="cuda" (with the sample's fuzz) is refused on this CPU machine
    # before launch: the refusals have tests of their own (test_devices.py).
    monkeypatch.setattr("rpc_harness._devices.require_world_devices", lambda *args, **kwargs: 1)
    with pytest.raises(_Launched):
        if how == "run":
            rpc_world.run("programs.echo:echo", world_size=2, **SAMPLES)
        else:
            rpc_world.spawn("programs.echo:run_worker", args=(2,), nprocs=2, **SAMPLES)
    expected = O.WorldOptions.from_values(SAMPLES, where="test")
    assert launched[0].options == expected


@pytest.mark.rpc_world(expect="unfinished")
def test_a_calls_expect_nothing_takes_back_its_markers_expect(rpc_world, monkeypatch):
    # expect=None is "not given", as for every option, and leaves the
    # marker's in force: a call had no way to take it back (outside-user trial).
    launched = []

    def launch(spec, **_):
        launched.append(spec.options.expect)
        raise _Launched

    monkeypatch.setattr("rpc_harness._parent.launcher.launch", launch)
    for expect in (None, "nothing"):
        with pytest.raises(_Launched):
            rpc_world.spawn("programs.echo:run_worker", args=(2,), nprocs=2, expect=expect)
    assert launched == ["unfinished", None]


# -- every numeric option, at its edges, through every door it has ------------------------
#
# The rule (README): budgets are seconds, finite, above 0 and at most a week;
# fuzz is 0..1 seconds; a seed is a whole number 0..2**63-1. Whatever the
# door, a value is accepted exactly when the rule says so, and comes through
# unchanged. (The marker, pytest flag and ini doors are tested in pytest
# sessions: tests/world/test_plugin.py.)

NUMERIC = tuple(name for name, option in O.DECLARED.items() if option.parse in (parse_seconds, O.parse_whole))
EDGES = (0, -1, -0.0, 1e-9, 0.5, 1, 1.0, 1.0000001, math.inf, -math.inf, math.nan, O.MAX_SECONDS,
         O.MAX_SECONDS + 1, 2**63 - 1, 2**63, -(2**63))


def test_the_numeric_options_are_the_ones_the_rule_covers():
    assert set(NUMERIC) == {"seed", "deadline", "bringup", "rpc_timeout", "fuzz"}


def follows_the_rule(name, value):
    if isinstance(value, bool):
        return False
    if name == "seed":
        return isinstance(value, int) and 0 <= value <= 2**63 - 1
    if not math.isfinite(value):
        return False
    if name == "fuzz":
        return 0 <= value <= O.MAX_FUZZ
    return 0 < value <= O.MAX_SECONDS


def as_text(value):
    return value if isinstance(value, str) else str(value) if isinstance(value, int) else repr(value)


def door_argument(name, value):
    return getattr(O.WorldOptions.from_values({name: value}, where="run_world()"), name)


def door_text(name, value):
    """A pytest flag's or ini key's text, as the plugin reads it."""
    option = O.DECLARED[name]
    return option.read(as_text(value), option.flag or f"--{name}")


def door_command_line(name, value):
    """An rpc-harness run flag, parsed by the command's own parser."""
    from rpc_harness.apps.cli import _parser

    flag = O.DECLARED[name].command_line
    try:
        args = _parser().parse_args(["run", "ps", f"{flag}={as_text(value)}"])
    except SystemExit:
        raise rpc_harness.WorldSpecError(f"{flag} refused {value!r}") from None
    return getattr(args, name)


def door_token(name, value):
    """A replay token's field, as rpc-harness replay decodes it."""
    import base64
    import json
    import zlib

    from rpc_harness.errors import ReplayError

    field = O.DECLARED[name].token
    data = {"n": 2, "seed": 1, "e": "m:f", field: value}
    raw = json.dumps(data).encode()
    try:
        repro = decode("rpch1_" + base64.urlsafe_b64encode(zlib.compress(raw)).decode().rstrip("="))
    except ReplayError as error:
        raise rpc_harness.WorldSpecError(str(error)) from None
    return repro.seed if name == "seed" else repro.options.get(name, O.WorldOptions.__dataclass_fields__[name].default)


class SessionConfig:
    """What the plugin reads a session's settings from: the command line's
    options and the ini file's keys."""

    def __init__(self, options=None, ini=None):
        self.options, self.ini = options or {}, ini or {}

    def getoption(self, dest):
        return self.options.get(dest)

    def getini(self, key):
        return self.ini.get(key)


def door_session(name, value, where):
    """A pytest flag (``where="options"``) or ini key (``"ini"``), as the
    plugin reads them at start-up (a bad one is a usage error)."""
    from rpc_harness.pytest_plugin import _session_values

    key = O.DECLARED[name].ini
    config = SessionConfig(**{where: {key: as_text(value)}})
    try:
        return _session_values(config)[name][0]
    except pytest.UsageError as error:
        raise rpc_harness.WorldSpecError(str(error)) from None


DOORS = {
    "argument": (door_argument, lambda option: True),
    "pytest_flag": (lambda name, value: door_session(name, value, "options"), lambda option: option.flag is not None),
    "ini": (lambda name, value: door_session(name, value, "ini"), lambda option: option.flag is not None),
    "text": (door_text, lambda option: option.flag is not None or option.command_line is not None),
    "command_line": (door_command_line, lambda option: option.command_line is not None),
    "token": (door_token, lambda option: option.token is not None),
}
CASES = [(door, name) for door, (_, has) in DOORS.items() for name in NUMERIC if has(O.DECLARED[name])]


def through(door, name, value):
    """(accepted, value that came through) for ``value`` at ``door``."""
    try:
        return True, DOORS[door][0](name, value)
    except rpc_harness.WorldSpecError:
        return False, None


@pytest.mark.parametrize(("door", "name"), CASES, ids=[f"{d}-{n}" for d, n in CASES])
def test_every_numeric_option_is_refused_or_accepted_at_its_edges_as_the_rule_says(door, name):
    for value in EDGES:
        accepted, came = through(door, name, value)
        assert accepted == follows_the_rule(name, value), f"{door} {name}={value!r}"
        if accepted:
            assert came == value and type(came) is (int if name == "seed" else float), f"{door} {name}={value!r}"


@pytest.mark.parametrize(("door", "name"), CASES, ids=[f"{d}-{n}" for d, n in CASES])
@settings(max_examples=25)
@given(value=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(2**64), 2**64)))
def test_any_number_is_accepted_exactly_when_the_rule_says(door, name, value):
    accepted, came = through(door, name, value)
    assert accepted == follows_the_rule(name, value)
    if accepted:
        assert came == value


DURATIONS = tuple(name for name in NUMERIC if O.DECLARED[name].parse is parse_seconds)
DURATION_CASES = [(door, name) for door, name in CASES if name in DURATIONS]


def test_the_durations_are_every_option_of_seconds():
    assert set(DURATIONS) == {"deadline", "bringup", "rpc_timeout", "fuzz"}


@pytest.mark.parametrize(("door", "name"), DURATION_CASES, ids=[f"{d}-{n}" for d, n in DURATION_CASES])
def test_every_duration_takes_the_same_text_forms_through_every_door(door, name):
    # A deadline of "10s" was refused while a fault's delay took 10s (issue 38).
    for text, seconds in (("1s", 1.0), ("250ms", 0.25), ("0.5", 0.5), (" 1e-1s ", 0.1), ("1", 1.0)):
        assert through(door, name, text) == (True, seconds), f"{door} {name}={text!r}"
    for text in ("soon", "1 s", "1sec", "1h", "ms", "nans", "infms", "1e400ms"):
        assert through(door, name, text) == (False, None), f"{door} {name}={text!r}"


@pytest.mark.parametrize("name", [n for n in NUMERIC if n != "seed"])
def test_a_refused_value_names_the_door_it_came_through(name):
    option = O.DECLARED[name]
    with pytest.raises(rpc_harness.WorldSpecError, match=r"^run_world\(\): invalid .* inf"):
        door_argument(name, math.inf)
    if option.flag:
        with pytest.raises(rpc_harness.WorldSpecError, match=rf"^{option.flag}: invalid .* 'nan'"):
            door_text(name, math.nan)
    if option.token:
        with pytest.raises(rpc_harness.WorldSpecError, match=rf"repro token field '{option.token}': invalid .* nan"):
            door_token(name, math.nan)


@pytest.mark.parametrize(("where", "key"), [("options", "rpc_seed"), ("ini", "rpc_seed")])
def test_the_session_seed_takes_zero_to_two_to_the_63_minus_one_through_the_flag_and_the_ini(where, key):
    from rpc_harness.pytest_plugin import _session_seed

    for text, ok in (("0", True), (str(2**63 - 1), True), ("-1", False), (str(2**63), False), ("nan", False),
                     ("inf", False), ("1.5", False), ("0x10", True)):
        config = SessionConfig(**{where: {key: text}})
        if ok:
            assert _session_seed(config) == int(text, 0)
        else:
            with pytest.raises(pytest.UsageError, match="invalid seed"):
                _session_seed(config)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"seed": 10**5000}, "invalid seed a whole number of about 5,000 digits; use a whole number 0..2**63-1"),
        ({"deadline": "9" * 100_000}, "invalid deadline '999"),
        ({"env": {"OMP_NUM_THREADS": "x" * 100_000}}, "env OMP_NUM_THREADS='xxx"),
    ],
)
def test_an_option_too_long_to_show_is_cut_and_named(values, message):
    # Issue 28: repr() of a 5,000-digit int raises ValueError (Python's int
    # max str digits) instead of the message naming the door; long text was
    # echoed in full.
    with pytest.raises(rpc_harness.WorldSpecError) as caught:
        O.WorldOptions.from_values(values, where="marker rpc_world")
    text = str(caught.value)
    assert text.startswith("marker rpc_world: ") and message in text and len(text) < 300, text[:400]


def test_the_schedule_option_is_parsed_once_into_the_value_every_part_of_the_world_reads(monkeypatch):
    from rpc_harness import schedule

    calls = []
    real = schedule.parse
    monkeypatch.setattr(schedule, "parse", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    monkeypatch.setattr(O, "_SCHEDULES", {})
    options = O.WorldOptions.from_values({"schedule": " pct:2:40 "}, where="test")
    spec = options.schedule_spec
    assert spec == real("pct:2:40") and options.schedule_spec is spec
    assert options.schedule == "pct:2:40"
    assert calls == [" pct:2:40 "], "parsed by its check, and never again"
    with pytest.raises(rpc_harness.WorldSpecError, match=r"^test: invalid schedule"):
        O.WorldOptions.from_values({"schedule": "sometimes"}, where="test")


def test_options_made_without_their_checks_still_read_their_schedule_parsed_once_by_its_text(monkeypatch):
    from rpc_harness import schedule

    monkeypatch.setattr(O, "_SCHEDULES", {})
    options = O.WorldOptions(schedule="pct:2:40")  # made directly: no check has parsed it
    spec = options.schedule_spec
    assert spec == schedule.parse("pct:2:40") and options.schedule_spec is spec
    assert O._SCHEDULES == {"pct:2:40": spec}, "kept under its own text"


def test_the_parsed_schedules_kept_are_forgotten_at_256_not_after(monkeypatch):
    spec = O.WorldOptions(schedule="controlled").schedule_spec
    monkeypatch.setattr(O, "_SCHEDULES", {f"s{n}": spec for n in range(255)})
    O._remember("last that fits", spec)
    assert len(O._SCHEDULES) == 256
    O._remember("one more", spec)
    assert O._SCHEDULES == {"one more": spec}, "an exploration's many replays do not pile up"


def test_a_rendezvous_that_is_neither_is_refused_naming_both():
    assert O.check_rendezvous("store", "here") == "store" and O.check_rendezvous("gloo", "here") == "gloo"
    with pytest.raises(rpc_harness.WorldSpecError) as refused:
        O.check_rendezvous("tcp", "here")
    assert str(refused.value) == (
        "here: invalid rendezvous 'tcp'; use one of: 'store' (the default: the world's store does what torch's "
        "Gloo group does in init_rpc); 'gloo' (torch's own: a Gloo group over every pair of ranks)")


# The sample values as a scenario's world takes them (its names and failpoints;
# rpc=False: a scenario of collectives only, as an RPC one refuses it).
SCENARIO_SAMPLES = dict(SAMPLES, faults="kill:worker1@x.step#2", failpoints=["x.step"])


def test_every_option_given_to_run_scenario_reaches_the_world_and_its_replay_lines(monkeypatch):
    launched = []

    def launch(spec, **_):
        launched.append(spec)
        raise _Launched

    monkeypatch.setattr("rpc_harness._parent.launcher.launch", launch)
    monkeypatch.setattr("rpc_harness._devices.require_world_devices", lambda *args, **kwargs: 1)
    with pytest.raises(_Launched):
        rpc_harness.run_scenario("ddp", world_size=2, **SCENARIO_SAMPLES)
    spec = launched[0]
    scenario_failpoints = ("ddp.step", "optimizer.step")
    expected = O.WorldOptions.from_values(dict(SCENARIO_SAMPLES, failpoints=[*scenario_failpoints, "x.step"]),
                                          where="test")
    assert spec.options == expected, "every option reaches the world; the scenario's failpoints and the caller's"
    token = decode(spec.repro.split()[2])
    carried = {name for name, option in O.DECLARED.items() if option.token and name != "seed"}
    assert set(token.options) == carried and token.seed == 7
    assert token.options["failpoints"] == ("x.step",), "the token carries only the caller's own failpoints"
    python = spec.repro.split("or: ")[1]
    assert "rendezvous='gloo'" in python and "rpc_timeout=4.0" in python and "failpoints=['x.step']" in python


def test_run_scenario_takes_the_worlds_defaults_not_its_own(monkeypatch):
    launched = []
    monkeypatch.setattr("rpc_harness._parent.launcher.launch", lambda spec, **_: launched.append(spec) or _raise())
    with pytest.raises(_Launched):
        rpc_harness.run_scenario("ps", world_size=2)
    defaults = O.WorldOptions.from_values({"seed": launched[0].seed}, where="test")
    assert launched[0].options == dataclasses.replace(defaults, failpoints=("trainer.step", "ps.forward",
                                                                           "optimizer.step"))


def _raise():
    raise _Launched


@pytest.mark.parametrize("door", ["run_world", "spawn", "rpc_world.run", "rpc_world.spawn", "run_scenario"])
def test_every_door_asks_the_options_own_check_of_this_machine_before_any_process(rpc_world, monkeypatch, door):
    asked = []

    def here(value, options, where):
        asked.append((value, options.rendezvous, where))
        raise rpc_harness.Unsupported(f"{where}: rendezvous {value} is not possible on this machine")

    monkeypatch.setitem(O.DECLARED, "rendezvous", dataclasses.replace(O.DECLARED["rendezvous"], here=here))
    monkeypatch.setattr("rpc_harness._parent.launcher.launch", lambda spec, **_: _raise())
    call = {"run_world": lambda **o: rpc_harness.run_world("programs.echo:echo", 2, **o),
            "spawn": lambda **o: rpc_harness.spawn("programs.echo:run_worker", args=(2,), nprocs=2, **o),
            "rpc_world.run": lambda **o: rpc_world.run("programs.echo:echo", 2, **o),
            "rpc_world.spawn": lambda **o: rpc_world.spawn("programs.echo:run_worker", args=(2,), nprocs=2, **o),
            "run_scenario": lambda **o: rpc_harness.run_scenario("ps", world_size=2, **o)}[door]
    where = {"run_world": "run_world()", "spawn": "spawn()", "rpc_world.run": "rpc_world.run() in ",
             "rpc_world.spawn": "rpc_world.spawn() in ", "run_scenario": "ps"}[door]
    with pytest.raises(rpc_harness.Unsupported, match=r"rendezvous gloo is not possible on this machine$"):
        call(rendezvous="gloo")
    assert [(value, seen) for value, seen, _ in asked] == [("gloo", "gloo")]
    assert asked[0][2].startswith(where), "the refusal names the door"
    with pytest.raises(_Launched):  # an option left at its default asks nothing of the machine
        call()
    assert len(asked) == 1


@pytest.mark.parametrize("args", [["-n", "2"], ["-n2"], ["-nauto"], ["--numprocesses=2"], ["-q", "--numprocesses", "2"]])
def test_pytest_n_without_xdist_says_what_it_needs(monkeypatch, args):
    # pytest alone says "unrecognized arguments: -n" (issue 38).
    from rpc_harness import extras
    from rpc_harness.pytest_plugin import refuse_parallel_without_xdist

    monkeypatch.setattr(extras, "installed", lambda package: package != "xdist")
    with pytest.raises(pytest.UsageError, match=r"needs pytest-xdist, which is not installed: "
                                                r"pip install 'rpc-harness\[xdist\]'$"):
        refuse_parallel_without_xdist(["tests", *args])
    refuse_parallel_without_xdist(["--", *args])  # after --, not an option
    monkeypatch.setattr(extras, "installed", lambda package: True)
    refuse_parallel_without_xdist(["tests", *args])
