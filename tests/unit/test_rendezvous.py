"""The store that stands in for init_rpc's Gloo group (rpc_harness.rpc.rendezvous):
its barrier lets nobody through before everyone has arrived, its gather gives
every rank the same list, and the device-map exchange through it gives what
torch's own gives, errors included. Threads over one in-memory store; no
process is started."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from torch.distributed.rpc import backend_registry

import rpc_harness
from rpc_harness.options import WorldOptions
from rpc_harness.rpc import rendezvous as _rendezvous

# Long enough for a loaded machine; a broken barrier fails fast, never on it.
TIMEOUT = timedelta(seconds=60)


def in_threads(world_size, work):
    """``work(group)`` in one thread per rank over one store; the results by rank."""
    store = dist.HashStore()
    results, errors = [None] * world_size, []

    def rank(r):
        try:
            results[r] = work(_rendezvous.StoreGroup(dist.PrefixStore("rpc_prefix_0", store), r, world_size,
                                                    timeout=TIMEOUT))
        except BaseException as error:  # noqa: BLE001 - shown by the assert below
            errors.append(error)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world_size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    return results


@pytest.mark.parametrize("world_size", [1, 2, 5])
def test_nobody_leaves_the_barrier_before_the_last_rank_arrives(world_size):
    def work(group):
        passed = []
        for generation in range(3):  # each barrier on its own: a late rank of one is not let through the next
            time.sleep(0.02 * ((group.rank() + generation) % world_size))  # a different rank is last each time
            arrived = time.monotonic()
            assert group.barrier().wait() is True
            passed.append((arrived, time.monotonic()))
        return passed

    results = in_threads(world_size, work)
    for generation in range(3):
        last_arrival = max(r[generation][0] for r in results)
        first_through = min(r[generation][1] for r in results)
        assert first_through >= last_arrival, f"barrier {generation}: a rank got through before the last arrived"


def test_a_barrier_waits_for_a_rank_that_never_comes():
    store = dist.HashStore()
    group = _rendezvous.StoreGroup(store, 0, 2, timeout=timedelta(seconds=0.3))
    started = time.monotonic()
    with pytest.raises(Exception, match="(?i)timeout|timed out"):
        group.barrier()
    assert time.monotonic() - started >= 0.25


@pytest.mark.parametrize("world_size", [1, 3, 6])
def test_every_rank_gathers_every_object_in_rank_order(world_size):
    def work(group):
        return [group.all_gather_object({"rank": group.rank(), "round": round_}) for round_ in range(2)]

    results = in_threads(world_size, work)
    for gathered in results:
        assert gathered == [[{"rank": r, "round": round_} for r in range(world_size)] for round_ in range(2)]


def test_a_group_answers_what_torch_asks_of_it():
    group = _rendezvous.StoreGroup(dist.HashStore(), 2, 5)
    assert (group.rank(), group.size()) == (2, 5)
    assert group.timeout == backend_registry.rpc_constants.DEFAULT_PROCESS_GROUP_TIMEOUT


# -- the device-map exchange: torch's own answers ------------------------------------------

cuda = torch.device


# (name, device count, device maps, devices) of every rank, as torch gathers them.
EXCHANGES = {
    "a cpu world": [("w0", 0, {}, []), ("w1", 0, {}, []), ("w2", 0, {}, [])],
    "maps both ways": [("w0", 2, {"w1": {cuda("cuda:0"): cuda("cuda:1")}}, []),
                       ("w1", 2, {"w0": {cuda("cuda:1"): cuda("cuda:0")}}, [])],
    "a one-sided map": [("w0", 2, {"w1": {cuda("cuda:0"): cuda("cuda:1")}}, [cuda("cuda:0")]),
                        ("w1", 2, {}, [])],
    "devices beyond its maps": [("w0", 2, {"w1": {cuda("cuda:0"): cuda("cuda:1")}}, [cuda("cuda:0"), cuda("cuda:1")]),
                                ("w1", 2, {}, [])],
    "a map past the peer's devices": [("w0", 2, {"w1": {cuda("cuda:0"): cuda("cuda:3")}}, []), ("w1", 2, {}, [])],
    "a map to nobody": [("w0", 2, {"w9": {cuda("cuda:0"): cuda("cuda:0")}}, []), ("w1", 2, {}, [])],
    "two devices onto one": [("w0", 2, {"w1": {cuda("cuda:0"): cuda("cuda:0"), cuda("cuda:1"): cuda("cuda:0")}},
                              []), ("w1", 2, {}, [])],
    "a device not in its devices": [("w0", 2, {"w1": {cuda("cuda:0"): cuda("cuda:1")}}, [cuda("cuda:1")]),
                                    ("w1", 2, {}, [])],
}


REFUSED = ("a map past the peer's devices", "a map to nobody", "two devices onto one", "a device not in its devices")


class _Gathered:
    """A group whose gather returns the given tuples (each rank's, by rank)."""

    def __init__(self, gathered):
        self.gathered = gathered

    def size(self):
        return len(self.gathered)


def _outcome(call):
    try:
        return "returned", call()
    except Exception as error:  # noqa: BLE001 - the error is the outcome compared
        return type(error).__name__, str(error)


@pytest.mark.parametrize("case", EXCHANGES)
@pytest.mark.parametrize("me", [0, 1])
def test_the_exchange_through_the_store_gives_what_torchs_own_gives(case, me, monkeypatch):
    gathered = EXCHANGES[case]
    name, count, maps, devices = gathered[me]

    def torchs_gather(output, obj, group):  # what Gloo's all_gather_object would have filled in
        assert obj == gathered[me]
        output[:] = group.gathered

    monkeypatch.setattr(dist, "all_gather_object", torchs_gather)
    original = backend_registry._tensorpipe_exchange_and_check_all_device_maps
    original = getattr(original, "__wrapped__", original)
    theirs = _outcome(lambda: original(name, count, maps, devices, _Gathered(gathered)))

    class Group(_rendezvous.StoreGroup):
        def all_gather_object(self, obj):
            assert obj == gathered[me]
            return gathered

    monkeypatch.setattr(_rendezvous, "_original_exchange", original)
    ours = _outcome(lambda: _rendezvous._exchange_device_maps(name, count, maps, devices,
                                                              Group(dist.HashStore(), me, len(gathered))))
    assert ours == theirs
    # The cases reach both torch's maps and each of its refusals.
    assert theirs[0] == ("ValueError" if case in REFUSED else "returned")


def test_outside_a_rank_and_in_a_gloo_world_torchs_own_functions_run(monkeypatch):
    calls = []
    monkeypatch.setattr(_rendezvous, "_original_group", lambda *args: calls.append(("group", args)) or "gloo group")
    monkeypatch.setattr(_rendezvous, "_original_exchange", lambda *args: calls.append(("exchange", args)) or "maps")
    for chosen in (None, "gloo"):
        monkeypatch.setattr(_rendezvous, "_chosen", chosen)
        assert _rendezvous._init_process_group("store", 1, 4) == "gloo group"
        assert _rendezvous._exchange_device_maps("w1", 0, {}, [], "gloo group") == "maps"
    assert calls == [("group", ("store", 1, 4)), ("exchange", ("w1", 0, {}, [], "gloo group"))] * 2
    monkeypatch.setattr(_rendezvous, "_chosen", "store")
    group = _rendezvous._init_process_group(dist.HashStore(), 1, 4)
    assert isinstance(group, _rendezvous.StoreGroup) and (group.rank(), group.size()) == (1, 4)
    assert len(calls) == 4


def test_the_option_takes_store_or_gloo_and_refuses_anything_else():
    assert WorldOptions().rendezvous == "store"
    assert WorldOptions.from_values({"rendezvous": "gloo"}, where="here").rendezvous == "gloo"
    with pytest.raises(rpc_harness.WorldSpecError,
                       match=r"^here: invalid rendezvous 'tcp'; use one of: 'store' \(the default: .*'gloo' \("):
        WorldOptions.from_values({"rendezvous": "tcp"}, where="here")
