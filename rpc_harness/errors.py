"""Every exception rpc-harness raises, in one hierarchy.

Each class says when it is raised. Messages name the rank (and worker name)
involved, say what happened and what to do next.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from .result import WorldResult

# The most characters of one input a message echoes. Echoed in full, a
# 100,000-character fault plan made a 200 KB error (issue 28).
ECHO_LIMIT = 80


def clip(value: object, *, at: int | None = None, limit: int = ECHO_LIMIT) -> str:
    """``repr(value)`` for an error message, cut to about ``limit`` characters.

    Every message that echoes input goes through here. A long text keeps
    the characters around index ``at`` (where the problem is), or, without
    ``at``, its start and its end; what was cut is said, with the length.
    A whole number too long for Python to print (``sys.get_int_max_str_digits``)
    is named by its size, not repr'd (which would raise).
    """
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            text = repr(value)
        except ValueError:  # more digits than Python converts
            return f"a whole number of about {int(value.bit_length() * 0.30103):,} digits"
        return text if len(text) <= limit else f"{text[:limit // 2]}...{text[-(limit // 4):]} ({len(text):,} digits)"
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= limit:
        return repr(value)
    if at is None:
        head, tail = limit * 2 // 3, limit // 3
        cut = text[:head] + "..." + text[-tail:]
    else:
        start = min(max(0, at - limit // 2), len(text) - limit)
        cut = ("..." if start else "") + text[start:start + limit] + ("..." if start + limit < len(text) else "")
    return f"{cut!r} ({len(text):,} characters, cut)" if isinstance(value, str) else f"{cut} ({len(text):,} characters, cut)"


class HarnessError(Exception):
    """Base class of every error rpc-harness raises on purpose."""


class WorldSpecError(HarnessError, ValueError):
    """A world was asked for with bad input (size, names, entry, deadline...).

    Raised before any process starts; the message names the bad value and
    where it came from (argument, marker, command line, ini).
    """


class FaultPlanError(HarnessError, ValueError):
    """A fault plan's text or contents are invalid.

    The message names the bad token and lists what is allowed.
    """


class ReplayError(HarnessError, ValueError):
    """A repro token cannot be decoded (wrong version, corrupt, a field of the
    wrong type or out of range)."""


class ScenarioError(HarnessError, ValueError):
    """A scenario cannot be found in the registry, fails to import, or lacks
    the scenario shape. The message names it and what is missing."""


class UsageError(HarnessError, ValueError):
    """Bad command-line input to ``rpc-harness`` or ``python -m
    rpc_harness.apps.torchrun`` that argparse cannot catch by itself (a path that
    cannot be written, a seed given where a token was expected, a missing
    torchrun variable). The command exits 2 with the message."""


class StaleStore(HarnessError, RuntimeError):
    """A spawned program's own ``file://`` store (its ``init_method``) held
    a store before its world started: one an earlier run left behind.
    Raised in every rank, in its ``init_rpc``, before torch reads the file;
    the message names the file and what is in it."""


class MissingExtra(HarnessError, ImportError):
    """A part of rpc-harness needs a package of one of its extras that is not
    installed (the built-in scenarios need ``[scenarios]``, the strategies
    ``[hypothesis]``). Raised where that part is used, not when the plugin
    loads; the message is one line naming the extra to install."""


class WorldFailed(HarnessError):
    """A world ended with at least one unexpected rank failure.

    Raised by ``run_world(..., check=True)``. ``result`` holds every rank's
    outcome; the message lists every failed rank and ends with the repro line.
    """

    def __init__(self, result: WorldResult) -> None:
        self.result = result
        super().__init__(result.report())


class WorldTimeout(WorldFailed):
    """A world ran past its deadline (or its bring-up budget). The report
    holds every rank's stacks."""


