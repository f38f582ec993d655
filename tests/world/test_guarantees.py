"""Guarantees a world keeps at their edges, checked in real worlds: a
hard-coded rendezvous without a network namespace, strict faults where the
plan also ended a rank, preloading, where the deadline and the bring-up
budget count from, the parameter server's lease queue under a kill, a
spawned program's names against its ranks, when a failpoint strikes. Those
that need no world are in tests/unit/test_edges.py. Each was seen to fail
with its guard removed (tools/plant_bugs.py plants each removal; issue 24
found them unguarded)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch
import torch.distributed.rpc as rpc
import worlds
from programs import hard_coded_port, named_out_of_order

import rpc_harness
from rpc_harness import WorldFailed, WorldTimeout
from rpc_harness.repro import decode
from rpc_harness.scenarios._rpc import call_method, call_method_async
from rpc_harness.scenarios.parameter_server import Config, ParameterServer
from rpc_harness.scenarios.parameter_server import server as ps_server
from rpc_harness.scenarios.parameter_server.config import PS_NAME

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# Where this module was imported: the forkserver preloads it (its tests use rpc_world).
IMPORTED_IN = os.getpid()


# -- a spawned program's hard-coded rendezvous without a network namespace -----------------


def test_a_programs_hard_coded_port_is_harmless_without_a_network_namespace(rpc_world):
    # The program sets MASTER_ADDR/MASTER_PORT by hand and init_rpc's env://
    # would rendezvous there. Another world's store already holds that port
    # (two worlds hard-coding one port, on a host without namespaces): the
    # program must get its world's private store and never touch the port.
    other = torch.distributed.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    keys = other.num_keys()
    result = rpc_world.spawn(hard_coded_port.run_worker, args=(2, other.port), nprocs=2, isolate=False)
    assert result.isolation.startswith("none: the world shares the host's loopback")
    assert result.values == [1, 2]
    assert other.num_keys() == keys, "the world wrote to the other world's rendezvous"


# -- strict faults in a world where the plan also killed or froze a rank -------------------


@pytest.mark.parametrize("ender", ["kill", "freeze"])
def test_a_fault_that_never_fired_fails_the_world_also_when_the_plan_ended_a_rank(ender):
    never = "raise:worker0@test.never#1"
    result = rpc_harness.run_world(worlds.step_three_times, world_size=2, faults=f"{ender}:worker1@test.step#2,{never}",
                               deadline=60, check=False)
    assert [r.status for r in result] == ["ok", "killed"]
    assert result.fault_counts() == {f"{ender}:worker1@test.step#2": 1, never: 0}
    assert not result.ok
    assert result.problems == [f"fault {never} never fired: worker0 reached test.step x3; mark it optional with "
                               "'?' if the run may end first"]
    optional = rpc_harness.run_world(worlds.step_three_times, world_size=2, deadline=60,
                                 faults=f"{ender}:worker1@test.step#2,{never}?")
    assert optional.ok and optional.problems == []


# -- preloading ----------------------------------------------------------------------------


def test_the_forkserver_imported_this_test_module_and_rpc_preload_before_forking_the_ranks(rpc_world):
    # Imported in the forkserver, a module's IMPORTED_IN is the forkserver's
    # pid, every rank's parent; a rank that imported it itself has its own.
    result = rpc_world.run(worlds.where_imported, world_size=2, args=([__name__, "worlds"],))
    for value in result.values:
        for module, seen in value.items():
            assert seen["imported_in"] == seen["forkserver"] != seen["rank"], f"{module} was not preloaded: {seen}"


PRELOADED = "import os\nIMPORTED_IN = os.getpid()\n"
SCRIPT = """
import json
import rpc_harness
from where import where_imported

rpc_harness.preload("by_call")
if __name__ == "__main__":
    result = rpc_harness.run_world(where_imported, world_size=2, args=(["by_call", "by_env"],))
    print(json.dumps(result.values))
