"""Collective worlds (issue 39): a default process group made on the world's
own store before the RPC agent (world options process_group and rpc), and
programs written the DDP tutorial's way, which call init_process_group
themselves, run unchanged under rpc_world.spawn."""

from __future__ import annotations

import os
import threading
import time

import pytest
import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
import torch.distributed.rpc as rpc
from programs import ddp_tutorial

import rpc_harness

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def sum_of_ranks(ctx):
    tensor = torch.tensor([float(ctx.rank)])
    dist.all_reduce(tensor, group=ctx.group)
    store, chain = c10d._get_default_store(), []
    while isinstance(store, dist.PrefixStore):
        chain.append(store)
        store = store.underlying_store
    return {
        "sum": tensor.item(),
        "group": ctx.group is dist.group.WORLD and ctx.group.size() == ctx.world_size,
        "backend": dist.get_backend(ctx.group),
        "rpc": rpc.api._is_current_rpc_agent_set(),
        "store": type(store).__name__,
        "world_store": _reads_the_worlds_file(ctx, store),
        "master_port": os.environ.get("MASTER_PORT"),
    }


def _reads_the_worlds_file(ctx, store):
    """Whether ``store`` (the group's, unwrapped) is the world's FileStore:
    a key written to the world's file shows in it."""
    dist.FileStore(os.path.join(ctx.workdir, "store"), -1).set(f"probe{ctx.rank}", b"1")
    return store.check([f"probe{ctx.rank}"])


def no_group(ctx):
    return ctx.group, dist.is_initialized()


def test_a_world_of_collectives_only_has_its_group_and_no_rpc_agent(rpc_world):
    result = rpc_world.run(sum_of_ranks, world_size=4, process_group="gloo", rpc=False)
    for value in result.values:
        assert value["sum"] == 0 + 1 + 2 + 3 and value["group"] and value["backend"] == "gloo"
        assert value["rpc"] is False, "rpc=False: no init_rpc"


def test_the_group_is_made_on_the_worlds_own_store_before_the_rpc_agent(rpc_world):
    result = rpc_world.run(sum_of_ranks, world_size=3, process_group="gloo")
    for value in result.values:
        assert value["sum"] == 3 and value["rpc"] is True
        assert value["store"] == "FileStore" and value["world_store"], "the group's store is init_rpc's"
        assert value["master_port"] is None, "no port, no second rendezvous"
    for outcome in result:
        kinds = [event["kind"] for event in outcome.events]
        assert kinds.index("group_start") < kinds.index("group_done") < kinds.index("init_rpc") < kinds.index(
            "entry_start"), "store, then the group, then the RPC agent, then the entry"


def test_without_a_process_group_there_is_none(rpc_world):
    assert rpc_world.run(no_group, world_size=2).values == [(None, False)] * 2


def test_the_ddp_tutorial_runs_unchanged_and_counts_as_joined(rpc_world):
    # It never calls init_rpc: it joins its world in its own init_process_group.
    result = rpc_world.spawn(ddp_tutorial.demo_basic, args=(2,), nprocs=2)
    assert [outcome.status for outcome in result] == ["ok", "ok"]
    first, second = result.values
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True)), "DDP kept the replicas equal"
    assert all(any(e["kind"] == "group_done" for e in outcome.events) for outcome in result)


def test_two_ddp_tutorials_at_once_do_not_meet_on_their_hard_coded_port(rpc_world):
    # Both set MASTER_PORT=12355: the world's store serves their env:// instead.
    results, errors = [], []

    def one():
        try:
            results.append(rpc_harness.spawn(ddp_tutorial.demo_basic, args=(2, 20), nprocs=2, isolate=False))
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(results) == 2


def test_a_program_with_its_own_store_keeps_it(rpc_world, tmp_path):
    result = rpc_world.spawn(ddp_tutorial.own_store, args=(3, str(tmp_path / "store")), nprocs=3)
    assert result.values == [6.0, 6.0, 6.0]


def test_a_program_may_not_make_a_second_default_group_in_a_world_that_has_one(rpc_world):
    result = rpc_world.spawn(ddp_tutorial.demo_basic, args=(2,), nprocs=2, process_group="gloo", check=False)
    # The first to raise stops the world; the other may be stopped before it reports the same.
    failed = [o for o in result if o.failed]
    assert failed and all("the world brought up the default process group already" in o.error for o in failed)


# -- deaths in a collective world --------------------------------------------------------------------


def all_reduce_steps(ctx, steps=5, die_at=None):
    for step in range(1, steps + 1):
        ctx.failpoint("step")
        if step == die_at and ctx.rank == 1:
            os._exit(3)  # a crash of its own, no fault planned
        tensor = torch.ones(4)
        dist.all_reduce(tensor, group=ctx.group)
    return steps


def _stopped(result, reason):
    return [o.rank for o in result if o.status == "stopped" and reason in o.stopped_because]


