"""Programs written the tutorials' way, run unchanged under rpc_world.spawn:
faults aimed by name at their RPCs and functions, counted message faults,
plans that never fire failing the world, and their own init_rpc/shutdown
made safe (tests/programs/ never imports the harness)."""

from __future__ import annotations

import re

import pytest
import torch.distributed.rpc as rpc
import worlds
from programs import echo, torch_examples, tutorial_ps, tutorial_rl

import rpc_harness
from rpc_harness import FaultPlanError, WorldFailed, WorldSpecError

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

PS_UPDATE = "rpc.call:BatchUpdateParameterServer.update_and_fetch_model"


def fired(result, fault):
    return [e for e in result.fired_faults() if e.fault == fault]


def spans(result, name, kind="serve"):
    """(begin, end) seconds of every ``kind`` span of rank ``name``."""
    events = result[name].events
    begins = {e["id"]: e for e in events if e["kind"] == f"{kind}_begin"}
    return [(begins[e["id"]], e) for e in events if e["kind"] == f"{kind}_end" and e["id"] in begins]


def test_a_tutorial_program_runs_unchanged_and_its_names_are_the_workers(rpc_world):
    result = rpc_world.spawn(tutorial_rl.run_worker, args=(3, 2, 10), nprocs=3)
    assert result.names == ("agent", "obs1", "obs2"), "the program's own init_rpc names the workers"
    assert [r.status for r in result] == ["ok", "ok", "ok"]
    assert result.values[0]["episodes"] == 2 and result.values[1:] == [None, None]
    # Its RPCs are on the timeline: issued by the observers (through the
    # tutorial's _remote_method helper), served by the agent.
    issued = {e["func"] for e in result["obs1"].events if e["kind"] == "rpc_begin"}
    assert "_call_method(Agent.select_action)" in issued
    served = {b["func"] for b, _ in spans(result, "agent")}
    assert {"_call_method(Agent.select_action)", "_call_method(Agent.report_reward)"} <= served


def test_an_observer_slowed_where_it_serves_its_episodes(rpc_world):
    fault = "delay:obs1@rpc.serve:Observer.run_episode#1+=0.2s"
    result = rpc_world.spawn(tutorial_rl.run_worker, args=(3, 2, 10), nprocs=3, faults=fault)
    assert [(e.rank, e.hit) for e in fired(result, fault)] == [(1, 1), (1, 2)], "once per episode, on obs1"
    episodes = [(b, e) for b, e in spans(result, "obs1") if b["func"] == "_call_method(Observer.run_episode)"]
    assert len(episodes) == 2 and all(e["t"] - b["t"] >= 0.2 for b, e in episodes), "each served episode waited"
    assert not fired(result, "delay:obs2@rpc.serve:Observer.run_episode#1+=0.2s")


# One of the suite's slowest (pytest --durations): the tutorial's server hangs once a trainer is
# dead, by design of the tutorial; the world's deadline (8 s) ends it.
def test_a_trainer_killed_the_third_time_it_calls_the_parameter_server(rpc_world):
    fault = f"kill:trainer2@{PS_UPDATE}#3"
    # The tutorial's batch-updating server waits for every trainer's update:
    # with one dead it never answers the others. The world hangs, and says where.
    result = rpc_world.spawn(tutorial_ps.run_worker, args=(4,), nprocs=4, faults=fault, deadline=8, check=False)
    assert result["trainer2"].status == "killed"
    assert [(e.rank, e.hit) for e in fired(result, fault)] == [(2, 3)], "exactly at the third call"
    updates = [e for e in result["trainer2"].events if e["kind"] == "rpc_begin" and "update_and_fetch" in e["func"]]
    assert len(updates) == 2, "the third call was never sent"
    assert result.timed_out and result["ps"].status == "hung"
    assert "fut.wait()" in result["ps"].stacks
    assert "update_and_fetch_model" in result["trainer1"].stacks
    assert "rank 2 (trainer2): killed by SIGKILL as the fault plan asked" in result.report()


