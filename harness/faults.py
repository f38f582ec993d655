"""Fault plans: which rank misbehaves, where, on which hit, and how.

A plan is data (frozen dataclasses) with a compact text form that
round-trips: ``FaultPlan.parse(str(plan)) == plan``. One fault reads::

    KIND:TARGET@POINT[#HIT[+]][=ARG]

- ``TARGET`` is a worker name (``trainer2``, ``observer1``, ``ps``).
- ``POINT`` is a failpoint name for ``delay``/``kill``/``raise``/``hang``,
  or a torch RPC message type for ``msgfail``/``msgdelay``.
- ``#HIT`` fires on the HIT-th time the rank reaches the failpoint (1-based);
  ``#HIT+`` on that hit and every later one. Defaults: ``delay`` fires on
  every hit (``#1+``), the others on the first (``#1``).
- ``ARG``: seconds for ``delay``/``msgdelay`` (``0.2s``, ``150ms``), how many
  times each message is failed for ``msgfail`` (default 1), an optional
  message for ``raise``.

Faults are separated by commas: ``kill:trainer2@trainer.step#3,delay:observer1@observer.step=0.2s``.
Firing is decided by hit counts alone, never by wall-clock time, so a plan
replays exactly.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .errors import FaultPlanError

FAILPOINT_KINDS = ("delay", "kill", "raise", "hang")
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

_FAULT_RE = re.compile(
    r"^(?P<kind>[a-z]+):(?P<target>[^@:#=,\s]+)@(?P<point>[^#=,\s]+)"
    r"(?:#(?P<hit>\d+)(?P<repeat>\+)?)?(?:=(?P<arg>[^,]*))?$"
)
_NAME_RE = re.compile(r"^[A-Za-z0-9_\-:]+$")
_POINT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
_DURATION_RE = re.compile(r"^(?P<num>\d+(?:\.\d*)?|\.\d+)(?P<unit>ms|s)?$")

SYNTAX = "KIND:TARGET@POINT[#HIT[+]][=ARG], e.g. kill:trainer2@trainer.step#3"


@dataclass(frozen=True)
class Fault:
    """One fault: ``kind`` fires in rank ``target`` at ``point``."""

    kind: str
    target: str
    point: str
    hit: int = 1
    repeat: bool = False
    arg: float | int | str | None = None

    def __post_init__(self) -> None:
        _check_fault(self, where=str(self) if self.kind in KINDS else self.kind)

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
        if self.kind in ("delay", "msgdelay"):
            text += f"={self.seconds:g}s"
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
        """Worker names the plan may kill."""
        return frozenset(f.target for f in self.faults if f.kind == "kill")

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
            if failpoints is not None and fault.kind in FAILPOINT_KINDS:
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
        return Fault(kind, match["target"], match["point"], hit, repeat, arg)
    except FaultPlanError as error:
        raise FaultPlanError(f"{where}: {error}") from None


def parse_duration(text: str, *, where: str) -> float:
    """``0.2s``, ``150ms`` or a bare number of seconds."""
    match = _DURATION_RE.match(text.strip())
    if match is None:
        raise FaultPlanError(f"{where}: bad duration {text!r}; use seconds like 0.2s or 150ms")
    value = float(match["num"])
    return value / 1000.0 if match["unit"] == "ms" else value


def _parse_arg(kind: str, text: str | None, token: str, where: str) -> float | int | str | None:
    if kind in ("delay", "msgdelay"):
        if text is None:
            raise FaultPlanError(f"{where}: {token!r}: {kind} needs a duration, e.g. ={'0.2s'}")
        return parse_duration(text, where=f"{where}: {token!r}")
    if kind == "msgfail":
        if text is None:
            return 1
        if not text.isdigit():
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
    if fault.hit < 1:
        raise FaultPlanError(f"{where}: hit must be >= 1 (hits count from 1), got {fault.hit}")
    if fault.kind in FAILPOINT_KINDS:
        if not _POINT_RE.match(fault.point):
            raise FaultPlanError(f"{where}: bad failpoint name {fault.point!r}")
    else:
        allowed = RETRYABLE_MESSAGE_TYPES if fault.kind == "msgfail" else MESSAGE_TYPES
        if fault.point not in allowed:
            raise FaultPlanError(
                f"{where}: {fault.kind} cannot use message type {fault.point!r}; "
                f"allowed: {', '.join(allowed)}"
            )
    if fault.kind in ("delay", "msgdelay") and not (
        isinstance(fault.arg, (int, float)) and 0 <= fault.arg <= 3600
    ):
        raise FaultPlanError(f"{where}: {fault.kind} needs a duration in seconds (0..3600), got {fault.arg!r}")
    if fault.kind == "msgfail" and not (isinstance(fault.arg, int) and fault.arg >= 1):
        raise FaultPlanError(f"{where}: msgfail's count must be a whole number >= 1, got {fault.arg!r}")
    if fault.kind == "raise" and fault.arg is not None and (
        not isinstance(fault.arg, str) or "," in fault.arg
    ):
        raise FaultPlanError(f"{where}: raise's message must be text without commas, got {fault.arg!r}")
