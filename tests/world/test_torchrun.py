"""rpc_harness.apps.torchrun: a scenario's ranks under torchrun, as two "nodes" on this
host, give the same ranks, seeds and gradients as the harness's own launcher."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch
import torchrun_scenario as tiny

import rpc_harness
from rpc_harness.gradcheck import compare

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # where torchrun_scenario.py is
ROOT = os.path.dirname(TESTS)
JOB_TIMEOUT = 120.0  # a whole two-node job; ~15 s on a loaded 2-core machine
DEADLINE = 60.0  # each rank's own deadline (--deadline), inside the job's


def free_port() -> int:
    """A port the kernel says is free now. Between closing it here and
    torchrun's agent binding it another process could take it; the window is
    milliseconds, and the tests retry with a fresh port when the bind fails,
    so the race costs a retry, never a wrong result."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _env(tmp_root) -> dict[str, str]:
    """The environment of torchrun and its ranks: torchrun's own folders
    (torchelastic_*) go to ``tmp_root``, which pytest removes."""
    tmp = os.path.join(str(tmp_root), "tmp")
    os.makedirs(tmp, exist_ok=True)
    env = dict(os.environ, TMPDIR=tmp)
    # The tiny scenario module lives here; the harness is installed editable.
    env["PYTHONPATH"] = os.pathsep.join([TESTS, ROOT, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["OMP_NUM_THREADS"] = "1"
    return env


def _stop(procs: list[subprocess.Popen]) -> None:
    """Stop every process group still running: SIGTERM (torchrun then stops
    its workers), SIGKILL for what is left."""
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        live = [p for p in procs if p.poll() is None]
        for proc in live:
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
        until = time.monotonic() + grace
        for proc in live:
            try:
                proc.wait(max(0.1, until - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass


class Group:
    """Processes started each in a session of its own, with their output in
    files; ``finish`` waits for all (bounded) and always stops what is left."""

    def __init__(self, commands: list[list[str]], envs: list[dict[str, str]], logdir) -> None:
        self.procs: list[subprocess.Popen] = []
        self.logs = []
        try:
            for k, (command, env) in enumerate(zip(commands, envs, strict=True)):
                log = open(logdir / f"proc{k}.log", "w+")  # noqa: SIM115 (closed in finish)
                self.logs.append(log)
                self.procs.append(subprocess.Popen(
                    command, cwd=logdir, env=env, stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, start_new_session=True,
                ))
        except BaseException:
            self.finish(wait=False)
            raise

    def finish(self, *, wait: bool = True) -> tuple[list[int | None], list[str]]:
        try:
            until = time.monotonic() + JOB_TIMEOUT
            for proc in self.procs if wait else ():
                try:
                    proc.wait(max(0.1, until - time.monotonic()))
                except subprocess.TimeoutExpired:
                    break
        finally:
            _stop(self.procs)
            texts = []
            for log in self.logs:
                log.seek(0)
                texts.append(log.read())
                log.close()
            self.logs = []
        return [p.returncode for p in self.procs], texts

    def __enter__(self) -> Group:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.logs:  # not finished: the test failed on the way
            self.finish(wait=False)


class Nodes:
    """``nodes`` torchrun agents on loopback, one rendezvous, started at once
    so that the test can run the harness's own world meanwhile."""

    def __init__(self, tmp_path, args: list[str], nodes: int = 2, nproc: int = 1) -> None:
        self.tmp_path, self.args, self.nodes, self.nproc = tmp_path, args, nodes, nproc
        self.out = tmp_path / "result.json"
        self.group = self._start()

    def _start(self) -> Group:
        port = free_port()
        commands = [
            [sys.executable, "-m", "torch.distributed.run", f"--nnodes={self.nodes}",
             f"--nproc-per-node={self.nproc}", f"--node-rank={node}", "--master-addr=127.0.0.1",
             f"--master-port={port}", "--max-restarts=0", "-m", "rpc_harness.apps.torchrun", *self.args,
             "--deadline", str(DEADLINE), *(["--out", str(self.out)] if node == 0 else [])]
            for node in range(self.nodes)
        ]
        return Group(commands, [_env(self.tmp_path)] * self.nodes, self.tmp_path)

    def result(self):
        """Rank 0's summary and saved values, once every agent exited 0."""
        for attempt in range(3):
            codes, texts = self.group.finish()
            if attempt < 2 and any("address already in use" in t.lower() for t in texts):
                self.group = self._start()  # lost the port race: another process took it first
                continue
            break
        output = "\n".join(f"--- node {n} (exit {c})\n{t}" for n, (c, t) in enumerate(zip(codes, texts, strict=True)))
        assert codes == [0] * self.nodes, output
        summary = json.loads(self.out.read_text())
        values = torch.load(str(self.out) + ".pt", weights_only=False)
        return summary, values, output

    def __enter__(self) -> Nodes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.group.__exit__(*exc)


def _compare_steps(actual: list[dict], expected: list[dict], *, who: str, seed: int, exact: bool) -> int:
    """Gradient for gradient (and loss for loss); how many tensors compared."""
    assert len(actual) == len(expected), f"{who}: {len(actual)} steps, expected {len(expected)}"
    checked = 0
    for k, (a, e) in enumerate(zip(actual, expected, strict=True)):
        _, mismatches = compare(a["grads"], e["grads"], scenario="tiny", step=k, rank=who, seed=seed)
        assert not mismatches, "\n".join(map(str, mismatches))
        if exact:
            assert all(torch.equal(a["grads"][n], e["grads"][n]) for n in e["grads"]), f"{who} step {k}"
            assert a["loss"] == e["loss"]
        else:
            assert math.isclose(a["loss"], e["loss"], rel_tol=1e-6), f"{who} step {k}: {a['loss']} != {e['loss']}"
        checked += len(e["grads"])
    return checked


# -- worlds under torchrun ----------------------------------------------------------------------


@pytest.mark.long
def test_tiny_scenario_under_two_torchrun_nodes_matches_the_harness(tmp_path, assert_gone):
    seed, config = 7, tiny.Config(steps=2, scale=2.0)
    world_size = 4
    names = tiny.names(world_size)
    args = ["--scenario", "torchrun_scenario:SCENARIO", "--seed", str(seed), "--set", "steps=2", "--set", "scale=2"]
    with Nodes(tmp_path, args, nodes=2, nproc=2) as nodes:
        world = rpc_harness.run_world(tiny.entry, names=names, seed=seed, args=(config,), deadline=DEADLINE)
        summary, values, output = nodes.result()
    assert summary["ok"] and summary["world_size"] == world_size and summary["names"] == list(names), output
    assert summary["seed"] == seed and summary["config"] == dataclasses.asdict(config)
    assert [r["status"] for r in summary["ranks"]] == ["ok"] * world_size
    assert summary["replay"] == f"import rpc_harness; rpc_harness.run_scenario('tiny', {{'steps': 2, 'scale': 2.0}}, world_size=4, seed={seed})"
    assert_gone([r["pid"] for r in summary["ranks"]])

    expected = tiny.baseline(config, world_size, seed)
    checked = 0
    for rank, name in enumerate(names):
        ours, theirs = values[rank], world.values[rank]
        assert ours["name"] == name
        # The same rank seed, and global RNGs seeded with it the same way.
        assert ours["seed"] == theirs["seed"] == rpc_harness.RankContext(rank=rank, names=names, world_seed=seed).seed
        assert torch.equal(ours["rand"], theirs["rand"])
        if rank == 0:
            continue
        checked += _compare_steps(ours["steps"], theirs["steps"], who=name, seed=seed, exact=True)
        _compare_steps(ours["steps"], expected[name], who=name, seed=seed, exact=False)
    assert checked == (world_size - 1) * config.steps * 2


@pytest.mark.long
def test_scenario_under_two_torchrun_nodes_matches_the_harness(tmp_path, assert_gone):
    """The parameter server across two torchrun nodes: same server log, same
    gradients step for step, same final weights as in the harness's world."""
    try:
        import rpc_harness.scenarios.parameter_server as ps
    except ImportError as error:  # the tiny-scenario test above always runs
        pytest.skip(f"rpc_harness.scenarios.parameter_server does not import: {error}")
    seed = 11
    config = dataclasses.replace(ps.Config(), batches=3, test_size=64)
    names = ps.names(2)
    args = ["--scenario", "ps", "--seed", str(seed), "--set", "batches=3", "--set", "test_size=64"]
    with Nodes(tmp_path, args) as nodes:
        world = rpc_harness.run_world(ps.entry, names=names, seed=seed, args=(config,), deadline=DEADLINE)
        summary, values, output = nodes.result()
    assert summary["ok"] and summary["scenario"] == "ps" and summary["names"] == list(names), output
    assert_gone([r["pid"] for r in summary["ranks"]])

    ours, theirs = values[0], world.values[0]
    assert len(ours["steps"]) == len(theirs["steps"]) == config.batches
    for k, (a, e) in enumerate(zip(ours["steps"], theirs["steps"], strict=True)):
        assert (a["trainer"], a["batch"], a["version"]) == (e["trainer"], e["batch"], e["version"])
        _, mismatches = compare(a["grads"], e["grads"], scenario="ps", step=k, rank=a["trainer"], seed=seed)
        assert not mismatches, "\n".join(map(str, mismatches))
        # Not bit-equal: torchrun's workers and the harness's ranks may run
        # torch with different intra-op thread counts, so reductions differ
        # in the last bits; hence gradcheck's tolerances above.
        assert math.isclose(a["loss"], e["loss"], rel_tol=1e-5), (k, a["loss"], e["loss"])
    _, mismatches = compare(ours["final"], theirs["final"], scenario="ps", step="final", rank=names[0],
                            seed=seed, what="parameter")
    assert not mismatches, "\n".join(map(str, mismatches))
    one_sample = 1.0 / config.test_size
    assert math.isclose(ours["accuracy"], theirs["accuracy"], abs_tol=one_sample)
    assert values[1]["losses"] == pytest.approx(world.values[1]["losses"], rel=1e-5)


@pytest.mark.long
def test_a_ddp_world_killed_inside_an_all_reduce_under_two_torchrun_nodes_ends_as_in_the_harness(tmp_path, assert_gone):
    """The DDP tutorial (a gloo group, no RPC agent) on two torchrun nodes
    of two ranks each, worker2 killed inside its third all-reduce (issued by
    DDP's C++ reducer): the kill is the plan's, so torchrun tears nothing
    down (worker3 shares its node); the others are stopped for it, the world
    is ok and says so, every agent exits 0, and the report (the ranks, where
    each was in its collectives) is the one the harness gives the same
    world on one host."""
    from rpc_harness.scenarios import ddp

    seed, faults = 5, "kill:worker2@c10d.all_reduce#3"
    args = ["--scenario", "ddp", "--seed", str(seed), "--set", "steps=3", "--faults", faults]
    with Nodes(tmp_path, args, nodes=2, nproc=2) as nodes:
        local = ddp.run(ddp.Config(steps=3), world_size=4, seed=seed, faults=faults, deadline=DEADLINE).world
        summary, values, output = nodes.result()
    assert summary["ok"] and summary["process_group"] == "gloo" and summary["rpc"] is False, output
    assert [(f["rank"], f["point"], f["hit"]) for f in summary["fired"]] == [(2, "c10d.all_reduce", 3)], output
    statuses = ["stopped", "stopped", "killed", "stopped"]
    assert [r["status"] for r in summary["ranks"]] == statuses, output
    # Every rank ended after the kill, as its watcher saw it (one host, one clock).
    assert all(r["ended_at"] >= summary["fired"][0]["t"] for r in summary["ranks"]), summary["ranks"]
    assert "ended early by its fault plan: rank 2 (worker2) was killed by the fault plan" in summary["headline"]
    assert summary["replay"] == f"import rpc_harness; rpc_harness.run_scenario('ddp', {{'steps': 3}}, world_size=4, seed={seed}, faults={faults!r})"
    assert local.ok and [r.status for r in local.ranks] == statuses, local.report()
    assert summary["ended_by"] == local.ended_by
    assert summary["ranks"][2]["describe"] == local.ranks[2].describe()
    for rank in (0, 1, 3):
        # Stopped in or before that collective: where, exactly, is the OS's timing, here as there.
        assert summary["ranks"][rank]["describe"].startswith(
            f"rank {rank} (worker{rank}): stopped by the harness (SIGKILL): {local.ended_by}")
    where = re.search(r"all_reduce#\d+ \(collective #\d+, float32 \[\d+\]\)", " ".join(local.collectives))
    assert where and where[0] in " ".join(summary["collectives"]), (summary["collectives"], local.collectives)
    assert values == [None] * 4
    assert_gone([r["pid"] for r in summary["ranks"]])


@pytest.mark.long
def test_a_ddp_rpc_world_killed_inside_its_trainers_all_reduce_under_torchrun_ends_as_in_the_harness(
        tmp_path, assert_gone):
    """The DDP + RPC tutorial (a gloo group and RPC agents) on two torchrun
    nodes of two ranks, with its own kill check: trainer1 killed inside
    DDP's all-reduce over the trainers' subgroup, which runs in an RPC
    handler thread of a rank whose entry has long returned. The world ends
    at once, as in the harness: the master, still in its entry, stopped;
    the ranks whose entry had returned shut down."""
    from rpc_harness.scenarios import ddp_rpc

    seed, faults = 5, "kill:trainer1@c10d.all_reduce:trainers#3"
    args = ["--scenario", "ddp_rpc", "--seed", str(seed), "--set", "steps=3", "--faults", faults]
    with Nodes(tmp_path, args, nodes=2, nproc=2) as nodes:
        local = ddp_rpc.run(ddp_rpc.Config(steps=3), world_size=4, seed=seed, faults=faults, deadline=DEADLINE).world
        summary, values, output = nodes.result()
    assert summary["ok"] and summary["process_group"] == "gloo" and summary["rpc"] is True, output
    assert [(f["rank"], f["point"], f["hit"]) for f in summary["fired"]] == [(3, "c10d.all_reduce:trainers", 3)]
    assert local.ok, local.report()
    assert [r["status"] for r in summary["ranks"]] == [r.status for r in local.ranks], (output, local.report())
    assert summary["ended_by"] == local.ended_by and "rank 3 (trainer1) was killed" in local.ended_by
    assert_gone([r["pid"] for r in summary["ranks"]])


@pytest.mark.long
def test_a_collective_world_with_rpc_under_two_torchrun_nodes_fires_a_delay_in_its_all_reduce(tmp_path, assert_gone):
    """A world with both a gloo group and RPC agents (the scenario's own
    world options) across two torchrun nodes: a delay fires in worker1's
    second all_reduce, the sums are the harness's and one process's, and
    the RPC over the same world answers."""
    seed, config, faults = 3, tiny.Config(steps=3), "delay:worker1@c10d.all_reduce#2=50ms"
    names = tiny.names(2)
    args = ["--scenario", "torchrun_scenario:COLLECTIVE", "--seed", str(seed), "--set", "steps=3", "--faults", faults]
    with Nodes(tmp_path, args) as nodes:
        world = rpc_harness.run_world(tiny.collective_entry, names=names, seed=seed, args=(config,),
                                      process_group="gloo", faults=faults, deadline=DEADLINE)
        summary, values, output = nodes.result()
    assert summary["ok"] and summary["process_group"] == "gloo" and summary["rpc"] is True, output
    assert [(f["rank"], f["point"], f["hit"]) for f in summary["fired"]] == [(1, "c10d.all_reduce", 2)], output
    assert world.ok and list(world.fault_counts().values()) == [1], world.report()
    expected = tiny.collective_sums(config, 2, seed)
    for rank in range(2):
        assert all(torch.equal(a, e) for a, e in zip(values[rank]["sums"], expected, strict=True)), rank
        assert all(torch.equal(a, e) for a, e in zip(values[rank]["sums"], world.values[rank]["sums"], strict=True))
        assert values[rank]["owner_seed"] == world.values[rank]["owner_seed"] == rpc_harness.RankContext(
            rank=0, names=names, world_seed=seed).seed
    assert_gone([r["pid"] for r in summary["ranks"]])


def test_a_collective_fault_that_never_fires_fails_the_world_without_torchrun(tmp_path, assert_gone):
    """Plain processes (rank 0's watcher serves the store), a gloo group
    and no RPC agent: the world runs its course, but a fault aimed at a
    collective the program never issues fails it, named, with what that
    rank did reach; the rank itself ended well."""
    out = tmp_path / "result.json"
    command = [sys.executable, "-m", "rpc_harness.apps.torchrun", "--scenario", "torchrun_scenario:COLLECTIVE",
               "--seed", "3", "--rpc", "no", "--faults", "delay:worker1@c10d.broadcast=1ms",
               "--deadline", str(DEADLINE)]
    codes, texts = _plain_processes(tmp_path, [[*command, "--out", str(out)], command])
    output = "\n".join(texts)
    assert codes == [1, 0], output
    summary = json.loads(out.read_text())
    assert not summary["ok"] and summary["rpc"] is False and [r["status"] for r in summary["ranks"]] == ["ok", "ok"]
    [problem] = summary["problems"]
    assert problem.startswith("fault delay:worker1@c10d.broadcast#1+=0.001s never fired: worker1 reached "), problem
    assert "c10d.all_reduce x3" in problem, problem
    assert_gone([r["pid"] for r in summary["ranks"]])


def _plain_processes(tmp_path, commands: list[list[str]]) -> tuple[list[int | None], list[str]]:
    """One process per rank with RANK/WORLD_SIZE/MASTER_* set, no torchrun
    agent; a fresh port where the first was taken."""
    for _ in range(3):
        port = free_port()
        envs = [dict(_env(tmp_path), RANK=str(r), WORLD_SIZE=str(len(commands)), MASTER_ADDR="127.0.0.1",
                     MASTER_PORT=str(port)) for r in range(len(commands))]
        with Group(commands, envs, tmp_path) as group:
            codes, texts = group.finish()
        if not any("address already in use" in t.lower() for t in texts):
            break
    return codes, texts


def test_a_failing_rank_is_reported_without_torchrun(tmp_path, assert_gone):
    """Plain processes with RANK/WORLD_SIZE/MASTER_* set (no torchrun agent:
    rank 0 hosts the store): a raise fault in the owner's RPC handler makes
    worker1's entry fail; the leader's summary names it and exits non-zero."""
    out = tmp_path / "result.json"
    command = [sys.executable, "-m", "rpc_harness.apps.torchrun", "--scenario", "torchrun_scenario:SCENARIO", "--seed", "3",
               "--faults", "raise:owner@tiny.step#2", "--deadline", str(DEADLINE)]
    for _ in range(3):
        port = free_port()
        envs = [dict(_env(tmp_path), RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
                for r in range(2)]
        with Group([[*command, "--out", str(out)], command], envs, tmp_path) as group:
            codes, texts = group.finish()
        if not any("address already in use" in t.lower() for t in texts):
            break
    output = "\n".join(texts)
    assert codes == [1, 1], output
    summary = json.loads(out.read_text())
    owner, worker = summary["ranks"]
    assert not summary["ok"] and owner["status"] == "ok", output
    assert worker["status"] == "raised" and "InjectedFault" in worker["traceback"], output
    assert "failed (worker1 raised)" in summary["headline"]
    assert_gone([owner["pid"], worker["pid"]])


def test_a_rank_dies_with_its_launcher(tmp_path, assert_gone):
    """torchrun starts each worker in a session of its own, so killing
    torchrun's process group cannot reach them: a rank must die with its
    parent by itself. Here the parent is a stand-in launcher, SIGKILLed while
    its rank 0 of 2 waits in the rendezvous for a rank 1 that never comes."""
    port = free_port()
    env = dict(_env(tmp_path), RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    rank_cmd = [sys.executable, "-m", "rpc_harness.apps.torchrun", "--scenario", "torchrun_scenario:SCENARIO", "--seed", "1",
                "--deadline", str(DEADLINE)]
    launcher = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen({rank_cmd!r}, start_new_session=True)\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", launcher], env=env, stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        rank_pid = int(proc.stdout.readline())
        # Rank 0 serves the store once it is past arming its death signal.
        until = time.monotonic() + JOB_TIMEOUT
        while time.monotonic() < until:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert proc.poll() is None, "the stand-in launcher exited early"
            time.sleep(0.1)
        else:
            pytest.fail("rank 0 never started its store")
    finally:
        _stop([proc])
        proc.stdout.close()
    assert_gone([rank_pid])


def test_a_rank_stopped_by_sigterm_takes_its_process_and_its_folder_with_it(tmp_path, assert_gone):
    """torchrun stops its workers with SIGTERM: the watcher then kills its
    rank and removes the rank's folder (its event log and collective
    history) before it exits. Here rank 0 of 2 waits for a rank 1 that
    never comes."""
    port = free_port()
    env = dict(_env(tmp_path), RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    command = [sys.executable, "-m", "rpc_harness.apps.torchrun", "--scenario", "torchrun_scenario:COLLECTIVE",
               "--seed", "1", "--deadline", str(DEADLINE)]
    with Group([command], [env], tmp_path) as group:
        watcher = group.procs[0]
        until = time.monotonic() + JOB_TIMEOUT
        folders, children = [], []
        while time.monotonic() < until and not (folders and children):
            assert watcher.poll() is None, "the watcher exited early"
            folders = list((tmp_path / "tmp").glob("rpc-harness-torchrun-*"))
            with open(f"/proc/{watcher.pid}/task/{watcher.pid}/children") as file:
                children = [int(pid) for pid in file.read().split()]
            time.sleep(0.1)
        assert folders and len(children) == 1, (folders, children)
        watcher.send_signal(signal.SIGTERM)
        codes, texts = group.finish()
    assert codes == [130] and "interrupted: the rank was stopped" in texts[0], texts
    assert not any(folder.exists() for folder in folders)
    assert_gone([watcher.pid, *children])


# -- the pieces, in process ------------------------------------------------------------------
