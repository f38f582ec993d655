"""The Gloo group of torch's ``init_rpc``, replaced in a harness world's ranks
by the world's own store (world option ``rendezvous``: ``"store"``, the
default, or ``"gloo"``, torch's own path).

torch 2.13's TensorPipe backend (``rpc/backend_registry.py``,
``_tensorpipe_init_backend_handler``) builds a ``ProcessGroupGloo`` over
the rendezvous store for a static world (a full mesh: a TCP connection for
every pair of ranks, 32,640 at 256 ranks) and uses it for exactly two
things before dropping it as init_rpc returns: one ``all_gather_object`` of
each rank's (name, device count, device maps, devices), which torch checks
and turns into reverse device maps, and one ``barrier()`` after the
agent's first ``_all_gather``, so that no rank returns before the leader
has finished it. Nothing else holds the group: the agent, its transport,
its channels and every RPC (``_all_gather``, graceful shutdown's
``_wait_all_workers``) are TensorPipe's.

Here ``_init_process_group`` returns a :class:`StoreGroup` over the same
store, and the device-map exchange gathers through it and then checks and
maps with torch's own functions (``_validate_device_maps``,
``_create_reverse_mapping``, ``_create_device_list``), in torch's order.
Everything a program can see is the same: the same checks, the same
errors, the same reverse maps and devices, and init_rpc returns at the
same point of the world's bring-up (after every rank is in, after the
leader's ``_all_gather``). What differs is the cost, and what a rank does
while it waits for a peer that died during bring-up: a Gloo survivor
raises at once, one here waits (as it would in the store's rendezvous),
and the supervisor fails the world for the death either way.

Installed in the forkserver (``install``); a rank turns it on for its
world (``choose``). Outside a rank, and in a ``"gloo"`` world, torch's
own functions run.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from torch.distributed.rpc import backend_registry
from torch.distributed.rpc.constants import DEFAULT_PROCESS_GROUP_TIMEOUT

STORE, GLOO = "store", "gloo"
PREFIX = "rpc_harness/rendezvous"  # the keys it writes, beside the agent's own (under init_rpc's prefix)

_chosen: str | None = None  # this rank's world's choice; None: torch's own (outside a rank)
_original_group: Callable[..., Any] | None = None
_original_exchange: Callable[..., Any] | None = None


class StoreGroup:
    """The two collectives init_rpc asks of its group, over its store.

    ``all_gather_object`` is where the ranks meet: every rank writes its
    object, the leader (rank 0) reads them all and writes the list once, the
    others read that list: O(world) store operations, where each rank
    reading every other's would be O(world²). Every wait is as long as the
    Gloo group's own timeout (``DEFAULT_PROCESS_GROUP_TIMEOUT``, which torch
    builds it with): a world's bring-up budget ends it first. Each call is a
    generation of keys of its own."""

    def __init__(self, store: Any, rank: int, world_size: int,
                 timeout: timedelta = DEFAULT_PROCESS_GROUP_TIMEOUT) -> None:
        self.store, self._rank, self._size, self.timeout = store, rank, world_size, timeout
        self._generation = 0

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size

    def _key(self, *parts: object) -> str:
        return "/".join((PREFIX, *map(str, parts)))

    def _next(self) -> int:
        self._generation += 1
        return self._generation

    def _read(self, key: str) -> Any:
        self.store.wait([key], self.timeout)
        return pickle.loads(self.store.get(key))

    def all_gather_object(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, by rank, in every rank."""
        generation = self._next()
        every = self._key(generation, "all")
        if self._rank != 0:
            self.store.set(self._key(generation, self._rank), pickle.dumps(obj))
            return self._read(every)
        gathered = [obj] + [self._read(self._key(generation, rank)) for rank in range(1, self._size)]
        self.store.set(every, pickle.dumps(gathered))
        return gathered

    def barrier(self) -> _Passed:
        """Return once every rank of the group has called it (its ``wait()``
        then returns at once, as a finished Gloo work's does)."""
        generation = self._next()
        arrived = self.store.add(self._key(generation, "arrived"), 1)
        opened = self._key(generation, "open")
        if arrived == self._size:  # the last to arrive lets everyone through
            self.store.set(opened, b"1")
        self.store.wait([opened], self.timeout)
        return _Passed()


class _Passed:
    """What ``group.barrier()`` returns: a finished work."""

    def wait(self, timeout: timedelta | None = None) -> bool:
        return True


def _init_process_group(store: Any, rank: int, world_size: int) -> Any:
    assert _original_group is not None
    if _chosen != STORE:
        return _original_group(store, rank, world_size)
    return StoreGroup(store, rank, world_size)


def _exchange_device_maps(my_name: str, my_device_count: int, my_device_maps: Any, my_devices: Any,
                          group: Any) -> Any:
    """torch's ``_tensorpipe_exchange_and_check_all_device_maps``, the
    gathered tuples read from a :class:`StoreGroup`: the same checks and
    results, made by torch's own functions."""
    assert _original_exchange is not None
    if not isinstance(group, StoreGroup):
        return _original_exchange(my_name, my_device_count, my_device_maps, my_devices, group)
    gathered = group.all_gather_object((my_name, my_device_count, my_device_maps, my_devices))
    all_names = [name for name, _, _, _ in gathered]
    all_device_counts = {name: count for name, count, _, _ in gathered}
    all_device_maps = {name: map_ for name, _, map_, _ in gathered}
    all_devices = {name: devices for name, _, _, devices in gathered}
    backend_registry._validate_device_maps(all_names, all_device_counts, all_device_maps, all_devices)
    reverse_device_maps = backend_registry._create_reverse_mapping(my_name, all_names, all_device_maps)
    my_devices = backend_registry._create_device_list(my_devices, my_device_maps, reverse_device_maps)
    return reverse_device_maps, my_devices


def install() -> None:
    """Put the replacement in this process (idempotent); off until ``choose``."""
    global _original_group, _original_exchange
    if _original_group is not None:
        return
    _original_group = backend_registry._init_process_group
    _original_exchange = backend_registry._tensorpipe_exchange_and_check_all_device_maps
    _init_process_group.__wrapped__ = _original_group  # type: ignore[attr-defined]
    _exchange_device_maps.__wrapped__ = _original_exchange  # type: ignore[attr-defined]
    backend_registry._init_process_group = _init_process_group
    backend_registry._tensorpipe_exchange_and_check_all_device_maps = _exchange_device_maps


def choose(rendezvous: str | None) -> None:
    """This rank's world's choice: ``"store"`` or ``"gloo"`` (None: torch's own)."""
    global _chosen
    _chosen = rendezvous

