"""The soft limit on open files (rpc_harness._parent.limits), each case in a fresh
interpreter so that this process keeps its own."""

from __future__ import annotations

import resource
import subprocess
import sys

CHILD = """
import resource, sys
from rpc_harness._parent import limits as _limits
soft, hard = map(int, sys.argv[1:3])
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
print(_limits.raise_open_files(), *resource.getrlimit(resource.RLIMIT_NOFILE))
"""


def limits_after(soft: int, hard: int) -> list[int]:
    done = subprocess.run([sys.executable, "-c", CHILD, str(soft), str(hard)], capture_output=True, text=True,
                          timeout=60, check=True)
    return [int(part) for part in done.stdout.split()]


def test_the_soft_limit_is_raised_to_the_hard_one_and_the_hard_one_kept():
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    top = min(hard, 4096)
    assert limits_after(256, top) == [top, top, top]


def test_a_soft_limit_at_the_hard_one_is_left_as_it_is():
    assert limits_after(512, 512) == [512, 512, 512]
