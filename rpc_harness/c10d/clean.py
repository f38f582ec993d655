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

The ranks compare their sequence numbers through the world's store, never
through the group itself: where they differ, a collective of the check's
own would pair with the entry's leftover and wait or mix data. Only where
every rule but the last holds is the group tried with a collective, and
only where the entry's own collectives do not already show it usable: on
every rank, the entry ran at least one collective over the default group
it began with, and each completed, none failed (the rank's history counts
them). A completed collective over every member is what the check's own
would show, and the check's own all_reduce was half of a reused entry's
time (4 ranks on 2 cores: ~3.6 ms of ~7.5 ms under load). The check's own
collective is the harness's (``hooks.unobserved``): no failpoint of the
entry's plan fires in it, and no rank's history counts it.
"""

from __future__ import annotations

import gc
import pickle
import time
import warnings
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from . import hooks
from .group import world_store

PREFIX = "rpc_harness/clean"  # the keys of the sequence numbers, under the group's own prefix of the store

POLL = 0.0005  # seconds between looks for the peers' words in the store

_checks = 0  # checks made so far in this rank: every rank makes the same ones, so keys match
# The world's store, one object a rank: a FileStore object reads its whole
# file at its first look and only what was added after that. A new one at
# each check read every key of every check before it (the exchange: 2.5 to
# 4 ms an entry, under load, growing with the entries).
_stores: dict[str, Any] = {}


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


def findings(store_path: str, rank: int, world_size: int, before: Before, *, thorough: bool,
             wait: float) -> list[tuple[str, str]]:
    """``(rule, text)`` for each collective rule of ``_clean.RULES`` this
    rank breaks; ``wait``: seconds to wait for every peer's word. Pending
    handles are looked for only in a ``thorough`` check (a scan of live
    objects, ~0.3 s): one its peers never issued shows in the quick check's
    sequence numbers already."""
    global _checks
    _checks += 1
    group = c10d.GroupMember.WORLD
    if group is None:
        return [("group", "has no default group any more: the entry destroyed it (dist.destroy_process_group())")]
    found = [("work", text) for text in pending_work()] if thorough else []
    left = [pg for pg in c10d._world.pg_map if id(pg) not in before.groups and pg is not group]
    if left:
        described = ", ".join(_describe(pg) for pg in left[:5])
        found.append(("subgroups", f"still has {len(left)} subgroup(s) the entry made: {described}"))
    sequence = group._get_sequence_number_for_group()
    now = hooks.tally(group.group_name)
    entered = now[0]
    peers = _exchange(store_path, rank, world_size, (sequence, bool(found), proven(before, group, now), entered), wait)
    others = {peer: word for peer, word in peers.items() if word[0] != sequence}
    if others:
        found.append(("sequence", _behind(entered, sequence, others)))
    # Every rank decides alike from what all said: a collective only where
    # every rank is clean so far, so that none waits in it alone, and only
    # where some rank's own collectives did not show the group usable.
    clean = len(peers) == world_size and not any(word[1] for word in peers.values()) and not others
    if clean and not all(word[2] for word in peers.values()):
        found += [("group", text) for text in _try(group, world_size)]
    return found


def _behind(entered: int, sequence: int, others: dict[int, tuple[int, bool, bool, int]]) -> str:
    """The sequence rule's finding, numbered as the report's collectives
    lines number them (the rank's history: the entries' collectives, not
    the checks' own); in torch's sequence numbers where the histories agree
    and torch's do not (an op the histories do not see)."""
    if any(word[3] != entered for word in others.values()):
        return (f"is at collective #{entered} of the default group, but "
                + ", ".join(f"rank {peer} at #{word[3]}" for peer, word in sorted(others.items())))
    return (f"is at sequence number {sequence} of the default group (torch's), but "
            + ", ".join(f"rank {peer} at {word[0]}" for peer, word in sorted(others.items())))


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


def _exchange(store_path: str, rank: int, world_size: int, mine: tuple[int, bool, bool, int],
              wait: float) -> dict[int, tuple[int, bool, bool, int]]:
    """Every rank's (torch's sequence number, found something, group shown
    usable, collectives its history entered), through the world's store
    (those that said theirs within ``wait`` seconds)."""
    store = _stores.get(store_path)
    if store is None:
        store = _stores[store_path] = world_store(store_path)
    key = f"{PREFIX}/{_checks}"
    store.set(f"{key}/{rank}", pickle.dumps(mine))
    # Looked for, not waited for: a FileStore's wait() looks every 10 ms
    # (measured: a 4-rank exchange took 10 ms of a reused entry's time), and
    # check() is one read of the store's file.
    until = time.monotonic() + wait
    pending = list(range(world_size))
    numbers = {}
    while pending:
        for peer in [p for p in pending if store.check([f"{key}/{p}"])]:
            numbers[peer] = pickle.loads(store.get(f"{key}/{peer}"))
            pending.remove(peer)
        if pending and time.monotonic() >= until:
            break  # did not answer: its own check says why
        if pending:
            time.sleep(POLL)
    return numbers


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
