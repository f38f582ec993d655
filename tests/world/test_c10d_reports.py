"""A hang, a deadline or a lost rank in a collective world is explained:
its report says where each rank was in its collectives, read from the
histories the ranks wrote as they went (the one a kill ended included)."""

from __future__ import annotations

import c10d_entries
import pytest

import rpc_harness


def test_ranks_stuck_at_different_ops_of_one_collective_are_named_with_their_ops():
    result = rpc_harness.run_world(c10d_entries.disagreeing, world_size=3, deadline=5, check=False)
    assert result.timed_out
    line = "rank 2 at broadcast#1 (collective #3, float32 [16]); ranks 0, 1 at all_reduce#3 (collective #3, float32 [16])"
    assert result.collectives == [line]
    assert f"  collectives: {line}\n" in result.report()


def test_a_rank_that_never_entered_the_collective_its_peers_wait_in_is_named():
    result = rpc_harness.run_world(c10d_entries.one_short, world_size=3, deadline=5, check=False)
    assert result.timed_out
    assert result.collectives == ["ranks 0, 1 at all_reduce#3 (collective #3, float32 [4])",
                                  "rank 2 never entered collective #3 (its last: all_reduce#2, collective #2, completed)"]


def test_ranks_that_gave_a_collective_different_shapes_are_named_with_theirs():
    result = rpc_harness.run_world(c10d_entries.mismatched, world_size=2, deadline=30, check=False)
    assert not result.ok  # gloo aborts one rank or both, or they hang
    assert result.collectives[0] == (
        "ranks disagree on the shape of all_gather#1 (collective #2): [8] on rank 0, [16] on rank 1")


def test_a_rank_killed_in_ddps_all_reduce_is_shown_inside_it():
    result = rpc_harness.run_world(c10d_entries.ddp_steps, world_size=2, args=(4,),
                                   faults="kill:worker1@c10d.all_reduce#3", deadline=60, check=False)
    assert result[1].status == "killed"
    # Its history was written up to the kill: it entered the all-reduce and never completed it.
    [line] = [line for line in result.collectives if line.startswith("every rank at all_reduce#3 (collective #")]
    assert "float32 [36])" in line and ("not completed on rank 1" in line or "not completed on ranks 0, 1" in line), \
        result.collectives


def test_a_world_hung_outside_its_collectives_says_every_rank_completed_its_last():
    # Nothing after the second all-reduce looks at it: the rank brings its
    # history up to date as it answers for its stacks.
    result = rpc_harness.run_world(c10d_entries.stuck_after_collectives, world_size=2, deadline=4, check=False,
                                   faults="hang:worker0@test.after,hang:worker1@test.after")
    assert result.timed_out
    assert result.collectives == ["every rank completed all_reduce#2 (collective #2, float32 [4]), its last collective"]


@pytest.mark.parametrize("group", ["the entry's own", "the world's"])
def test_a_rank_that_raised_is_the_failure_and_its_peers_cut_off_in_their_collective_are_its_consequence(group):
    # Its peers' all-reduce fails as the world is stopped ("Connection
    # closed by peer"): that is not their failure, nor a death (outside-user
    # trial: the report said "2 of 3 ranks failed" and "rank 0 died").
    if group == "the world's":
        result = rpc_harness.run_world(c10d_entries.raises_before_the_worlds_all_reduce, world_size=3, deadline=30,
                                       check=False, process_group="gloo", rpc=False)
    else:
        result = rpc_harness.run_world(c10d_entries.raises_before_its_all_reduce, world_size=3, deadline=30,
                                       check=False)
    assert [o.rank for o in result.ranks if o.failed] == [1]
    assert result[1].error == "ValueError: rank 1's own mistake"
    cause = "rank 1 (worker1) raised, and a collective world cannot go on without one of its ranks"
    assert result.ended_by == cause
    for peer in (result[0], result[2]):
        assert peer.status == "stopped"
        assert peer.stopped_because.startswith(cause)
    assert "1 of 3 ranks failed" in result.report().splitlines()[0]
    assert "died" not in result.report()
