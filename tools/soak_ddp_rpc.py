"""Soak the DDP + RPC shape (issue 22, defect 3): a program that opens its own
``tcp://`` stores, hosted by rank 0, which exits as soon as its own graceful
``rpc.shutdown()`` returns.

    python tools/soak_ddp_rpc.py [-n RUNS] [--parallel 2] [--plain]

runs ``tests/programs/ddp_rpc.py`` RUNS times under ``rpc_harness.spawn``,
``--parallel`` worlds at once (each stream of worlds in a process of its own,
as ``pytest -n 2`` runs them), and prints every failed world's summary and the
count. ``--plain`` runs the same program under ``torch.multiprocessing.spawn``
instead (one at a time: its ports are hard-coded). Exit status: 0 when no run
failed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")


def stream(runs: int, first_seed: int) -> None:
    """One stream of worlds, one after the other; one JSON line per world."""
    sys.path.insert(0, TESTS)
    from programs import ddp_rpc

    import rpc_harness

    for index in range(runs):
        started = time.monotonic()
        result = rpc_harness.spawn(ddp_rpc.run_worker, args=(4,), nprocs=4, seed=first_seed + index, deadline=60,
                               check=False)
        failed = [r.describe() for r in result if r.status != "ok"]
        errors = sorted({line.strip() for r in result for line in (r.traceback or "").splitlines()
                         if "Error" in line and not line.startswith(" ")})
        print(json.dumps({"seed": first_seed + index, "ok": result.ok, "seconds": round(time.monotonic() - started, 2),
                          "headline": result.report(replay=False).splitlines()[0], "ranks": failed,
                          "errors": errors, "problems": result.problems}), flush=True)


def plain(runs: int) -> int:
    failures = 0
    for index in range(runs):
        done = subprocess.run([sys.executable, os.path.join(TESTS, "programs", "ddp_rpc.py")], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
        ok = done.returncode == 0
        failures += not ok
        tail = "" if ok else " | " + " / ".join(done.stderr.strip().splitlines()[-3:])
        print(f"plain run {index + 1}/{runs}: {'ok' if ok else f'FAILED (exit {done.returncode})'}{tail}", flush=True)
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--runs", type=int, default=30, help="worlds in all (default 30)")
    parser.add_argument("--parallel", type=int, default=2, help="worlds at once (default 2)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the first world")
    parser.add_argument("--plain", action="store_true", help="torch.multiprocessing.spawn, one at a time")
    parser.add_argument("--stream", type=int, default=None, help=argparse.SUPPRESS)  # internal: one stream
    args = parser.parse_args()
    if args.stream is not None:
        stream(args.stream, args.seed)
        return 0
    if args.plain:
        failures = plain(args.runs)
        print(f"plain mp.spawn: {failures} of {args.runs} runs failed")
        return int(failures > 0)
    shares = [args.runs // args.parallel + (i < args.runs % args.parallel) for i in range(args.parallel)]
    procs, seed = [], args.seed
    for share in shares:
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--stream", str(share),
                                       "--seed", str(seed)], cwd=ROOT, stdout=subprocess.PIPE, text=True))
        seed += share
    outcomes = []
    for number, proc in enumerate(procs):
        for line in proc.stdout:
            if not line.startswith("{"):
                continue
            outcome = json.loads(line)
            outcomes.append(outcome)
            mark = "ok" if outcome["ok"] else "FAILED"
            print(f"[stream {number}] seed {outcome['seed']}: {mark} in {outcome['seconds']}s", flush=True)
            if not outcome["ok"]:
                print("    " + outcome["headline"])
                for text in outcome["ranks"] + outcome["errors"] + outcome["problems"]:
                    print("    " + text)
        proc.wait()
    failures = sum(1 for o in outcomes if not o["ok"])
    lost = args.runs - len(outcomes)
    print(f"rpc_harness.spawn, {args.parallel} worlds at once: {failures} of {len(outcomes)} runs failed"
          + (f" ({lost} never reported: a stream crashed)" if lost else ""))
    return int(failures > 0 or lost > 0)


if __name__ == "__main__":
    sys.exit(main())