"""


# One of the suite's slowest (pytest --durations): outside pytest means fresh interpreters: two
# scripts, each starting a forkserver of its own.
def test_outside_pytest_preload_and_the_environment_variable_reach_the_forkserver(tmp_path, short_tmp):
    (tmp_path / "by_call.py").write_text(PRELOADED)
    (tmp_path / "by_env.py").write_text(PRELOADED)
    (tmp_path / "where.py").write_text(textwrap.dedent("""
        import os, sys

        def where_imported(ctx, modules):
            return {name: [getattr(sys.modules.get(name), "IMPORTED_IN", None), os.getppid(), os.getpid()]
                    for name in modules}
    """))
    (tmp_path / "script.py").write_text(SCRIPT)
    path = os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = dict(os.environ, RPC_HARNESS_PRELOAD="by_env", TMPDIR=str(short_tmp), PYTHONPATH=path)
    done = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    for value in json.loads(done.stdout.splitlines()[-1]):
        for module, (imported_in, forkserver, rank) in value.items():
            assert imported_in == forkserver != rank, f"{module} was not preloaded: {value}"


# -- where the deadline counts from --------------------------------------------------------


def test_the_deadline_counts_from_when_every_rank_has_joined():
    # Every rank's setup takes SLOW_START (5 s) before it joins, and the
    # entries return at once: a deadline of 4 s counted from the fork would
    # run out during the bring-up.
    result = rpc_harness.run_world(worlds.returns_at_once, world_size=2, setup=worlds.slow_start, deadline=4)
    assert result.ok and result.values == [0, 1]
    assert result.duration >= worlds.SLOW_START


def test_a_bring_up_longer_than_its_budget_fails_as_a_bring_up_naming_the_ranks_not_joined():
    with pytest.raises(WorldTimeout) as caught:
        rpc_harness.run_world(worlds.returns_at_once, world_size=2, setup=worlds.slow_start, bringup=1, deadline=600)
    result = caught.value.result
    assert result.budget == "bring-up" and result.timed_out
    assert [r.status for r in result] == ["hung", "hung"]
    report = result.report()
    assert "bring-up budget of 1s" in report.splitlines()[0]
    assert "rank 0 (worker0): had not joined the RPC world when the bring-up budget ran out" in report
    assert "slow_start" in result[0].stacks, "its stacks show where it was"


# -- the parameter server's lease queue ----------------------------------------------------

LEASE = Config(batches=1, test_size=16)
TRAINERS = ("trainer1", "trainer2", "trainer3")


def lease_state():
    """On the server: who holds the step lease, who is queued for it, who was reaped."""
    server = ps_server.param_server
    if server is None:
        return None, [], []
    with server._cv:
        holder = server._holder.trainer if server._holder is not None else None
        return holder, [lease.trainer for lease in server._queue], sorted(server._dead)


def wait_for(name, what, predicate):
    """Poll the server's lease state until ``predicate(holder, queue, dead)`` (30 s at most)."""
    until = time.monotonic() + 30
    while not predicate(*(state := rpc.rpc_sync(PS_NAME, lease_state))):
        if time.monotonic() > until:
            raise AssertionError(f"{name} waited 30 s for {what}; the lease state is {state}")
        time.sleep(0.02)


def ask_for_the_lease(rref, name):
    """begin_step, as a trainer calls it: a future completed when ``name`` holds the lease."""
    return rpc.rpc_async(PS_NAME, call_method_async, args=(ParameterServer.begin_step, rref, name, 0,
                                                           TRAINERS.index(name) + 1))


def release(rref, name):
    rpc.rpc_sync(PS_NAME, call_method, args=(ParameterServer.end_step, rref, name, 0, TRAINERS.index(name) + 1,
                                             None))
    rpc.rpc_sync(PS_NAME, call_method_async, args=(ParameterServer.trainer_done, rref, name))


def lease_queue(ctx):
    """trainer1 holds the lease; trainer2, then trainer3 queue for it;
    trainer2 dies there (the plan kills it at failpoint lease.queued);
    trainer1 releases the lease once the server has reaped trainer2."""
    if ctx.rank == 0:
        server = ps_server.get_parameter_server(LEASE, ctx.world_seed, TRAINERS)
        server.supervise(timeout=30)
        report = server.report()
        return {"held": [d["trainer"] for d in report["dropped"]], "dead": report["dead"]}
    rref = rpc.remote(PS_NAME, ps_server.get_parameter_server, args=(LEASE, ctx.world_seed, TRAINERS))
    if ctx.name == "trainer1":
        ask_for_the_lease(rref, "trainer1").wait()
        wait_for(ctx.name, "trainer2 reaped", lambda holder, queue, dead: dead == ["trainer2"])
        release(rref, "trainer1")
    elif ctx.name == "trainer2":
        wait_for(ctx.name, "trainer1 holding the lease", lambda holder, queue, dead: holder == "trainer1")
        ask_for_the_lease(rref, "trainer2")
        wait_for(ctx.name, "trainer2 and trainer3 queued", lambda holder, queue, dead: queue == ["trainer2", "trainer3"])
        ctx.failpoint("lease.queued")
    else:
        wait_for(ctx.name, "trainer2 queued", lambda holder, queue, dead: queue == ["trainer2"])
        ask_for_the_lease(rref, "trainer3").wait()
        release(rref, "trainer3")
    return ctx.name


