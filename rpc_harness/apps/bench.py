"""``rpc-harness bench``: every benchmark figure in one run.

- world bring-up + teardown from 2 to 512 ranks, against the tutorials' way
  (``torch.multiprocessing.spawn`` + ``init_rpc``) up to 16, medians and
  ratio, drawn as growth curves with a third way: an entry in a reused
  world of each size up to 64 (the reuse section);
- the same 4-rank world through the ``rpc_world`` fixture, from a pytest
  test module that imports pytest and torch (what a user's test pays), with
  its asserts rewritten in the ranks and without (``--assert=plain``);
- memory per rank as PSS and USS (RSS counts the pages every rank shares
  with the forkserver, and 128 ranks would "use" more than the machine has);
- an entry in a reused 4-rank world (``rpc_world_module``, its cleanliness
  check included) against a fresh 4-rank world, both through the fixtures;
- failure-report latency: a rank's death to the world's failure report;
- unarmed failpoint cost, and its share of a scenario's run time;
- what recording an RPC for the timeline adds to the call;
- each scenario's steps per second and peak memory per rank;
- controlled schedules: worlds per minute against free-running ones, and
  how many worlds each way of running (random walk, PCT, free, fuzzed)
  takes to fail on each race (a lost update, a pipeline that trusts arrival
  order, the PS tutorial's #780 from a checkout), median and worst over 20
  seeds, with PCT's measured rate against its bound;
- exhaustive exploration (``explore(strategy="dpor")``): the schedules
  DPOR runs to exhaust a world against the naive search (cut at a cap),
  and until it finds each race; schedules per second in a reused 4-rank
  world (``explore(reuse=True)``) against fresh ones;
- with ``--device cuda`` (only that): a 4-rank world's bring-up with CUDA
  against the CPU, an ``rpc_sync`` round trip of a 1 MB tensor along the
  world's device maps against the same tensor on the CPU, and each
  scenario's steps per second on the GPU against the CPU, all on the same
  machine in the same run. Refused where CUDA is not available.

Timings are printed and written as JSON; they are never asserted in tests.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Sequence
from typing import Any

from rpc_harness import run_world, spawn, strict_json
from rpc_harness.context import RankContext, activate, failpoint
from rpc_harness.scenario import Scenario, make_config, run_scenario, runs_on_devices

ROUND_TRIP_BYTES = 1 << 20  # the tensor of the device round trip: 1 MB of float32


def _same(tensor: Any) -> Any:
    return tensor


def tensor_round_trip(ctx: RankContext, calls: int) -> float | None:
    """Rank 0 times ``rpc_sync`` of a 1 MB float32 tensor on its device to
    rank 1 and back (on CUDA along the world's device maps: the peer
    receives it on its GPU and returns it); seconds per call."""
    import torch
    import torch.distributed.rpc as rpc

    if ctx.rank != 0:
        return None
    device = torch.device(ctx.device)
    tensor = torch.ones(ROUND_TRIP_BYTES // 4, device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(10):  # warm the pipe and its channels up
        rpc.rpc_sync(ctx.names[1], _same, args=(tensor,))
    sync()
    started = time.perf_counter()
    for _ in range(calls):
        back = rpc.rpc_sync(ctx.names[1], _same, args=(tensor,))
    sync()
    elapsed = time.perf_counter() - started
    if back.device != device:
        raise RuntimeError(f"the tensor came back on {back.device}, not {device}: the device maps did not hold")
    return elapsed / calls


def device_figures(devices: tuple[str, ...], scenarios: list[Scenario], repeat: int,
                   calls: int = 200) -> dict[str, Any]:
    """The same measurements on ``devices`` and on the CPU, one after the
    other on this machine: bring-up of a 4-rank world, the 1 MB round trip,
    each scenario's steps per second. ``devices=()`` measures the CPU twice
    (what the suite runs, on a machine without CUDA)."""
    arms: dict[str, tuple[str, ...]] = {"device": devices, "cpu": ()}
    figures: dict[str, Any] = {"devices": ",".join(devices) or "cpu", "bring_up": {}, "round_trip": {},
                               "scenarios": []}
    for label, placed in arms.items():
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            run_world(noop, world_size=4, deadline=300, devices=placed or None)
            times.append(time.perf_counter() - started)
        figures["bring_up"][label] = statistics.median(times)
        per_call = [run_world(tensor_round_trip, world_size=2, deadline=300, args=(calls,),
                              devices=placed or None)[0].value for _ in range(repeat)]
        figures["round_trip"][label] = statistics.median(per_call)
        print(f"  {label} ({','.join(placed) or 'cpu'}): 4-rank bring-up {figures['bring_up'][label]:.3f} s, "
              f"1 MB rpc_sync round trip {figures['round_trip'][label] * 1e6:.0f} us", flush=True)
    for sc in scenarios:
        row: dict[str, Any] = {"scenario": sc.name, "world_size": sc.default_world_size}
        for label, placed in arms.items():
            report = run_scenario(sc, world_size=sc.default_world_size, seed=1, deadline=300,
                                  devices=placed or None)
            row[f"{label}_steps_per_s"] = report.steps / report.duration if report.duration else 0.0
            row[f"{label}_ok"] = report.ok
        figures["scenarios"].append(row)
        print(f"  {sc.name}: {row['device_steps_per_s']:.1f} steps/s on {figures['devices']} against "
              f"{row['cpu_steps_per_s']:.1f} on the CPU (ok: {row['device_ok']} / {row['cpu_ok']})", flush=True)
    return figures


def noop(ctx: RankContext) -> int:
    """The smallest useful entry: bring-up and teardown only."""
    return ctx.rank


def die_after_mark(ctx: RankContext) -> int:
    """Rank 1 records the moment and SIGKILLs itself; the others wait."""
    if ctx.rank == 1:
        ctx.event("dying")
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(30)
    return ctx.rank


def _echo(x: int) -> int:
    return x


def rpc_pairs(ctx: RankContext, calls: int) -> dict[str, float] | None:
    """Rank 0 times ``rpc_sync`` to rank 1 as recorded for the timeline and as
    torch's own function, in alternating blocks so that drift hits both."""
    import torch.distributed.rpc as rpc

    if ctx.rank != 0:
        return None
    recorded, plain = rpc.rpc_sync, rpc.rpc_sync.__wrapped__
    peer = ctx.names[1]
    for i in range(20):  # warm both paths up (recorded calls count against the cap)
        plain(peer, _echo, args=(i,))
    times = {"recorded": 0.0, "plain": 0.0}
    for _ in range(10):
        for label, call in (("recorded", recorded), ("plain", plain)):
            started = time.perf_counter()
            for i in range(calls // 10):
                call(peer, _echo, args=(i,))
            times[label] += time.perf_counter() - started
    return {label: total / calls for label, total in times.items()}


def rpc_recording_cost(repeat: int, calls: int = 1000) -> dict[str, float]:
    """Per-call microseconds of a recorded and a plain ``rpc_sync``, medians
    over ``repeat`` worlds (one world's figure swings by 2x on a busy
    machine). Calls stay under the recording cap, past which calls are not
    recorded at all."""
    samples = [run_world(rpc_pairs, world_size=2, args=(calls,), deadline=120).values[0] for _ in range(repeat)]
    row = {
        "recorded_us": statistics.median(s["recorded"] for s in samples) * 1e6,
        "plain_us": statistics.median(s["plain"] for s in samples) * 1e6,
        "added_us": statistics.median(s["recorded"] - s["plain"] for s in samples) * 1e6,
        "worlds": repeat,
    }
    print(f"  rpc_sync round trip: {row['plain_us']:.0f} us; recording it for the timeline adds "
          f"{row['added_us']:.0f} us (medians over {repeat} worlds)", flush=True)
    return row


def _spawn_rank(rank: int, world_size: int, init_method: str) -> None:
    import warnings

    import torch.distributed.rpc as rpc

    warnings.filterwarnings("ignore", message="You are using a Backend")

    options = rpc.TensorPipeRpcBackendOptions(init_method=init_method)
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=world_size, rpc_backend_options=options)
    rpc.shutdown()


