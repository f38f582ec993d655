"""One rank's history of collectives, written as it goes (rank side).

Every collective and point-to-point op the rank enters is a line of
``rank{N}.c10d`` in the world's folder: which group, its number there, the
op, what the rank gave it (dtypes and shapes); and a second line when it
completes. The file is a memory-mapped :class:`~rpc_harness.context.EventLog`,
so a line is in the file the moment it is written and a SIGKILLed rank
leaves everything up to its death behind. Lines are JSON, written by hand
(``json.dumps`` of a dict per collective cost more than the rest of the
record). ``rpc_harness.c10d.history`` reads them in the parent.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from ..context import EventLog

SHOWN_TENSORS = 4  # tensors described per op; the rest counted


# Each (dtype, shape) described once: formatting them was a quarter of what
# recording a collective cost (a program's collectives repeat a few shapes).
_described: dict[tuple[Any, Any], str] = {}
MAX_DESCRIBED = 4096


def describe_tensors(value: Any) -> str:
    """``float32 [16]``, or several such, comma-separated: what a rank gave an op."""
    tensors: list[Any] = []
    _flatten(value, tensors)
    parts = [_describe(t) for t in tensors[:SHOWN_TENSORS]]
    if len(tensors) > SHOWN_TENSORS:
        parts.append(f"and {len(tensors) - SHOWN_TENSORS} more")
    return ", ".join(parts)


def _describe(tensor: Any) -> str:
    key = (tensor.dtype, tensor.shape)
    text = _described.get(key)
    if text is None:
        text = f"{str(tensor.dtype).removeprefix('torch.')} {list(tensor.shape)}"
        if len(_described) < MAX_DESCRIBED:
            _described[key] = text
    return text


def _flatten(value: Any, into: list[Any]) -> None:
    if isinstance(value, (list, tuple)):
        for item in value:
            _flatten(item, into)
    elif value is not None:
        into.append(value)


class History:
    """The writer of one rank's ``.c10d`` file. Numbers each group's
    collectives (1, 2, ...: every member enters them in one order) and,
    apart, its point-to-point ops; survives the entries of a reused world."""

    def __init__(self, path: str | None, rank: int) -> None:
        self._log = EventLog(path, rank)
        self._lock = threading.Lock()
        self._collectives: dict[str, int] = {}
        self._p2p: dict[str, int] = {}
        self._settled: dict[str, list[int]] = {}  # each group's collectives completed, and failed
        self._groups: set[str] = set()
        self._quoted: dict[str, str] = {}  # each group's name as JSON, made once

    def tally(self, group: str) -> tuple[int, int, int]:
        """How many collectives of ``group`` this rank entered, saw complete,
        and saw fail, so far (completions as far as the last flush wrote them)."""
        with self._lock:
            completed, failed = self._settled.get(group, (0, 0))
            return self._collectives.get(group, 0), completed, failed

    def known(self, group: str) -> bool:
        return group in self._groups

    def group(self, group: str, desc: str, ranks: list[int] | None) -> None:
        """Write, once, what a group is: its description and members (global ranks)."""
        with self._lock:
            if group in self._groups:
                return
            self._groups.add(group)
        self._log.append((json.dumps({"k": "group", "g": group, "desc": desc, "ranks": ranks}) + "\n").encode())

    def enter(self, group: str, op: str, p2p: bool, tensors: str, peer: int | None) -> int:
        """Write that the rank enters ``op`` in ``group``; return its number there."""
        counts = self._p2p if p2p else self._collectives
        with self._lock:
            seq = counts[group] = counts.get(group, 0) + 1
        peer_field = "" if peer is None else f', "peer": {peer}'
        # (tensors: dtype names, digits, brackets, commas and spaces, nothing JSON escapes)
        self._log.append(
            f'{{"t": {time.time()!r}, "k": "enter", "g": {self._quote(group)}, "n": {seq}, '
            f'"op": "{op}", "p2p": {"true" if p2p else "false"}, "x": "{tensors}"{peer_field}}}\n'.encode()
        )
        return seq

    def _quote(self, group: str) -> str:
        quoted = self._quoted.get(group)
        if quoted is None:
            quoted = self._quoted[group] = json.dumps(group)
        return quoted

    def done(self, group: str, seq: int, p2p: bool, error: BaseException | None = None) -> None:
        """Write that op ``seq`` of ``group`` completed (or failed with ``error``)."""
        failed = "" if error is None else f', "error": {json.dumps(f"{type(error).__name__}: {error}"[:200])}'
        if not p2p:
            with self._lock:
                settled = self._settled.setdefault(group, [0, 0])
                settled[error is not None] += 1
        self._log.append(
            f'{{"t": {time.time()!r}, "k": "done", "g": {self._quote(group)}, "n": {seq}, '
            f'"p2p": {"true" if p2p else "false"}{failed}}}\n'.encode()
        )
