"""Worlds started from a plain script, as users write them outside pytest."""

from __future__ import annotations

import re
import subprocess
import sys

UNGUARDED = """
import rpc_harness

def hello(ctx):
    return ctx.rank

print(rpc_harness.run_world(hello, world_size=2).values)
"""


def test_a_script_that_starts_a_world_without_a_main_guard_is_told_to_add_one(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(UNGUARDED)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    # Both ranks import the script and raise the same error; whichever
    # reports first fails the world, and the other is stopped.
    raised = re.findall(r"rank (\d) \(worker\1\): raised WorldSpecError: a world cannot be started from a "
                        r"daemonic process", done.stderr)
    assert raised and set(raised) <= {"0", "1"}, done.stderr
    assert "`if __name__ == '__main__':`" in done.stderr

