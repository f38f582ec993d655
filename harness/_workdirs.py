"""World folders: made private, stamped with their owner, swept when the
owner died without removing them.

``launch`` removes its world's folder on every path its process survives
(exceptions, Ctrl-C, SIGTERM handled as Ctrl-C). A process killed by SIGKILL
runs no cleanup, so each folder holds the owner's pid and the kernel's start
time of that process (a pid alone may be reused), and the first world of
every later process sweeps the folders whose owner is gone.
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile

PREFIX = "rpc-world-"
_OWNER = "owner"
_swept = False


def make() -> str:
    """A new world folder (mode 0700), stamped with this process."""
    global _swept
    if not _swept:
        _swept = True
        sweep()
    folder = tempfile.mkdtemp(prefix=PREFIX)
    with open(os.path.join(folder, _OWNER), "w") as file:
        file.write(f"{os.getpid()} {_start_time(os.getpid())}\n")
    return folder


def sweep(root: str | None = None) -> list[str]:
    """Remove the world folders under ``root`` (the temp folder) whose owner
    process is gone; return them."""
    removed = []
    for folder in glob.glob(os.path.join(root or tempfile.gettempdir(), PREFIX + "*")):
        try:
            with open(os.path.join(folder, _OWNER)) as file:
                pid_text, start = file.read().split()
            pid = int(pid_text)
        except (OSError, ValueError):
            continue  # not stamped (an older harness, or being made right now): not ours to judge
        if _start_time(pid) != start:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _start_time(pid: int) -> str:
    """The kernel's start time of ``pid`` (field 22 of /proc/PID/stat), or "" if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            return file.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""
