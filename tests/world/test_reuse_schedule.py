"""Controlled schedules in reused worlds: an entry of ``run(...)`` runs
under control in a live world (its schedule begins at the entry and ends at
its return), takes the same steps as in a fresh world, is checked clean
after it like any entry, and ``explore(reuse=True)`` searches schedules as
entries of one live world, with replay lines that reproduce what it found."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

# Imported before any in-process session, as in test_reuse: torch imported
# twice in one process crashes it, and one forkserver serves every session.
import torch  # noqa: F401

import rpc_harness
from rpc_harness import schedule as S
from rpc_harness._parent.live import WorldPool
from rpc_harness.apps import races
from rpc_harness.errors import WorldFailed
from rpc_harness.spec import make_spec

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

BANK = dict(names=races.BANK_NAMES, deadline=60)


def verdict(world: rpc_harness.WorldResult) -> tuple:
    return world.ok, tuple((o.name, o.status, (o.error or "").split(":")[0]) for o in world.failures)


def test_the_same_schedule_takes_the_same_steps_fresh_and_in_a_reused_world():
    schedules = [("controlled", seed) for seed in (1, 2, 3, 4)] + [("pct:2", 1), ("pct:3", 5)]
    pool = WorldPool(limit=1)
    try:
        pool.run(make_spec(races.bank_entry, 4, seed=0, **BANK), "a free entry first")
        reused = [pool.run(make_spec(races.bank_entry, 4, seed=seed, schedule=schedule, **BANK), f"{schedule} {seed}")
                  for schedule, seed in schedules]
    finally:
        pool.close()
    fresh = [rpc_harness.run_world(races.bank_entry, 4, seed=seed, schedule=schedule, check=False, **BANK)
             for schedule, seed in schedules]
    assert any("entry 2 of it" in world.reuse for world in reused), [world.reuse for world in reused]
    for (schedule, seed), here, there in zip(schedules, reused, fresh, strict=True):
        assert here.controlled and there.controlled, (here.schedule_note, there.schedule_note)
        assert S.pairs(here.schedule) == S.pairs(there.schedule), (schedule, seed)
        assert here.schedule_digest == there.schedule_digest and verdict(here) == verdict(there)
    assert {verdict(world)[0] for world in fresh} == {True, False}, "the race fails for some schedules, not all"


def sleeps_on_the_schedules_clock(ctx):
    if ctx.rank == 0:
        import time

        time.sleep(30)  # under control: the schedule's clock, not the real one
    return ctx.rank


def test_a_reused_worlds_schedule_clock_starts_at_its_entry():
    pool = WorldPool(limit=1)
    try:
        entries = [pool.run(make_spec(sleeps_on_the_schedules_clock, 2, seed=seed, schedule="controlled",
                                      deadline=60), f"sleeper {seed}") for seed in (1, 1, 2)]
    finally:
        pool.close()
    assert all(entry.ok and entry.controlled for entry in entries), [entry.report() for entry in entries]
    assert "entry 3 of it" in entries[-1].reuse
    clocks = [[step.clock for step in entry.schedule] for entry in entries]
    assert clocks[0][0] == 0.0 and max(clocks[0]) == 30.0, clocks[0]
    assert clocks[1] == clocks[0], "the second entry's clock starts at 0 again, not at the first's 30"
    assert clocks[2][0] == 0.0 and max(clocks[2]) == 30.0


def test_a_race_explored_in_a_reused_world_replays_from_its_printed_lines(tmp_path):
    found = rpc_harness.explore(races.bank_entry, 4, reuse=True, schedules=20, seed=1, **BANK)
    assert found.failed and found.shrunk is not None, found.summary()
    assert "lost update" in found.found.world["bank"].error
    assert all("a reused world" in attempt.world.reuse for attempt in [found.found, found.shrunk]), \
        [found.found.world.reuse]
    shrunk = found.shrunk.world
    token_line, python_line = found.replay
    token = re.fullmatch(r"rpc-harness replay (rpch1_\S+) --deadline 60", token_line)
    assert token, token_line
    # The token replays it as it ran, in a reused world, its rules checked.
    done = subprocess.run([sys.executable, "-m", "rpc_harness", "replay", token[1], "--deadline", "60"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr  # 1: the failure reproduced
    assert "lost update: balance 9, expected 18" in done.stdout and "replay: the failure reproduced" in done.stdout
    assert "a reused world, brought up for this entry" in done.stdout, done.stdout
    # The Python line, in a fresh world: the same steps, the same failure.
    assert python_line.endswith("  # in a fresh world, where no rule of a reused world is checked"), python_line
    with pytest.raises(WorldFailed) as failed:
        exec(python_line, {"rpc_harness": rpc_harness})
    again = failed.value.result
    assert again.schedule_digest == shrunk.schedule_digest and verdict(again) == verdict(shrunk), again.report()


class Box:
    value = 1


def keeps_an_rref(ctx):
    import torch.distributed.rpc as rpc

    if ctx.rank == 0:
        KEPT.append(rpc.remote(ctx.names[1], Box))
        assert KEPT[-1].to_here().value == 1
    return ctx.rank


KEPT: list = []


def test_an_explored_entry_that_leaves_state_fails_naming_the_rule_it_broke():
    found = rpc_harness.explore(keeps_an_rref, 2, reuse=True, schedules=3, seed=1, shrink=False,
                                deadline=60)
    assert found.failed and len(found.attempts) == 1, found.summary()
    world = found.found.world
    assert world.controlled and world.schedule, world.schedule_note
    assert any(re.search(r"rule rrefs .*: rank 1 \(worker1\) owns 1 RRef", p) for p in world.problems), world.problems
    assert "left it dirty (rule rrefs)" in world.reuse, world.reuse


def test_explore_refuses_reuse_for_what_a_reused_world_cannot_run():
    with pytest.raises(rpc_harness.WorldSpecError, match=r"spawn=True\) needs a world of its own"):
        rpc_harness.explore(races.run_worker, 4, spawn=True, reuse=True, args=(4,))
    with pytest.raises(rpc_harness.WorldSpecError, match=r"message faults .* it cannot run in a reused world; "
                                                         r"use reuse=False"):
        rpc_harness.explore(races.bank_entry, 4, reuse=True, faults="msgdelay:bank@PYTHON_CALL=0.01s", **BANK)
    with pytest.raises(rpc_harness.WorldSpecError, match="invalid reuse 'yes'"):
        rpc_harness.explore(races.bank_entry, 4, reuse="yes", **BANK)
