"""Replay lines: every way a world is told to run again, built in one place.

Three forms, for worlds and for scenarios alike:

- the pytest line (``pytest NODEID --rpc-seed=N``), which replays a whole test;
- a token (``rpc-harness replay rpch1_...``): one copy-pasteable string;
- a Python call (``rpc_harness.run_world(...)``, ``rpc_harness.spawn(...)``,
  ``rpc_harness.run_scenario(...)``), printed only when every value in it has
  a literal form that evaluates back to itself (otherwise the line says so
  and points at the others: a line that cannot work is never printed).

A token encodes what defines the world: the scenario (or an entry's import
path, and whether it was spawned), world size, worker names, seed, config
overrides, an entry's arguments when they are plain data, the modules the
original run had imported before the world (a test module's import-time
setup), and every world option declared with a token field
(:mod:`rpc_harness.options`). Like Hypothesis's ``@reproduce_failure``, it
carries a format version, and a token from another version is refused with
a clear error rather than silently replaying something else. Every field is
checked against its type and range when decoded, with the option's own
check, so a damaged or crafted token is refused naming the field. A token is
code all the same: replaying it imports the modules it names and calls the
function.
"""

from __future__ import annotations

import ast
import base64
import binascii
import contextlib
import json
import math
import re
import shlex
import sys
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .entry import found_anywhere, import_folder
from .errors import FaultPlanError, ReplayError, WorldSpecError, clip
from .faults import FaultPlan
from .options import COMMAND_LINE_DEADLINE, DECLARED, MAX_WORLD_SIZE, WorldOptions

if TYPE_CHECKING:  # pragma: no cover
    from .spec import WorldSpec

PREFIX = "rpch"
VERSION = 1
SEED_FLAG = "--rpc-seed"  # the pytest plugin's session seed
# package.module:function, or /abs/path/script.py:function (a script's: see rpc_harness.entry)
_ENTRY_RE = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_.]*|/[^\x00\n]*):[A-Za-z_][A-Za-z0-9_.]*$")
_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$")
_NAME_RE = re.compile(r"^[A-Za-z0-9_\-:]{1,128}$")
_SCENARIO_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_MAX_TOKEN = 1 << 20  # a token longer than this is not one we printed
# The token fields that are not world options (those are named in options.py).
_SHAPE_FIELDS = {"n", "s", "e", "k", "names", "c", "p", "a", "w", "m", "r"}
_OPTION_BY_FIELD = {option.token: name for name, option in DECLARED.items() if option.token}


