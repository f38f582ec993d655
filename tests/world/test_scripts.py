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



# A script as users write them: the tutorials' shape (spawn, a world that
# calls functions of the script itself), then a world that fails.
SCRIPT = """
import torch.distributed.rpc as rpc
import rpc_harness

def add(a, b):
    return a + b

def run_worker(rank, n):  # the tutorials' shape: rpc_sync to a function of the script itself
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=n)
    total = rpc.rpc_sync("worker1", add, args=(rank, 40)) if rank == 0 else None
    rpc.shutdown()
    return total

def entry(ctx):
    return rpc.rpc_sync(ctx.names[(ctx.rank + 1) % ctx.world_size], add, args=(ctx.rank, 1))

def boom(ctx, n):
    if ctx.rank == 1:
        raise RuntimeError(f"boom {n}")

if __name__ == "__main__":
    print("SPAWN", rpc_harness.spawn(run_worker, args=(2,), nprocs=2).values)
    print("RUN", rpc_harness.run_world(entry, world_size=2).values)
    found = rpc_harness.explore(boom, 2, args=(3,), schedules=1)
    print("\\n".join(found.summary()))
    rpc_harness.run_world(boom, world_size=2, args=(3,))
"""


# One of the suite's slowest (pytest --durations): a script run as `python script.py`, then each of
# its replay lines run from another folder: fresh interpreters importing torch, as a user's would.
# The script's own worlds that call its functions share its run (one interpreter less).
def test_a_script_run_as_python_script_py_can_rpc_its_own_functions_and_its_replay_lines_work_from_anywhere(
        tmp_path):
    (tmp_path / "here").mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = tmp_path / "here" / "script.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script)], cwd=script.parent, capture_output=True, text=True,
                          timeout=300)
    # Its functions live in __mp_main__ in the ranks (as under multiprocessing's
    # spawn); pickling one for an rpc_sync found no such module there.
    assert "SPAWN [40, None]" in done.stdout and "RUN [1, 2]" in done.stdout, done.stdout + done.stderr

    # Issue 28: a function of a script run as `python script.py` lives in its
    # __main__, and the lines named it `__main__:boom`, which any other
    # process (a Python prompt, rpc-harness replay) found no function in.
    assert done.returncode == 1 and "raised RuntimeError: boom 3" in done.stderr, done.stderr
    # The world's deadline comes along (60 s, not the replay's 300): a token does not carry it.
    token = re.search(r"^Replay: rpc-harness replay (rpch1_\S+) --deadline 60$", done.stdout, re.MULTILINE)
    line = re.search(r"^Replay: (import rpc_harness; rpc_harness\.run_world\(.*\))$", done.stderr, re.MULTILINE)
    assert token and line, (done.stdout, done.stderr)

    python = subprocess.run([sys.executable, "-c", line.group(1)], cwd=elsewhere,  # pasted as printed
                            capture_output=True, text=True, timeout=300)
    assert python.returncode == 1
    assert "rank 1 (worker1): raised RuntimeError: boom 3" in python.stderr, python.stderr

    replay = subprocess.run([sys.executable, "-m", "rpc_harness", "replay", token.group(1), "--deadline", "60"],
                            cwd=elsewhere, capture_output=True, text=True, timeout=300)
    assert replay.returncode == 1, replay.stdout + replay.stderr
    assert "rank 1 (worker1): raised RuntimeError: boom 3" in replay.stdout
    assert "replay: the failure reproduced" in replay.stdout
    assert re.search(r"rpc-harness replay rpch1_\S+ --deadline 60$", replay.stdout, re.M), "the replay's own line too"
    assert f"{script}:boom" in line.group(1), "named by the script's path"
