"""init_rpc's Gloo group replaced by the world's store (rpc_harness.rpc.rendezvous):
by default no rank builds a Gloo group, run and spawn worlds alike, and the
agent is torch's TensorPipe agent; ``rendezvous="gloo"`` (argument, marker)
is torch's own path, with the same results.

That the agent behaves the same under the default is proved by the rest of
the suite, which runs under it: every fault kind (test_fault_controls),
kills and shutdown after a death (test_launcher, test_spawn, the scenario
tests), hangs and deadlines (test_launcher, test_guarantees)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.distributed.rpc as rpc
import worlds

import rpc_harness

_gloo_groups = []  # in a rank: every Gloo group built in it, by its size


def count_gloo_groups():
    """setup: count the Gloo groups this rank builds (torch's backend
    registry builds its group as ``dist.ProcessGroupGloo(store, rank, size, timeout)``)."""
    original = dist.ProcessGroupGloo

    def counted(store, rank, size, *args, **kwargs):
        _gloo_groups.append(size)
        return original(store, rank, size, *args, **kwargs)

    dist.ProcessGroupGloo = counted


def add(a, b):
    return a + b


def ring(ctx):
    peer = ctx.names[(ctx.rank + 1) % ctx.world_size]
    agent = rpc.api._get_current_rpc_agent()
    infos = sorted((info.id, info.name) for info in agent.get_worker_infos())
    value = rpc.rpc_sync(peer, add, args=(torch.ones(2) * ctx.rank, 1)).tolist()
    return {"value": value, "infos": infos, "agent": type(agent).__name__, "gloo_groups": list(_gloo_groups)}


def program(rank, world_size):
    """A spawned program: its own init_rpc and shutdown, the tutorials' way."""
    rpc.init_rpc(f"node{rank}", rank=rank, world_size=world_size)
    agent = rpc.api._get_current_rpc_agent()
    value = rpc.rpc_sync(f"node{(rank + 1) % world_size}", add, args=(rank, 10))
    rpc.shutdown()
    return {"value": value, "agent": type(agent).__name__, "gloo_groups": list(_gloo_groups)}


def expected_ring(world_size):
    return [[float(rank + 1)] * 2 for rank in range(world_size)]  # each rank's value, added to by its peer


@pytest.mark.parametrize("rendezvous", [None, "store", "gloo"])
def test_a_run_world_builds_a_gloo_group_only_when_asked_and_its_rpcs_are_the_same(rpc_world, rendezvous):
    result = rpc_world.run(ring, world_size=4, rendezvous=rendezvous, setup=count_gloo_groups)
    assert [v["value"] for v in result.values] == expected_ring(4)
    assert all(v["infos"] == [(r, f"worker{r}") for r in range(4)] for v in result.values)
    assert {v["agent"] for v in result.values} == {"TensorPipeAgent"}
    groups = [] if rendezvous in (None, "store") else [4]
    assert [v["gloo_groups"] for v in result.values] == [groups] * 4


@pytest.mark.parametrize("rendezvous", [None, "gloo"])
def test_a_spawned_programs_init_rpc_builds_a_gloo_group_only_when_asked(rpc_world, rendezvous):
    result = rpc_world.spawn(program, args=(3,), nprocs=3, rendezvous=rendezvous, setup=count_gloo_groups)
    assert [v["value"] for v in result.values] == [10, 11, 12]
    assert {v["agent"] for v in result.values} == {"TensorPipeAgent"}
    assert [v["gloo_groups"] for v in result.values] == [[] if rendezvous is None else [3]] * 3


@pytest.mark.rpc_world(rendezvous="gloo")
def test_the_marker_chooses_torchs_own_path(rpc_world):
    result = rpc_world.run(ring, world_size=2, setup=count_gloo_groups)
    assert [v["gloo_groups"] for v in result.values] == [[2], [2]]


def test_a_planned_kill_and_the_shutdown_after_it_end_alike_either_way(rpc_world):
    outcomes = {}
    for rendezvous in ("store", "gloo"):
        result = rpc_world.run(worlds.step_three_times, world_size=3, rendezvous=rendezvous,
                               faults="kill:worker1@test.step#2", deadline=30)
        outcomes[rendezvous] = ([r.status for r in result], result[1].signal, result.values[0], result.values[2],
                                [(f.rank, f.fault, f.hit) for f in result.fired_faults()])
    assert outcomes["store"] == outcomes["gloo"] == (["ok", "killed", "ok"], "SIGKILL", {}, {},
                                                     [(1, "kill:worker1@test.step#2", 2)])


def test_a_bad_rendezvous_is_refused_before_any_process_starts():
    with pytest.raises(rpc_harness.WorldSpecError, match=r"^run_world\(\): invalid rendezvous 'mpi'"):
        rpc_harness.run_world(ring, world_size=2, rendezvous="mpi")
