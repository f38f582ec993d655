"""rpc_harness.apps.torchrun's pieces, in process: environment, scenario loading, plans, summaries."""

from __future__ import annotations

import dataclasses
import json
import math
import os

import pytest
import torch
import torchrun_scenario as tiny

import rpc_harness
from rpc_harness.apps import torchrun
from rpc_harness.errors import FaultPlanError, UsageError
from rpc_harness.rank_setup import rpc_backend
from rpc_harness.scenario import available


def test_launch_env_reads_torchrun_variables_and_names_what_is_missing():
    env = torchrun.LaunchEnv.from_environ({
        "RANK": "3", "WORLD_SIZE": "4", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500",
        "LOCAL_RANK": "1", "TORCHELASTIC_USE_AGENT_STORE": "True",
    })
    assert (env.rank, env.world_size, env.master_addr, env.master_port, env.local_rank, env.agent_store) == (
        3, 4, "10.0.0.1", 29500, 1, True)
    with pytest.raises(UsageError, match="MASTER_PORT is not set"):
        torchrun.LaunchEnv.from_environ({"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "x"})
    with pytest.raises(UsageError, match="does not fit"):
        torchrun.LaunchEnv.from_environ({"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "x", "MASTER_PORT": "1"})


def test_main_without_torchrun_environment_is_a_usage_error(monkeypatch, capsys):
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(torchrun, "die_with_parent", lambda: None)
    assert torchrun.main(["--scenario", "torchrun_scenario:SCENARIO", "--seed", "1"]) == 2
    assert "RANK is not set" in capsys.readouterr().err


def test_loopback_detection_decides_the_interface_pinning(monkeypatch):
    assert torchrun.is_loopback("127.0.0.1") and torchrun.is_loopback("::1") and torchrun.is_loopback("localhost")
    assert not torchrun.is_loopback("10.1.2.3") and not torchrun.is_loopback("[2001:db8::1]")
    for name in ("TP_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        # Set first, so that teardown also removes what pin_loopback sets:
        # monkeypatch.delenv of an absent variable records nothing to undo.
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    assert not torchrun.pin_loopback("10.1.2.3") and "TP_SOCKET_IFNAME" not in os.environ
    assert torchrun.pin_loopback("127.0.0.2")
    assert os.environ["TP_SOCKET_IFNAME"] == os.environ["GLOO_SOCKET_IFNAME"] == "lo"


def test_scenario_loading_config_overrides_and_fault_plans():
    scenario = torchrun.load_scenario("torchrun_scenario:SCENARIO")
    assert scenario is tiny.SCENARIO
    assert torchrun.build_config(scenario, ["steps=5", "scale=0.5"]) == tiny.Config(steps=5, scale=0.5)
    assert torchrun.build_config(scenario, [], steps=7) == tiny.Config(steps=7)
    with pytest.raises(UsageError, match="no field 'nope'"):
        torchrun.build_config(scenario, ["nope=1"])
    with pytest.raises(UsageError, match="not a valid int"):
        torchrun.build_config(scenario, ["steps=many"])
    with pytest.raises(UsageError, match="steps and dim must be >= 1"):
        torchrun.build_config(scenario, ["steps=0"])
    with pytest.raises(UsageError, match="cannot load scenario 'no_such_scenario_module:X'"):
        torchrun.load_scenario("no_such_scenario_module:X")
    with pytest.raises(UsageError, match=f"unknown scenario 'chess'; registered scenarios: {', '.join(available())}$"):
        torchrun.load_scenario("chess")
    with pytest.raises(UsageError, match="is not a scenario: it lacks name"):
        torchrun.load_scenario("json:JSONDecoder")
    names = tiny.names(3)
    plan = torchrun.build_plan("delay:owner@tiny.step=10ms,msgdelay:worker1@PYTHON_CALL=1ms", names, tiny.FAILPOINTS)
    assert len(plan) == 2
    with pytest.raises(FaultPlanError, match="hang and freeze faults need the harness"):
        torchrun.build_plan("hang:worker1@tiny.step#2", names, tiny.FAILPOINTS)
    # A planned kill is judged by the rank's watcher, under torchrun too; at a collective as anywhere.
    assert len(torchrun.build_plan("kill:worker1@tiny.step#2,delay:owner@c10d.all_reduce#3=1ms", names,
                                   tiny.FAILPOINTS)) == 2
    with pytest.raises(FaultPlanError, match="unknown worker"):
        torchrun.build_plan("delay:trainer9@tiny.step=1s", names, tiny.FAILPOINTS)


def test_backend_options_pick_the_faulty_agent_only_for_message_faults():
    names = tiny.names(2)
    plain = rpc_harness.RankContext(rank=1, names=names, world_seed=1)
    backend, options = rpc_backend(plain, "env://", rpc_timeout=30.0)
    assert backend.name == "TENSORPIPE" and options.rpc_timeout == 30.0 and options.init_method == "env://"
    plan = torchrun.build_plan("msgdelay:worker1@PYTHON_CALL=5ms", names, tiny.FAILPOINTS)
    faulty = rpc_harness.RankContext(rank=1, names=names, world_seed=1, faults=plan)
    backend, options = rpc_backend(faulty, "env://", rpc_timeout=30.0)
    assert backend.name == "FAULTY_TENSORPIPE" and options.messages_to_delay == {"PYTHON_CALL": pytest.approx(0.005)}


def test_summaries_are_strict_json_for_any_return_value():
    @dataclasses.dataclass
    class Record:
        loss: float
        grads: dict

    value = {
        "record": Record(float("nan"), {"w": torch.ones(2, 3), "big": torch.zeros(100)}),
        "history": list(range(1500)),
        "inf": float("-inf"),
        "ints": torch.arange(3),
        "other": object(),
        "empty": torch.empty(0),
    }
    out = torchrun.summarise(value)
    text = json.dumps(out, allow_nan=False)  # raises on a NaN that slipped through
    assert out["record"]["type"] == "Record" and out["record"]["loss"] == "nan" and out["inf"] == "-inf"
    assert out["record"]["grads"]["w"] == {"tensor": [2, 3], "dtype": "float32", "norm": math.sqrt(6),
                                           "values": [[1.0] * 3] * 2}
    assert "values" not in out["record"]["grads"]["big"] and out["record"]["grads"]["big"]["norm"] == 0.0
    assert out["ints"] == {"tensor": [3], "dtype": "int64", "values": [0, 1, 2]}
    assert len(out["history"]) == 1001 and out["history"][-1] == "... 500 more"
    assert out["other"].startswith("<object object") and out["empty"]["norm"] == 0.0
    assert "NaN" not in text


# -- collective worlds: their options, and how their ranks are judged ------------------------


def test_world_options_are_the_scenarios_own_unless_the_flags_say_otherwise():
    from rpc_harness.scenarios import ddp

    args = torchrun.RunArgs(scenario="ddp", seed=1)
    assert torchrun.world_options(ddp.SCENARIO, args) == ("gloo", False)
    assert torchrun.world_options(tiny.SCENARIO, args) == (None, True)
    assert torchrun.world_options(ddp.SCENARIO, dataclasses.replace(args, rpc=True)) == ("gloo", True)
    assert torchrun.world_options(tiny.SCENARIO, dataclasses.replace(args, process_group="gloo")) == ("gloo", True)
    with pytest.raises(UsageError, match="nccl: not under torchrun yet"):
        torchrun.world_options(tiny.SCENARIO, dataclasses.replace(args, process_group="nccl"))
    with pytest.raises(UsageError, match="rpc=False without a process_group leaves the entry no way"):
        torchrun.world_options(tiny.SCENARIO, dataclasses.replace(args, rpc=False))
    plan = torchrun.build_plan("msgdelay:worker1@PYTHON_CALL=1ms", tiny.names(2), tiny.FAILPOINTS)
    with pytest.raises(UsageError, match="act on RPCs, but rpc=False"):
        torchrun.world_options(ddp.SCENARIO, args, plan)


def _world(plan: str = "", process_group: str | None = "gloo") -> torchrun.World:
    names = tiny.names(2)
    return torchrun.World(tiny.SCENARIO, tiny.Config(), names, torchrun.build_plan(plan, names, tiny.FAILPOINTS),
                          process_group, True, 0.0, 60.0)


def _report(rank: int, status: str = "ok", **fields) -> torchrun.RankReport:
    return torchrun.RankReport(rank, tiny.names(2)[rank], "host", 100 + rank, status, 1.0, **fields)


def _end(rank: int, exitcode: int | None = 0, signal: str | None = None, **fields) -> torchrun.RankEnd:
    return torchrun.RankEnd(rank, "host", 200 + rank, exitcode, signal, fields.pop("events", []), "", **fields)


def test_a_ranks_outcome_is_read_from_its_report_and_its_watchers_end():
    outcome = torchrun.outcome
    assert outcome(0, "owner", _report(0, value=3), _end(0)).status == "ok"
    assert outcome(0, "owner", _report(0, value=3), _end(0)).value == 3
    # A planned kill, whatever the rank said before it.
    assert outcome(1, "worker1", None, _end(1, None, "SIGKILL", killed_by_plan=True)).status == "killed"
    # A death nobody planned, before or after its report.
    assert outcome(1, "worker1", None, _end(1, None, "SIGSEGV")).status == "died"
    assert outcome(1, "worker1", _report(1), _end(1, None, "SIGSEGV")).status == "died"
    # Stopped because a peer left a collective world: by its watcher, or as its collective failed.
    stopped = outcome(0, "owner", None, _end(0, None, "SIGKILL", stopped_because="rank 1 (worker1) was killed"))
    assert (stopped.status, stopped.stopped_because) == ("stopped", "rank 1 (worker1) was killed")
    assert outcome(0, "owner", _report(0, "stopped", stopped_because="x"), _end(0, 1)).status == "stopped"
    raised = outcome(1, "worker1", _report(1, "raised", error="ValueError: no"), _end(1, 1))
    assert (raised.status, raised.error, raised.failed) == ("raised", "ValueError: no", True)
    assert outcome(1, "worker1", None, _end(1, 1, hung=True)).status == "hung"
    lost = outcome(1, "worker1", None, None)
    assert lost.status == "died" and "its watcher sent nothing" in lost.error


def test_the_leader_judges_a_world_as_the_harness_does():
    args = torchrun.RunArgs(scenario="torchrun_scenario:SCENARIO", seed=4)
    fired = {"t": 1.0, "rank": 1, "kind": "fault", "fault": "kill:worker1@c10d.all_reduce#2", "fault_kind": "kill",
             "point": "c10d.all_reduce", "hit": 2}
    history = ('{"k": "group", "g": "0", "desc": "default_pg", "ranks": [0, 1]}\n'
               '{"k": "enter", "g": "0", "n": 1, "op": "all_reduce", "p2p": false, "x": "float32 [4]"}\n')
    world = _world("kill:worker1@c10d.all_reduce#2")
    ends = {0: _end(0, None, "SIGKILL", stopped_because="rank 1 (worker1) was killed by the fault plan"),
            1: _end(1, None, "SIGKILL", events=[fired], killed_by_plan=True)}
    ends[0].history = ends[1].history = history
    result = torchrun.judge_world(world, args, {0: None, 1: None}, ends, "rank 1 was killed", seconds=1.0)
    assert result.ok and [r.status for r in result.ranks] == ["stopped", "killed"], result.report()
    assert result.ended_by == "rank 1 was killed"
    assert result.collectives == ["every rank at all_reduce#1 (collective #1, float32 [4]); not completed on ranks 0, 1"]
    # A fault that never fired fails a world that ran its course; and dead ranks must be the killed ones.
    result = torchrun.judge_world(world, args, {0: _report(0), 1: _report(1)}, {0: _end(0), 1: _end(1)}, "",
                                  seconds=1.0)
    assert not result.ok and result.problems[0].startswith("fault kill:worker1@c10d.all_reduce#2 never fired")
    result = torchrun.judge_world(_world(), args, {0: _report(0), 1: None}, {0: _end(0), 1: _end(1, None, "SIGKILL")},
                                  "", seconds=1.0)
    assert not result.ok and [r.status for r in result.ranks] == ["ok", "died"]
    summary = torchrun.summarise_world(_world(), args, result, {0: _report(0), 1: None}, {0: _end(0), 1: None})
    assert summary["headline"].startswith("rpc-harness torchrun: tiny world of 2 failed (worker1 died)")
    assert "rank 1 (worker1): killed by SIGKILL from outside the harness" in summary["report"]
    assert "while starting; the fault plan did not kill it" in summary["report"]
    died_in_entry = torchrun.outcome(1, "worker1", None, _end(1, None, "SIGKILL", events=[{"kind": "entry_start"}]))
    assert "in its entry; the fault plan did not kill it" in died_in_entry.describe()
    json.dumps(summary, allow_nan=False)
