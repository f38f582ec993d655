"""What a rank and its supervisor say to each other over their pipe.

Small frozen dataclasses, pickled by the pipe and taken apart with ``match``
on the other end: a field added to one is a field, not a new position in a
tuple that three modules unpack. Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# -- rank -> supervisor -------------------------------------------------------------


@dataclass(frozen=True)
class Joined:
    """Every rank is through ``init_rpc``: ``names`` are every worker's names
    (a spawned program gives them in its own ``init_rpc``)."""

    names: tuple[str, ...]


@dataclass(frozen=True)
class Progress:
    """What the rank's code reported through ``progress()``."""

    done: int
    total: int
    unit: str
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class EntryDone:
    """The entry (or program) is done; the rank waits for :class:`Shutdown`.
    ``value`` is its pickled return value, when already known."""

    value: bytes | None = None


@dataclass(frozen=True)
class Value:
    """The pickled return value of a program that shut RPC down itself."""

    value: bytes


@dataclass(frozen=True)
class ShutDown:
    """The rank's RPC shutdown finished; it waits for :class:`Exit`."""


@dataclass(frozen=True)
class Frozen:
    """A freeze fault is about to SIGSTOP the rank."""


@dataclass(frozen=True)
class Failed:
    """The rank's code raised (``skipped``: it called ``pytest.skip()``).
    ``phase`` is where: starting, entry, result or shutdown; ``pickled`` the
    exception itself, when it pickles."""

    phase: str
    error: str  # one line
    traceback: str
    pickled: bytes | None = None
    skipped: bool = False


# -- supervisor -> rank ---------------------------------------------------------------


@dataclass(frozen=True)
class Shutdown:
    """Every live rank is done: shut RPC down, gracefully only if ``graceful``
    (a graceful shutdown waits for every peer, so never after a death)."""

    graceful: bool


@dataclass(frozen=True)
class Exit:
    """Every rank has shut down: the process may end. (A rank that ended at
    once could take with it what a slower peer's shutdown still talks to: a
    program's own store, hosted by rank 0.)"""


ToSupervisor = Joined | Progress | EntryDone | Value | ShutDown | Frozen | Failed


def describe(message: Any) -> str:
    """A message's name, for errors about unexpected ones."""
    return type(message).__name__