def test_rref_proxy_calls_are_failpoints_and_spans(rpc_world):
    fault = "delay:trainer1@rpc.call:BatchUpdateParameterServer.get_model=0.05s"
    result = rpc_world.spawn(tutorial_ps.run_worker, args=(3,), nprocs=3, faults=fault)
    assert len(fired(result, "delay:trainer1@rpc.call:BatchUpdateParameterServer.get_model#1+=0.05s")) == 1
    issued = [e for e in result["trainer1"].events if e["kind"] == "rpc_begin"]
    assert any(e["func"] == "BatchUpdateParameterServer.get_model" and e["api"] == "rpc_sync" for e in issued)
    served = {b["func"] for b, _ in spans(result, "ps")}
    assert "BatchUpdateParameterServer.get_model" in served
    assert "BatchUpdateParameterServer.update_and_fetch_model" in served


def test_rref_proxies_first_called_from_many_threads_at_once_are_named_by_their_type_every_time(rpc_world):
    # Issue 28: torch's first calls of a proxy each fetch the RRef's type and
    # cache it, racing one another; a call named by a type fetch still under
    # way was "RRef.inc", so its failpoint's count varied for the same seed.
    # 12 rounds of 8 first calls released by a barrier, through rpc_sync()
    # and rpc_async() in turn: every one must count, in every run.
    rounds, threads = 12, 8
    fault = "kill:worker0@rpc.call:Counter.inc#100000?"  # aimed at rank 0: it counts every failpoint
    for _ in range(3):
        result = rpc_world.run(worlds.proxies_first_called_from_threads, world_size=2, args=(rounds, threads),
                               faults=fault)
        hits = result[0].hits
        assert hits.get("rpc.call:Counter.inc") == rounds * threads, hits
        assert not [name for name in hits if name.startswith("rpc.call:RRef.")], hits


def test_message_faults_on_a_program_are_counted(rpc_world):
    plan = "msgfail:agent@RREF_USER_DELETE=1,msgdelay:agent@PYTHON_CALL=0.05s"
    result = rpc_world.spawn(tutorial_rl.run_worker, args=(3, 2, 10), nprocs=3, faults=plan)
    counts = result.fault_counts()
    # The agent drops its two observers' RRefs at shutdown: each delete fails
    # once, and torch's retry delivers it. It starts an episode on each
    # observer by rpc_async, a PYTHON_CALL, twice: four sends delayed.
    assert counts["msgfail:agent@RREF_USER_DELETE=1"] == 2
    assert counts["msgdelay:agent@PYTHON_CALL=0.05s"] == 4
    assert all(r.status == "ok" for r in result)


def test_a_plan_that_never_fires_fails_the_world_naming_it(rpc_world):
    with pytest.raises(WorldFailed) as caught:
        rpc_world.spawn(tutorial_rl.run_worker, args=(3, 2, 10), nprocs=3, faults="kill:obs1@observer.step#3")
    message = str(caught.value)
    assert "fault kill:obs1@observer.step#3 never fired: obs1 reached " in message
    assert re.search(r"rpc\.call:Agent\.select_action x\d+", message), "what it reached instead, with counts"
    assert "mark it optional with '?'" in message
    assert all(r.status == "ok" for r in caught.value.result), "every rank itself was fine"


def serves_only(ctx):
    """Returns at once: this rank's work happens while it serves its peers."""


def work():
    rpc_harness.failpoint("server.work")


def calls_worker1_ten_times(ctx):
    if ctx.rank == 0:
        for _ in range(10):
            rpc.rpc_sync("worker1", work)


def entry(ctx):
    return calls_worker1_ten_times(ctx) if ctx.rank == 0 else serves_only(ctx)


def test_a_fault_that_never_fires_counts_the_hits_a_rank_made_serving_its_peers(rpc_world):
    with pytest.raises(WorldFailed) as caught:
        rpc_world.run(entry, world_size=2, faults="kill:worker1@server.work#50")
    message = str(caught.value)
    assert "never fired (only 10 hit(s) of server.work, the fault waits for hit 50): worker1 reached " in message
    assert "server.work x10" in message and "rpc.serve:work x10" in message


