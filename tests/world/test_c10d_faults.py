"""Faults at collectives, with no code change (``c10d.OP`` failpoints):
each kind fires exactly in the collective and hit its plan names, in
collectives of the Python API and in those DDP's reducer and FSDP2 issue
from C++ and through functional collectives. The entries make their own
process group, as a user program does.

Where a fault struck is read from the rank's own event log, in the order
the entry wrote it: the fault's record lies between the entry's events
before and after the step whose collective it names, or the test fails."""

from __future__ import annotations

import c10d_entries

import rpc_harness


def timeline(outcome):
    """The entry's step events and the faults that fired, in the order the rank wrote them."""
    out = []
    for event in outcome.events:
        if event.get("kind") == "event" and event["name"].startswith("step."):
            out.append((event["name"].removeprefix("step."), event["step"]))
        elif event.get("kind") == "fault":
            out.append(("fault", event["hit"]))
    return out


def fired(result):
    return [(f.rank, f.fault, f.hit) for f in result.fired_faults()]


def test_a_kill_strikes_inside_ddps_third_gradient_all_reduce():
    result = rpc_harness.run_world(c10d_entries.ddp_steps, world_size=2, args=(4,),
                                   faults="kill:worker1@c10d.all_reduce#3", deadline=60, check=False)
    victim = result[1]
    assert victim.status == "killed" and victim.signal == "SIGKILL"
    # DDP's reducer all-reduces the gradients once a backward pass (one bucket):
    # the third all-reduce is the third step's backward, which never returned.
    assert timeline(victim) == [("before", 1), ("after", 1), ("before", 2), ("after", 2), ("before", 3), ("fault", 3)]
    assert fired(result) == [(1, "kill:worker1@c10d.all_reduce#3", 3)]
    assert ("after", 3) not in timeline(result[0])  # its peer never got through that all-reduce


def test_a_delay_holds_its_rank_before_exactly_the_all_reduce_it_names():
    result = rpc_harness.run_world(c10d_entries.timed_all_reduces, world_size=2, args=(3,),
                                   faults="delay:worker1@c10d.all_reduce#2=0.5s", deadline=60)
    assert timeline(result[1]) == [("before", 1), ("after", 1), ("before", 2), ("fault", 2), ("after", 2),
                                   ("before", 3), ("after", 3)]
    assert fired(result) == [(1, "delay:worker1@c10d.all_reduce#2=0.5s", 2)]
    # Its peer waited in that all-reduce for it.
    assert result.values[0][1] >= 0.5 and result.values[1][1] >= 0.5, result.values


def test_a_raise_reaches_the_program_from_the_python_apis_all_reduce_on_the_hit_it_names():
    plan = "raise:worker0@c10d.all_reduce#2,raise:worker1@c10d.all_reduce#2"
    result = rpc_harness.run_world(c10d_entries.catching, world_size=2, args=(3,), faults=plan, deadline=60)
    for rank, raised in enumerate(result.values):
        [(step, kind, message)] = raised
        assert (step, kind) == (2, "InjectedFault")
        assert f"raise:worker{rank}@c10d.all_reduce#2 fired on hit 2" in message


def test_a_raise_inside_ddps_reducer_fails_the_backward_pass_it_names():
    plan = "raise:worker0@c10d.all_reduce#2,raise:worker1@c10d.all_reduce#2"
    result = rpc_harness.run_world(c10d_entries.ddp_steps, world_size=2, args=(3,), faults=plan, deadline=60,
                                   check=False)
    assert [r.status for r in result] == ["raised", "raised"]
    for rank, outcome in enumerate(result):
        assert outcome.error.startswith("InjectedFault: injected fault"), outcome.error
        assert f"raise:worker{rank}@c10d.all_reduce#2 fired on hit 2" in outcome.error
        assert timeline(outcome) == [("before", 1), ("after", 1), ("before", 2), ("fault", 2)]


def test_a_kill_strikes_inside_fsdp2s_second_reduce_scatter():
    result = rpc_harness.run_world(c10d_entries.fsdp_steps, world_size=2, args=(3,),
                                   faults="kill:worker1@c10d.reduce_scatter_tensor#2", deadline=60, check=False)
    victim = result[1]
    assert victim.status == "killed" and victim.signal == "SIGKILL"
    # fully_shard gathers the parameters in forward and reduce-scatters the
    # gradients in backward, once a step each: the second step's backward.
    assert timeline(victim) == [("before", 1), ("after", 1), ("before", 2), ("fault", 2)]
    assert fired(result) == [(1, "kill:worker1@c10d.reduce_scatter_tensor#2", 2)]
    assert ("after", 2) not in timeline(result[0])


