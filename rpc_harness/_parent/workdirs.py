"""World folders: made private, stamped with their owner, swept when the
owner died without removing them.

``launch`` removes its world's folder on every path its process survives
(exceptions, Ctrl-C, SIGTERM handled as Ctrl-C). A process killed by SIGKILL
runs no cleanup, so each folder holds the owner's pid and the kernel's start
time of that process (a pid alone may be reused), and the first world of
every later process sweeps the folders whose owner is gone. The same stamp
goes into multiprocessing's own folder of the process (``pymp-*``, where the
forkserver's socket lives; multiprocessing removes it at exit, not at
SIGKILL), so that it is swept too; unstamped ``pymp-*`` folders are other
programs' and are left alone.
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile

PREFIX = "rpc-world-"
MULTIPROCESSING_PREFIX = "pymp-"
_OWNER = "owner"
_swept = False


def make() -> str:
    """A new world folder (mode 0700), stamped with this process."""
    global _swept
    if not _swept:
        _swept = True
        sweep()
    folder = tempfile.mkdtemp(prefix=PREFIX)
    stamp(folder)
    return folder


def stamp_multiprocessing_folder() -> None:
    """Stamp this process's ``pymp-*`` folder (made now if it is not yet)."""
    from multiprocessing import util

    folder = util.get_temp_dir()
    if not os.path.exists(os.path.join(folder, _OWNER)):
        stamp(folder)


def stamp(folder: str) -> None:
    """Write the owner stamp: this process's pid and start time."""
    with open(os.path.join(folder, _OWNER), "w") as file:
        file.write(f"{os.getpid()} {_start_time(os.getpid())}\n")


def sweep(root: str | None = None) -> list[str]:
    """Remove the stamped folders under ``root`` (the temp folder) whose
    owner process is gone; return them."""
    removed = []
    root = root or tempfile.gettempdir()
    folders = glob.glob(os.path.join(root, PREFIX + "*")) + glob.glob(os.path.join(root, MULTIPROCESSING_PREFIX + "*"))
    for folder in folders:
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
    """The kernel's start time of ``pid`` (field 22 of /proc/PID/stat), or ""
    if it is gone: a zombie too, which owns nothing any more (a killed xdist
    worker stays one until its controller reaps it)."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            fields = file.read().rsplit(")", 1)[1].split()
    except OSError:
        return ""
    if len(fields) < 20 or fields[0] == "Z":
        return ""
    return fields[19]
