"""SIGTERM treated as Ctrl-C, by the pytest plugin and the ``rpc-harness``
command alike.

By default SIGTERM ends a process at once: no ``finally`` runs, so a world's
ranks are left to die by themselves (they watch their supervisor) and its
folder stays behind. Raised as KeyboardInterrupt instead, it unwinds like
Ctrl-C: every world in progress kills its ranks and removes its folder. An
xdist controller owns no world itself: it passes SIGTERM on to its workers,
which do the same, before it stops.
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType


def terminate_as_interrupt(*, forward_to_children: bool = False) -> bool:
    """Handle SIGTERM as KeyboardInterrupt in this process; whether installed
    (not when SIGTERM already has a handler, or off the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
        return False

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends it the hard way
        if forward_to_children:
            for pid in children(os.getpid()):
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        raise KeyboardInterrupt("SIGTERM")

    signal.signal(signal.SIGTERM, on_sigterm)
    return True


def children(pid: int) -> list[int]:
    """The direct children of ``pid``."""
    found = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as file:
                found += [int(p) for p in file.read().split()]
        except OSError:
            continue
    return found
