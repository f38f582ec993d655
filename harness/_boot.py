"""What the parent sends a rank, and the process target it starts.

Kept apart from ``_rank`` because importing ``_rank`` wraps torch's RPC API
for the rank it runs in: the parent (a user's pytest process) pickles
``Boot`` and ``main`` by reference, so it imports this module, and must not
get its own ``init_rpc`` wrapped by the harness.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from .faults import FaultPlan
from .spec import EntryRef


@dataclass(frozen=True)
class Boot:
    """What a rank needs to know, sent from the supervisor."""

    rank: int
    names: tuple[str, ...]  # a spawn world's are placeholders until its ranks name themselves
    seed: int
    workdir: str
    entry: EntryRef
    payload: bytes
    faults: FaultPlan
    fuzz: float
    rpc_timeout: float
    deadline: float
    sys_path: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    spawned: bool = False
    master_port: int = 0
    netns: Any = None  # the world's network namespace (_netns.Namespace), if it has one


def rank_file(workdir: str, rank: int, what: str) -> str:
    """Where rank files live: log, events, stacks."""
    return os.path.join(workdir, f"rank{rank}.{what}")


def main(conn: Connection, boot: Boot) -> None:
    """Process target of a rank (the forkserver has ``_rank`` loaded)."""
    from ._rank import main as run_rank

    run_rank(conn, boot)
