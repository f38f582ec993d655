"""Open files enough for a big world.

A world's ranks keep TensorPipe connections to their peers, and its leader
(rank 0, which every rank's ``init_rpc`` meets) holds about six files a
rank: 3,088 at 512 ranks (measured 2026-11-26, torch 2.13). The supervisor
holds two or three a rank (its pipe, its sentinel, its schedule pipe). Most
Linux hosts and CI runners give a process a soft limit of 1,024 open files,
and there a 256-rank world's leader aborted while starting (SIGABRT, no
word of why). The hard limit is usually far higher, and any process may
raise its soft limit up to it; so the forkserver raises its own (its ranks
inherit it) and the test process raises its own before a big world.
"""

from __future__ import annotations

import resource

# Past this the kernel's own ceiling (fs.nr_open, 1,048,576 by default) refuses.
_CEILING = 1 << 20
# Below this many ranks the usual 1,024 is plenty for the test process.
BIG_WORLD = 128


def raise_open_files() -> int:
    """Raise this process's soft limit on open files to its hard limit (at
    most :data:`_CEILING`); the soft limit now. Never lowers it; a limit
    that cannot be raised is left as it is."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _CEILING if hard == resource.RLIM_INFINITY else min(hard, _CEILING)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):  # a hard limit above the kernel's ceiling: keep what we have
            pass
    return soft
