"""Soak a world shape that once failed rarely: many worlds, a few at once,
optionally beside CPU hogs, every failure printed.

    python tools/soak.py [--world ddp|ps-kill] [-n RUNS] [--parallel 2] [--hogs K] [--plain]

``--world ddp`` (issue 22, defect 3) runs ``tests/programs/ddp_rpc.py``, a
program that opens its own ``tcp://`` stores, hosted by rank 0, which exits
as soon as its own graceful ``rpc.shutdown()`` returns, under
``rpc_harness.spawn``; ``--plain`` runs it under
``torch.multiprocessing.spawn`` instead (one at a time: its ports are
hard-coded). ``--world ps-kill`` (issue 28) runs the parameter-server
scenario at 4 ranks with its planned trainer kill, the world whose server
was seen to crash in torch's native shutdown (SIGABRT, "double free or
corruption"; SIGSEGV) twice in 9 runs under heavy load.

RUNS worlds, ``--parallel`` at once (each stream of worlds in a process of
its own, as ``pytest -n 2`` runs them), beside ``--hogs`` busy-looping
processes (ended with the soak). Prints every failed world's summary and the
count. Exit status: 0 when no run failed, 1 otherwise.
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


def _ddp_world(seed: int) -> object:
    sys.path.insert(0, TESTS)
    from programs import ddp_rpc

    import rpc_harness

    return rpc_harness.spawn(ddp_rpc.run_worker, args=(4,), nprocs=4, seed=seed, deadline=60, check=False)


def _ps_kill_world(seed: int) -> object:
    from rpc_harness.scenarios import parameter_server as ps

    report = ps.run(world_size=4, seed=seed, faults="kill:trainer3@trainer.step#3", deadline=120)
    return report.world


WORLDS = {"ddp": _ddp_world, "ps-kill": _ps_kill_world}


def stream(world: str, runs: int, first_seed: int) -> None:
    """One stream of worlds, one after the other; one JSON line per world."""
    for index in range(runs):
        started = time.monotonic()
        result = WORLDS[world](first_seed + index)
        failed = [r.describe() for r in result if r.status != "ok"]
        errors = sorted({line.strip() for r in result for line in (r.traceback or "").splitlines()
                         if "Error" in line and not line.startswith(" ")})
        # A native crash's own words (glibc's "double free", a fatal signal's
        # dump) are in the rank's output, not in a Python traceback.
        crashes = [f"{r.label} died of {r.signal}; its output ends:\n{r.output[-3000:]}" for r in result
                   if r.signal in ("SIGABRT", "SIGSEGV", "SIGBUS") and r.status != "killed"]
        print(json.dumps({"seed": first_seed + index, "ok": result.ok, "seconds": round(time.monotonic() - started, 2),
                          "headline": result.report(replay=False).splitlines()[0], "ranks": failed,
                          "errors": errors, "problems": result.problems, "crashes": crashes}), flush=True)


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
    parser.add_argument("--plain", action="store_true", help="ddp: torch.multiprocessing.spawn, one at a time")
    parser.add_argument("--world", choices=sorted(WORLDS), default="ddp", help="which world (default ddp)")
    parser.add_argument("--hogs", type=int, default=0, help="busy-looping processes beside the soak (default 0)")
    parser.add_argument("--stream", type=int, default=None, help=argparse.SUPPRESS)  # internal: one stream
    args = parser.parse_args()
    if args.stream is not None:
        stream(args.world, args.stream, args.seed)
        return 0
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hogs)]
    try:
        return soak(args)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def soak(args: argparse.Namespace) -> int:
    if args.plain:
        failures = plain(args.runs)
        print(f"plain mp.spawn: {failures} of {args.runs} runs failed")
        return int(failures > 0)
    shares = [args.runs // args.parallel + (i < args.runs % args.parallel) for i in range(args.parallel)]
    procs, seed = [], args.seed
    for share in shares:
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--world", args.world, "--stream",
                                       str(share), "--seed", str(seed)], cwd=ROOT, stdout=subprocess.PIPE, text=True))
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
                for text in outcome["ranks"] + outcome["errors"] + outcome["problems"] + outcome["crashes"]:
                    print("    " + text)
        proc.wait()
    failures = sum(1 for o in outcomes if not o["ok"])
    lost = args.runs - len(outcomes)
    print(f"{args.world}, {args.parallel} worlds at once, {args.hogs} CPU hogs: {failures} of {len(outcomes)} runs failed"
          + (f" ({lost} never reported: a stream crashed)" if lost else ""))
    return int(failures > 0 or lost > 0)


if __name__ == "__main__":
    sys.exit(main())
