"""Fault plans: which rank misbehaves, where, on which hit, and how.

A plan is data (frozen dataclasses) with a compact text form that
round-trips: ``FaultPlan.parse(str(plan)) == plan``. One fault reads::

    KIND:TARGET@POINT[#HIT[+]][?][=ARG]

- ``TARGET`` is a worker name (``trainer2``, ``observer1``, ``ps``).
- ``POINT`` is a failpoint for ``delay``/``kill``/``raise``/``hang``: one
  written in the code (``trainer.step``), or one that needs no code at all:
  ``rpc.call:NAME`` (the rank issues an RPC that runs NAME), ``rpc.serve:NAME``
  (the rank runs NAME for a peer), ``call:package.module:Qualified.name``
  (any importable function or method) or ``c10d.OP[:GROUP]`` (the rank
  enters a collective or point-to-point op of ``torch.distributed``, from
  Python or from C++ as DDP and FSDP do; see ``rpc_harness.c10d.ops``). For
  ``msgfail``/``msgdelay`` it is a torch RPC message type.
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

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .c10d.ops import check_point as check_c10d_point
from .c10d.ops import is_c10d_point
from .durations import format_seconds, parse_seconds
from .errors import FaultPlanError, clip

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

MAX_DELAY = 3600.0  # seconds


def parse_duration(text: str, *, where: str) -> float:
    """``0.2s``, ``150ms`` or a bare number of seconds (:mod:`rpc_harness.durations`)."""
    try:
        return parse_seconds(text)
    except ValueError as error:
        raise FaultPlanError(f"{where}: {error}") from None


# -- what a kind's =ARG is ---------------------------------------------------------------


@dataclass(frozen=True)
class Argument:
    """How a kind's ``=ARG`` is read, checked and written: ``parse(text,
    where)`` gives the value (text None: no ``=ARG``), ``problem(value)`` says
    what is wrong with a value (None: nothing), ``text(value)`` writes it back
    (None: nothing to write)."""

    parse: Callable[[str | None, str], Any]
    problem: Callable[[Any], str | None]
    text: Callable[[Any], str | None]


def _no_argument(kind: str) -> Argument:
    def parse(text: str | None, where: str) -> None:
        if text is not None:
            raise FaultPlanError(f"{where}: {kind} takes no =ARG")

    return Argument(parse, lambda value: None if value is None else f"{kind} takes no argument, got {clip(value)}",
                    lambda value: None)


def _duration(kind: str) -> Argument:
    def parse(text: str | None, where: str) -> float:
        if text is None:
            raise FaultPlanError(f"{where}: {kind} needs a duration, e.g. =0.2s")
        return parse_duration(text, where=where)

    def problem(value: Any) -> str | None:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= MAX_DELAY:
            return None
        return f"{kind} needs a duration in seconds (0..{MAX_DELAY:g}), got {clip(value)}"

    return Argument(parse, problem, lambda value: f"{format_seconds(value)}s")


def _count(kind: str) -> Argument:
    def parse(text: str | None, where: str) -> int:
        if text is None:
            return 1
        if not re.fullmatch(r"[0-9]{1,6}", text):
            raise FaultPlanError(f"{where}: {kind}'s count must be a whole number >= 1")
        return int(text)

    def problem(value: Any) -> str | None:
        if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 999_999:
            return None
        return f"{kind}'s count must be a whole number >= 1, got {clip(value)}"

    return Argument(parse, problem, str)


def _message(kind: str) -> Argument:
    def problem(value: Any) -> str | None:
        if value is None or (isinstance(value, str) and value and "," not in value and value == value.strip()
                             and all(c.isprintable() for c in value)):
            return None
        return f"{kind}'s message must be printable text without commas or outer spaces, got {clip(value)}"

    return Argument(lambda text, where: text or None, problem, lambda value: value or None)


# -- the kinds -------------------------------------------------------------------------------


@dataclass(frozen=True)
class FaultKind:
    """Everything the harness knows about one kind of fault, in one place:
    parsing, the text form and the checks read it here, and so do the
    supervisor's rule for expected deaths, the report, the choice of RPC
    agent and the torchrun runner. (What a kind *does* in a rank is
    ``context.FIRING``, one function per failpoint kind.)"""

    name: str
    effect: str  # one line, for help texts
    argument: Argument
    at_failpoint: bool = True  # False: it acts on every send of a message type, and takes no #HIT
    repeats: bool = False  # without #HIT: fire on every hit (True) or on the first only
    ends_rank: bool = False  # the world expects the rank dead once it fired
    # It fires as an error, which a program can lose in a future it never
    # waits on: a world that then hangs names the last one (see WorldResult).
    raises: bool = False
    faulty_agent: bool = False  # runs inside torch's FaultyTensorPipe agent
    message_types: tuple[str, ...] = ()  # a message kind's allowed types
    under_torchrun: bool = True  # judged under torchrun too (a rank that stops without ending is not)
    waits: bool = False  # it holds its rank (or the send) ARG seconds each time it fires


FAULT_KINDS: dict[str, FaultKind] = {kind.name: kind for kind in (
    FaultKind("delay", "sleep ARG seconds at every hit", _duration("delay"), repeats=True,
              waits=True),
    FaultKind("kill", "SIGKILL the rank", _no_argument("kill"), ends_rank=True),
    FaultKind("raise", "raise rpc_harness.InjectedFault (ARG: its message)", _message("raise"), raises=True),
    FaultKind("hang", "block forever", _no_argument("hang"), under_torchrun=False),
    FaultKind("freeze", "SIGSTOP the rank; the harness kills it once the others are done",
              _no_argument("freeze"), ends_rank=True, under_torchrun=False),
    FaultKind("msgfail", "fail each send of a message type ARG times (torch retries)", _count("msgfail"),
              at_failpoint=False, faulty_agent=True, message_types=RETRYABLE_MESSAGE_TYPES),
    FaultKind("msgdelay", "delay each send of a message type by ARG seconds", _duration("msgdelay"),
              at_failpoint=False, faulty_agent=True, message_types=DELAYABLE_MESSAGE_TYPES, waits=True),
)}
KINDS = tuple(FAULT_KINDS)
FAILPOINT_KINDS = tuple(name for name, kind in FAULT_KINDS.items() if kind.at_failpoint)
MESSAGE_KINDS = tuple(name for name, kind in FAULT_KINDS.items() if not kind.at_failpoint)
# Kinds that end a rank as the plan asks: the world expects it dead.
ENDING_KINDS = tuple(name for name, kind in FAULT_KINDS.items() if kind.ends_rank)

_FAULT_RE = re.compile(
    r"^(?P<kind>[a-z]+):(?P<target>[^@:#=,?\s]+)@(?P<point>[^#=,?\s]+)"
    r"(?:#(?P<hit>[0-9]+)(?P<repeat>\+)?)?(?P<optional>\?)?(?:=(?P<arg>[^,]*))?$"
)
_NAME_RE = re.compile(r"^[A-Za-z0-9_\-:]+$")
_IDENTIFIERS = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
# The three forms of a failpoint: written in the code, an RPC, any function.
MAX_POINT = 300  # characters of a failpoint name (call:package.module:Qualified.name ones are the longest)
_POINT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
_RPC_POINT_RE = re.compile(rf"^rpc\.(?:call|serve):{_IDENTIFIERS}$")
_CALL_POINT_RE = re.compile(rf"^call:{_IDENTIFIERS}:{_IDENTIFIERS}$")

SYNTAX = "KIND:TARGET@POINT[#HIT[+]][?][=ARG], e.g. kill:trainer2@trainer.step#3"


def uses_faulty_agent(plan: Iterable[Fault], fuzz: float) -> bool:
    """Whether a world runs torch's FaultyTensorPipe agent: when its plan has
    message faults or it fuzzes the schedule (which delays sends)."""
    return bool(fuzz) or any(f.traits.faulty_agent for f in plan)


def is_code_point(point: str) -> bool:
    """Whether ``point`` is a failpoint written in the code (``trainer.step``),
    not one the harness makes (``rpc.call:...``, ``rpc.serve:...``, ``call:...``,
    ``c10d.OP``)."""
    return ":" not in point and not is_c10d_point(point)


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
        _check_fault(self, where=clip(_as_written(self)))

    @property
    def traits(self) -> FaultKind:
        """What this fault's kind is like: its row of :data:`FAULT_KINDS`."""
        return FAULT_KINDS[self.kind]

    @property
    def seconds(self) -> float:
        """The delay of a ``delay``/``msgdelay`` fault, in seconds."""
        return float(self.arg or 0.0)

    def fires_on(self, hit: int) -> bool:
        """Whether this fault fires on the ``hit``-th hit (1-based) of its point."""
        return hit == self.hit or (self.repeat and hit > self.hit)

    def __str__(self) -> str:
        text = f"{self.kind}:{self.target}@{self.point}"
        if self.traits.at_failpoint:
            text += f"#{self.hit}" + ("+" if self.repeat else "")
        if self.optional:
            text += "?"
        arg = self.traits.argument.text(self.arg)
        return text if arg is None else f"{text}={arg}"


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
                raise FaultPlanError(f"{where}: expected Fault objects, got {clip(fault)}")
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
        return frozenset(f.target for f in self.faults if f.traits.ends_rank)

    def validate(
        self,
        names: Sequence[str],
        *,
        failpoints: Sequence[str] | None = None,
        where: str = "fault plan",
    ) -> None:
        """Check targets against the world's worker names and, when the
        scenario declares them, points against its failpoints; refuse a
        fault given twice."""
        first: dict[tuple[str, str, str, int], int] = {}
        for index, fault in enumerate(self.faults):
            # Two faults of one kind at the same worker, point and hit fire
            # together: the same fault twice, or two that contradict each
            # other (two kills, two messages for one raise). Either way the
            # plan does not say what its author meant.
            earlier = first.setdefault((fault.kind, fault.target, fault.point, fault.hit), index)
            if earlier != index:
                raise FaultPlanError(
                    f"{where}: duplicate fault {clip(str(fault))} (fault {index + 1} of the plan) repeats "
                    f"{clip(str(self.faults[earlier]))} (fault {earlier + 1}): one kind at one worker, point and "
                    "hit fires once; give it once"
                )
        for fault in self.faults:
            if fault.target not in names:
                raise FaultPlanError(
                    f"{where}: {clip(str(fault))} targets unknown worker {clip(fault.target)}; "
                    f"this world's workers are {', '.join(names)}"
                )
            if failpoints is not None and fault.traits.at_failpoint and is_code_point(fault.point):
                if fault.point not in failpoints:
                    raise FaultPlanError(
                        f"{where}: {clip(str(fault))} names unknown failpoint {clip(fault.point)}; "
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
        raise FaultPlanError(f"{where}: cannot parse fault {clip(token)}; expected {SYNTAX}")
    kind = FAULT_KINDS.get(match["kind"])
    if kind is None:
        raise FaultPlanError(
            f"{where}: unknown fault kind {clip(match['kind'])} in {clip(token)}; allowed kinds: {', '.join(KINDS)}"
        )
    if not kind.at_failpoint and match["hit"] is not None:
        raise FaultPlanError(f"{where}: {clip(token)}: {kind.name} takes no #HIT; message faults apply to every send")
    hit = int(match["hit"]) if match["hit"] is not None else 1
    repeat = bool(match["repeat"]) if match["hit"] is not None else kind.repeats
    arg = kind.argument.parse(match["arg"], f"{where}: {clip(token)}")
    try:
        return Fault(kind.name, match["target"], match["point"], hit, repeat, arg, bool(match["optional"]))
    except FaultPlanError as error:
        raise FaultPlanError(f"{where}: {error}") from None


def _as_written(fault: Fault) -> str:
    """A fault not yet checked, as a plan names it in an error: with its hit
    where that is not the first (an error about the hit must show it; an
    argument's error shows the argument itself); any value renders."""
    text = f"{fault.kind}:{fault.target}@{fault.point}"
    return text if fault.hit == 1 else f"{text}#{fault.hit}"


def _check_fault(fault: Fault, *, where: str) -> None:
    kind = FAULT_KINDS.get(fault.kind)  # type: ignore[call-overload]
    if kind is None:
        raise FaultPlanError(f"{where}: unknown fault kind {clip(fault.kind)}; allowed kinds: {', '.join(KINDS)}")
    if not isinstance(fault.point, str) or not isinstance(fault.target, str):
        raise FaultPlanError(f"{where}: a fault's target and point are text, got {clip(fault.target)}, {clip(fault.point)}")
    if not _NAME_RE.match(fault.target):
        raise FaultPlanError(f"{where}: bad target {clip(fault.target)}; worker names use letters, digits, _ - :")
    if isinstance(fault.hit, bool) or not isinstance(fault.hit, int) or fault.hit < 1:
        raise FaultPlanError(f"{where}: hit must be >= 1 (hits count from 1), got {clip(fault.hit)}")
    if kind.at_failpoint:
        if len(fault.point) > MAX_POINT:
            # Every report of the fault repeats it (never fired, fired, the
            # replay lines): a name no program uses is refused here, cut.
            raise FaultPlanError(f"{where}: failpoint name {clip(fault.point)} is longer than {MAX_POINT} characters")
        if is_c10d_point(fault.point):
            check_c10d_point(fault.point, where=where)
        elif not (_POINT_RE.match(fault.point) or _RPC_POINT_RE.match(fault.point)
                or _CALL_POINT_RE.match(fault.point)):
            raise FaultPlanError(
                f"{where}: bad failpoint name {clip(fault.point)}; use a name like trainer.step, "
                "rpc.call:NAME, rpc.serve:NAME, call:package.module:Qualified.name or c10d.all_reduce"
            )
    elif fault.point not in kind.message_types:
        why = ("torch retries only these" if kind.name == "msgfail"
               else "torch sends the others from C++, where a delay could not be counted")
        raise FaultPlanError(
            f"{where}: {kind.name} cannot use message type {clip(fault.point)} ({why}); "
            f"allowed: {', '.join(kind.message_types)}"
        )
    problem = kind.argument.problem(fault.arg)
    if problem is not None:
        raise FaultPlanError(f"{where}: {problem}")
    if not isinstance(fault.repeat, bool) or not isinstance(fault.optional, bool):
        raise FaultPlanError(f"{where}: repeat and optional are True or False")
