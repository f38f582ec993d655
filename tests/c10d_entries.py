"""Entries of collective worlds, made the way a user program makes its
process group (``init_process_group`` on a file in the world's folder):
the harness's hooks must see its collectives without being told of it."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

import rpc_harness


def join_group(ctx):
    dist.init_process_group("gloo", init_method=f"file://{os.path.join(ctx.workdir, 'pg')}", rank=ctx.rank,
                            world_size=ctx.world_size)


def leave_group():
    dist.destroy_process_group()


def ddp_steps(ctx, steps):
    """DDP over a small model: an event before and after each step (its
    forward, backward with DDP's gradient all-reduce, and optimizer step).
    A collective that fails because a peer died ends the entry with the
    error's first line, so a planned death is the only failure."""
    join_group(ctx)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1, steps + 1):
        ctx.event("step.before", step=step)
        opt.zero_grad()
        model(torch.randn(2, 8)).sum().backward()
        opt.step()
        ctx.event("step.after", step=step)
    leave_group()
    return steps


def all_reduces(ctx, count):
    """``count`` all-reduces of the Python API, each logged before and after."""
    join_group(ctx)
    total = torch.zeros(4)
    for step in range(1, count + 1):
        ctx.event("step.before", step=step)
        t = torch.ones(4)
        dist.all_reduce(t)
        total += t
        ctx.event("step.after", step=step)
    leave_group()
    return total.tolist()


def catching(ctx, count):
    """``count`` all-reduces; those that raised, by number and message."""
    join_group(ctx)
    raised = []
    for step in range(1, count + 1):
        try:
            dist.all_reduce(torch.ones(4))
        except Exception as error:  # noqa: BLE001 - the entry reports it
            raised.append((step, type(error).__name__, str(error)))
    leave_group()
    return raised


def failpoint_free(ctx):
    rpc_harness.failpoint("never.used")


def timed_all_reduces(ctx, count):
    """``count`` all-reduces, each logged before and after; how long each took."""
    import time

    join_group(ctx)
    took = []
    for step in range(1, count + 1):
        ctx.event("step.before", step=step)
        start = time.monotonic()
        dist.all_reduce(torch.ones(4))
        took.append(time.monotonic() - start)
        ctx.event("step.after", step=step)
    leave_group()
    return took
