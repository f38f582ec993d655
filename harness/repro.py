"""Repro tokens: one copy-pasteable string that replays a failing world.

A token encodes what defines the world: the scenario (or an entry's import
path, and whether it was spawned), world size, worker names, fault plan,
seed, fuzz, config overrides, and an entry's arguments when they are plain
data. Like Hypothesis's ``@reproduce_failure``, it carries a format version,
and a token from another version is refused with a clear error rather than
silently replaying something else. Every field is checked against its type
and range when decoded, so a damaged or crafted token is refused naming the
field. A token is code all the same: replaying it imports the module it
names and calls the function.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import FaultPlanError, ReplayError
from .faults import FaultPlan

PREFIX = "rpch"
VERSION = 1
MAX_WORLD_SIZE = 256  # as spec.MAX_WORLD_SIZE (spec imports this module's users, not the other way)
_ENTRY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_.]*$")
_NAME_RE = re.compile(r"^[A-Za-z0-9_\-:]{1,128}$")
_SCENARIO_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_MAX_TOKEN = 1 << 20  # a token longer than this is not one we printed


@dataclass(frozen=True)
class Repro:
    """Everything needed to run a world again."""

    world_size: int
    seed: int
    scenario: str | None = None  # "rl", "rnn", "ps" ...
    entry: str | None = None  # "module:function", for plain worlds
    names: tuple[str, ...] = ()
    faults: str = ""
    fuzz: float = 0.0
    config: dict[str, Any] = field(default_factory=dict)
    path: str = ""  # for entries: the folder their module is imported from
    spawned: bool = False  # the entry is a program run as spawn(fn, args, nprocs)
    args: tuple[Any, ...] = ()  # the entry's arguments, when plain data (JSON)
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.scenario is None) == (self.entry is None):
            raise ReplayError("a repro names exactly one of a scenario or an entry")

    @property
    def plan(self) -> FaultPlan:
        return FaultPlan.parse(self.faults, where="repro token")

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
        if self.faults:
            data["f"] = self.faults
        if self.fuzz:
            data["z"] = self.fuzz
        if self.config:
            data["c"] = self.config
        if self.path:
            data["p"] = self.path
        if self.args:
            data["a"] = list(self.args)
        if self.kwargs:
            data["w"] = self.kwargs
        raw = json.dumps(data, separators=(",", ":"), sort_keys=True).encode()
        body = base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode().rstrip("=")
        return f"{PREFIX}{VERSION}_{body}"

    def command(self) -> str:
        """The command line that replays it."""
        return f"rpc-harness replay {self.token()}"


def plain_data(value: Any) -> bool:
    """Whether ``value`` survives a trip through a token unchanged (tuples
    come back as lists, which arguments treat alike)."""
    try:
        return _same(json.loads(json.dumps(value, allow_nan=False)), value)
    except (TypeError, ValueError):
        return False


def _same(decoded: Any, original: Any) -> bool:
    if isinstance(original, (list, tuple)):
        return isinstance(decoded, list) and len(decoded) == len(original) and all(
            _same(d, o) for d, o in zip(decoded, original, strict=True))
    if isinstance(original, dict):
        return isinstance(decoded, dict) and decoded.keys() == original.keys() and all(
            _same(decoded[k], original[k]) for k in original)
    return type(decoded) is type(original) and decoded == original


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
    known = {"n", "seed", "s", "e", "k", "names", "f", "z", "c", "p", "a", "w"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ReplayError(f"repro token has unknown field(s) {unknown}; it was not made by this rpc-harness")
    n = _whole(data, "n", 1, MAX_WORLD_SIZE, required=True)
    seed = _whole(data, "seed", 0, 2**63 - 1, required=True)
    scenario = _text(data, "s", _SCENARIO_RE, "a scenario name")
    entry = _text(data, "e", _ENTRY_RE, "'package.module:function'")
    if (scenario is None) == (entry is None):
        raise ReplayError("repro token names neither a scenario nor an entry (or both)")
    kind = data.get("k")
    if kind not in (None, "spawn"):
        raise ReplayError(f"repro token field 'k' is {kind!r}; expected 'spawn' or nothing")
    names = data.get("names", [])
    if not isinstance(names, list) or not all(isinstance(x, str) and _NAME_RE.match(x) for x in names):
        raise ReplayError("repro token field 'names' must be a list of worker names")
    if names and len(names) != n:
        raise ReplayError(f"repro token has {len(names)} names for a world of {n}")
    faults = data.get("f", "")
    if not isinstance(faults, str):
        raise ReplayError(f"repro token field 'f' must be a fault plan's text, got {type(faults).__name__}")
    fuzz = data.get("z", 0.0)
    if isinstance(fuzz, bool) or not isinstance(fuzz, (int, float)) or not 0 <= fuzz <= 1:
        raise ReplayError(f"repro token field 'z' (fuzz) must be seconds in 0..1, got {fuzz!r}")
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
    try:
        repro = Repro(world_size=n, seed=seed, scenario=scenario, entry=entry, names=tuple(names), faults=faults,
                      fuzz=float(fuzz), config=config, path=path, spawned=kind == "spawn", args=tuple(args),
                      kwargs=kwargs)
        repro.plan  # noqa: B018 - validates the fault plan's text now, not mid-replay
    except FaultPlanError as error:
        raise ReplayError(f"repro token's fault plan is invalid: {error}") from None
    return repro


def _whole(data: Mapping[str, Any], key: str, low: int, high: int, *, required: bool) -> int:
    if key not in data and not required:
        return low
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ReplayError(f"repro token field {key!r} must be a whole number in {low}..{high}, got {value!r}")
    return value


def _text(data: Mapping[str, Any], key: str, pattern: re.Pattern[str], what: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not pattern.match(value):
        raise ReplayError(f"repro token field {key!r} must be {what}, got {value!r}")
    return value