def test_a_hang_blocks_its_rank_in_exactly_the_collective_it_names_until_the_deadline():
    result = rpc_harness.run_world(c10d_entries.all_reduces, world_size=2, args=(3,),
                                   faults="hang:worker1@c10d.all_reduce#2", deadline=4, check=False)
    assert result.timed_out
    victim = result[1]
    assert victim.status == "hung"
    assert timeline(victim) == [("before", 1), ("after", 1), ("before", 2), ("fault", 2)]
    assert "hang_at_failpoint" in victim.stacks
    assert fired(result) == [(1, "hang:worker1@c10d.all_reduce#2", 2)]
    assert timeline(result[0])[-1] == ("before", 2)  # waiting for it in that all-reduce


def test_a_freeze_stops_its_rank_in_exactly_the_collective_it_names():
    result = rpc_harness.run_world(c10d_entries.all_reduces, world_size=2, args=(3,),
                                   faults="freeze:worker1@c10d.all_reduce#2", deadline=4, check=False)
    assert result.timed_out  # its peer waits in the all-reduce for a rank that never answers
    victim = result[1]
    assert victim.status == "killed" and "frozen (SIGSTOP)" in victim.describe()
    assert timeline(victim) == [("before", 1), ("after", 1), ("before", 2), ("fault", 2)]
    assert fired(result) == [(1, "freeze:worker1@c10d.all_reduce#2", 2)]
    assert timeline(result[0])[-1] == ("before", 2)


def test_every_collective_and_point_to_point_op_hits_its_own_point_once():
    from rpc_harness.c10d.ops import POINTS

    # A zero delay at every point of both ranks: each must fire (a fault that
    # never fires fails the world), and only once, since each op runs once:
    # isend is not send, all_gather_into_tensor not all_gather.
    plan = ",".join(f"delay:worker{rank}@c10d.{point}=0s" for rank in (0, 1) for point in POINTS)
    result = rpc_harness.run_world(c10d_entries.every_op, world_size=2, faults=plan, deadline=120)
    assert result.values == [{}, {}]  # gloo ran every one
    assert set(result.fault_counts().values()) == {1}, result.fault_counts()


def test_a_point_with_a_group_counts_that_groups_ops_only():
    # Each step all-reduces in the default group, then in the subgroup: the
    # second all-reduce overall is the first step's subgroup one, the
    # subgroup's second is the second step's.
    plan = "delay:worker1@c10d.all_reduce:sub#2=0s,delay:worker0@c10d.all_reduce:1#3=0s"
    result = rpc_harness.run_world(c10d_entries.two_groups, world_size=2, args=(3,), faults=plan, deadline=60)
    assert ("fault", 2) in timeline(result[1])
    assert timeline(result[1]).index(("fault", 2)) == timeline(result[1]).index(("before", 2)) + 1
    assert timeline(result[0]).index(("fault", 3)) == timeline(result[0]).index(("before", 3)) + 1
    assert sorted(fired(result)) == [(0, "delay:worker0@c10d.all_reduce:1#3=0s", 3),
                                     (1, "delay:worker1@c10d.all_reduce:sub#2=0s", 2)]


def test_a_c10d_fault_that_never_fires_fails_the_world_naming_what_its_rank_reached():
    result = rpc_harness.run_world(c10d_entries.all_reduces, world_size=2, args=(2,),
                                   faults="kill:worker1@c10d.all_reduce#3", deadline=60, check=False)
    [problem] = result.problems
    assert problem.startswith("fault kill:worker1@c10d.all_reduce#3 never fired (only 2 hit(s) of c10d.all_reduce"), \
        problem


def test_a_spawned_tutorial_program_gets_faults_in_its_own_ddp_groups_collectives():
    # pytorch/examples' DDP + RPC program (tests/programs/ddp_rpc.py) makes
    # its trainers' Gloo group itself, on its own TCP store; DDP's reducer
    # all-reduces inside the distributed backward pass: once a batch, and
    # the program trains 2 epochs of 3 batches.
    from programs import ddp_rpc

    result = rpc_harness.spawn(ddp_rpc.run_worker, args=(4,), nprocs=4, deadline=120,
                               faults="delay:trainer1@c10d.all_reduce=0s")
    assert result.fault_counts() == {"delay:trainer1@c10d.all_reduce#1+=0s": 6}
    assert [f.hit for f in result.fired_faults()] == [1, 2, 3, 4, 5, 6]