@dataclass(frozen=True)
class Repro:
    """Everything needed to run a world again.

    ``options`` holds the world options a token carries (by name, checked;
    defaults are left out), ``modules`` the ``(module, folder)`` pairs the
    original run had imported before its world, in order; ``reused`` that
    the entry ran in a reused world (``rpc_world_module``,
    ``rpc_world_session``), whose rules a replay checks after it too.
    """

    world_size: int
    seed: int
    scenario: str | None = None  # "rl", "rnn", "ps" ...
    entry: str | None = None  # "module:function", for plain worlds
    names: tuple[str, ...] = ()
    config: dict[str, Any] = field(default_factory=dict)
    path: str = ""  # for entries: the folder their module is imported from
    spawned: bool = False  # the entry is a program run as spawn(fn, args, nprocs)
    args: tuple[Any, ...] = ()  # the entry's arguments, when plain data (JSON)
    kwargs: dict[str, Any] = field(default_factory=dict)
    modules: tuple[tuple[str, str], ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    reused: bool = False

    def __post_init__(self) -> None:
        if (self.scenario is None) == (self.entry is None):
            raise ReplayError("a repro names exactly one of a scenario or an entry")
        checked = {}
        for name, value in self.options.items():
            option = DECLARED.get(name)
            if option is None or option.token is None or name == "seed":
                raise ReplayError(f"a repro cannot carry the world option {name!r}")
            value = option.check(value, f"repro option {name}")
            if value != WorldOptions.__dataclass_fields__[name].default:
                checked[name] = value
        object.__setattr__(self, "options", checked)

    # -- what it holds --------------------------------------------------------------
    @property
    def plan(self) -> FaultPlan:
        return self.options.get("faults", FaultPlan())

    @property
    def faults(self) -> str:
        return str(self.plan)

    @property
    def fuzz(self) -> float:
        return self.options.get("fuzz", 0.0)

    @property
    def schedule(self) -> str:
        return self.options.get("schedule", "free")

    def world_options(self) -> dict[str, Any]:
        """The world options to run it with, as keyword arguments."""
        return {"seed": self.seed, **self.options}

    # -- its forms ----------------------------------------------------------------------
    def token(self) -> str:
        """The compact, versioned text form."""
        data: dict[str, Any] = {"n": self.world_size, "seed": self.seed}
        if self.scenario:
            data["s"] = self.scenario
        if self.entry:
            data["e"] = self.entry
        if self.spawned:
            data["k"] = "spawn"
        if self.names:
            data["names"] = list(self.names)
        if self.config:
            data["c"] = self.config
        if self.path:
            data["p"] = self.path
        if self.args:
            data["a"] = list(self.args)
        if self.kwargs:
            data["w"] = self.kwargs
        if self.modules:
            data["m"] = [list(pair) for pair in self.modules]
        if self.reused:
            data["r"] = True
        for name, value in self.options.items():
            option = DECLARED[name]
            data[option.token] = option.plain(value)  # type: ignore[index]
        raw = json.dumps(data, separators=(",", ":"), sort_keys=True).encode()
        body = base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode().rstrip("=")
        return f"{PREFIX}{VERSION}_{body}"

    def command(self, deadline: float | None = None) -> str:
        """The command line that replays it; with the ``deadline`` the world
        had, where that is not the replay's default (a token does not carry
        it, and a hang would otherwise wait the default out)."""
        line = f"rpc-harness replay {self.token()}"
        if deadline is not None and deadline != COMMAND_LINE_DEADLINE:
            line += f" --deadline {deadline:g}"
        return line


# -- the other forms ------------------------------------------------------------------------


def pytest_line(nodeid: str | Sequence[str], session_seed: int, flags: Sequence[tuple[str, str | None]] = ()) -> str:
    """The pytest command that replays a test (or several, in order) with
    the same seeds, and the world options the run was given on its command
    line (``flags``: flag and text, e.g. ``("--rpc-schedule", "controlled")``,
    or None for a flag that takes no value; the ini file's come along by themselves)."""
    given = "".join(f" {shlex.quote(flag if text is None else f'{flag}={text}')}" for flag, text in flags)
    ids = " ".join(shlex.quote(one) for one in ([nodeid] if isinstance(nodeid, str) else nodeid))
    return f"pytest {ids} {SEED_FLAG}={session_seed}{given}"


def world_token(spec: WorldSpec, *, path: str = "", modules: Sequence[tuple[str, str]] = (),
                reused: bool = False) -> Repro | None:
    """The token of a world whose arguments are plain data (None otherwise:
    a token cannot carry them). ``path`` is the folder its entry's module is
    imported from; ``modules`` what the run had imported before the world;
    ``reused``: the entry ran in a reused world."""
    kwargs = dict(spec.kwargs)
    if not plain_data(spec.args) or not plain_data(kwargs):
        return None
    options = {name: value for name, value in spec.options.given() if DECLARED[name].token and name != "seed"}
    return Repro(world_size=spec.world_size, seed=spec.seed, entry=str(spec.entry),
                 names=spec.names if all(spec.names) else (), path=path, spawned=spec.spawned,
                 args=spec.args, kwargs=kwargs, modules=tuple(modules), options=options, reused=reused)


def replaying(spec: WorldSpec, steps: Sequence[Any]) -> WorldSpec:
    """``spec`` with its schedule replaced by the recorded ``steps`` (a
    controlled world's replay lines take them one for one, and fail, saying
    where, if the world no longer does)."""
    import dataclasses

    from .schedule import replay_schedule

    return dataclasses.replace(spec, options=dataclasses.replace(spec.options, schedule=replay_schedule(steps)))


def python_call(spec: WorldSpec, *, modules: Sequence[tuple[str, str]] = ()) -> str:
    """A Python call that runs the same world again, with everything it was
    given (after preloading ``modules``, what the run had imported before
    the world); or, when an argument has no literal form, a sentence saying so."""
    arguments: list[tuple[str, Any]] = []
    if spec.spawned:
        head = f"rpc_harness.spawn({str(spec.entry)!r}"
        arguments += [("args", spec.args), ("nprocs", spec.world_size)]
        if all(spec.names):
            arguments.append(("names", list(spec.names)))
    else:
        head = f"rpc_harness.run_world({str(spec.entry)!r}"
        arguments.append(("names", list(spec.names)))
        if spec.args:
            arguments.append(("args", spec.args))
    if spec.kwargs:
        arguments.append(("kwargs", dict(spec.kwargs)))
    for name, value in spec.options.given():
        arguments.append((name, DECLARED[name].plain(value)))
    call = _call(head, arguments)
    if call.startswith("("):  # no line: the sentence says why
        return call
    if modules:
        call = f"rpc_harness.preload({', '.join(repr(m) for m, _ in modules)}); {call}"
    # The folders the modules were imported from, where a Python started in
    # another folder would not look (pytest put tests/ on sys.path): without
    # them the line failed from the repository's root (outside-user trial).
    entry_folder = import_folder(spec.entry.module) if spec.entry.main_file is None else ""
    folders = [folder for folder in dict.fromkeys([entry_folder, *(folder for _, folder in modules)])
               if not found_anywhere(folder)]
    if folders:
        return f"import rpc_harness, sys; sys.path[:0] = {folders!r}; {call}"
    return f"import rpc_harness; {call}"  # whole: it runs pasted into `python -c` (outside-user trial)


def scenario_call(repro: Repro) -> str:
    """The Python call that runs the scenario world of ``repro`` again."""
    arguments: list[tuple[str, Any]] = []
    if repro.config:
        arguments.append(("", repro.config))
    arguments += [("world_size", repro.world_size), ("seed", repro.seed)]
    arguments += [(name, DECLARED[name].plain(value)) for name, value in repro.options.items()]
    call = _call(f"rpc_harness.run_scenario({repro.scenario!r}", arguments)
    return call if call.startswith("(") else f"import rpc_harness; {call}"


def _call(head: str, arguments: list[tuple[str, Any]]) -> str:
    unliteral = next((where for name, value in arguments for where in _unliteral(name or "config", value)), None)
    if unliteral is not None:
        where, value = unliteral
        literal = ", ".join(f"{name}={value!r}" for name, value in arguments if name and is_literal(value))
        kind = f"{type(value).__module__}.{type(value).__qualname__}"
        return (f"(no Python line can replay this world: {where} is a {kind}, which has no literal form; "
                f"call {head}, ...) again with the same arguments and {literal})")
    text = head
    for name, value in arguments:
        text += f", {name}={value!r}" if name else f", {value!r}"
    return text + ")"


def _unliteral(where: str, value: Any) -> list[tuple[str, Any]]:
    """The first part of ``value`` without a literal form, named by where it
    sits (``args[1]``, ``kwargs['config']``), as a one-item list; [] if none."""
    if is_literal(value):
        return []
    parts: list[tuple[str, Any]] = []
    if isinstance(value, (list, tuple)):
        parts = [(f"{where}[{i}]", item) for i, item in enumerate(value)]
    elif isinstance(value, dict):
        parts = [(f"{where}[{key!r}]", item) for key, item in value.items()]
    for part, item in parts:
        found = _unliteral(part, item)
        if found:
            return found
    return [(where, value)]


def is_literal(value: Any) -> bool:
    """Whether ``repr(value)`` evaluates back to an equal value of the same type."""
    # The common arguments answered without a parse: every world's Python
    # line asks, and ast.literal_eval was a quarter of the lines' cost in a
    # reused world's millisecond entries.
    kind = type(value)
    if kind in (str, bytes, bool, type(None)):
        return True
    if kind is int and value.bit_length() < 10_000:  # (past Python's limit on digits, repr() raises)
        return True
    if kind is float:
        return math.isfinite(value)  # repr(nan) and repr(inf) are names, not literals
    if kind in (list, tuple):
        return all(is_literal(item) for item in value)
    if kind is dict:
        return all(is_literal(key) and is_literal(item) for key, item in value.items())
    try:
        return _same(ast.literal_eval(repr(value)), value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False


def plain_data(value: Any) -> bool:
    """Whether ``value`` survives a trip through a token unchanged (tuples
    come back as lists, which arguments treat alike)."""
    try:
        return _same(json.loads(json.dumps(value, allow_nan=False)), value, lists_for_tuples=True)
    except (TypeError, ValueError):
        return False


def _same(decoded: Any, original: Any, *, lists_for_tuples: bool = False) -> bool:
    if isinstance(original, (list, tuple)):
        kind = list if lists_for_tuples else type(original)
        return isinstance(decoded, kind) and len(decoded) == len(original) and all(
            _same(d, o, lists_for_tuples=lists_for_tuples) for d, o in zip(decoded, original, strict=True))
    if isinstance(original, dict):
        return isinstance(decoded, dict) and decoded.keys() == original.keys() and all(
            _same(decoded[k], original[k], lists_for_tuples=lists_for_tuples) for k in original)
    return type(decoded) is type(original) and decoded == original


# -- reading a token back ----------------------------------------------------------------------


def decode(token: str) -> Repro:
    """Decode a token; :class:`ReplayError` says what is wrong with a bad one."""
    if not isinstance(token, str):
        raise ReplayError(f"a repro token is text, got {type(token).__name__}")
    token = token.strip()
    head, sep, body = token.partition("_")
    if not sep or not head.startswith(PREFIX):
        raise ReplayError(f"not an rpc-harness repro token: {token[:40]!r} (tokens start with {PREFIX}{VERSION}_)")
    version = head[len(PREFIX):]
    if version != str(VERSION):
        raise ReplayError(
            f"repro token of format version {version[:10]!r}; this rpc-harness reads version {VERSION}. "
            "Replay it with the rpc-harness version that printed it."
        )
    if len(body) > _MAX_TOKEN or not re.fullmatch(r"[A-Za-z0-9_\-]*", body):
        raise ReplayError("corrupt repro token (characters that are not in a token); copy the whole token")
    try:
        raw = zlib.decompressobj().decompress(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)), _MAX_TOKEN)
        data = json.loads(raw)
    except (binascii.Error, zlib.error, ValueError) as error:
        raise ReplayError(f"corrupt repro token ({type(error).__name__}: {error}); copy the whole token") from None
    return _from_fields(data)


