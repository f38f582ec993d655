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

from ..options import WorldOptions
from ..spec import EntryRef


@dataclass(frozen=True)
class Boot:
    """What a rank needs to know, sent from the supervisor: its place, its
    program, and the world's options (every one, as checked by make_spec)."""

    rank: int
    names: tuple[str, ...]  # a spawn world's are placeholders until its ranks name themselves
    workdir: str
    entry: EntryRef
    payload: bytes  # the pickled (args, kwargs)
    options: WorldOptions
    sys_path: tuple[str, ...]
    spawned: bool = False
    master_port: int = 0
    netns: Any = None  # the world's network namespace (_netns.Namespace), if it has one
    asserts: dict[str, Any] | None = None  # how its session rewrites asserts (rpc_harness._rank.asserts.session_rewriting)
    live: bool = False  # a reused world's rank: after init_rpc it runs entries as told (msg.RunEntry)

    @property
    def seed(self) -> int:
        return self.options.seed  # type: ignore[return-value]  # drawn by make_spec


def rank_file(workdir: str, rank: int, what: str) -> str:
    """Where rank files live: ``log``, ``events``, ``stacks``."""
    return os.path.join(workdir, f"rank{rank}.{what}")


def main(conn: Connection, boot: Boot, schedule: Connection | None = None) -> None:
    """Process target of a rank (the forkserver has ``_rank`` loaded);
    ``schedule`` is its pipe to the scheduler of a controlled world."""
    from .rank import main as run_rank

    run_rank(conn, boot, schedule)
