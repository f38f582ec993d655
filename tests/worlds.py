"""Rank entries for the harness's own tests (importable by name in ranks)."""

from __future__ import annotations

import os
import signal
import time

import torch
import torch.distributed.rpc as rpc

import harness


def add(a, b):
    return a + b


def identity(ctx):
    """Who am I, and what do my seeded RNGs say?"""
    return {
        "rank": ctx.rank,
        "name": ctx.name,
        "names": ctx.names,
        "world_size": ctx.world_size,
        "seed": ctx.seed,
        "world_seed": ctx.world_seed,
        "rand": torch.rand(3).tolist(),
        "same_everywhere": ctx.derive_seed("shared"),
        "current_is_ctx": harness.current_context() is ctx,
        "pid": os.getpid(),
    }


def ring(ctx):
    """Every rank calls its right neighbour over RPC."""
    peer = ctx.names[(ctx.rank + 1) % ctx.world_size]
    return rpc.rpc_sync(peer, add, args=(torch.full((2,), float(ctx.rank)), 1)).tolist()


def say_hello(ctx):
    print(f"hello from {ctx.name}", flush=True)
    return ctx.rank


def rank1_sigkills_itself(ctx):
    if ctx.rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return ctx.rank


def rank2_raises(ctx):
    if ctx.rank == 2:
        raise ValueError(f"boom from {ctx.name}")
    time.sleep(30)  # the others would wait forever: the harness must not


def hang_at_step(ctx):
    harness.failpoint("test.step")
    return ctx.rank


def step_three_times(ctx):
    for _ in range(3):
        harness.failpoint("test.step")
    return ctx.hits()


def returns_unpicklable(ctx):
    return lambda: None


def listening_addresses(ctx):
    """Local addresses of this process's listening TCP sockets."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as file:
            next(file)
            for line in file:
                parts = line.split()
                local, state, inode = parts[1], parts[3], parts[9]
                if state == "0A" and inode in inodes:  # 0A: LISTEN
                    found.append(local.split(":")[0])
    return found


def sleep_forever(ctx, pid_dir):
    with open(os.path.join(pid_dir, f"{ctx.rank}.pid"), "w") as file:
        file.write(str(os.getpid()))
    time.sleep(600)
