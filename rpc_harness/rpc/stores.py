"""A spawned program's own ``file://`` stores (its ``init_method``): a stale
one refused by name, and the ones its world made removed with the world.

torch's FileStore removes its file when the last process using it closes
it cleanly. Ranks of a world never do (they leave by ``os._exit``, or are
killed), so every world that ran a program with its own
``init_method="file:///tmp/store"`` left the file behind (measured: 1367
bytes after a clean 2-rank run), and the next run of the same program, a
replay included, read the old run's keys: its bring-up failed with
``ECONNREFUSED`` from an old address, or timed out, and nothing said why.

The first rank of a world to reach the store judges it, before any rank of
this world can have written to it: ranks take their turn under a lock in
the world's folder, and the verdict is kept there for the others and for
the launcher, which removes the stores its world made once every rank is gone.
"""

from __future__ import annotations

import fcntl
import os
import time

from ..errors import StaleStore

FILE_SCHEME = "file://"
_CLAIMS = "program-stores"  # in the world's folder: one line per store, "verdict\tpath"
_MADE = "made"  # the verdict on a store this world made


def check(init_method: str, workdir: str) -> None:
    """Raise :class:`StaleStore` when ``init_method`` names a file store that
    was there before this world (the same verdict in every rank)."""
    if not init_method.startswith(FILE_SCHEME) or not workdir:
        return
    path = init_method[len(FILE_SCHEME):]
    with open(os.path.join(workdir, _CLAIMS), "a+") as claims:
        fcntl.flock(claims, fcntl.LOCK_EX)  # released as the file closes
        claims.seek(0)
        verdicts = {line.split("\t", 1)[1]: line.split("\t", 1)[0] for line in claims.read().splitlines()}
        verdict = verdicts.get(path)
        if verdict is None:
            verdict = _judge(path)
            claims.write(f"{verdict}\t{path}\n")
    if verdict != _MADE:
        raise StaleStore(
            f"init_rpc(init_method={init_method!r}): {path} is a store left behind by an earlier run "
            f"(or in use by another run at once: {verdict}); torch would read that run's workers and fail at bring-up. Remove the file, or give "
            "each run a path of its own (e.g. in tempfile.mkdtemp())")


def _judge(path: str) -> str:
    """``_MADE`` for a store this world will make, else what is there already."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return _MADE
    if found.st_size == 0:  # an empty file holds no keys: torch starts it afresh
        return _MADE
    written = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(found.st_mtime))
    return f"{found.st_size} bytes, last written {written}, before this world started"


def remove_made(workdir: str) -> None:
    """Remove the stores this world made (call once every rank has ended):
    what torch would have done had its ranks closed them."""
    try:
        with open(os.path.join(workdir, _CLAIMS)) as claims:
            lines = claims.read().splitlines()
    except OSError:
        return
    for line in lines:
        verdict, path = line.split("\t", 1)
        if verdict == _MADE:
            try:
                os.remove(path)
            except OSError:  # the program removed it, or never got to make it
                pass