def spawn_world(world_size: int) -> float:
    """One world the tutorials' way; returns its wall time."""
    import torch.multiprocessing as mp

    os.environ.setdefault("TP_SOCKET_IFNAME", "lo")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    with tempfile.TemporaryDirectory(prefix="rpc-bench-") as folder:
        started = time.perf_counter()
        mp.spawn(_spawn_rank, args=(world_size, f"file://{folder}/store"), nprocs=world_size, join=True)
        return time.perf_counter() - started


SIZES = (2, 4, 16, 64, 256, 512)
QUICK_SIZES = (2, 4)
# Reused worlds are measured up to 64 ranks: a 256-rank world's bring-up
# alone is most of a minute here, and its entries add nothing to the curve's shape.
REUSED_UP_TO = 64
SPAWN_UP_TO = 16  # the tutorials' way pays ~2 s of `import torch` a rank: 16 ranks take ~20 s


def harness_world(world_size: int) -> float:
    started = time.perf_counter()
    run_world(noop, world_size=world_size, deadline=300, bringup=600)
    return time.perf_counter() - started


def memory(ctx: RankContext) -> dict[str, int]:
    """What this rank adds to the machine, in kB: PSS (its share of every
    page it maps) and USS (its private pages), read once RPC is up."""
    fields: dict[str, int] = {}
    with open("/proc/self/smaps_rollup") as file:
        for line in file:
            key, _, rest = line.partition(":")
            if rest.strip().endswith("kB"):
                fields[key] = int(rest.split()[0])
    return {"pss_kb": fields.get("Pss", 0),
            "uss_kb": fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)}


def memory_per_rank(world_size: int) -> dict[str, float]:
    values = run_world(memory, world_size=world_size, deadline=300, bringup=600).values
    return {
        "pss_mb": statistics.median(v["pss_kb"] for v in values) / 1024,
        "uss_mb": statistics.median(v["uss_kb"] for v in values) / 1024,
        "world_pss_gb": sum(v["pss_kb"] for v in values) / 1024**2,
    }


def bring_up(sizes: list[int], repeats: dict[int, int], spawn_repeat: dict[int, int]) -> list[dict[str, Any]]:
    harness_world(2)  # warm the forkserver: steady state is what tests see
    rows = []
    for size in sizes:
        ours = [harness_world(size) for _ in range(repeats.get(size, 1))]
        theirs = [spawn_world(size) for _ in range(spawn_repeat.get(size, 0))]
        row: dict[str, Any] = {"world_size": size, "harness_median_s": statistics.median(ours),
                               "harness_runs": len(ours), **memory_per_rank(size)}
        if theirs:
            row.update(spawn_median_s=statistics.median(theirs), spawn_runs=len(theirs),
                       speedup=statistics.median(theirs) / statistics.median(ours))
        rows.append(row)
        versus = f", spawn {row['spawn_median_s']:.3f}s, {row['speedup']:.1f}x" if theirs else ""
        print(f"  bring-up {size:>3} ranks: harness {row['harness_median_s']:.3f}s{versus}; per rank PSS "
              f"{row['pss_mb']:.0f} MB, USS {row['uss_mb']:.0f} MB; world PSS {row['world_pss_gb']:.2f} GB", flush=True)
    return rows


FIXTURE_TEST = textwrap.dedent("""
    import json, os, time
    import pytest
    import torch
    import torch.distributed.rpc as rpc

    def add(a, b):
        return a + b

    def ring(ctx):
        peer = ctx.names[(ctx.rank + 1) % ctx.world_size]
        value = rpc.rpc_sync(peer, add, args=(torch.ones(2) * ctx.rank, 1)).tolist()
        assert len(value) == 2, value  # rewritten in the ranks, unless --assert=plain
        return value

    def test_worlds(rpc_world):
        started = time.perf_counter()
        rpc_world.run(ring, world_size=4)  # the first world starts the forkserver
        first = time.perf_counter() - started
        times = []
        for _ in range(int(os.environ["BENCH_REPEAT"])):
            started = time.perf_counter()
            rpc_world.run(ring, world_size=4)
            times.append(time.perf_counter() - started)
        with open(os.environ["BENCH_OUT"], "w") as file:
            json.dump({"first": first, "times": times}, file)
""")