class ControlLost(HarnessError):
    """A world run under a controlled schedule lost control (a step blocked
    where the scheduler cannot see, and the world ran free from there) in a
    pytest session with ``--rpc-schedule-strict`` (ini ``rpc_schedule_strict``).

    Raised by the ``rpc_world`` fixture after the world, whatever its
    ``check``. ``result`` holds the world; the message names the step, what
    control waited for, every rank's stacks and the replay line.
    """

    def __init__(self, result: WorldResult, message: str) -> None:
        self.result = result
        super().__init__(message)


class GradientMismatch(HarnessError, AssertionError):
    """A distributed run's gradients or parameters differ from the baseline.

    The message names scenario, step, rank, parameter, the max absolute and
    relative difference, the tolerance and the seed to replay.
    """


class Unsupported(HarnessError, RuntimeError):
    """What a world needs cannot be had with this torch or on this machine.

    Raised before any process starts when the installed torch lacks a
    private name the harness hooks, or it behaves differently (the message
    names torch's version and each missing piece), or lacks an optional one
    the world needs (torch's faulty agent, for message faults and fuzzing).
    Raised inside a rank, before its ``init_rpc``, by a spawned program
    whose TensorPipe options ask for CUDA devices (``device_maps``,
    ``devices``) where CUDA is not available: the message says what the
    harness runs and what to do.
    """


class InjectedFault(HarnessError, RuntimeError):
    """Raised inside a rank by a ``raise`` fault at a failpoint."""


# -- one line of an error ----------------------------------------------------------------

# torch prefixes the message of an exception raised by code a peer ran for
# us with the peer, and nests each hop's message in the next, escaped once
# more at each hop: a newline reads \n one hop in, \\n two hops in.
_REMOTE_HOP_RE = re.compile(r"On WorkerInfo\(id=\d+, name=([^)]+)\):(?:\n|\\+n)")
_REPR_RE = re.compile(r"^(?P<type>[A-Za-z_][A-Za-z0-9_.]*)\((?P<quote>['\"])(?P<message>.*)(?P=quote)\)$")


def is_remote_exception(error: BaseException) -> bool:
    """Whether ``error`` was raised by the code a peer ran for us (torch tags
    such errors with the worker they came from) rather than by the transport."""
    return _REMOTE_HOP_RE.search(str(error)) is not None


def origin(error: BaseException) -> str:
    """What a remote exception was where it was first raised, and where:
    ``InjectedFault: disk full (raised on w1)``. Other errors: ``Type: message``."""
    text = str(error)
    hops = list(_REMOTE_HOP_RE.finditer(text))
    if not hops:
        return f"{type(error).__name__}: {text.strip()}"
    raised = re.split(r"\n|\\+n", text[hops[-1].end():], maxsplit=1)[0]
    raised = re.sub(r"\\+(['\"])", r"\1", raised).strip()  # its quotes, escaped once a hop
    match = _REPR_RE.match(raised)  # the remote side writes repr(error): Type('message')
    if match:
        raised = f"{match['type']}: {match['message']}" if match["message"] else match["type"]
    return f"{raised} (raised on {hops[-1].group(1)})"


def one_line(error: BaseException) -> str:
    """``Type: first line of the message``; for an exception a peer raised,
    its innermost message and where it was raised (the first line of such an
    error is only ``On WorkerInfo(...):``). An assert pytest rewrote, whose
    first line is its author's message, keeps the comparison too:
    ``AssertionError: rank 2 got tensor([3., 3.]) (assert tensor(6.) < 6)``."""
    name = type(error).__name__
    if is_remote_exception(error):
        inner = origin(error)
        return inner if inner.split(":", 1)[0].split(" (", 1)[0] == name else f"{name}: {inner}"
    lines = str(error).strip().splitlines()
    if not lines:
        return name
    if isinstance(error, AssertionError) and not lines[0].startswith("assert "):
        # pytest writes the message, then the explanation from column 0.
        compared = next((line for line in lines[1:] if line.startswith("assert ")), None)
        if compared is not None:
            return f"{name}: {lines[0]} ({compared})"
    return f"{name}: {lines[0]}"
