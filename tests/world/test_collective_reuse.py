"""Reused collective worlds (issue 39): rpc_world_module keeps a world with a
default process group live across tests, checks between entries that each
left it as a fresh one (rpc_harness.c10d.clean), fails an entry that broke a
rule naming it, and gives the next test a fresh world."""

from __future__ import annotations

import re

import pytest

# Imported before any in-process session, as in test_reuse.
import torch  # noqa: F401

import rpc_harness  # noqa: F401
from world.test_reuse import failure_section, pids_in, run

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

ENTRIES = """
import os
import pytest
import torch
import torch.distributed as dist

KEPT = []
WORLD = dict(world_size=3, process_group="gloo", rpc=False)


def pid(ctx):
    return os.getpid()


def collectives(ctx, step):
    tensor = torch.full((4,), float(ctx.rank + step))
    dist.all_reduce(tensor, group=ctx.group)
    assert tensor.tolist() == [float(sum(range(ctx.world_size)) + ctx.world_size * step)] * 4
    flag = torch.tensor([step if ctx.rank == 0 else -1])
    dist.broadcast(flag, src=0, group=ctx.group)
    assert flag.item() == step
    work = dist.all_reduce(torch.ones(2), group=ctx.group, async_op=True)
    work.wait()  # an async_op handle waited for: clean
    return os.getpid()


def leaves_a_pending_handle(ctx):
    if ctx.rank == 0:  # its peers never issue it: it never completes
        KEPT.append(dist.all_reduce(torch.ones(2), group=ctx.group, async_op=True))
    return os.getpid()


def leaves_a_subgroup(ctx):
    KEPT.append(dist.new_group([0, 1]))
    return os.getpid()


def destroys_the_default_group(ctx):
    dist.destroy_process_group()
    return os.getpid()


def breaks_rank_1s_sums(ctx):
    # No collective of the entry's shows the group usable: the check's own
    # all_reduce tries it, and rank 1's answer is wrong.
    if ctx.rank == 1:
        real = dist.all_reduce

        def doubled(tensor, *args, **kwargs):
            work = real(tensor, *args, **kwargs)
            tensor.mul_(2)
            return work

        dist.all_reduce = doubled
    return os.getpid()
"""


def test_a_reused_collective_world_survives_a_hundred_entries(pytester):
    pytester.makepyfile(ENTRIES + """
@pytest.mark.parametrize("step", range(100))
def test_entry(rpc_world_module, step):
    result = rpc_world_module.run(collectives, args=(step,), **WORLD)
    print(f"PIDS test_entry[{step}]", result.values)
""")
    result = run(pytester, "-s")
    result.assert_outcomes(passed=100)
    out = result.stdout.str()
    first = pids_in(out, r"test_entry\[0\]")
    assert all(pids_in(out, rf"test_entry\[{step}\]") == first for step in range(100)), "one live world throughout"


# Each dirty entry, and what its failure must say.
DIRTY = {
    "pending handle": ("leaves_a_pending_handle", [
        r"rule work .*: rank 0 \(worker0\) holds 1 work handle\(s\) of async_op collectives that have not completed",
        r"rule sequence .*: the ranks are at different collectives of the default group: rank 0 at #(\d+); "
        r"ranks 1, 2 at #(?!\1)\d+"]),
    "subgroup": ("leaves_a_subgroup", [
        r"rule subgroups .*: rank 0 \(worker0\) still has 1 subgroup\(s\) the entry made: group '\d+' of ranks "
        r"\[0, 1\]"]),
    "destroyed group": ("destroys_the_default_group", [
        r"rule group .*: rank 0 \(worker0\) has no default group any more: the entry destroyed it"]),
    "group that sums wrong": ("breaks_rank_1s_sums", [
        r"rule group .*: rank 1 \(worker1\) an all_reduce of ones over the default group gave 6, not 3"]),
}


@pytest.mark.parametrize("dirt", sorted(DIRTY))
def test_a_dirty_collective_entry_fails_naming_what_it_left_and_the_next_gets_a_fresh_world(pytester, dirt):
    entry, patterns = DIRTY[dirt]
    pytester.makepyfile(ENTRIES + f"""
def test_before(rpc_world_module):
    print("PIDS test_before", rpc_world_module.run(collectives, args=(1,), **WORLD).values)

def test_dirty(rpc_world_module):
    rpc_world_module.run({entry}, **WORLD)

def test_after(rpc_world_module):
    print("PIDS test_after", rpc_world_module.run(collectives, args=(2,), **WORLD).values)
""")
    result = run(pytester, "-s", "-rP")
    result.assert_outcomes(passed=2, failed=1)
    out = result.stdout.str()
    failure = failure_section(out, "test_dirty")
    assert "rpc world failed: the entry left the reused world dirty" in failure
    for pattern in patterns:
        assert re.search(pattern, failure), f"{pattern!r} not in:\n{failure}"
    assert not set(pids_in(out, "test_after")) & set(pids_in(out, "test_before")), "a fresh world after it"


def test_a_plans_failpoint_at_a_collective_never_fires_in_the_check_between_entries(pytester):
    # The entry runs no collective; only the check's own all_reduce (the
    # group is tried, the entry having shown nothing) could reach the
    # failpoint. Were it the entry's, worker1 would die in the check.
    pytester.makepyfile(ENTRIES + """
def test_first(rpc_world_module):
    print("PIDS test_first", rpc_world_module.run(pid, **WORLD).values)

def test_planned(rpc_world_module):
    result = rpc_world_module.run(pid, faults="kill:worker1@c10d.all_reduce", check=False, **WORLD)
    print("PIDS test_planned", result.values)
    print("FIRED", result.fault_counts(), result.killed)

def test_next(rpc_world_module):
    print("PIDS test_next", rpc_world_module.run(pid, **WORLD).values)
""")
    result = run(pytester, "-s", "-rP")
    result.assert_outcomes(passed=3)
    out = result.stdout.str()
    assert "FIRED {'kill:worker1@c10d.all_reduce#1': 0} []" in out, out
    assert pids_in(out, "test_first") == pids_in(out, "test_planned") == pids_in(out, "test_next")