def test_a_planned_kill_ends_a_collective_world_at_once_and_stops_the_survivors(rpc_world):
    # Without this, gloo fails each survivor's next collective ("Connection
    # closed by peer"): every survivor a failure of the plan's own doing.
    result = rpc_world.run(all_reduce_steps, world_size=4, process_group="gloo", rpc=False, deadline=30,
                           faults="kill:worker2@step#3", failpoints=["step"])
    assert result.ok and not result.timed_out, result.report()
    assert [o.status for o in result] == ["stopped", "stopped", "killed", "stopped"]
    reason = "rank 2 (worker2) was killed by the fault plan, and a collective world cannot go on without"
    assert _stopped(result, reason) == [0, 1, 3] and reason in result.ended_by
    assert "ended early: rank 2 (worker2) was killed by the fault plan" in result.report()
    assert result.report().startswith("rpc world ended early by its fault plan")
    # Killed after its second all_reduce completed, worker2 wrote that down
    # first; the survivors, stopped at once, are not guessed to be inside theirs.
    assert result.collectives and not any("not completed" in line for line in result.collectives), result.collectives


def test_a_frozen_rank_ends_a_collective_world_without_waiting_for_its_deadline(rpc_world):
    # Its sockets stay open: without this, the others wait in all_reduce
    # until the deadline (gloo alone would wait 30 minutes).
    result = rpc_world.run(all_reduce_steps, world_size=3, process_group="gloo", deadline=20,
                           faults="freeze:worker1@step#2", failpoints=["step"])
    assert not result.timed_out and result.ok, result.report()
    assert [o.status for o in result] == ["stopped", "killed", "stopped"]
    assert _stopped(result, "rank 1 (worker1) was frozen by the fault plan") == [0, 2]


def test_an_unplanned_death_fails_a_collective_world_and_names_the_dead_rank(rpc_world):
    result = rpc_world.run(all_reduce_steps, world_size=3, process_group="gloo", rpc=False, deadline=20,
                           kwargs={"die_at": 2}, check=False)
    assert not result.timed_out and not result.ok
    assert [o.status for o in result] == ["stopped", "died", "stopped"], result.report()
    assert [o.rank for o in result.failures] == [1], "dead ranks: the one that died, not its survivors"
    assert _stopped(result, "rank 1 (worker1) died, and a collective world cannot go on") == [0, 2]


def test_a_planned_kill_in_a_ddp_program_ends_it_and_says_it_never_got_past_the_kill(rpc_world):
    names = ["worker0", "worker1", "worker2"]
    kill = "kill:worker1@call:torch.optim.sgd:SGD.step#2"
    result = rpc_world.spawn(ddp_tutorial.demo_basic, args=(3, 5), nprocs=3, names=names, faults=kill, check=False)
    assert [o.status for o in result] == ["stopped", "killed", "stopped"], result.report()
    assert _stopped(result, "rank 1 (worker1) was killed by the fault plan") == [0, 2]
    assert result.problems[0].startswith("the program never got past the planned kill of rank 1 (worker1)")
    accepted = rpc_world.spawn(ddp_tutorial.demo_basic, args=(3, 5), nprocs=3, names=names, faults=kill,
                               expect="unfinished")
    assert accepted.ok and [o.rank for o in accepted if o.status == "killed"] == [1]


# -- a group that cannot form --------------------------------------------------------------------------


def rank2_hangs_before_its_group():
    if rpc_harness.current_context().rank == 2:
        time.sleep(3600)


def rank1_dies_before_its_group():
    if rpc_harness.current_context().rank == 1:
        os._exit(3)


def test_a_group_that_never_forms_names_the_rank_that_never_reached_it(rpc_world):
    result = rpc_world.run(sum_of_ranks, world_size=3, process_group="gloo", rpc=False, bringup=5,
                           setup=rank2_hangs_before_its_group, check=False)
    assert result.timed_out and result.budget == "bring-up"
    assert result.problems[0] == (
        "the default process group never formed (gloo): rank 2 (worker2) hung before it reached init_process_group; "
        "rank 0 (worker0), rank 1 (worker1) waited in init_process_group for it")
    assert "time.sleep(3600)" in result["worker2"].stacks or "rank2_hangs_before_its_group" in result["worker2"].stacks


def test_a_rank_that_dies_before_its_group_forms_is_named(rpc_world):
    result = rpc_world.run(sum_of_ranks, world_size=3, process_group="gloo", rpc=False,
                           setup=rank1_dies_before_its_group, check=False)
    assert not result.timed_out and [o.rank for o in result.failures] == [1]
    assert result.problems[0].startswith(
        "the default process group never formed (gloo): rank 1 (worker1) died before it reached init_process_group")
    assert "rpc world failed" in result.report()


def hangs_before_its_own_group(rank, world_size):
    if rank == 1:
        time.sleep(3600)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


def test_a_spawned_programs_group_that_never_forms_is_named_too(rpc_world):
    result = rpc_world.spawn(hangs_before_its_own_group, args=(2,), nprocs=2, bringup=5, check=False)
    assert result.timed_out and result.problems[0] == (
        "the default process group never formed: rank 1 hung before it reached init_process_group; "
        "rank 0 waited in init_process_group for it")