def test_an_optional_fault_that_never_fires_passes(rpc_world):
    result = rpc_world.spawn(tutorial_rl.run_worker, args=(3, 1, 5), nprocs=3,
                             faults="kill:obs1@rpc.call:Agent.select_action#99?")
    assert result.ok and result.fault_counts() == {"kill:obs1@rpc.call:Agent.select_action#99?": 0}


def test_a_function_of_the_program_becomes_a_failpoint_without_a_change(rpc_world):
    fault = "raise:agent@call:programs.tutorial_rl:Agent.finish_episode#2=no update"
    with pytest.raises(WorldFailed) as caught:
        rpc_world.spawn(tutorial_rl.run_worker, args=(3, 3, 5), nprocs=3, faults=fault)
    agent = caught.value.result["agent"]
    assert agent.status == "raised" and agent.error == "InjectedFault: no update (rank 0, agent)"
    assert "rewards.append(agent.finish_episode())" in agent.traceback
    assert [e.hit for e in fired(caught.value.result, "raise:agent@call:programs.tutorial_rl:Agent.finish_episode#2=no update")] == [2]


def test_the_programs_own_graceful_shutdown_returns_after_a_planned_kill(rpc_world):
    # Unaided, worker0's graceful rpc.shutdown() would wait forever for the
    # dead worker1; through the harness it is told to shut down at once.
    result = rpc_world.spawn(echo.run_worker, args=(3,), nprocs=3, faults="kill:worker1@rpc.call:echo#2",
                             deadline=30)
    assert [r.status for r in result] == ["ok", "killed", "ok"]
    assert result.values[2] == [0, 1, 2]
    shutdowns = [e for e in result["worker0"].events if e["kind"] == "shutdown_start"]
    assert shutdowns and shutdowns[0]["graceful"] is False


def test_a_plan_aimed_at_a_name_the_program_never_uses_fails_naming_the_real_ones(rpc_world):
    with pytest.raises(WorldFailed, match=r"unknown worker 'trainer9'; this world's workers are ps, trainer1, trainer2"):
        rpc_world.spawn(tutorial_ps.run_worker, args=(3,), nprocs=3, faults="kill:trainer9@trainer.step")
    with pytest.raises(FaultPlanError, match="unknown worker 'trainer9'"):  # named up front: refused at once
        rpc_world.spawn(tutorial_ps.run_worker, args=(3,), nprocs=3, names=["ps", "trainer1", "trainer2"],
                        faults="kill:trainer9@trainer.step")


def test_programs_that_do_not_join_as_started_are_told_why(rpc_world):
    with pytest.raises(WorldFailed, match="programs.echo:never_joins returned without calling rpc.init_rpc or dist.init_process_group"):
        rpc_world.spawn(echo.never_joins, args=(2,), nprocs=2)
    with pytest.raises(WorldFailed, match=r"init_rpc\(world_size=1\) in a world the harness started with 2 processes"):
        rpc_world.spawn(echo.joins_a_smaller_world, args=(2,), nprocs=2, bringup=10)
    with pytest.raises(WorldSpecError, match=r"cannot be called as run_worker\(rank\)"):
        rpc_world.spawn(echo.run_worker, nprocs=2)


def test_torchs_own_batch_parameter_server_example(rpc_world):
    fault = "delay:worker0@rpc.serve:BatchUpdateParameterServer.update_and_fetch_model=0.01s"
    result = rpc_world.spawn(torch_examples.run_batch_parameter_server, args=(3,), nprocs=3, faults=fault)
    assert all(r.status == "ok" for r in result)
    # Two trainers, four batches each: eight updates served by the server.
    assert result.fault_counts() == {"delay:worker0@rpc.serve:BatchUpdateParameterServer.update_and_fetch_model#1+=0.01s": 8}


def test_torchs_own_reinforcement_learning_example(rpc_world):
    fault = "delay:worker1@rpc.serve:Observer.run_episode=0.01s"
    result = rpc_world.spawn(torch_examples.run_reinforcement_learning, args=(3,), nprocs=3, faults=fault)
    assert result.values[0] > 475, "the example trains until its reward passes the threshold"
    episodes = len(fired(result, "delay:worker1@rpc.serve:Observer.run_episode#1+=0.01s"))
    assert episodes >= 1 and len(spans(result, "worker2")) >= episodes
