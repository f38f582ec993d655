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


def leave_ddp_group():
    """Leave a group a DDP model trained over, as the model is freed after
    it. torch 2.13 can deadlock there: the model's reducer frees the group,
    whose destructor joins gloo's threads holding the GIL, while one of them
    waits for the GIL to free a work made in the last backward pass (it
    holds the pass's stashed Python context). Seen once in ~50 runs under
    load: the rank hangs as its entry returns. In a barrier first, the main
    thread waits without the GIL, and gloo's threads finish with those works."""
    dist.barrier()
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
    leave_ddp_group()
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


def every_op(ctx):
    """Each collective and point-to-point op of torch.distributed once (two
    ranks): the point each one hit, read from nothing but the plan's faults,
    and the errors of those gloo does not support, by op."""
    join_group(ctx)
    rank, size = ctx.rank, ctx.world_size
    peer = 1 - rank
    ones = torch.ones(4)
    unsupported = {}

    def attempt(name, call):
        try:
            call()
        except RuntimeError as error:
            unsupported[name] = str(error).splitlines()[0]

    attempt("all_reduce", lambda: dist.all_reduce(ones.clone()))
    attempt("all_gather", lambda: dist.all_gather([torch.empty(4) for _ in range(size)], ones))
    attempt("all_gather_into_tensor", lambda: dist.all_gather_into_tensor(torch.empty(4 * size), ones))
    attempt("reduce_scatter", lambda: dist.reduce_scatter(torch.empty(4), [ones.clone() for _ in range(size)]))
    attempt("reduce_scatter_tensor", lambda: dist.reduce_scatter_tensor(torch.empty(4), torch.ones(4 * size)))
    attempt("broadcast", lambda: dist.broadcast(ones.clone(), src=0))
    attempt("reduce", lambda: dist.reduce(ones.clone(), dst=0))
    attempt("gather", lambda: dist.gather(ones, [torch.empty(4) for _ in range(size)] if rank == 0 else None, dst=0))
    attempt("scatter", lambda: dist.scatter(torch.empty(4), [ones.clone() for _ in range(size)] if rank == 0 else None,
                                            src=0))
    attempt("all_to_all", lambda: dist.all_to_all([torch.empty(2) for _ in range(size)],
                                                  [torch.ones(2) for _ in range(size)]))
    attempt("all_to_all_single", lambda: dist.all_to_all_single(torch.empty(4), torch.ones(4)))
    attempt("barrier", lambda: dist.barrier())
    attempt("monitored_barrier", lambda: dist.monitored_barrier())
    attempt("all_reduce_coalesced", lambda: dist.all_reduce_coalesced([ones.clone(), ones.clone()]))
    attempt("all_gather_coalesced", lambda: dist.all_gather_coalesced(
        [[torch.empty(4)] for _ in range(size)], [ones]))

    def coalesced(collective):
        with dist._coalescing_manager(async_ops=True) as manager:
            collective()
        manager.wait()

    attempt("all_gather_into_tensor_coalesced", lambda: coalesced(
        lambda: dist.all_gather_into_tensor(torch.empty(4 * size), ones)))
    attempt("reduce_scatter_tensor_coalesced", lambda: coalesced(
        lambda: dist.reduce_scatter_tensor(torch.empty(4), torch.ones(4 * size))))
    if rank == 0:
        dist.send(ones, peer)
        dist.isend(ones, peer).wait()
        dist.recv(torch.empty(4), peer)
        dist.irecv(torch.empty(4), peer).wait()
    else:
        dist.recv(torch.empty(4), peer)
        dist.irecv(torch.empty(4), peer).wait()
        dist.send(ones, peer)
        dist.isend(ones, peer).wait()
    leave_group()
    return unsupported


def fsdp_steps(ctx, steps):
    """FSDP2 (``fully_shard``) over a small model on gloo: an event before
    and after each step (forward with the parameters' all-gather, backward
    with the gradients' reduce-scatter, optimizer step)."""
    from torch.distributed.fsdp import fully_shard

    join_group(ctx)
    torch.manual_seed(0)
    model = fully_shard(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1, steps + 1):
        ctx.event("step.before", step=step)
        opt.zero_grad()
        model(torch.randn(2, 8)).sum().backward()
        opt.step()
        ctx.event("step.after", step=step)
    leave_ddp_group()
    return steps


def two_groups(ctx, steps):
    """Each step one all-reduce in the default group, then one in a
    subgroup of every rank described as "sub"."""
    join_group(ctx)
    sub = dist.new_group(list(range(ctx.world_size)), group_desc="sub")
    for step in range(1, steps + 1):
        ctx.event("step.before", step=step)
        dist.all_reduce(torch.ones(4))
        dist.all_reduce(torch.ones(4), group=sub)
        ctx.event("step.after", step=step)
    leave_group()
    return steps


def disagreeing(ctx):
    """Two all-reduces on every rank, then a third on all but the last
    rank, which broadcasts instead: the third collective never completes."""
    join_group(ctx)
    dist.all_reduce(torch.ones(16))
    dist.all_reduce(torch.ones(16))
    if ctx.rank == ctx.world_size - 1:
        dist.broadcast(torch.ones(16), src=0)
    else:
        dist.all_reduce(torch.ones(16))
    leave_group()


def raises_before_its_all_reduce(ctx):
    """Rank 1 raises before the all-reduce its peers wait in."""
    join_group(ctx)
    if ctx.rank == 1:
        raise ValueError("rank 1's own mistake")
    dist.all_reduce(torch.ones(2))


def raises_before_the_worlds_all_reduce(ctx):
    """The same in a world whose group the harness made (process_group="gloo")."""
    if ctx.rank == 1:
        raise ValueError("rank 1's own mistake")
    dist.all_reduce(torch.ones(2), group=ctx.group)


def one_short(ctx):
    """Three all-reduces on every rank but the last, which does two and returns."""
    join_group(ctx)
    for _ in range(2 if ctx.rank == ctx.world_size - 1 else 3):
        dist.all_reduce(torch.ones(4))


def mismatched(ctx):
    """An all-gather whose ranks give tensors of different lengths."""
    join_group(ctx)
    dist.all_reduce(torch.ones(4))
    size = 8 * (ctx.rank + 1)
    dist.all_gather([torch.empty(size) for _ in range(ctx.world_size)], torch.ones(size))
    leave_group()


def stuck_after_collectives(ctx):
    """Two all-reduces, then failpoint ``test.after`` (where a plan may hang the rank)."""
    join_group(ctx)
    dist.all_reduce(torch.ones(4))
    dist.all_reduce(torch.ones(4))
    rpc_harness.failpoint("test.after")
    leave_group()


def ddp_model():
    torch.manual_seed(0)
    return torch.nn.Linear(8, 4)


def ddp_batches(steps):
    generator = torch.Generator().manual_seed(1)
    return [torch.randn(2, 8, generator=generator) for _ in range(steps)]


def ddp_parameters(ctx, steps):
    """DDP training on the same batches in every rank: its final parameters."""
    join_group(ctx)
    model = torch.nn.parallel.DistributedDataParallel(ddp_model())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for batch in ddp_batches(steps):
        opt.zero_grad()
        model(batch).sum().backward()
        opt.step()
    leave_ddp_group()
    return [p.detach().clone() for p in model.parameters()]


def baseline_parameters(steps):
    """The same training in one process: DDP averages equal gradients, so it must end here."""
    model = ddp_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for batch in ddp_batches(steps):
        opt.zero_grad()
        model(batch).sum().backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]
