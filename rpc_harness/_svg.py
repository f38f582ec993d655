"""What the hand-written SVG pictures share: font, XML-safe text, nice ticks."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

FONT = "font-family=\"sans-serif\""
# Characters XML 1.0 cannot hold at all, escaped or not.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def nice_step(raw: float, *, integer: bool = False) -> float:
    """The smallest 1, 2, 2.5 or 5 times a power of ten that is >= ``raw``."""
    if raw <= 0 or not math.isfinite(raw):
        return 1.0
    magnitude = 10.0 ** math.floor(math.log10(raw))
    for mantissa in (1.0, 2.0, 2.5, 5.0, 10.0):
        step = mantissa * magnitude
        if step >= raw * (1 - 1e-9) and not (integer and step != int(step)):
            return max(step, 1.0) if integer else step
    return 10.0 * magnitude


def tidy(value: float) -> float:
    """k * step without the float noise (0.30000000000000004 -> 0.3)."""
    return float(f"{value:.12g}") + 0.0  # + 0.0 turns -0.0 into 0.0


def decimals(ticks: Sequence[float]) -> int:
    """The fewest decimals that write every tick exactly (0.25 needs 2)."""
    for places in range(10):
        if all(abs(float(f"{t:.{places}f}") - t) <= 1e-9 * max(1.0, abs(t)) for t in ticks):
            return places
    return 10


def xml_text(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)
