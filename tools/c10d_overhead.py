"""Measure what the collective hooks (``rpc_harness.c10d.hooks``) add to
one collective: ``dist.all_reduce`` of 16 floats in a one-rank gloo group
(no peer to wait for, so the hook's own cost is what differs), timed in
fresh processes, the modes taken in turn so that a machine's load falls on
all of them alike.

Modes: ``none`` (torch alone), ``passing`` (the kernels registered, no rank
context: what every rank of an RPC-only world pays), ``recorded`` (a rank's
context with no fault aimed at it: failpoint lookup, history written,
completion recorded), ``armed`` (a fault aimed at the rank at another
point: every hit counted too).

Usage: python tools/c10d_overhead.py [--rounds 5] [--calls 200]
Prints each mode's fastest time per call over the rounds (each round's
fastest batch), and its cost over ``none``: on a loaded machine the fastest
is the one least disturbed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

CHILD = r"""
import os, sys, tempfile, time
import torch, torch.distributed as dist
mode, calls = sys.argv[1], int(sys.argv[2])
folder = tempfile.mkdtemp()
if mode != "none":
    from rpc_harness.c10d import hooks
    from rpc_harness.context import RankContext
    from rpc_harness.faults import FaultPlan
    hooks.install()
    if mode != "passing":
        plan = FaultPlan.parse("delay:w0@c10d.broadcast=0s" if mode == "armed" else "")
        hooks.open_history(os.path.join(folder, "rank0.c10d"), 0)
        hooks.start(RankContext(rank=0, names=["w0"], world_seed=0, faults=plan))
dist.init_process_group("gloo", init_method=f"file://{folder}/store", rank=0, world_size=1)
tensor = torch.ones(16)
for _ in range(200):
    dist.all_reduce(tensor)
best = float("inf")
for _ in range(40):  # short batches, the fastest kept: a batch the machine's load preempted says nothing
    start = time.perf_counter()
    for _ in range(calls):
        dist.all_reduce(tensor)
    best = min(best, (time.perf_counter() - start) / calls)
dist.destroy_process_group()
print(best * 1e6)
"""
MODES = ("none", "passing", "recorded", "armed")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200, help="all-reduces per batch (40 batches a process)")
    args = parser.parse_args()
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(args.rounds):
        for mode in MODES:
            out = subprocess.run([sys.executable, "-c", CHILD, mode, str(args.calls)], check=True,
                                 capture_output=True, text=True)
            times[mode].append(float(out.stdout.split()[-1]))
    base = min(times["none"])
    for mode in MODES:
        fastest = min(times[mode])
        print(f"{mode:9s} {fastest:7.1f} us per all_reduce  (+{fastest - base:5.1f} us)  rounds: "
              + ", ".join(f"{t:.1f}" for t in times[mode]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
