"""Issue 28: what outside trials found the reports did not say. One test per
defect, each with a program of the shape that exposed it (tests/programs/,
none of which imports the harness). Every test here fails before its fix,
for the reason its name gives."""

from __future__ import annotations

import pytest
from programs import dropped_future, echo, tutorial_rl

from rpc_harness import WorldFailed, WorldTimeout
from rpc_harness.result import UNFINISHED

# -- 1: a planned kill of the rank the program needs most ------------------------------

KILL_AGENT = "kill:agent@rpc.call:Observer.run_episode#1"


def test_1_a_planned_kill_that_no_survivor_ran_past_fails_the_world_naming_it(rpc_world):
    # The agent drives the RL tutorial; its observers only serve (init_rpc,
    # then straight into rpc.shutdown()). Killed at its first call, it takes
    # the whole program with it, and the observers end "ok".
    with pytest.raises(WorldFailed) as caught:
        rpc_world.spawn(tutorial_rl.run_worker, args=(3, 2, 10), nprocs=3, faults=KILL_AGENT, deadline=30)
    result = caught.value.result
    assert [r.status for r in result] == ["killed", "ok", "ok"], "precondition: the observers shut down"
    assert not result.ok
    assert result.problems and result.problems[0].startswith(f"{UNFINISHED} rank 0 (agent): "), result.problems
    assert "rank 1 (obs1), rank 2 (obs2) only served" in result.problems[0]
    assert "expect='unfinished'" in result.problems[0], "says how to accept it"
    assert str(caught.value).startswith("rpc world failed: a planned kill ended its program")


def test_1_a_test_that_expects_the_kill_to_end_the_program_says_so(rpc_world):
    result = rpc_world.spawn(tutorial_rl.run_worker, args=(3, 2, 10), nprocs=3, faults=KILL_AGENT, deadline=30,
                             expect="unfinished")
    assert result.ok and [r.status for r in result] == ["killed", "ok", "ok"]


def test_1_a_kill_that_a_survivor_ran_past_is_still_expected(rpc_world):
    # worker2 calls worker0 from its own code, and returns: the program went
    # on without worker1, whichever of the two finished first.
    result = rpc_world.spawn(echo.run_worker, args=(3,), nprocs=3, faults="kill:worker1@rpc.call:echo#2",
                             deadline=30)
    assert result.ok and [r.status for r in result] == ["ok", "killed", "ok"]


# -- 3: an error lost in a future nobody waited for -------------------------------------


def test_3_a_hang_after_an_injected_error_names_that_error_in_its_headline(rpc_world):
    fault = "raise:worker1@rpc.serve:store#1=disk full"
    with pytest.raises(WorldTimeout) as caught:
        rpc_world.spawn(dropped_future.run_worker, args=(2,), nprocs=2, faults=fault, deadline=3)
    headline = str(caught.value).splitlines()[0]
    assert headline.startswith("rpc world hung"), headline
    assert f"last injected error: {fault} in rank 1 (worker1) on hit 1" in headline, headline
    assert "disk full" in headline, headline