def test_a_trainer_killed_while_its_lease_request_is_queued_is_skipped_and_the_next_in_line_trains():
    result = rpc_harness.run_world(lease_queue, names=[PS_NAME, *TRAINERS], faults="kill:trainer2@lease.queued",
                               deadline=60)
    assert [r.status for r in result] == ["ok", "ok", "killed", "ok"]
    assert result.values[0] == {"held": ["trainer1", "trainer3"], "dead": ["trainer2"]}
    reaped = [e["trainer"] for e in result[PS_NAME].events if e.get("name") == "ps.reaped"]
    assert reaped == ["trainer2"]


# -- a spawned program's worker names against its ranks ------------------------------------


def test_a_programs_names_belong_to_the_ranks_that_took_them_whatever_their_sort_order(rpc_world):
    # ps, trainer2, trainer10 by rank; ps, trainer10, trainer2 by name.
    result = rpc_world.spawn(named_out_of_order.run_worker, args=(3,), nprocs=3)
    assert result.names == ("ps", "trainer2", "trainer10")
    assert [(r.rank, r.name, r.value["rank"], r.value["name"]) for r in result] == [
        (0, "ps", 0, "ps"), (1, "trainer2", 1, "trainer2"), (2, "trainer10", 2, "trainer10")]
    assert result["trainer10"].value["replies"] == ["trainer10 (rank 2) reported"] * 2
    # A fault aimed by name strikes the rank of that name ... (the kill of the
    # only trainer that reports leaves nothing of the program done by the
    # survivors: accepted here, since names are what this test is about)
    killed = rpc_world.spawn(named_out_of_order.run_worker, args=(3,), nprocs=3,
                             faults="kill:trainer10@rpc.call:report#2", expect="unfinished")
    assert [r.status for r in killed] == ["ok", "ok", "killed"]
    assert [(f.rank, f.hit) for f in killed.fired_faults()] == [(2, 2)]
    assert "rank 2 (trainer10): killed by SIGKILL as the fault plan asked" in killed.report()
    # ... one that never fires is reported with that rank's own hits (trainer10 calls twice, trainer2 once) ...
    with pytest.raises(WorldFailed) as caught:
        rpc_world.spawn(named_out_of_order.run_worker, args=(3,), nprocs=3, faults="kill:trainer10@rpc.call:report#3")
    assert ("fault kill:trainer10@rpc.call:report#3 never fired (only 2 hit(s) of rpc.call:report, the fault waits "
            "for hit 3): trainer10 reached rpc.call:report x2") in str(caught.value)
    # ... and names said up front match the program's own, rank for rank, as its replay token keeps them.
    named = rpc_world.spawn(named_out_of_order.run_worker, args=(3,), nprocs=3, names=["ps", "trainer2", "trainer10"])
    assert named.ok and named.problems == []
    token = named.repro.split("rpc-harness replay ", 1)[1].split()[0]
    assert decode(token).names == ("ps", "trainer2", "trainer10")


# -- when a call: failpoint strikes --------------------------------------------------------


@pytest.mark.parametrize("target", ["record_line", "line_recorder"], ids=["function", "callable-object"])
def test_a_call_failpoint_strikes_before_the_call_has_any_effect(tmp_path, target):
    lines = tmp_path / "lines"
    raised = rpc_harness.run_world(worlds.records_lines, world_size=2, args=(str(lines), 3, target),
                               faults=f"raise:worker0@call:worlds:{target}#2", deadline=60)
    assert raised.values[0] == [2]
    assert lines.read_text().splitlines() == ["1", "3"], "the second call raised before it wrote its line"
    lines.unlink()
    killed = rpc_harness.run_world(worlds.records_lines, world_size=2, args=(str(lines), 3, target),
                               faults=f"kill:worker0@call:worlds:{target}#2", deadline=60)
    assert [r.status for r in killed] == ["killed", "ok"]
    assert lines.read_text().splitlines() == ["1"], "the rank died before the second call wrote its line"


@pytest.mark.parametrize("point", ["rpc.call", "rpc.serve"])
def test_an_rpc_failpoint_strikes_before_the_function_runs(tmp_path, point):
    lines = tmp_path / "lines"
    target = "worker0" if point == "rpc.call" else "worker1"  # the rank that issues it, or the one that serves it
    result = rpc_harness.run_world(worlds.serves_lines, world_size=2, args=(str(lines), 3),
                               faults=f"raise:{target}@{point}:record_line#2", deadline=60)
    assert result.values[0] == [2]
    assert lines.read_text().splitlines() == ["1", "3"]
