"""Measure oneMKL's first-call race on this machine, with and without the
warm-up every rank gets (``rpc_harness.rank_setup.warm_math_kernels``).

Each run is a fresh process: its threads make their first call of each of
torch's oneMKL math ops at once, and each answer is compared, bit for bit,
with the same call made again afterwards (by then the kernel is chosen).
A difference is a first call that ran another kernel (pytorch/pytorch#188792).

Usage: python tools/mkl_first_call_race.py [--runs 30] [--threads 4]
Prints, for each mode, how many runs got a different first answer and where.
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys

CHILD = r"""
import sys, threading, torch
from rpc_harness import rank_setup
threads = int(sys.argv[2])
torch.ones(64, 64) @ torch.ones(64, 64)  # loads MKL first, as a rank has by the time it serves a call
if sys.argv[1] == "warm":
    rank_setup.warm_math_kernels()
dtypes = (torch.float32, torch.float64)
inputs = {(op, dt, i): torch.linspace(0.05, 0.95, 64, dtype=dt) * (1 + i / 10) / 1.4
          for op in rank_setup.MKL_MATH_OPS for dt in dtypes for i in range(threads)}
first = {}
together = threading.Barrier(threads)
def calls(i):
    for op in rank_setup.MKL_MATH_OPS:
        for dt in dtypes:
            together.wait()  # every thread's first call of this op at once
            first[(op, dt, i)] = getattr(torch, op)(inputs[(op, dt, i)])
workers = [threading.Thread(target=calls, args=(i,)) for i in range(threads)]
for w in workers: w.start()
for w in workers: w.join()
print(" ".join(sorted({f"{op}/{str(dt)[6:]}" for (op, dt, i), got in first.items()
                       if not torch.equal(got, getattr(torch, op)(inputs[(op, dt, i)]))})))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30, help="fresh processes per mode")
    parser.add_argument("--threads", type=int, default=4, help="threads making their first calls at once")
    args = parser.parse_args(argv)
    for mode in ("cold", "warm"):
        differed: collections.Counter[str] = collections.Counter()
        bad = 0
        for _ in range(args.runs):
            out = subprocess.run([sys.executable, "-c", CHILD, mode, str(args.threads)], capture_output=True,
                                 text=True, timeout=120, check=True).stdout.split()
            bad += bool(out)
            differed.update(out)
        where = ", ".join(f"{op} x{n}" for op, n in differed.most_common()) or "-"
        print(f"{mode}: {bad} of {args.runs} runs got a different first answer ({where})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
