"""What an entry of a reused collective world must leave behind, checked in
each rank between entries (called by ``rpc_harness._rank.clean``): the rules
a collective world adds to an RPC world's.

Read from what torch itself keeps (measured on torch 2.13, gloo): the
default group's ``_get_sequence_number_for_group()`` counts the collectives
it ran (``new_group`` does not move it); ``distributed_c10d._world.pg_map``
holds every group this process made until ``destroy_process_group`` ends
it; an ``async_op`` handle is a ``dist.Work``, found among what live
objects refer to (it is not a garbage-collected container itself), and
``is_completed()`` says whether its collective finished.

Each rank looks at its own groups (:func:`look`) and says what it knows
of the default group (a ``sequence.GroupWord``); the supervisor compares
the ranks' words (``rpc_harness.c10d.sequence``), never the group itself:
where the ranks' sequence numbers differ, a collective of the check's own
would pair with the entry's leftover and wait or mix data. Only where
every rank is clean is the group tried with a collective
(:func:`try_default_group`, on the supervisor's word), and only where the
entry's own collectives do not already show it usable: on every rank, the
entry ran at least one collective over the default group it began with,
and each completed, none failed (the rank's history counts them). A
completed collective over every member is what the check's own would
show, and the check's own all_reduce was half of a reused entry's time (4
ranks on 2 cores: ~3.6 ms of ~7.5 ms under load). The check's own
collective is the harness's (``hooks.unobserved``): no failpoint of the
entry's plan fires in it, and no rank's history counts it.
"""

from __future__ import annotations

import gc
import warnings
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from . import hooks
from .sequence import GroupWord


@dataclass(frozen=True)
class Before:
    """A rank's process groups as an entry begins: those alive (by id), the
    default group (its id; None: none), and its collectives so far as the
    rank's history counts them (entered, completed, failed)."""

    groups: frozenset[int]
    world: int | None
    tally: tuple[int, int, int]


def before_entry() -> Before:
    world = c10d.GroupMember.WORLD
    return Before(frozenset(id(group) for group in c10d._world.pg_map), None if world is None else id(world),
                  (0, 0, 0) if world is None else hooks.tally(world.group_name))


def proven(before: Before, group: Any, now: tuple[int, int, int]) -> bool:
    """Whether the entry's own collectives show ``group`` (the default
    group) usable in this rank: the group the entry began with, at least
    one collective of the entry's over it, each completed, none failed (a
    completion of an older op meanwhile proves nothing: not proven).
    ``now``: the group's tally as the entry ended (``hooks.tally``)."""
    if id(group) != before.world:
        return False
    entered, completed, failed = now
    ran = entered - before.tally[0]
    return ran > 0 and completed - before.tally[1] == ran and failed == before.tally[2]


def look(before: Before, *, thorough: bool) -> tuple[list[tuple[str, str]], GroupWord | None]:
    """``(rule, text)`` for each collective rule of ``_clean.RULES`` this
    rank breaks alone, and its word on the default group for the rules
    only every rank's words judge (None: it has none). Pending handles
    are looked for only in a ``thorough`` check (a scan of live objects,
    ~0.3 s): one its peers never issued shows in the quick check's
    sequence numbers already."""
    group = c10d.GroupMember.WORLD
    if group is None:
        return [("group", "has no default group any more: the entry destroyed it (dist.destroy_process_group())")], None
    found = [("work", text) for text in pending_work()] if thorough else []
    left = [pg for pg in c10d._world.pg_map if id(pg) not in before.groups and pg is not group]
    if left:
        described = ", ".join(_describe(pg) for pg in left[:5])
        found.append(("subgroups", f"still has {len(left)} subgroup(s) the entry made: {described}"))
    now = hooks.tally(group.group_name)
    return found, GroupWord(group._get_sequence_number_for_group(), now[0], proven(before, group, now))


def pending_work(limit: int = 5) -> list[str]:
    """The ``async_op`` handles live objects of this rank hold whose
    collective has not completed."""
    works: dict[int, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated objects warn as they are looked at
        for holder in gc.get_objects():
            for ref in gc.get_referents(holder):
                if isinstance(ref, dist.Work) and id(ref) not in works and not ref.is_completed():
                    works[id(ref)] = ref
    if not works:
        return []
    return [f"holds {len(works)} work handle(s) of async_op collectives that have not completed: an "
            "async_op=True collective never waited for, or one its peers never issued"]


def try_default_group(world_size: int) -> list[str]:
    """What an all_reduce of ones over the default group shows wrong (every
    rank calls it together, on the supervisor's word)."""
    group = c10d.GroupMember.WORLD
    if group is None:  # (its look said so already: no rank is told to try then)
        return ["has no default group any more"]
    return _try(group, world_size)


def _try(group: Any, world_size: int) -> list[str]:
    tensor = torch.ones(1)
    try:
        with hooks.unobserved():  # the harness's collective, not the entry's: no failpoint, no history
            dist.all_reduce(tensor, group=group)
    except Exception as error:  # noqa: BLE001 - the finding says what it was
        return [f"cannot run a collective over the default group: {type(error).__name__}: {error}"]
    if tensor.item() != world_size:
        return [f"an all_reduce of ones over the default group gave {tensor.item():g}, not {world_size}"]
    return []


def _describe(group: Any) -> str:
    name = c10d._world.pg_names.get(group, "?")
    try:
        ranks = sorted(c10d.get_process_group_ranks(group))
    except (RuntimeError, ValueError):
        ranks = []
    return f"group {name!r} of ranks {ranks}"
