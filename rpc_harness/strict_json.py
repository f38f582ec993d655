"""JSON that every parser reads. Python's ``json`` writes ``NaN`` and
``Infinity`` by default, which JSON does not have: jq, a browser's
``JSON.parse``, Go's ``encoding/json`` and trace viewers refuse the file.
A world that recorded nothing has no metric (NaN), and a diverging run
reports a NaN loss: every file rpc-harness writes as JSON goes through here,
with each such number as ``null``.

Nothing here imports torch.
"""

from __future__ import annotations

import json
import math
from typing import IO, Any


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinity, however deep in its dicts,
    lists and tuples, as None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite(item) for item in value]
    return value


def dump(value: Any, file: IO[str], **options: Any) -> None:
    """``json.dump`` of ``finite(value)``, refusing any non-finite number
    that ``options["default"]`` would still turn out (it is made whole first,
    so a refused file is not left half written)."""
    text = json.dumps(finite(value), allow_nan=False, **options)
    file.write(text)
