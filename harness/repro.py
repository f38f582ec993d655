"""Repro tokens: one copy-pasteable string that replays a failing world.

A token encodes what defines the world: the scenario (or an entry's import
path), world size, worker names, fault plan, seed, fuzz and config overrides.
Like Hypothesis's ``@reproduce_failure``, it carries a format version, and a
token from another version is refused with a clear error rather than
silently replaying something else.
"""

from __future__ import annotations

import base64
import json
import zlib
from dataclasses import dataclass, field
from typing import Any

from .errors import ReplayError
from .faults import FaultPlan

PREFIX = "rpch"
VERSION = 1


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
        raw = json.dumps(data, separators=(",", ":"), sort_keys=True).encode()
        body = base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode().rstrip("=")
        return f"{PREFIX}{VERSION}_{body}"

    def command(self) -> str:
        """The command line that replays it."""
        return f"rpc-harness replay {self.token()}"


def decode(token: str) -> Repro:
    """Decode a token; :class:`ReplayError` says what is wrong with a bad one."""
    token = token.strip()
    head, sep, body = token.partition("_")
    if not sep or not head.startswith(PREFIX):
        raise ReplayError(f"not an rpc-harness repro token: {token[:40]!r} (tokens start with {PREFIX}{VERSION}_)")
    version = head[len(PREFIX):]
    if version != str(VERSION):
        raise ReplayError(
            f"repro token of format version {version!r}; this rpc-harness reads version {VERSION}. "
            "Replay it with the rpc-harness version that printed it."
        )
    try:
        raw = zlib.decompress(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        data = json.loads(raw)
        repro = Repro(
            world_size=int(data["n"]),
            seed=int(data["seed"]),
            scenario=data.get("s"),
            entry=data.get("e"),
            names=tuple(data.get("names", ())),
            faults=data.get("f", ""),
            fuzz=float(data.get("z", 0.0)),
            config=dict(data.get("c", {})),
            path=data.get("p", ""),
        )
    except ReplayError:
        raise
    except Exception as error:
        raise ReplayError(f"corrupt repro token ({type(error).__name__}: {error}); copy the whole token") from None
    repro.plan  # noqa: B018 - validates the fault plan's text now, not mid-replay
    return repro