def _from_fields(data: Any) -> Repro:
    if not isinstance(data, dict):
        raise ReplayError(f"corrupt repro token: its fields are a {type(data).__name__}, not a mapping")
    unknown = sorted(set(data) - _SHAPE_FIELDS - set(_OPTION_BY_FIELD))
    if unknown:
        raise ReplayError(f"repro token has unknown field(s) {unknown}; it was not made by this rpc-harness")
    n = _whole(data, "n", 1, MAX_WORLD_SIZE)
    if "seed" not in data:
        raise ReplayError("repro token field 'seed' is missing")
    scenario = _text(data, "s", _SCENARIO_RE, "a scenario name")
    entry = _text(data, "e", _ENTRY_RE, "'package.module:function' or '/path/script.py:function'")
    if (scenario is None) == (entry is None):
        raise ReplayError("repro token names neither a scenario nor an entry (or both)")
    kind = data.get("k")
    if kind not in (None, "spawn"):
        raise ReplayError(f"repro token field 'k' is {clip(kind)}; expected 'spawn' or nothing")
    names = data.get("names", [])
    if not isinstance(names, list) or not all(isinstance(x, str) and _NAME_RE.match(x) for x in names):
        raise ReplayError("repro token field 'names' must be a list of worker names")
    if names and len(names) != n:
        raise ReplayError(f"repro token has {len(names)} names for a world of {n}")
    config = data.get("c", {})
    if not isinstance(config, dict) or not all(isinstance(k, str) for k in config) or not all(
        v is None or isinstance(v, (bool, int, float, str)) for v in config.values()
    ):
        raise ReplayError("repro token field 'c' must map config field names to plain values")
    path = data.get("p", "")
    if not isinstance(path, str):
        raise ReplayError("repro token field 'p' must be a folder's path")
    args = data.get("a", [])
    kwargs = data.get("w", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise ReplayError("repro token fields 'a' and 'w' must be a list and a mapping of arguments")
    modules = data.get("m", [])
    if not isinstance(modules, list) or not all(
        isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str) and _MODULE_RE.match(pair[0])
        and isinstance(pair[1], str) for pair in modules
    ):
        raise ReplayError("repro token field 'm' must list [module, folder] pairs")
    options = {}
    # A setup function's check imports its module, which lives where the
    # run that printed the token found it: beside its test.
    with _importable_from([path, *(folder for _, folder in modules)]):
        for key, name in _OPTION_BY_FIELD.items():
            if key in data:
                try:
                    options[name] = DECLARED[name].check(data[key], f"repro token field {key!r}")
                except (WorldSpecError, FaultPlanError) as error:
                    raise ReplayError(str(error)) from None
    reused = data.get("r", False)
    if not isinstance(reused, bool):
        raise ReplayError(f"repro token field 'r' is {clip(reused)}; expected true (an entry of a reused world) "
                          "or nothing")
    if reused and (entry is None or kind == "spawn"):
        raise ReplayError("repro token field 'r' marks an entry of a reused world, but the token names a "
                          f"{'scenario' if entry is None else 'spawned program'}, which no reused world runs")
    seed = options.pop("seed")
    return Repro(reused=reused, world_size=n, seed=seed, scenario=scenario, entry=entry, names=tuple(names), config=config,
                 path=path, spawned=kind == "spawn", args=tuple(args), kwargs=kwargs,
                 modules=tuple((m, folder) for m, folder in modules), options=options)


@contextlib.contextmanager
def _importable_from(folders: Sequence[str]) -> Iterator[None]:
    """``folders`` at the front of ``sys.path`` for the block, then taken
    away again (those that were there already stay)."""
    added = [folder for folder in dict.fromkeys(folders) if folder and folder not in sys.path]
    sys.path[:0] = added
    try:
        yield
    finally:
        for folder in added:
            if folder in sys.path:
                sys.path.remove(folder)


def _whole(data: Mapping[str, Any], key: str, low: int, high: int) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ReplayError(f"repro token field {clip(key)} must be a whole number in {low}..{high}, got {clip(value)}")
    return value


def _text(data: Mapping[str, Any], key: str, pattern: re.Pattern[str], what: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not pattern.match(value):
        raise ReplayError(f"repro token field {clip(key)} must be {what}, got {clip(value)}")
    return value
