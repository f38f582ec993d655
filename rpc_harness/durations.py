"""Durations: the one text form of every number of seconds rpc-harness takes.

A world's deadline, bring-up budget, RPC timeout and fuzz, and a fault's
delay, reach it through many doors (an argument, the ``rpc_world`` marker, a
pytest flag or ini key, an ``rpc-harness`` flag, a replay token, a fault
plan). Each takes the same forms, read here: a number of seconds (``10``,
``0.5``, ``1e-3``), or a number with a unit (``10s``, ``200ms``). A world
whose deadline was ``"10s"`` was refused while a fault's delay took ``10s``
(issue 38): one parser keeps them the same.

Nothing here imports torch.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal

from .errors import clip

# What a unit divides its number by to give seconds.
UNITS = {"s": 1.0, "ms": 1000.0}
EXAMPLES = "10, 10s or 200ms"
_DURATION_RE = re.compile(r"(?P<number>[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)(?P<unit>ms|s)?")


def parse_seconds(text: str) -> float:
    """Seconds from their text form: a number of seconds, or a number
    ending in ``s`` or ``ms``. Anything else (``nan``, ``inf``,
    another unit) raises :class:`ValueError` saying what the forms are;
    the range is the caller's to check."""
    match = _DURATION_RE.fullmatch(text.strip())
    value = float(match["number"]) / UNITS[match["unit"] or "s"] if match else math.nan
    if not math.isfinite(value):
        raise ValueError(f"bad duration {clip(text)}; use seconds like {EXAMPLES}")
    return value


def format_seconds(value: float) -> str:
    """Seconds as :func:`parse_seconds` reads them back exactly:
    ``0.00001``, not ``1e-05``."""
    return format(Decimal(repr(float(value))).normalize(), "f")
