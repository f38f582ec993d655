"""World specs: what to run, in how many ranks, with which seed, faults and
deadline, validated in one place before any process starts."""

from __future__ import annotations

import functools
import pickle
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .durations import format_seconds
from .entry import EntryRef, check_signature
from .errors import FaultPlanError, Unsupported, WorldSpecError, clip
from .faults import FaultPlan, uses_faulty_agent
from .options import (
    MAX_FAULTY_WORLD_SIZE,
    MAX_WORLD_SIZE,
    WorldArgs,
    WorldOptions,
    default_bringup,
    takes_world_options,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

_WORKER_NAME_RE = re.compile(r"^[A-Za-z0-9_\-:]{1,128}$")  # what torch rpc accepts


@dataclass(frozen=True)
class WorldSpec:
    """Everything that defines one world. Built by :func:`make_spec`.

    A ``spawned`` world runs ``entry(rank, *args)`` in each process, and the
    program names its workers in its own init_rpc: ``names`` are then the
    names it was expected to give, or empty strings when nobody said."""

    entry: EntryRef
    names: tuple[str, ...]
    options: WorldOptions
    payload: bytes = field(default=pickle.dumps(((), {})), repr=False)  # pickled (args, kwargs)
    args: tuple[Any, ...] = field(default=(), repr=False)
    kwargs: tuple[tuple[str, Any], ...] = field(default=(), repr=False)
    spawned: bool = False
    repro: str = ""
    device_note: str = ""  # the world's devices for its report, and whether ranks share them

    @property
    def world_size(self) -> int:
        return len(self.names)

    @property
    def seed(self) -> int:
        return self.options.seed  # type: ignore[return-value]  # always drawn by make_spec

    @property
    def bringup(self) -> float:
        """The bring-up budget: the one given, or one for the world's size."""
        return self.options.bringup or default_bringup(self.world_size)


def _reported_at_the_caller(build: Callable[..., WorldSpec]) -> Callable[..., WorldSpec]:
    """A refused input's error is raised without the frames of the checks
    that found it: its message names what was wrong and where it came from,
    and in a pytest report the user's own line is then the last one shown."""

    @functools.wraps(build)
    def checked(*args: Any, **kwargs: Any) -> WorldSpec:
        __tracebackhide__ = True
        try:
            return build(*args, **kwargs)
        except (WorldSpecError, FaultPlanError, Unsupported) as error:
            raise error.with_traceback(None)  # noqa: B904 - the same error, not another

    return checked


@takes_world_options
@_reported_at_the_caller
def make_spec(
    entry: Callable[..., Any] | str,
    world_size: int | None = None,
    *,
    names: Sequence[str] | str | None = None,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    spawned: bool = False,
    repro: str = "",
    where: str = "run_world()",
    **options: Unpack[WorldArgs],
) -> WorldSpec:
    """Validate every input and build a :class:`WorldSpec`.

    ``options`` are world options (:mod:`rpc_harness.options`), None meaning the
    default. ``where`` names the source of the values (an argument list, a
    marker, a command-line option) so that errors point at it. A ``spawned``
    world without ``names`` checks its plan's targets once the program has
    named its workers.
    """
    ref = EntryRef.of(entry, where=f"{where}: entry")
    if not isinstance(args, (tuple, list)):
        raise WorldSpecError(f"{where}: args must be a tuple or list, got {type(args).__name__}")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise WorldSpecError(f"{where}: kwargs must be a mapping, got {type(kwargs).__name__}")
    check_signature(ref, entry, args, kwargs or {}, spawned=spawned, where=where)
    if spawned and (names is None or isinstance(names, str)):
        if names is not None:
            raise WorldSpecError(f"{where}: a spawned program names its workers itself; give names as a list")
        if world_size is None:
            raise WorldSpecError(f"{where}: give nprocs")
        resolved_names = ("",) * check_world_size(world_size, where=where, what="nprocs")
    else:
        resolved_names = resolve_names(world_size, names, where=where)
    checked = WorldOptions.from_values(options, where=where)
    check_layers(checked, spawned=spawned, where=where)
    plan = checked.faults
    failpoints = checked.failpoints
    if all(resolved_names):
        plan.validate(resolved_names, failpoints=failpoints, where=f"{where}: faults")
    else:
        plan.validate([f.target for f in plan], failpoints=failpoints, where=f"{where}: faults")
    check_call_points(plan, where=f"{where}: faults")
    check_waits_can_end(plan, bringup=checked.bringup or default_bringup(len(resolved_names)),
                        deadline=checked.deadline, where=f"{where}: faults")
    if uses_faulty_agent(plan, checked.fuzz) and len(resolved_names) > MAX_FAULTY_WORLD_SIZE:
        raise WorldSpecError(
            f"{where}: message faults and schedule fuzzing work in worlds of at most {MAX_FAULTY_WORLD_SIZE} "
            f"ranks, got {len(resolved_names)}: torch's faulty agent cannot leave TensorPipe's shared-memory "
            "transport, whose connection backlog overflows in larger worlds"
        )
    checked.check_here(where)  # what this machine cannot run (devices without CUDA, ...)
    device_note = ""
    if checked.devices:
        import torch

        from ._devices import sharing_note

        device_note = sharing_note(checked.devices, len(resolved_names), torch.cuda.device_count())
    if checked.process_group == "nccl":
        from ._devices import require_nccl_devices

        require_nccl_devices(checked.devices, len(resolved_names), where=where)
    try:
        payload = pickle.dumps((tuple(args), dict(kwargs or {})))
    except Exception as error:
        raise WorldSpecError(
            f"{where}: the entry's args/kwargs cannot be pickled for the ranks: {error}"
        ) from error
    return WorldSpec(
        entry=ref,
        names=resolved_names,
        options=checked,
        payload=payload,
        args=tuple(args),
        kwargs=tuple(sorted(dict(kwargs or {}).items())),
        spawned=spawned,
        repro=repro,
        device_note=device_note,
    )


def check_layers(options: WorldOptions, *, spawned: bool, where: str) -> None:
    """What a world brings up (a default process group, an RPC agent) must
    carry what the world is asked to do, or it is refused here."""
    if not options.rpc and options.process_group is None and not spawned:
        raise WorldSpecError(f"{where}: rpc=False without a process_group leaves the entry no way to reach its "
                             "peers; give process_group='gloo' (or 'nccl'), or keep rpc=True")
    if not options.rpc:
        on_rpcs = [str(f) for f in options.faults
                   if f.point.startswith(("rpc.call:", "rpc.serve:")) or not f.traits.at_failpoint]
        if on_rpcs:
            raise WorldSpecError(f"{where}: faults {', '.join(on_rpcs)} act on RPCs, but rpc=False: the world has "
                                 "no RPC agent")


def check_call_points(plan: FaultPlan, *, where: str) -> None:
    """Every ``call:package.module:Qualified.name`` of the plan must import
    and name a callable, here, before any rank tries."""
    from ._rank.callpoints import check_target

    for fault in plan:
        if fault.point.startswith("call:"):
            problem = check_target(fault.point.removeprefix("call:"))
            if problem:
                raise FaultPlanError(f"{where}: {fault}: {problem}")


def check_waits_can_end(plan: FaultPlan, *, bringup: float, deadline: float, where: str) -> None:
    """Refuse a fault that waits (``delay``, ``msgdelay``) at least as long
    as the world's bring-up budget and deadline together, unless it is
    optional: one that must fire then cannot end before the deadline,
    wherever it fires (the deadline counts from when every rank has joined,
    and a rank is up for at most the bring-up budget before that). Most
    likely a number meant as milliseconds, read as seconds: refused before
    any process starts, rather than failing as a hang minutes later.

    ``hang`` and ``freeze`` are not refused: a hang is how a test sees the
    deadline's report (it never ends, by design), and a frozen rank is
    killed once the others are done, which can end in time."""
    within = bringup + deadline
    for fault in plan:
        if fault.traits.waits and not fault.optional and fault.seconds >= within:
            seconds = format_seconds(fault.seconds)
            raise FaultPlanError(
                f"{where}: {fault} waits {seconds} s (a number without a unit is seconds: did you mean "
                f"{seconds}ms?); it is not optional, so it must fire, and the world cannot end before its deadline "
                f"(a bring-up budget of {format_seconds(bringup)} s, then a deadline of {format_seconds(deadline)} s)")


def check_world_size(
    world_size: object, *, where: str, what: str = "world_size", minimum: int = 1, needs: str = ""
) -> int:
    """``world_size`` if it is a whole number in ``minimum..MAX_WORLD_SIZE``;
    otherwise the one :class:`WorldSpecError` every door raises, naming
    ``where`` the value came from and ``what`` it is called there (``nprocs``
    for a spawned program). ``needs`` says why a smaller world cannot work
    (a scenario: "the scenario needs >= 2 ranks (an agent and an observer)")."""
    if isinstance(world_size, bool) or not isinstance(world_size, int):
        raise WorldSpecError(f"{where}: invalid {what} {clip(world_size)}; use a whole number in "
                             f"{minimum}..{MAX_WORLD_SIZE}")
    if world_size < minimum:
        raise WorldSpecError(f"{where}: invalid {what} {world_size}; {needs or f'use {minimum}..{MAX_WORLD_SIZE}'}")
    if world_size > MAX_WORLD_SIZE:
        raise WorldSpecError(f"{where}: invalid {what} {world_size}; use at most {MAX_WORLD_SIZE}")
    return world_size


def resolve_names(
    world_size: int | None, names: Sequence[str] | str | None, *, where: str
) -> tuple[str, ...]:
    """Worker names, one per rank: ``worker{rank}`` by default, a list, or a
    template such as ``"node{rank}"``."""
    if world_size is not None:
        check_world_size(world_size, where=where)
    if names is None or isinstance(names, str):
        if world_size is None:
            raise WorldSpecError(f"{where}: give world_size (or a list of names)")
        template = names or "worker{rank}"
        if "{rank}" not in template:
            raise WorldSpecError(f"{where}: names template {clip(template)} must contain '{{rank}}'")
        resolved = tuple(template.format(rank=r) for r in range(world_size))
    else:
        resolved = tuple(names)
        if world_size is not None and len(resolved) != world_size:
            raise WorldSpecError(
                f"{where}: {len(resolved)} names given for world_size={world_size}: {list(resolved)}"
            )
        if not resolved:
            raise WorldSpecError(f"{where}: names is empty")
    for name in resolved:
        if not isinstance(name, str) or not _WORKER_NAME_RE.match(name):
            raise WorldSpecError(
                f"{where}: invalid worker name {clip(name)}; use 1-128 letters, digits, _ - :"
            )
    duplicates = sorted({n for n in resolved if resolved.count(n) > 1})
    if duplicates:
        raise WorldSpecError(f"{where}: duplicate worker names {duplicates}")
    return resolved


