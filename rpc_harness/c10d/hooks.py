"""Failpoints and the history at every collective of a rank (rank side).

DDP's reducer and FSDP2 issue their collectives from C++ or through
functional collectives, never through ``torch.distributed.all_reduce``: a
hook on the Python API would not see them. Every one of them, from Python
or C++, on any process group (the harness's, the program's own, subgroups,
DeviceMesh's), gloo or NCCL, goes through one of torch's dispatcher ops
``c10d::allreduce_``, ``c10d::_reduce_scatter_base_`` ... So the harness
registers a Python kernel for each at the dispatcher's ``BackendSelect``
key, which every call passes before the CPU or CUDA kernel that runs the
collective: it records the op in the rank's history, reaches the failpoint
``c10d.OP`` (where a fault may kill, delay, raise, hang or freeze), then
redispatches below ``BackendSelect`` to torch's own kernel. (Excluding the
key in the thread instead broke gloo's all-gather, which makes tensors
with factory functions that need it. Measured on torch 2.13: torch's
process groups written in Python cannot stand in for a C++ backend, since
a Python subclass of ``Backend`` has no constructor; and a backend
registered again for a group is ignored.)

Tracing (FakeTensor, torch.compile) dispatches to the ``Python`` key above
``BackendSelect``: nothing fires while a program is traced.

:func:`install` registers the kernels once per process (in the forkserver);
they do nothing but redispatch until :func:`start` gives a rank's context.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

from .._rank import stackdump as _stackdump
from ..context import BEFORE_A_FAULT_ENDS, RankContext
from .ops import OPS, PREFIX, Op
from .record import History, describe_tensors

_library: Any = None  # torch.library.Library holding the kernels; they live as long as it does
_dist: Any = None  # torch.distributed, once installed
_watch: _Watch | None = None
_history: History | None = None
_unobserved = threading.local()
# The code objects of torch.distributed's send/recv/isend/irecv bodies: a
# send op reached from isend (and not from send, which calls isend) is an isend.
_P2P_CODES: dict[Any, str] = {}
_P2P_FRAMES = 8  # Python frames looked at above a point-to-point op


def install() -> None:
    """Register the kernels (idempotent); they pass every call straight on
    until :func:`start`."""
    global _library, _dist
    if _library is not None:
        return
    import inspect

    import torch
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    _dist = dist
    below = torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.BackendSelect)
    library = torch.library.Library("c10d", "IMPL")
    for op in OPS:
        overload = getattr(torch.ops.c10d, op.name).default
        library.impl(op.name, _kernel(op, overload, below), "BackendSelect", with_keyset=True)
    for name in ("send", "recv", "isend", "irecv"):
        _P2P_CODES[inspect.unwrap(getattr(c10d, name)).__code__] = name
    _stackdump.before_answering(flush)  # a hung rank's history says which of its ops completed
    BEFORE_A_FAULT_ENDS.append(flush)  # and so does a rank a fault ends
    _library = library


def open_history(path: str | None, rank: int) -> History:
    """Begin this rank's history at ``path`` (once per rank; a reused
    world's entries add to it)."""
    global _history
    _history = History(path, rank)
    return _history


def start(ctx: RankContext) -> None:
    """Fire ``ctx``'s faults at collectives and record them (a reused
    world's entry starts again with its own context)."""
    global _watch
    _watch = _Watch(ctx, _history or History(None, ctx.rank))


def stop() -> None:
    """Leave collectives alone again (a test, or a process that stops being a rank)."""
    global _watch
    _watch = None


class unobserved:
    """``with unobserved():`` the collectives this thread issues are the
    harness's own (a reused world's checks between entries): no failpoint,
    no history."""

    def __enter__(self) -> None:
        _unobserved.active = True

    def __exit__(self, *exc: object) -> None:
        _unobserved.active = False


def _kernel(op: Op, overload: Any, below: Any) -> Callable[..., Any]:
    redispatch = overload._handle.redispatch_boxed
    group_at = next(i for i, arg in enumerate(overload._schema.arguments) if arg.name == "process_group")

    def kernel(keyset: Any, *args: Any) -> Any:
        watch = _watch
        if watch is None or getattr(_unobserved, "active", False):
            return redispatch(keyset & below, *args)
        return watch.run(op, group_at, redispatch, keyset & below, args)

    return kernel