def timed_session(name: str, source: str, repeat: int, *pytest_args: str,
                  env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run the test module ``source`` (as ``name``) in a pytest session of
    its own, in a temporary folder, with ``BENCH_REPEAT`` and ``BENCH_OUT``
    (and ``env``) set; what it wrote to ``BENCH_OUT`` as JSON."""
    with tempfile.TemporaryDirectory(prefix="rpc-bench-") as folder:
        with open(os.path.join(folder, name), "w") as file:
            file.write(source)
        out = os.path.join(folder, "times.json")
        env = dict(os.environ, **(env or {}), BENCH_REPEAT=str(repeat), BENCH_OUT=out)
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args, name],
                              cwd=folder, env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"the bench session {name} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        with open(out) as file:
            return json.load(file)


def fixture_session(repeat: int, assert_mode: str = "rewrite") -> dict[str, Any]:
    """One pytest session of its own running ``repeat`` + 1 4-rank worlds
    through ``rpc_world`` from a test module that imports pytest and torch,
    its asserts rewritten in the ranks (pytest's default) or not
    (``--assert=plain``): ``{"first": s, "times": [s, ...]}``, the first
    world (which starts the forkserver) apart."""
    return timed_session("test_fixture_path.py", FIXTURE_TEST, repeat, f"--assert={assert_mode}")


def fixture_path(repeat: int, rounds: int = 3) -> dict[str, Any]:
    """A 4-rank world through ``rpc_world`` from a test module that imports
    pytest and torch, in pytest sessions of their own: median seconds, with
    the ranks rewriting the module's asserts as pytest does (the default)
    and without (``--assert=plain``), sessions of each alternating
    (``rounds`` of each, ``repeat`` worlds in all), so that drift hits both;
    and the median first world of a session, which starts the forkserver
    (where the test module is imported through pytest's rewriting hook)."""
    per_session = max(1, -(-repeat // rounds))
    times: dict[str, list[float]] = {"rewrite": [], "plain": []}
    firsts: dict[str, list[float]] = {"rewrite": [], "plain": []}
    for _ in range(rounds):
        for mode in ("rewrite", "plain"):
            session = fixture_session(per_session, mode)
            times[mode] += session["times"]
            firsts[mode].append(session["first"])
    row = {"median_s": statistics.median(times["rewrite"]), "runs": len(times["rewrite"]),
           "first_s": statistics.median(firsts["rewrite"]),
           "plain_median_s": statistics.median(times["plain"]), "plain_runs": len(times["plain"]),
           "plain_first_s": statistics.median(firsts["plain"]), "sessions": rounds}
    print(f"  4-rank world through rpc_world from a test module: {row['median_s']:.3f}s "
          f"(asserts rewritten in ranks; {row['plain_median_s']:.3f}s with --assert=plain; first world of a "
          f"session {row['first_s']:.2f}s / {row['plain_first_s']:.2f}s)", flush=True)
    return row


REUSE_TEST = textwrap.dedent("""
    import json, os, time
    import torch
    import torch.distributed.rpc as rpc

    def add(a, b):
        return a + b

    def ring(ctx):
        peer = ctx.names[(ctx.rank + 1) % ctx.world_size]
        return rpc.rpc_sync(peer, add, args=(torch.ones(2) * ctx.rank, 1)).tolist()

    def test_entries(rpc_world_module, rpc_world):
        started = time.perf_counter()
        rpc_world_module.run(ring, world_size=4)  # brings the live world up
        first = time.perf_counter() - started
        reused, fresh = [], []
        for _ in range(int(os.environ["BENCH_REPEAT"])):  # alternating, so that drift hits both
            started = time.perf_counter()
            rpc_world_module.run(ring, world_size=4)
            reused.append(time.perf_counter() - started)
            started = time.perf_counter()
            rpc_world.run(ring, world_size=4)
            fresh.append(time.perf_counter() - started)
        by_size = {}  # the bring-up curve's third way: an entry in a reused world, by its size
        for size in map(int, os.environ["BENCH_SIZES"].split(",")):
            rpc_world_module.run(ring, world_size=size)  # its bring-up, not counted
            by_size[size] = []
            for _ in range(int(os.environ["BENCH_SIZE_REPEAT"])):
                started = time.perf_counter()
                rpc_world_module.run(ring, world_size=size)
                by_size[size].append(time.perf_counter() - started)
        with open(os.environ["BENCH_OUT"], "w") as file:
            json.dump({"first": first, "reused": reused, "fresh": fresh, "by_size": by_size}, file)
""")


def reused_entries(repeat: int, sizes: tuple[int, ...] = (), size_repeat: int = 10) -> dict[str, Any]:
    """An entry (one ``rpc_sync`` a rank) in a reused 4-rank world
    (``rpc_world_module``: the entry, then every rank's cleanliness check)
    against the same entry in a fresh 4-rank world (``rpc_world``), from one
    pytest session of their own, alternating: medians, and the bring-up of
    the live world (its first entry). Then, for the bring-up curve, the
    median entry in a reused world of each of ``sizes`` ranks
    (``size_repeat`` entries each, after its bring-up): ``by_size``."""
    env = {"BENCH_SIZES": ",".join(map(str, sizes)), "BENCH_SIZE_REPEAT": str(size_repeat)}
    times = timed_session("test_reused_entries.py", REUSE_TEST, repeat, env=env)
    reused, fresh = statistics.median(times["reused"]), statistics.median(times["fresh"])
    row = {"reused_median_s": reused, "fresh_median_s": fresh, "runs": len(times["reused"]),
           "first_s": times["first"], "per_minute": 60 / reused,
           "by_size": [{"world_size": int(size), "median_s": statistics.median(runs), "runs": len(runs)}
                       for size, runs in sorted(times["by_size"].items(), key=lambda item: int(item[0]))]}
    for point in row["by_size"]:
        print(f"  entry in a reused {point['world_size']}-rank world: {point['median_s'] * 1000:.1f} ms "
              f"(median of {point['runs']})", flush=True)
    print(f"  entry in a reused 4-rank world: {reused * 1000:.1f} ms (median of {row['runs']}; "
          f"{row['per_minute']:.0f} a minute), fresh 4-rank world {fresh:.3f} s, {fresh / reused:.0f}x; "
          f"the live world's first entry {times['first']:.2f} s", flush=True)
    return row


# The same 4-rank all_reduce test three ways: a fresh gloo-only world
# (rpc_world), an entry in a reused one (rpc_world_module), and torch's own
# MultiProcessTestCase (torch.testing._internal.common_distributed), which
# spawns its processes for every test; each in a pytest session of its own.
COLLECTIVE_TEST = textwrap.dedent("""
    import json, os, time
    import torch
    import torch.distributed as dist

    WORLD = dict(world_size=4, process_group="gloo", rpc=False)

    def all_reduce(ctx):
        tensor = torch.ones(4) * ctx.rank
        dist.all_reduce(tensor, group=ctx.group)
        assert tensor.tolist() == [6.0] * 4

    def test_entries(rpc_world_module, rpc_world):
        started = time.perf_counter()
        rpc_world_module.run(all_reduce, **WORLD)  # brings the live world up
        first = time.perf_counter() - started
        reused, fresh = [], []
        for _ in range(int(os.environ["BENCH_REPEAT"])):  # alternating, so that drift hits both
            started = time.perf_counter()
            rpc_world_module.run(all_reduce, **WORLD)
            reused.append(time.perf_counter() - started)
            started = time.perf_counter()
            rpc_world.run(all_reduce, **WORLD)
            fresh.append(time.perf_counter() - started)
        # Then one entry after another, as a module's tests run them: each
        # of the entries above followed a fresh world's teardown.
        rpc_world_module.run(all_reduce, **WORLD)  # (the fresh worlds' last ranks gone)
        consecutive = []
        for _ in range(int(os.environ["BENCH_CONSECUTIVE"])):
            started = time.perf_counter()
            rpc_world_module.run(all_reduce, **WORLD)
            consecutive.append(time.perf_counter() - started)
        with open(os.environ["BENCH_OUT"], "w") as file:
            json.dump({"first": first, "reused": reused, "fresh": fresh, "consecutive": consecutive}, file)
""")
TORCH_COLLECTIVE_TEST = textwrap.dedent("""
    import json, os, time
    import torch
    import torch.distributed as dist
    from torch.testing._internal.common_distributed import MultiProcessTestCase

    TIMES = []

    class AllReduce(MultiProcessTestCase):
        @property
        def world_size(self):
            return 4

        def setUp(self):  # in the test's own process only: its ranks run the test alone
            self.started = time.perf_counter()
            super().setUp()
            self._spawn_processes()

        def tearDown(self):
            super().tearDown()
            TIMES.append(time.perf_counter() - self.started)
            with open(os.environ["BENCH_OUT"], "w") as file:
                json.dump({"times": TIMES}, file)

        def all_reduce(self):
            store = dist.FileStore(self.file_name, self.world_size)
            dist.init_process_group("gloo", store=store, rank=self.rank, world_size=self.world_size)
            tensor = torch.ones(4) * self.rank
            dist.all_reduce(tensor)
            assert tensor.tolist() == [6.0] * 4
            dist.destroy_process_group()

    for index in range(int(os.environ["BENCH_REPEAT"])):
        setattr(AllReduce, f"test_all_reduce_{index}", AllReduce.all_reduce)
""")

# The floor under a reused world's entry: the same all_reduce, driven the
# same way (a word down a pipe to each of 4 waiting processes, an answer
# back), with nothing of the harness's around it. On a machine with fewer
# cores than ranks gloo's all_reduce is itself slow about half the time.
BARE_ALL_REDUCE = textwrap.dedent("""
    import json, os, sys, tempfile, time
    import multiprocessing as mp

    def rank(r, n, path, conn):
        import torch, torch.distributed as dist
        torch.set_num_threads(1)
        dist.init_process_group("gloo", store=dist.FileStore(path, n), rank=r, world_size=n)
        while conn.recv():
            tensor = torch.ones(4) * r
            dist.all_reduce(tensor)
            assert tensor.tolist() == [6.0] * 4
            conn.send(True)
        dist.destroy_process_group()

    if __name__ == "__main__":
        n, repeat = 4, int(os.environ["BENCH_REPEAT"])
        pipes = [mp.Pipe() for _ in range(n)]
        with tempfile.TemporaryDirectory() as folder:
            ranks = [mp.get_context("forkserver").Process(target=rank, args=(r, n, os.path.join(folder, "store"),
                                                                                pipes[r][1])) for r in range(n)]
            for process in ranks:
                process.start()
            times = []
            for _ in range(repeat + 1):  # the first (the group's first collective) apart
                started = time.perf_counter()
                for mine, _ in pipes:
                    mine.send(True)
                assert all(mine.recv() for mine, _ in pipes)
                times.append(time.perf_counter() - started)
            for mine, _ in pipes:
                mine.send(False)
            for process in ranks:
                process.join(60)
        with open(os.environ["BENCH_OUT"], "w") as file:
            json.dump({"times": times[1:]}, file)
""")


def bare_all_reduce(repeat: int) -> list[float]:
    """Round trips of the bare loop above (seconds)."""
    with tempfile.TemporaryDirectory(prefix="rpc-bench-") as folder:
        script, out = os.path.join(folder, "bare.py"), os.path.join(folder, "times.json")
        with open(script, "w") as file:
            file.write(BARE_ALL_REDUCE)
        done = subprocess.run([sys.executable, script], cwd=folder, capture_output=True, text=True, timeout=600,
                              env=dict(os.environ, BENCH_REPEAT=str(repeat), BENCH_OUT=out))
        if done.returncode != 0:
            raise RuntimeError(f"the bare all_reduce loop failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        with open(out) as file:
            return json.load(file)["times"]


def collective_worlds(repeat: int, torch_repeat: int) -> dict[str, Any]:
    """Issue 39's speed row: the 4-rank gloo all_reduce test in a fresh
    collective world, as an entry of a reused one, and under torch's
    ``MultiProcessTestCase``, measured in this run: medians and ratios."""
    # Entries one after another are cheap: ten times as many, for a steadier
    # median (gloo's all_reduce on 2 cores is slow about half the time).
    ours = timed_session("test_collective_entries.py", COLLECTIVE_TEST, repeat,
                         env={"BENCH_CONSECUTIVE": str(10 * repeat)})
    theirs = timed_session("test_torch_all_reduce.py", TORCH_COLLECTIVE_TEST, torch_repeat)
    bare = bare_all_reduce(10 * repeat)
    fresh, reused = statistics.median(ours["fresh"]), statistics.median(ours["reused"])
    torch_test = statistics.median(theirs["times"])
    consecutive = statistics.median(ours["consecutive"])
    row = {"fresh_median_s": fresh, "reused_median_s": reused, "first_s": ours["first"], "runs": len(ours["fresh"]),
           "consecutive_median_s": consecutive, "consecutive_runs": len(ours["consecutive"]),
           "bare_median_s": statistics.median(bare), "bare_runs": len(bare),
           "torch_median_s": torch_test, "torch_runs": len(theirs["times"]),
           "torch_over_fresh": torch_test / fresh, "torch_over_reused": torch_test / reused}
    print(f"  4-rank gloo all_reduce test: fresh world {fresh:.3f} s, reused world's entry {reused * 1000:.1f} ms "
          f"(each after a fresh world; one after another {consecutive * 1000:.1f} ms; the all_reduce alone, "
          f"in a bare loop of 4 processes, {row['bare_median_s'] * 1000:.1f} ms), torch's MultiProcessTestCase "
          f"{torch_test:.2f} s ({row['torch_over_fresh']:.0f}x / {row['torch_over_reused']:.0f}x)", flush=True)
    return row


def failure_latency(repeat: int) -> dict[str, Any]:
    samples = []
    for _ in range(repeat):
        result = run_world(die_after_mark, world_size=4, deadline=60, check=False)
        reported = time.time()
        dying = next(e["t"] for e in result[1].events if e.get("name") == "dying")
        samples.append(reported - dying)
    row = {"median_s": statistics.median(samples), "max_s": max(samples), "runs": repeat}
    print(f"  death -> failure report: median {row['median_s'] * 1000:.0f} ms, max {row['max_s'] * 1000:.0f} ms", flush=True)
    return row


def failpoint_cost(calls: int = 200_000) -> float:
    """Seconds per call of an unarmed ``rpc_harness.failpoint`` inside a rank."""
    previous = activate(RankContext(rank=0, names=["worker0"], world_seed=0))
    try:
        started = time.perf_counter()
        for _ in range(calls):
            failpoint("bench.step")
        return (time.perf_counter() - started) / calls
    finally:
        activate(previous)


# The world sizes each scenario is measured at (those it can run; its default where it can run neither).
SCENARIO_SIZES = (2, 4)


def scenario_rates(scenarios: list[Scenario], per_call: float) -> list[dict[str, Any]]:
    """Each scenario's steps per second at world sizes 2 and 4 (where it
    runs them), its peak memory per rank, the time of its baseline alone,
    and what its failpoints cost of the run (counted at the first size)."""
    rows = []
    harness_world(2)  # warm the forkserver: alone (--only scenarios), the first row paid its start (ddp's 4.2 s)
    for sc in scenarios:
        sizes = [size for size in SCENARIO_SIZES if size >= sc.min_world_size] or [sc.default_world_size]
        for size in sizes:
            rows.append(_scenario_row(sc, size, per_call, count_hits=size == sizes[0]))
    return rows


def _scenario_row(sc: Scenario, size: int, per_call: float, *, count_hits: bool) -> dict[str, Any]:
    name = sc.name
    report = run_scenario(sc, world_size=size, seed=1, deadline=300)
    hits = None
    if count_hits:  # a zero-length delay armed at every point of every rank counts the hits
        plan = ",".join(f"delay:{worker}@{point}=0s" for worker in sc.names(size) for point in sc.failpoints)
        counted = run_scenario(sc, world_size=size, seed=1, deadline=300, faults=plan)
        hits = len(counted.world.fired_faults()) if counted.world is not None else 0
    peak = max((e.get("maxrss_kb", 0) for r in report.world.ranks for e in r.events), default=0) if report.world else 0
    records = sc.records(report.world) if report.world is not None else None
    baseline_s = None
    if records is not None:  # the baseline alone, as the judge runs it
        config = make_config(sc)
        started = time.perf_counter()
        sc.baseline(config, size, 1, records)
        baseline_s = time.perf_counter() - started
    row = {
        "scenario": name,
        "world_size": size,
        "steps": report.steps,
        "duration_s": report.duration,
        "steps_per_s": report.steps / report.duration if report.duration else 0.0,
        "ok": report.ok,
        "failpoint_hits": hits,
        "failpoint_overhead_pct": (100.0 * hits * per_call / report.duration if report.duration and hits is not None
                                   else None),
        "peak_rss_mb_per_rank": peak / 1024.0,
        "baseline_s": baseline_s,
    }
    overhead = (f"{hits} failpoint hits = {row['failpoint_overhead_pct']:.4f}% overhead, " if hits is not None
                else "")
    baseline = f", baseline {baseline_s:.2f}s" if baseline_s is not None else ""
    print(f"  {name} (world {size}): {row['steps_per_s']:.1f} steps/s over {row['steps']} steps in "
          f"{row['duration_s']:.1f}s, {overhead}peak RSS {row['peak_rss_mb_per_rank']:.0f} MB/rank{baseline}",
          flush=True)
    return row


def schedule_cost(repeat: int) -> dict[str, Any]:
    """Worlds per minute of a 3-rank world (bank, auditor, one client) run
    free and under a controlled schedule, and the steps a schedule took."""

    from . import races

    out: dict[str, Any] = {}
    for schedule in ("free", "controlled"):
        times, steps = [], []
        for seed in range(1, repeat + 1):
            started = time.perf_counter()
            world = spawn(races.run_worker, args=(3,), nprocs=3, seed=seed, schedule=schedule, deadline=120)
            times.append(time.perf_counter() - started)
            steps.append(len(world.schedule))
        out[schedule] = {"per_minute": 60.0 / statistics.median(times), "median_s": statistics.median(times),
                         "steps": statistics.median(steps)}
    print(f"  schedules: {out['controlled']['per_minute']:.0f}/min controlled "
          f"({out['controlled']['steps']:.0f} steps), {out['free']['per_minute']:.0f}/min free", flush=True)
    return out


# The ways of running a race is measured under: the random walk, PCT of
# depths 2 and 3 (spread over the program's own number of steps, which makes
# PCT's bound as tight as it gets), and free-running worlds with and without
# fuzzing.
STRATEGIES = ("random", "pct:2", "pct:3", "free", "free + fuzz 0.02")


def race_programs() -> list[tuple[str, Any, int, tuple[Any, ...], str]]:
    """The races measured: (label, entry, ranks, args, what its failure
    says). The lost update and the pipeline ship with rpc-harness; the
    parameter-server tutorial's race (pytorch/examples#780) is added when the
    bench runs from a checkout of this repository, which holds it in
    ``tests/programs``."""
    from . import races

    programs: list[tuple[str, Any, int, tuple[Any, ...], str]] = [
        ("lost update", races.run_worker, 4, (4,), "lost update"),
        ("pipeline order", races.pipeline_worker, 3, (3,), "pipeline out of order"),
    ]
    tests = os.path.join(os.getcwd(), "tests")
    if os.path.exists(os.path.join(tests, "programs", "tutorial_ps_mnist.py")):
        if tests not in sys.path:
            sys.path.insert(0, tests)
        from programs import tutorial_ps_mnist  # type: ignore[import-not-found]

        programs.append(("PS tutorial #780", tutorial_ps_mnist.main, 3, (3, 2), "modified by an inplace operation"))
    return programs


def pct_bound(tasks: int, steps: int, depth: int) -> float:
    """PCT's guarantee: a bug of depth ``depth`` is found with probability at
    least 1 / (n k^(d-1)) per schedule, n tasks, k steps (Burckhardt et al.,
    ASPLOS 2010)."""
    return 1.0 / (tasks * steps ** (depth - 1))


def summarize_counts(counts: list[int | None], cap: int) -> dict[str, Any]:
    """Median and worst of the worlds each seed took to fail (None: not in
    ``cap``), and the rate of failing worlds among all that ran."""
    ran = sum(cap if c is None else c for c in counts)
    failed = sum(c is not None for c in counts)
    ordered = sorted(float("inf") if c is None else c for c in counts)
    median = statistics.median(ordered) if ordered else float("inf")
    return {"median": None if median == float("inf") else median,
            "worst": None if not ordered or ordered[-1] == float("inf") else ordered[-1],
            "rate": failed / ran if ran else 0.0, "worlds": ran, "failed": failed}


def schedules_until_failure(seeds: int, cap: int) -> dict[str, Any]:
    """For each race and each way of running it: from ``seeds`` starting
    seeds, how many worlds it takes to fail (at most ``cap`` each); median,
    worst, and for PCT the measured rate against its bound. A world that
    fails for another reason than the race is counted apart and named."""

    rows = []
    for label, entry, nprocs, args, says in race_programs():
        probe = spawn(entry, args=args, nprocs=nprocs, seed=0, schedule="controlled", deadline=120, check=False)
        steps, tasks = len(probe.schedule), len({step.task for step in probe.schedule})
        for strategy in STRATEGIES:
            schedule, fuzz = ("free", 0.02) if strategy.startswith("free +") else (strategy, 0.0)
            if schedule.startswith("pct"):
                schedule = f"{schedule}:{steps}"
            counts: list[int | None] = []
            other: list[str] = []
            for start in range(1, seeds + 1):
                found = None
                for j in range(1, cap + 1):
                    world = spawn(entry, args=args, nprocs=nprocs, seed=start * 1000 + j, schedule=schedule,
                                  fuzz=fuzz, deadline=120, check=False)
                    if world.ok:
                        continue
                    if says in world.report():
                        found = j
                    else:
                        other.append(f"seed {start * 1000 + j}: {world.report().splitlines()[0]}")
                    break
                counts.append(found)
            row = {"program": label, "strategy": strategy, "schedule": schedule, "steps": steps, "tasks": tasks,
                   **summarize_counts(counts, cap), "seeds": seeds, "cap": cap, "other_failures": other}
            if schedule.startswith("pct"):
                row["bound"] = pct_bound(tasks, steps, int(schedule.split(":")[1]))
            rows.append(row)
            print(f"  {label}, {strategy}: {_until(row)}"
                  + (f", rate {row['rate']:.1%} (bound {_percent(row['bound'])})" if "bound" in row else "")
                  + (f"; {len(other)} other failure(s): {other[0]}" if other else ""), flush=True)
    return {"seeds": seeds, "cap": cap, "rows": rows}


# The ps scenario's world explored exhaustively: 2 trainers, the least work
# that still trains, takes the step lease and evaluates (one batch each,
# one evaluation batch).
PS_EXPLORED = {"batches": 1, "test_size": 32, "min_accuracy_steps": 1000}


def exhaustive_search(cap: int, naive_cap: int, ps_cap: int, seeds: int, sample_cap: int) -> dict[str, Any]:
    """Exhaustive exploration, counted: for worlds that cannot fail (every
    sender's message to one collector, in every order), the schedules DPOR
    runs to exhaust them and the naive search's (cut at ``naive_cap``); the
    ``ps`` scenario's world with 2 trainers (:data:`PS_EXPLORED`; failing
    is the world's own verdict, not the scenario's gradient check; DPOR cut
    at ``ps_cap``); for each race, the schedules DPOR runs until it fails
    (deterministic: one seed), and, from ``seeds`` seeds (at most
    ``sample_cap`` worlds each), the worlds the random walk and PCT take."""
    from rpc_harness import run_world, spawn
    from rpc_harness.explore import Attempt, explore_runs
    from rpc_harness.scenario import make_config, resolve, world_names

    from . import races

    def runner(entry: Any, nprocs: int, args: tuple[Any, ...]) -> Any:
        def run(seed: int, schedule: str) -> Attempt:
            world = spawn(entry, args=args, nprocs=nprocs, seed=seed, schedule=schedule, deadline=120, check=False)
            return Attempt(seed, schedule, world, not world.ok)
        return run

    def counted(found: Any, started: float) -> dict[str, Any]:
        return {"schedules": len(found.attempts), "exhausted": found.exhausted, "verdict": found.verdict(),
                "checks": found.checks, "seconds": time.perf_counter() - started}

    rows = []
    for senders in (2, 3):
        row: dict[str, Any] = {"program": f"{senders} messages to one rank"}
        for strategy in ("dpor", "dfs"):
            started = time.perf_counter()
            found = explore_runs(runner(races.collector_worker, senders + 1, (senders + 1,)), seed=1,
                                 schedules=cap if strategy == "dpor" else naive_cap, strategy=strategy, shrink=False)
            row[strategy] = counted(found, started)
            print(f"  {row['program']}, {strategy}: {found.verdict()}", flush=True)
        rows.append(row)
    ps = resolve("ps")
    config, names = make_config(ps, PS_EXPLORED), world_names(ps, 3)
    steps: list[int] = []

    def run_ps(seed: int, schedule: str) -> Attempt:
        world = run_world(ps.entry, names=names, args=(config,), seed=seed, schedule=schedule, deadline=120,
                          check=False, failpoints=ps.failpoints)
        steps.append(len(world.schedule))
        return Attempt(seed, schedule, world, not world.ok)

    started = time.perf_counter()
    found = explore_runs(run_ps, seed=1, schedules=ps_cap, strategy="dpor", shrink=False)
    label = "ps world, 2 trainers, 1 batch each"
    rows.append({"program": label, "dpor": counted(found, started), "steps": max(steps)})
    print(f"  {label}, dpor: {found.verdict()} (worlds of up to {max(steps)} steps)", flush=True)
    for label, entry, nprocs, args, says in race_programs():
        found = explore_runs(runner(entry, nprocs, args), seed=1, schedules=cap, strategy="dpor", shrink=False)
        failed = found.found is not None and says in found.found.world.report()  # type: ignore[union-attr]
        row = {"program": label, "dpor": {"schedules": len(found.attempts), "failed": failed,
                                          "verdict": found.verdict()}}
        for strategy in ("random", "pct:3"):
            counts: list[int | None] = []
            for start in range(1, seeds + 1):
                sampled = explore_runs(runner(entry, nprocs, args), seed=start * 1000, schedules=sample_cap,
                                       strategy=strategy, shrink=False)
                hit = sampled.found is not None and says in sampled.found.world.report()  # type: ignore[union-attr]
                counts.append(len(sampled.attempts) if hit else None)
            row[strategy] = {**summarize_counts(counts, sample_cap), "seeds": seeds, "cap": sample_cap}
            print(f"  {label}, {strategy}: {_until(row[strategy])}", flush=True)
        rows.append(row)
        print(f"  {label}, dpor: {found.verdict()}", flush=True)
    return {"cap": cap, "naive_cap": naive_cap, "seeds": seeds, "sample_cap": sample_cap, "rows": rows}


def reused_schedules(count: int) -> dict[str, Any]:
    """Schedules per second in a reused 4-rank world against fresh ones:
    ``count`` schedules (the random walk, seeds 1 on) of the collector entry
    (three messages to one rank, none of which fails), each as an entry of
    one live world (``explore(reuse=True)``, its bring-up counted) and each
    in a fresh world; and the lost update's entry, searched with DPOR in a
    reused world until it fails."""
    from rpc_harness import explore

    from . import races

    probe = run_world(races.collector_entry, 4, names=races.COLLECTOR_NAMES, seed=0, schedule="controlled",
                      deadline=120)  # (the forkserver up first)
    out: dict[str, Any] = {"schedules": count, "steps": len(probe.schedule)}
    for way, reuse in (("reused", True), ("fresh", False)):
        started = time.perf_counter()
        found = explore(races.collector_entry, 4, names=races.COLLECTOR_NAMES, reuse=reuse, schedules=count,
                        seed=1, deadline=120)
        seconds = time.perf_counter() - started
        out[way] = {"seconds": seconds, "per_s": len(found.attempts) / seconds, "failed": found.failed}
    started = time.perf_counter()
    found = explore(races.bank_entry, 4, names=races.BANK_NAMES, reuse=True, strategy="dpor", schedules=300,
                    seed=1, shrink=False, deadline=120)
    out["race"] = {"verdict": found.verdict(), "seconds": time.perf_counter() - started,
                   "failed": found.found is not None and "lost update" in found.found.world["bank"].error}  # type: ignore[index,union-attr]
    print(f"  schedules in a reused 4-rank world: {out['reused']['per_s']:.1f}/s, in fresh ones "
          f"{out['fresh']['per_s']:.1f}/s ({count} schedules each); the lost update reused: "
          f"{out['race']['verdict']} in {out['race']['seconds']:.1f}s", flush=True)
    return out


def timeout_verdicts(reruns: int, rpc_timeout: float = 30.0) -> dict[str, Any]:
    """A world whose verdict rests on the world's ``rpc_timeout`` (a reply
    that takes 2 s longer; ``races.impatient_worker``): free-running once
    (the timeout's real time), then under a controlled schedule ``reruns``
    times, seeds 1 on (the timeout on the schedule's clock): wall times and
    the caller's verdicts, which must be the free-running one every time."""
    from . import races

    def world(schedule: str, seed: int) -> tuple[float, str]:
        started = time.perf_counter()
        result = spawn(races.impatient_worker, args=(2,), nprocs=2, kwargs={"sleep": rpc_timeout + 2}, seed=seed,
                       schedule=schedule, rpc_timeout=rpc_timeout, deadline=4 * rpc_timeout)
        return time.perf_counter() - started, str(result["impatient"].value)

    free_s, free_verdict = world("free", 0)
    runs = [world("controlled", seed) for seed in range(1, reruns + 1)]
    times = [seconds for seconds, _ in runs]
    same = sum(verdict == free_verdict for _, verdict in runs)
    out = {"rpc_timeout_s": rpc_timeout, "free_s": free_s, "free_verdict": free_verdict, "reruns": reruns,
           "controlled_median_s": statistics.median(times), "controlled_max_s": max(times), "same_verdict": same,
           "verdicts": sorted({verdict for _, verdict in runs})}
    print(f"  a verdict on a {rpc_timeout:g} s rpc_timeout: free-running {free_s:.1f} s; under control median "
          f"{out['controlled_median_s']:.2f} s, max {out['controlled_max_s']:.2f} s "
          f"({free_s / out['controlled_median_s']:.0f}x); the free-running verdict {same} times of {reruns}",
          flush=True)
    return out


def _percent(fraction: float) -> str:
    """Two significant figures: PCT's bounds run from tenths of a percent to
    thousandths of one."""
    return f"{fraction * 100:.2g}%"


def _until(row: dict[str, Any]) -> str:
    cap = row["cap"]
    median = f"> {cap}" if row["median"] is None else f"{row['median']:g}"
    worst = f"> {cap}" if row["worst"] is None else f"{row['worst']:g}"
    return f"median {median}, worst {worst}"


SECTIONS = ("bring-up", "fixture", "reuse", "collectives", "failure", "failpoint", "recording", "scenarios",
            "schedules", "exhaustive", "timeouts")


def run_bench(
    *,
    quick: bool,
    json_path: str | None,
    repeat: int | None,
    scenarios: list[Scenario],
    only: tuple[str, ...] = SECTIONS,
    svg_path: str | None = None,
    devices: tuple[str, ...] = (),
) -> int:
    """Measure the ``only`` sections, print the table, write the JSON (and
    the growth curve's SVG). With ``devices`` (checked by the caller: CUDA
    is there), only the device against the CPU."""
    if devices:
        print(f"rpc-harness bench --device {','.join(devices)} ({os.cpu_count()} cores): against the CPU", flush=True)
        figures = {"cores": os.cpu_count(), "quick": quick,
                   "device": device_figures(devices, [sc for sc in scenarios if runs_on_devices(sc)],
                                            repeat or (3 if quick else 10),
                                            calls=50 if quick else 200)}
        return _finish(figures, json_path)
    sizes = list(QUICK_SIZES if quick else SIZES)
    repeat = repeat or (3 if quick else 10)
    # Big worlds take long enough that a few runs say as much as many.
    repeats = {size: repeat if size <= 16 else max(1, min(repeat, 3 if size <= 64 else 2)) for size in sizes}
    spawn_repeat = {size: (1 if quick else (3 if size <= 4 else 1)) for size in sizes if size <= SPAWN_UP_TO}
    print(f"rpc-harness bench ({os.cpu_count()} cores{', quick' if quick else ''}): {', '.join(only)}", flush=True)
    figures: dict[str, Any] = {"cores": os.cpu_count(), "quick": quick}
    if "bring-up" in only:
        figures["bring_up"] = bring_up(sizes, repeats, spawn_repeat)
    if "fixture" in only:
        figures["fixture_path"] = fixture_path(4 if quick else 30, rounds=2 if quick else 5)
    if "reuse" in only:
        figures["reused_entries"] = reused_entries(5 if quick else 50, tuple(s for s in sizes if s <= REUSED_UP_TO),
                                                   3 if quick else 10)
    if "collectives" in only:
        figures["collectives"] = collective_worlds(5 if quick else 30, 2 if quick else 5)
    if svg_path and "bring-up" in only:
        write_growth_picture(figures["bring_up"], svg_path, figures.get("reused_entries", {}).get("by_size", ()))
        print(f"  wrote {svg_path}", flush=True)
    if "failure" in only:
        figures["failure_latency"] = failure_latency(3 if quick else 5)
    per_call = failpoint_cost()
    if "failpoint" in only:
        figures["unarmed_failpoint_ns"] = per_call * 1e9
        print(f"  unarmed failpoint: {per_call * 1e9:.0f} ns per call", flush=True)
    if "recording" in only:
        figures["rpc_recording"] = rpc_recording_cost(3 if quick else 7)
    if "schedules" in only:
        figures["schedule_cost"] = schedule_cost(3 if quick else 10)
        figures["until_failure"] = schedules_until_failure(5 if quick else 20, 3 if quick else 5)
    if "exhaustive" in only:
        figures["exhaustive"] = exhaustive_search(30 if quick else 300, 30 if quick else 100, 10 if quick else 100,
                                                  2 if quick else 5, 5 if quick else 20)
        figures["reused_schedules"] = reused_schedules(20 if quick else 100)
    if "timeouts" in only:
        figures["timeouts"] = timeout_verdicts(5 if quick else 20)
    if "scenarios" in only and not (quick and only == SECTIONS):
        figures["scenarios"] = scenario_rates(scenarios, per_call)
    return _finish(figures, json_path)


def _finish(figures: dict[str, Any], json_path: str | None) -> int:
    print()
    print(table(figures))
    if json_path:
        os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
        with open(json_path, "w") as file:
            strict_json.dump(figures, file, indent=2)
        print(f"\nwrote {json_path}")
    return 0


def write_growth_picture(rows: list[dict[str, Any]], path: str, reused: Sequence[dict[str, Any]] = ()) -> str:
    """The bring-up rows as growth curves, all three ways: the spawn way, a
    fresh harness world, and (``reused``: the reuse section's ``by_size``)
    an entry in a reused one."""
    from rpc_harness.plots import write_growth

    series = {
        "rpc-harness, fresh world (run_world)": [(r["world_size"], r["harness_median_s"]) for r in rows],
        "torch.multiprocessing.spawn + init_rpc": [(r["world_size"], r["spawn_median_s"]) for r in rows
                                                   if "spawn_median_s" in r],
    }
    if reused:
        series["rpc-harness, an entry in a reused world (rpc_world_module)"] = [
            (r["world_size"], r["median_s"]) for r in reused]
    biggest = rows[-1]
    notes = [f"{os.cpu_count()} cores, torch CPU; medians. Memory at {biggest['world_size']} ranks: "
             f"{biggest['pss_mb']:.0f} MB PSS a rank, {biggest['world_pss_gb']:.1f} GB for the world."]
    title = "A world up and down, or an entry in a reused one, by size" if reused else "World up and down, by size"
    return write_growth(path, title, "ranks", "seconds (median)", series, notes)


def table(figures: dict[str, Any]) -> str:
    """The figures as the README quotes them."""
    lines = ["| measurement | harness | spawn way | ratio |", "|---|---|---|---|"]
    for row in figures.get("bring_up", []):
        spawn = f"{row['spawn_median_s']:.2f} s | {row['speedup']:.0f}x" if "spawn_median_s" in row else " | "
        lines.append(f"| {row['world_size']}-rank world up + down (median) | {row['harness_median_s']:.3f} s "
                     f"| {spawn} |")
    fixture = figures.get("fixture_path")
    spawn4 = next((r for r in figures.get("bring_up", []) if r["world_size"] == 4 and "spawn_median_s" in r), None)
    if fixture:
        versus = (f"{spawn4['spawn_median_s']:.2f} s | {spawn4['spawn_median_s'] / fixture['median_s']:.0f}x"
                  if spawn4 else " | ")
        lines.append(f"| 4-rank world through rpc_world, from a test module importing pytest and torch (median) "
                     f"| {fixture['median_s']:.3f} s | {versus} |")
        if "plain_median_s" in fixture:
            lines.append(f"| the same, asserts rewritten in ranks / not (--assert=plain): world (median), first "
                         f"world of a session (median) | {fixture['median_s']:.3f} / {fixture['plain_median_s']:.3f} s, "
                         f"{fixture['first_s']:.2f} / {fixture['plain_first_s']:.2f} s | | |")
    reuse = figures.get("reused_entries")
    if reuse:
        # The "spawn way" column holds the fresh world's figure here, the ratio fresh / reused.
        lines.append(f"| entry in a reused 4-rank world (rpc_world_module) / in a fresh one (rpc_world), one "
                     f"rpc_sync a rank (median) | {reuse['reused_median_s'] * 1000:.1f} ms "
                     f"({reuse['per_minute']:,.0f} a minute) | "
                     f"{reuse['fresh_median_s']:.3f} s | {reuse['fresh_median_s'] / reuse['reused_median_s']:.0f}x |")
        fresh_by_size = {r["world_size"]: r["harness_median_s"] for r in figures.get("bring_up", [])}
        for point in reuse.get("by_size", []):
            # Against a fresh world of that size from the bring-up section (run_world), when there is one.
            size, median = point["world_size"], point["median_s"]
            fresh = (f"{fresh_by_size[size]:.3f} s | {fresh_by_size[size] / median:.0f}x" if size in fresh_by_size
                     else " | ")
            lines.append(f"| entry in a reused {size}-rank world / a fresh {size}-rank world (run_world), one "
                         f"rpc_sync a rank (median) | {median * 1000:.1f} ms | {fresh} |")
    coll = figures.get("collectives")
    if coll:
        # The "spawn way" column holds torch's MultiProcessTestCase here, the ratio torch / ours.
        lines.append(f"| 4-rank gloo all_reduce test in a fresh collective world (rpc_world, rpc=False) / under "
                     f"torch's MultiProcessTestCase (median) | {coll['fresh_median_s']:.3f} s | "
                     f"{coll['torch_median_s']:.2f} s | {coll['torch_over_fresh']:.0f}x |")
        lines.append(f"| the same test as an entry in a reused collective world (rpc_world_module), each after a "
                     f"fresh world / under MultiProcessTestCase (median) | {coll['reused_median_s'] * 1000:.1f} ms | "
                     f"{coll['torch_median_s']:.2f} s | {coll['torch_over_reused']:.0f}x |")
        if "consecutive_median_s" in coll:
            lines.append(f"| the same entries one after another, as a module's tests run them (median) | "
                         f"{coll['consecutive_median_s'] * 1000:.1f} ms | | |")
        if "bare_median_s" in coll:
            lines.append(f"| its all_reduce alone, in a bare loop of 4 processes (no harness: a word down a pipe to "
                         f"each, an answer back; median) | {coll['bare_median_s'] * 1000:.1f} ms | | |")
    for row in figures.get("bring_up", []):
        lines.append(f"| memory at {row['world_size']} ranks: per rank PSS / USS (median), world PSS | "
                     f"{row['pss_mb']:.0f} / {row['uss_mb']:.0f} MB, {row['world_pss_gb']:.2f} GB | | |")
    lat = figures.get("failure_latency")
    if lat:
        lines.append(f"| rank death -> failure report (median / max) | {lat['median_s'] * 1000:.0f} / "
                     f"{lat['max_s'] * 1000:.0f} ms | | |")
    if "unarmed_failpoint_ns" in figures:
        lines.append(f"| unarmed failpoint | {figures['unarmed_failpoint_ns']:.0f} ns/call | | |")
    rec = figures.get("rpc_recording")
    if rec:
        lines.append(f"| rpc_sync round trip / added by recording it for the timeline (medians) | "
                     f"{rec['plain_us']:.0f} / {rec['added_us']:.0f} us | | |")
    for row in figures.get("scenarios", []):
        overhead = row.get("failpoint_overhead_pct")
        baseline = row.get("baseline_s")
        lines.append(f"| {row['scenario']} (world {row['world_size']}) | {row['steps_per_s']:.1f} steps/s, "
                     + (f"failpoints {overhead:.4f}% of run time, " if overhead is not None else "")
                     + f"peak {row['peak_rss_mb_per_rank']:.0f} MB/rank"
                     + (f", baseline {baseline:.2f} s" if baseline is not None else "") + " | | |")
    cost = figures.get("schedule_cost")
    if cost:
        lines.append(f"| 3-rank world under a controlled schedule / free-running, worlds per minute (median) | "
                     f"{cost['controlled']['per_minute']:.0f} ({cost['controlled']['steps']:.0f} steps) / "
                     f"{cost['free']['per_minute']:.0f} | | |")
    until = figures.get("until_failure")
    if until:
        lines.append("")
        lines.append(f"Worlds until the race fails, from {until['seeds']} seeds (at most {until['cap']} each):")
        lines.append("")
        lines.append("| race (steps, tasks) | way of running | worlds until it fails | failing worlds | PCT's bound |")
        lines.append("|---|---|---|---|---|")
        for row in until["rows"]:
            bound = _percent(row["bound"]) if "bound" in row else ""
            lines.append(f"| {row['program']} ({row['steps']}, {row['tasks']}) | {row['strategy']} | {_until(row)} | "
                         f"{row['rate']:.0%} of {row['worlds']} | {bound} |")
    exhaustive = figures.get("exhaustive")
    if exhaustive:
        lines.append("")
        lines.append(f"Exhaustive exploration (DPOR with sleep sets, cut at {exhaustive['cap']:,}; the naive search "
                     f"cut at {exhaustive['naive_cap']:,}; the random walk and PCT from {exhaustive['seeds']} seeds, "
                     f"at most {exhaustive['sample_cap']} worlds each):")
        lines.append("")
        lines.append("| world | DPOR | naive search | random: worlds until it fails | pct:3 |")
        lines.append("|---|---|---|---|---|")
        for row in exhaustive["rows"]:
            naive = row.get("dfs", {}).get("verdict", "")
            sampled = [_until(row[k]) if k in row else "" for k in ("random", "pct:3")]
            lines.append(f"| {row['program']} | {row['dpor']['verdict']} | {naive} | {sampled[0]} | {sampled[1]} |")
    reused = figures.get("reused_schedules")
    if reused:
        lines.append("")
        # The "spawn way" column holds the fresh worlds' figure here, the ratio reused / fresh.
        lines.append("| measurement | reused world | fresh worlds | ratio |")
        lines.append("|---|---|---|---|")
        lines.append(f"| schedules per second, 4-rank world (3 messages to one rank, {reused['schedules']} random-walk "
                     f"schedules, {reused['steps']} steps each; explore(reuse=True), its bring-up counted) | "
                     f"{reused['reused']['per_s']:.1f}/s | {reused['fresh']['per_s']:.1f}/s | "
                     f"{reused['reused']['per_s'] / reused['fresh']['per_s']:.0f}x |")
        lines.append(f"| lost update as an entry of run(...), DPOR in a reused 4-rank world | "
                     f"{reused['race']['verdict']}, {reused['race']['seconds']:.1f} s | | |")
    timeouts = figures.get("timeouts")
    if timeouts:
        lines.append("")
        # The "spawn way" column holds the free-running world here, the ratio free / controlled.
        lines.append("| measurement | under a controlled schedule | free-running | ratio |")
        lines.append("|---|---|---|---|")
        lines.append(f"| a world whose verdict rests on a {timeouts['rpc_timeout_s']:g} s rpc_timeout, wall time "
                     f"(median of {timeouts['reruns']}, max) | {timeouts['controlled_median_s']:.2f} s, "
                     f"{timeouts['controlled_max_s']:.2f} s | {timeouts['free_s']:.1f} s | "
                     f"{timeouts['free_s'] / timeouts['controlled_median_s']:.0f}x |")
        lines.append(f"| its verdict: the free-running one ({timeouts['free_verdict'][:60]}...) | "
                     f"{timeouts['same_verdict']} of {timeouts['reruns']} | once | |")
    device = figures.get("device")
    if device:
        # The "spawn way" column holds the CPU's figure here, the ratio device / CPU time.
        name = device["devices"]
        up, trip = device["bring_up"], device["round_trip"]
        lines.append(f"| 4-rank world up + down on {name} / on the CPU (median) | {up['device']:.3f} s | "
                     f"{up['cpu']:.3f} s | {up['device'] / up['cpu']:.2f}x |")
        lines.append(f"| rpc_sync round trip of a 1 MB tensor on {name} along the device maps / on the CPU "
                     f"(median) | {trip['device'] * 1e6:.0f} us | {trip['cpu'] * 1e6:.0f} us | "
                     f"{trip['device'] / trip['cpu']:.2f}x |")
        for row in device["scenarios"]:
            speed = row["device_steps_per_s"] / row["cpu_steps_per_s"] if row["cpu_steps_per_s"] else 0.0
            lines.append(f"| {row['scenario']} (world {row['world_size']}) steps/s on {name} / on the CPU | "
                         f"{row['device_steps_per_s']:.1f} | {row['cpu_steps_per_s']:.1f} | {speed:.2f}x |")
    return "\n".join(lines)
