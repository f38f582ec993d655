"""A planted bug found by Hypothesis, shrunk to the smallest world and replayed from its printed line."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch  # noqa: F401 - before the in-process session, which must not import it (see test_plugin)

from rpc_harness.repro import decode

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


PLANTED = '''
import torch.distributed.rpc as rpc
from hypothesis import given
import rpc_harness
from rpc_harness import strategies as hs

def observer_names(n):
    return ("agent",) + tuple(f"observer{k}" for k in range(1, n))

def rewards_of(world_seed, k):
    return [rpc_harness.derive_seed(world_seed, "reward", k, t) % 100 for t in range(3)]

def collect(k):
    ctx = rpc_harness.current_context()
    return rewards_of(ctx.world_seed, k)

def bucket(k):
    return BUCKET(k)

def agent_checks_rewards(ctx):
    if ctx.rank != 0:
        return None
    futures = {k: rpc.rpc_async(ctx.names[k], collect, args=(k,)) for k in range(1, ctx.world_size)}
    got = {}
    for k, future in futures.items():
        got.setdefault(bucket(k), []).extend(future.wait())
    expected = {k: rewards_of(ctx.world_seed, k) for k in range(1, ctx.world_size)}
    assert got == expected, f"observers' rewards mixed up: {got} != {expected}"
    return got

@hs.world_settings(max_examples=15)
@given(case=hs.worlds(observer_names, min_size=1, max_size=5))
def test_rewards_reach_the_right_observer(rpc_world, case):
    rpc_world.run(agent_checks_rewards, names=case.names, seed=case.seed)
'''

BUGGY = "BUCKET = lambda k: 1 if k <= 2 else k  # planted: observers 1 and 2 share a slot\n"
FIXED = "BUCKET = lambda k: k\n"


# One of the suite's slowest (pytest --durations): Hypothesis searches world sizes and fault plans
# until the planted bug fails, shrinks it, and the line it prints is replayed in fresh processes:
# dozens of worlds, which is what is tested.
def test_a_planted_bug_is_found_shrunk_and_replayed(pytester):
    pytester.makepyfile(test_planted=PLANTED + BUGGY)
    # In this process (its worlds fork from this worker's forkserver; they
    # are bounded by their deadlines); the replays below run the printed
    # line in a fresh process, as a user would.
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "observers' rewards mixed up" in out
    # Hypothesis names the shrunk example "Falsifying example" (older) or "Failing test case".
    falsifying = re.search(r"(?:Falsifying example|Failing test case):.*?case=WorldCase\(\s*world_size=(\d+)", out, re.S)
    assert falsifying, out[-3000:]
    assert falsifying.group(1) == "3", "shrunk to the smallest world with two observers"
    tokens = re.findall(r"rpc-harness replay (rpch1_[A-Za-z0-9_\-]+)", out)
    assert tokens, "the failure report ends with a replay line"
    assert re.search(r"Replay: pytest test_planted.py::test_rewards_reach_the_right_observer --rpc-seed=\d+", out)
    token = tokens[-1]
    assert decode(token).world_size == 3

    replay = [sys.executable, "-m", "rpc_harness.apps.cli", "replay", token]
    again = subprocess.run(replay, cwd=pytester.path, capture_output=True, text=True, timeout=120)
    assert again.returncode == 1, again.stdout + again.stderr
    assert "the failure reproduced" in again.stdout
    assert "observers' rewards mixed up" in again.stdout

    (pytester.path / "test_planted.py").write_text(PLANTED + FIXED)
    fixed = subprocess.run(replay, cwd=pytester.path, capture_output=True, text=True, timeout=120)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "did NOT fail this time" in fixed.stdout