def _p2p_point(op: Op) -> str:
    """``send`` or ``isend`` (``recv`` or ``irecv``): the outermost of
    torch's four functions among the Python frames above the op; the
    blocking name when it came from C++."""
    frame = sys._getframe(2)
    found = None
    for _ in range(_P2P_FRAMES):
        if frame is None:
            break
        name = _P2P_CODES.get(frame.f_code)
        if name is not None:
            found = name
        frame = frame.f_back
    return found if found in op.points else op.point


class _Watch:
    """One rank's context at its collectives: the failpoints, the history."""

    def __init__(self, ctx: RankContext, history: History) -> None:
        self.ctx = ctx
        self.history = history
        # A plan naming a group (c10d.all_reduce:1) makes every op hit its
        # group's failpoints too; without one, one failpoint per op.
        self.per_group = any(f.point.startswith(PREFIX) and ":" in f.point for f in ctx.faults)

    def run(self, op: Op, group_at: int, redispatch: Callable[..., Any], keyset: Any, args: tuple) -> Any:
        group = _dist.ProcessGroup.unbox(args[group_at])
        name = group.group_name
        if not self.history.known(name):
            self.history.group(name, group.group_desc, _members(group))
        point = _p2p_point(op) if op.p2p else op.point
        peer = args[op.peer] if op.peer is not None else None
        tensors = describe_tensors(args[op.tensors]) if op.tensors is not None else ""
        if _pending:
            flush()
        seq = self.history.enter(name, point, op.p2p, tensors, peer)
        try:
            self._reach(point, name, group.group_desc)
            out = redispatch(keyset, *args)
        except BaseException as error:
            self.history.done(name, seq, op.p2p, error)
            raise
        work = out[1] if isinstance(out, tuple) and len(out) == 2 else out
        if work is None or isinstance(work, tuple):  # monitored_barrier: done when it returns
            self.history.done(name, seq, op.p2p)
        else:
            _watch_completion(work, name, seq, op.p2p)
        return out

    def _reach(self, point: str, name: str, desc: str) -> None:
        """The failpoints of one op: ``c10d.OP``, and where a plan names
        groups, ``c10d.OP:NAME`` and ``c10d.OP:DESCRIPTION``."""
        self.ctx.failpoint(PREFIX + point)
        if self.per_group:
            self.ctx.failpoint(f"{PREFIX}{point}:{name}")
            if desc not in (name, "undefined"):
                self.ctx.failpoint(f"{PREFIX}{point}:{desc}")


# Ops entered whose completion is not written yet: (future or None, work,
# group, number, point-to-point?). Polled, not called back: a Python callback
# on each op's future runs on the backend's thread, which must take the GIL
# from the thread that waits for it, and cost ~200 us a collective (measured,
# tools/c10d_overhead.py); a poll is a C++ call of well under a microsecond.
_pending: list[tuple[Any, Any, str, int, bool]] = []
_pending_lock = threading.Lock()
MAX_PENDING = 256  # ops a rank may leave unwaited before the oldest are forgotten


def _watch_completion(work: Any, group: str, seq: int, p2p: bool) -> None:
    work = _dist.Work.unbox(work)
    try:
        future = work.get_future()
    except RuntimeError:  # a work without a future (some point-to-point ones): its completion, not its error
        future = None
    with _pending_lock:
        _pending.append((future, work, group, seq, p2p))
        del _pending[:-MAX_PENDING]


def tally(group: str) -> tuple[int, int, int]:
    """The collectives of ``group`` (its name) this rank has entered, seen
    complete and seen fail so far, completions brought up to date first."""
    flush()
    return _history.tally(group) if _history is not None else (0, 0, 0)


def flush() -> None:
    """Write the completion of every op that completed since the last look:
    each op's enter looks, and the harness calls this as an entry ends and
    before a rank answers for its stacks (a hang, a failure), so that the
    history says how far each rank got."""
    history = _history
    if history is None:
        return
    with _pending_lock:
        finished = [item for item in _pending if (item[0].done() if item[0] is not None else item[1].is_completed())]
        for item in finished:
            _pending.remove(item)
    for future, _, group, seq, p2p in finished:
        error = None
        if future is not None:
            try:
                future.value()
            except BaseException as failed:  # noqa: BLE001 - the failure is the record
                error = failed
        history.done(group, seq, p2p, error)


def _members(group: Any) -> list[int] | None:
    """The global ranks of ``group``, where torch knows them."""
    try:
        return list(_dist.get_process_group_ranks(group))
    except Exception:  # noqa: BLE001 - a group torch's registry does not hold
        return None
