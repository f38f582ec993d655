"""Exhaustive exploration (``strategy="dpor"``) in real worlds: it reaches
every outcome the naive search reaches, in fewer worlds; it says
"exhausted" only when nothing cut it short; and it finds the races that
sampling finds, with a replay line that fails again. The search itself is
checked against the truth on a model (tests/unit/test_dpor.py)."""

from __future__ import annotations

import itertools

import pytest

import rpc_harness
from rpc_harness.apps import races
from rpc_harness.explore import Attempt, explore_runs, world_signature

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def search(nprocs: int, strategy: str, **bounds) -> tuple[set[tuple], rpc_harness.Exploration]:
    """Every log the collector returned over the search's worlds, and the search."""
    logs: set[tuple] = set()

    def run(seed: int, schedule: str) -> Attempt:
        world = rpc_harness.spawn(races.collector_worker, args=(nprocs,), nprocs=nprocs, seed=seed, schedule=schedule,
                                  deadline=60, check=False)
        assert world.ok and world.controlled, world.report()
        logs.add(tuple(world.values[0]))
        return Attempt(seed, schedule, world, False)

    found = explore_runs(run, seed=5, strategy=strategy, check_every=4, **{"schedules": 300, **bounds})
    return logs, found


@pytest.mark.long  # about 45 worlds
def test_dpor_exhausts_what_the_naive_search_cannot_and_misses_no_outcome_it_reaches():
    # Two senders: DPOR exhausts in 8 worlds; the naive search runs over
    # 300 without exhausting (measured), so it is cut at 30 here, and every
    # outcome it reaches must be one DPOR reached.
    reduced, by_dpor = search(3, "dpor")
    every, by_dfs = search(3, "dfs", schedules=30)
    assert reduced == {(1, 2), (2, 1)}
    assert every <= reduced
    assert by_dpor.exhausted, by_dpor.verdict()
    assert not by_dfs.exhausted and by_dfs.verdict().startswith("not exhausted: schedule bound 30;")
    assert by_dpor.checks >= 1  # some schedule was run twice and compared


@pytest.mark.long  # 30 worlds (24 schedules, 6 run twice): about 6 s on a quiet machine
def test_three_messages_to_one_rank_reach_all_six_orders():
    logs, found = search(4, "dpor")
    assert logs == set(itertools.permutations((1, 2, 3)))
    assert found.exhausted and found.verdict().startswith("exhausted: "), found.verdict()


def test_a_bound_that_cuts_the_search_is_never_called_exhausted():
    _, cut = search(4, "dpor", schedules=3)
    assert not cut.exhausted and cut.verdict() == "not exhausted: schedule bound 3; 3 schedules (dpor), none failed"


def test_dpor_finds_the_lost_update_and_its_replay_line_fails_again():
    found = rpc_harness.explore(races.run_worker, 4, spawn=True, args=(4, 0.0), strategy="dpor", schedules=200,
                                deadline=60)
    assert found.failed, found.summary()
    assert "lost update" in found.found.world["bank"].error
    assert found.verdict().startswith("a schedule failed after ")
    again = rpc_harness.spawn(races.run_worker, args=(4, 0.0), nprocs=4, seed=found.shrunk.seed if found.shrunk
                              else found.found.seed, schedule=found.replay_schedule, deadline=60, check=False)
    assert not again.ok and world_signature(again) == (found.shrunk or found.found).signature
