"""Property tests of collective worlds: for any world size in range and
any small plan of delays (and at most one kill) at DDP's collectives, the
replicas stay in sync with a single-process baseline, a planned death is
the only death, and every fault fired where its plan says; a planted bug
that only a fault at a collective reveals is found, shrunk and replayed
from its printed line."""

from __future__ import annotations

import re
import subprocess
import sys

import c10d_entries
import pytest
import torch
from hypothesis import given

import rpc_harness
from rpc_harness import strategies as hs
from rpc_harness.repro import decode

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

STEPS = 3
# DDP's constructor broadcasts (its parameters, then its buffers), each step
# all-reduces once: hits up to 3 fire in every run.
FAULTS = dict(max_kills=1, max_hit=STEPS, delays=(0.001, 0.05))


@pytest.mark.long
@hs.world_settings()
@given(case=hs.collective_worlds(("all_reduce", "broadcast"), max_size=3, **FAULTS))
def test_ddp_replicas_stay_equal_to_the_baseline_under_faults_at_its_collectives(case):
    result = rpc_harness.run_world(c10d_entries.ddp_parameters, names=case.names, seed=case.seed, args=(STEPS,),
                                   faults=case.faults, deadline=60, check=False)
    assert not result.timed_out, result.report()
    killed = {f.target for f in case.faults if f.kind == "kill"}
    assert {r.name for r in result.dead} <= killed, result.report()
    for fault in case.faults:
        hits = [f.hit for f in result.fired_faults() if f.fault == str(fault)]
        assert hits and hits[0] == fault.hit, (fault, hits)
    if killed:
        assert [r.name for r in result.killed] == sorted(killed)
        return  # its peers lose it inside a collective: whether they raise or are stopped, nothing more to compare
    assert result.ok, result.report()
    baseline = c10d_entries.baseline_parameters(STEPS)
    for rank, parameters in enumerate(result.values):
        for got, want in zip(parameters, baseline, strict=True):
            torch.testing.assert_close(got, want, msg=lambda m, rank=rank: f"rank {rank}: {m}")


PLANTED = '''
import datetime
import os
import torch
import torch.distributed as dist
from hypothesis import given
from rpc_harness import strategies as hs

def averaged(ctx, steps):
    dist.init_process_group("gloo", init_method=f"file://{os.path.join(ctx.workdir, 'pg')}", rank=ctx.rank,
                            world_size=ctx.world_size)
    for _ in range(steps):
        work = dist.all_reduce(torch.ones(4), async_op=True)
        WAIT(work)
    dist.destroy_process_group()

@hs.world_settings(max_examples=12)
@given(case=hs.collective_worlds(max_size=3, kinds=("delay",), max_hit=2, delays=(0.001, 1.0)))
def test_averaging_survives_slow_peers(rpc_world, case):
    rpc_world.run(averaged, names=case.names, seed=case.seed, faults=case.faults, args=(2,), deadline=30)
'''

# The planted bug: a watchdog far shorter than a slow peer may take.
BUGGY = "WAIT = lambda work: work.wait(timeout=datetime.timedelta(seconds=0.3))\n"
FIXED = "WAIT = lambda work: work.wait()\n"


@pytest.mark.long
def test_a_bug_only_a_delay_at_a_collective_reveals_is_found_shrunk_and_replayed(pytester):
    pytester.makepyfile(test_planted=PLANTED + BUGGY)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "Operation timed out" in out
    falsifying = re.search(r"(?:Falsifying example|Failing test case):.*?case=WorldCase\(\s*world_size=(\d+)", out, re.S)
    assert falsifying, out[-3000:]
    assert falsifying.group(1) == "2", "shrunk to the smallest world"
    tokens = re.findall(r"rpc-harness replay (rpch1_[A-Za-z0-9_\-]+)", out)
    assert tokens, "the failure report ends with a replay line"
    replayed = decode(tokens[-1])
    [fault] = replayed.plan.faults
    assert (fault.kind, fault.point, fault.seconds) == ("delay", "c10d.all_reduce", 1.0)

    replay = [sys.executable, "-m", "rpc_harness.apps.cli", "replay", tokens[-1]]
    again = subprocess.run(replay, cwd=pytester.path, capture_output=True, text=True, timeout=300)
    assert again.returncode == 1, again.stdout + again.stderr
    assert "the failure reproduced" in again.stdout and "Operation timed out" in again.stdout

    (pytester.path / "test_planted.py").write_text(PLANTED + FIXED)
    fixed = subprocess.run(replay, cwd=pytester.path, capture_output=True, text=True, timeout=300)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "did NOT fail this time" in fixed.stdout
