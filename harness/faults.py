"""Fault plans: which rank misbehaves, where, on which hit, and how.

A plan is data (frozen dataclasses) with a compact text form that
round-trips: ``FaultPlan.parse(str(plan)) == plan``. One fault reads::

    KIND:TARGET@POINT[#HIT[+]][?][=ARG]

- ``TARGET`` is a worker name (``trainer2``, ``observer1``, ``ps``).
- ``POINT`` is a failpoint for ``delay``/``kill``/``raise``/``hang``: one
  written in the code (``trainer.step``), or one that needs no code at all:
  ``rpc.call:NAME`` (the rank issues an RPC that runs NAME), ``rpc.serve:NAME``
  (the rank runs NAME for a peer) or ``call:package.module:Qualified.name``
  (any importable function or method). For ``msgfail``/``msgdelay`` it is a
  torch RPC message type.
- ``#HIT`` fires on the HIT-th time the rank reaches the failpoint (1-based);
  ``#HIT+`` on that hit and every later one. Defaults: ``delay`` fires on
  every hit (``#1+``), the others on the first (``#1``).
- ``?`` marks a fault optional: one that never fires does not fail the
  world (Hypothesis plans may draw hits past the end of a run). Without it
  a fault that never fires fails the world: a plan that does nothing tests
  nothing.
- ``ARG``: seconds for ``delay``/``msgdelay`` (``0.2s``, ``150ms``), how many
  times each message is failed for ``msgfail`` (default 1; torch tries a
  message 6 times, so 6 or more loses it), an optional message for ``raise``.

Faults are separated by commas: ``kill:trainer2@trainer.step#3,delay:observer1@observer.step=0.2s``.
Firing is decided by hit counts alone, never by wall-clock time, so a plan
replays exactly.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal

from .errors import FaultPlanError

FAILPOINT_KINDS = ("delay", "kill", "raise", "hang", "freeze")
# Kinds that end a rank as the plan asks: the world expects it dead.
ENDING_KINDS = ("kill", "freeze")
MESSAGE_KINDS = ("msgfail", "msgdelay")
KINDS = FAILPOINT_KINDS + MESSAGE_KINDS

# Message types torch's FaultyTensorPipeAgent knows by name.
MESSAGE_TYPES = (
    "RREF_FORK_REQUEST",
    "RREF_CHILD_ACCEPT",
    "RREF_USER_DELETE",
    "CLEANUP_AUTOGRAD_CONTEXT_REQ",
    "PYTHON_REMOTE_CALL",
    "SCRIPT_REMOTE_CALL",
    "PYTHON_CALL",
    "SCRIPT_CALL",
    "PYTHON_RREF_FETCH_CALL",
    "SCRIPT_RREF_FETCH_CALL",
)
# Only these are sent with retries by torch; failing any other type would also
# break init_rpc's and shutdown's own all-gathers, so msgfail is scoped to them.
RETRYABLE_MESSAGE_TYPES = MESSAGE_TYPES[:4]
# Sends of these types are made from Python, where the harness counts them;
# torch sends the others from C++, where a delay could not be seen to happen.
DELAYABLE_MESSAGE_TYPES = MESSAGE_TYPES[4:]
# torch tries a retryable message this many times (1 + its 5 retries): a
# msgfail count this high loses the message.
TORCH_SEND_TRIES = 6

_FAULT_RE = re.compile(
    r"^(?P<kind>[a-z]+):(?P<target>[^@:#=,?\s]+)@(?P<point>[^#=,?\s]+)"
    r"(?:#(?P<hit>[0-9]+)(?P<repeat>\+)?)?(?P<optional>\?)?(?:=(?P<arg>[^,]*))?$"
)
_NAME_RE = re.compile(r"^[A-Za-z0-9_\-:]+$")
_IDENTIFIERS = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
# The three forms of a failpoint: written in the code, an RPC, any function.
_POINT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
_RPC_POINT_RE = re.compile(rf"^rpc\.(?:call|serve):{_IDENTIFIERS}$")
_CALL_POINT_RE = re.compile(rf"^call:{_IDENTIFIERS}:{_IDENTIFIERS}$")
_DURATION_RE = re.compile(r"^(?P<num>(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)(?P<unit>ms|s)?$")

SYNTAX = "KIND:TARGET@POINT[#HIT[+]][?][=ARG], e.g. kill:trainer2@trainer.step#3"


def is_code_point(point: str) -> bool:
    """Whether ``point`` is a failpoint written in the code (``trainer.step``),
    not one the harness makes (``rpc.call:...``, ``rpc.serve:...``, ``call:...``)."""
    return ":" not in point


def format_seconds(value: float) -> str:
    """Seconds as the parser reads them back exactly: ``0.00001``, not ``1e-05``."""
    text = format(Decimal(repr(float(value))).normalize(), "f")
    return text


@dataclass(frozen=True)
class Fault:
    """One fault: ``kind`` fires in rank ``target`` at ``point``."""

    kind: str
    target: str
    point: str
    hit: int = 1
    repeat: bool = False
    arg: float | int | str | None = None
    optional: bool = False

    def __post_init__(self) -> None:
        _check_fault(self, where=f"{self.kind}:{self.target}@{self.point}")

    @property
    def seconds(self) -> float:
        """The delay of a ``delay``/``msgdelay`` fault, in seconds."""
        return float(self.arg or 0.0)

    def fires_on(self, hit: int) -> bool:
        """Whether this fault fires on the ``hit``-th hit (1-based) of its point."""
        return hit == self.hit or (self.repeat and hit > self.hit)

    def __str__(self) -> str:
        text = f"{self.kind}:{self.target}@{self.point}"
        if self.kind in FAILPOINT_KINDS:
            text += f"#{self.hit}" + ("+" if self.repeat else "")
        if self.optional:
            text += "?"
        if self.kind in ("delay", "msgdelay"):
            text += f"={format_seconds(self.seconds)}s"
        elif self.kind == "msgfail":
            text += f"={self.arg}"
        elif self.kind == "raise" and self.arg:
            text += f"={self.arg}"
        return text


@dataclass(frozen=True)
class FaultPlan:
    """An ordered set of faults for one world. Empty plan: no faults."""

    faults: tuple[Fault, ...] = ()

    @classmethod
    def parse(cls, text: str | None, *, where: str = "fault plan") -> FaultPlan:
        """Parse the text form; ``where`` names the source in error messages."""
        if text is None or not text.strip():
            return cls()
        faults = []
        for token in text.split(","):
            token = token.strip()
            if token:
                faults.append(parse_fault(token, where=where))
        return cls(tuple(faults))

    @classmethod
    def coerce(cls, value: FaultPlan | str | Iterable[Fault] | None, *, where: str) -> FaultPlan:
        """A plan from a plan, its text form, an iterable of faults or None."""
        if isinstance(value, FaultPlan):
            return value
        if value is None or isinstance(value, str):
            return cls.parse(value, where=where)
        if not isinstance(value, (list, tuple)):
            raise FaultPlanError(
                f"{where}: expected a fault plan, its text form or a list of Fault objects, "
                f"got {type(value).__name__}"
            )
        faults = tuple(value)
        for fault in faults:
            if not isinstance(fault, Fault):
                raise FaultPlanError(f"{where}: expected Fault objects, got {fault!r}")
        return cls(faults)

    def __str__(self) -> str:
        return ",".join(str(f) for f in self.faults)

    def __bool__(self) -> bool:
        return bool(self.faults)

    def __iter__(self):
        return iter(self.faults)

    def __len__(self) -> int:
        return len(self.faults)

    def for_target(self, name: str) -> tuple[Fault, ...]:
        """The faults aimed at worker ``name``."""
        return tuple(f for f in self.faults if f.target == name)

    def kill_targets(self) -> frozenset[str]:
        """Worker names the plan may kill (or freeze, which ends in a kill)."""
        return frozenset(f.target for f in self.faults if f.kind in ENDING_KINDS)

    def validate(
        self,
        names: Sequence[str],
        *,
        failpoints: Sequence[str] | None = None,
        where: str = "fault plan",
    ) -> None:
        """Check targets against the world's worker names and, when the
        scenario declares them, points against its failpoints."""
        for fault in self.faults:
            if fault.target not in names:
                raise FaultPlanError(
                    f"{where}: {fault} targets unknown worker {fault.target!r}; "
                    f"this world's workers are {', '.join(names)}"
                )
            if failpoints is not None and fault.kind in FAILPOINT_KINDS and is_code_point(fault.point):
                if fault.point not in failpoints:
                    raise FaultPlanError(
                        f"{where}: {fault} names unknown failpoint {fault.point!r}; "
                        f"known failpoints: {', '.join(failpoints)}"
                    )
        for target in {f.target for f in self.faults}:
            counts = {f.arg for f in self.faults if f.target == target and f.kind == "msgfail"}
            if len(counts) > 1:
                # torch's faulty agent takes one fail count per process.
                raise FaultPlanError(
                    f"{where}: msgfail faults on {target} use different counts {sorted(counts)}; "
                    "one rank's message faults must share one count"
                )


def parse_fault(token: str, *, where: str = "fault plan") -> Fault:
    """Parse one fault token; errors name the token and list what is allowed."""
    match = _FAULT_RE.match(token)
    if match is None:
        raise FaultPlanError(f"{where}: cannot parse fault {token!r}; expected {SYNTAX}")
    kind = match["kind"]
    if kind not in KINDS:
        raise FaultPlanError(
            f"{where}: unknown fault kind {kind!r} in {token!r}; allowed kinds: {', '.join(KINDS)}"
        )
    if kind in MESSAGE_KINDS and match["hit"] is not None:
        raise FaultPlanError(f"{where}: {token!r}: {kind} takes no #HIT; message faults apply to every send")
    hit = int(match["hit"]) if match["hit"] is not None else 1
    repeat = bool(match["repeat"]) if match["hit"] is not None else kind == "delay"
    arg = _parse_arg(kind, match["arg"], token, where)
    try:
        return Fault(kind, match["target"], match["point"], hit, repeat, arg, bool(match["optional"]))
    except FaultPlanError as error:
        raise FaultPlanError(f"{where}: {error}") from None


def parse_duration(text: str, *, where: str) -> float:
    """``0.2s``, ``150ms`` or a bare number of seconds."""
    match = _DURATION_RE.match(text.strip())
    if match is None:
        raise FaultPlanError(f"{where}: bad duration {text!r}; use seconds like 0.2s or 150ms")
    value = float(match["num"])
    value = value / 1000.0 if match["unit"] == "ms" else value
    if not math.isfinite(value):
        raise FaultPlanError(f"{where}: bad duration {text!r}; use seconds like 0.2s or 150ms")
    return value


def _parse_arg(kind: str, text: str | None, token: str, where: str) -> float | int | str | None:
    if kind in ("delay", "msgdelay"):
        if text is None:
            raise FaultPlanError(f"{where}: {token!r}: {kind} needs a duration, e.g. ={'0.2s'}")
        return parse_duration(text, where=f"{where}: {token!r}")
    if kind == "msgfail":
        if text is None:
            return 1
        if not re.fullmatch(r"[0-9]{1,6}", text):
            raise FaultPlanError(f"{where}: {token!r}: msgfail's count must be a whole number >= 1")
        return int(text)
    if kind == "raise":
        return text or None
    if text is not None:
        raise FaultPlanError(f"{where}: {token!r}: {kind} takes no =ARG")
    return None


def _check_fault(fault: Fault, *, where: str) -> None:
    if fault.kind not in KINDS:
        raise FaultPlanError(f"{where}: unknown fault kind {fault.kind!r}; allowed kinds: {', '.join(KINDS)}")
    if not _NAME_RE.match(fault.target):
        raise FaultPlanError(f"{where}: bad target {fault.target!r}; worker names use letters, digits, _ - :")
    if isinstance(fault.hit, bool) or not isinstance(fault.hit, int) or fault.hit < 1:
        raise FaultPlanError(f"{where}: hit must be >= 1 (hits count from 1), got {fault.hit}")
    if not isinstance(fault.point, str) or not isinstance(fault.target, str):
        raise FaultPlanError(f"{where}: a fault's target and point are text, got {fault.target!r}, {fault.point!r}")
    if fault.kind in FAILPOINT_KINDS:
        if not (_POINT_RE.match(fault.point) or _RPC_POINT_RE.match(fault.point)
                or _CALL_POINT_RE.match(fault.point)):
            raise FaultPlanError(
                f"{where}: bad failpoint name {fault.point!r}; use a name like trainer.step, "
                "rpc.call:NAME, rpc.serve:NAME or call:package.module:Qualified.name"
            )
    else:
        allowed = RETRYABLE_MESSAGE_TYPES if fault.kind == "msgfail" else DELAYABLE_MESSAGE_TYPES
        if fault.point not in allowed:
            why = ("torch retries only these" if fault.kind == "msgfail"
                   else "torch sends the others from C++, where a delay could not be counted")
            raise FaultPlanError(
                f"{where}: {fault.kind} cannot use message type {fault.point!r} ({why}); "
                f"allowed: {', '.join(allowed)}"
            )
    if fault.kind in ("delay", "msgdelay") and not (
        isinstance(fault.arg, (int, float)) and not isinstance(fault.arg, bool) and 0 <= fault.arg <= 3600
    ):
        raise FaultPlanError(f"{where}: {fault.kind} needs a duration in seconds (0..3600), got {fault.arg!r}")
    if fault.kind == "msgfail" and not (
        isinstance(fault.arg, int) and not isinstance(fault.arg, bool) and 1 <= fault.arg <= 999_999
    ):
        raise FaultPlanError(f"{where}: msgfail's count must be a whole number >= 1, got {fault.arg!r}")
    if fault.kind == "raise" and fault.arg is not None and (
        not isinstance(fault.arg, str) or not fault.arg or "," in fault.arg or fault.arg != fault.arg.strip()
        or any(not c.isprintable() for c in fault.arg)
    ):
        raise FaultPlanError(
            f"{where}: raise's message must be printable text without commas or outer spaces, got {fault.arg!r}"
        )
    if fault.kind in FAILPOINT_KINDS and fault.kind != "raise" and fault.kind != "delay" and fault.arg is not None:
        raise FaultPlanError(f"{where}: {fault.kind} takes no argument, got {fault.arg!r}")
    if not isinstance(fault.repeat, bool) or not isinstance(fault.optional, bool):
        raise FaultPlanError(f"{where}: repeat and optional are True or False")
