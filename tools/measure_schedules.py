"""Measure what controlled schedules promise (issue 20), on two racy worlds:
the parameter-server tutorial as printed (2 trainers, ``tests/programs/
tutorial_ps_mnist.py``) and a lost update in a served handler
(``rpc_harness/apps/races.py``).

    python tools/measure_schedules.py [--seeds 10] [--reruns 5] [--hogged 20] [--timeouts 20]
                                      [--only replay|timeouts] [--json PATH]

- replay: for each seed, the verdict and the schedule digest of every rerun
  (all must agree);
- the same for one failing seed rerun ``--hogged`` times while two CPU hogs
  run (busy loops in processes of their own);
- exploration: how many distinct digests the seeds gave, which failed;
- timeouts (issue 41): a contract on the world's 30 s ``rpc_timeout``
  (``tests/programs/slow_answer.py``: a caller waits on a handler that
  sleeps 60 s) run once free-running and ``--timeouts`` times under
  control: the verdict (the caller's error) and digest of every controlled
  run, the same as the free-running verdict, and the wall time of each.

Prints a summary and writes every figure as JSON. Exit status 0 when every
rerun agreed with its seed's first run, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]


def worlds() -> dict:
    from programs import tutorial_ps_mnist

    import rpc_harness
    from rpc_harness.apps import races

    def ps(seed: int) -> rpc_harness.WorldResult:
        return rpc_harness.spawn(tutorial_ps_mnist.main, args=(3, 2), nprocs=3, seed=seed, schedule="controlled",
                             deadline=120, check=False)

    def lost(seed: int) -> rpc_harness.WorldResult:
        return rpc_harness.spawn(races.run_worker, args=(4,), nprocs=4, seed=seed, schedule="controlled", deadline=60,
                             check=False)

    return {"ps tutorial (2 trainers)": ps, "lost update": lost}


def timeouts(runs: int) -> tuple[dict, bool]:
    """A 30 s rpc_timeout contract, free-running once and under control ``runs`` times."""
    import statistics

    from programs import slow_answer

    import rpc_harness

    def world(schedule: str) -> tuple[rpc_harness.WorldResult, float]:
        started = time.monotonic()
        result = rpc_harness.spawn(slow_answer.run_worker, args=(2,), kwargs={"sleep": 60.0, "timeout": None},
                                   nprocs=2, seed=1, schedule=schedule, deadline=180, rpc_timeout=30.0, check=False)
        return result, time.monotonic() - started

    world("controlled")  # the forkserver's start (torch's import) is no world's time
    free, free_seconds = world("free")
    verdict = free["impatient"].value
    print(f"30 s rpc_timeout contract, free-running: {verdict!r} in {free_seconds:.1f}s", flush=True)
    controlled = [world("controlled") for _ in range(runs)]
    outcomes = {(w["impatient"].value, w.controlled, w.schedule_digest) for w, _ in controlled}
    same = len(outcomes) == 1 and next(iter(outcomes))[:2] == (verdict, True)
    median = statistics.median(seconds for _, seconds in controlled)
    entries = statistics.median(w.duration for w, _ in controlled)  # the world's own count: its ranks' fork to its end
    print(f"30 s rpc_timeout contract, under control: {'the free-running verdict' if same else 'NOT the same'} "
          f"in {runs} of {runs} runs, median {median:.2f}s a world ({entries:.2f}s by the world's own count, against "
          f"{free.duration:.1f}s free-running): {30.0 / median:.0f}x faster than its 30 s timeout, "
          f"{free_seconds / median:.0f}x faster than the free-running world, {free.duration / entries:.0f}x "
          f"by the worlds' own counts", flush=True)
    return {"free": {"verdict": verdict, "seconds": free_seconds}, "runs": runs, "same": same,
            "outcomes": sorted(map(list, outcomes)), "seconds": [seconds for _, seconds in controlled],
            "median_seconds": median, "median_duration": entries, "free_duration": free.duration}, same


def outcome(world) -> tuple[str, str]:
    verdict = "ok" if world.ok else "FAILED: " + "; ".join(sorted(f"{o.name} {o.status}" for o in world.failures))
    if not world.controlled:
        verdict += " (control given up)"
    return verdict, world.schedule_digest


def hogs(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--reruns", type=int, default=5)
    parser.add_argument("--hogged", type=int, default=20)
    parser.add_argument("--timeouts", type=int, default=20)
    parser.add_argument("--only", choices=("replay", "timeouts"))
    parser.add_argument("--json", default="rpc-harness-out/schedules.json")
    args = parser.parse_args()
    report: dict = {}
    agreed = True
    if args.only in (None, "timeouts"):
        report["timeouts"], agreed = timeouts(args.timeouts)
    for name, run in (worlds() if args.only in (None, "replay") else {}).items():
        started = time.monotonic()
        seeds = {}
        for seed in range(1, args.seeds + 1):
            runs = [outcome(run(seed)) for _ in range(args.reruns)]
            seeds[seed] = runs
            same = len(set(runs)) == 1
            agreed &= same
            print(f"{name}, seed {seed}: {runs[0][0]}, digest {runs[0][1]}, "
                  f"{'same' if same else 'NOT the same'} in {len(runs)} runs"
                  + ("" if same else f": {sorted(set(runs))}"), flush=True)
        first = {seed: runs[0] for seed, runs in seeds.items()}
        failing = [seed for seed, (verdict, _) in first.items() if verdict != "ok"]
        passing = [seed for seed, (verdict, _) in first.items() if verdict == "ok"]
        entry = {"seeds": {str(k): v for k, v in seeds.items()}, "distinct_digests": len({d for _, d in first.values()}),
                 "failing_seeds": failing, "passing_seeds": passing, "seconds": time.monotonic() - started}
        if failing:
            busy = hogs(2)
            try:
                runs = [outcome(run(failing[0])) for _ in range(args.hogged)]
            finally:
                for hog in busy:
                    hog.kill()
                    hog.wait()
            same = len(set(runs)) == 1 and runs[0] == first[failing[0]]
            agreed &= same
            entry["hogged"] = {"seed": failing[0], "runs": len(runs), "same": same, "outcomes": sorted(set(runs))}
            print(f"{name}, failing seed {failing[0]} with two CPU hogs: {'same' if same else 'NOT the same'} "
                  f"verdict and digest in {len(runs)} runs", flush=True)
        print(f"{name}: {entry['distinct_digests']} distinct digests in {args.seeds} seeds; failing seeds {failing}, "
              f"passing {passing}", flush=True)
        report[name] = entry
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as file:
        json.dump(report, file, indent=2)
    print(f"wrote {args.json}")
    return 0 if agreed else 1


if __name__ == "__main__":
    sys.exit(main())
