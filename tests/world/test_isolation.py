"""Nobody else gets in: a world's ranks listen where only they can reach
them (a network namespace of their own, where the machine allows one), and
their transports are pinned to loopback, asserted from inside the ranks."""

from __future__ import annotations

import json
import os
import socket
import threading
import time

import pytest
import worlds

import rpc_harness
from rpc_harness._parent import netns as _netns

ISOLATED, WHY = _netns.isolation_available()


def world_in_background(tmp_path, **options):
    """Run ``worlds.endpoints_then_wait`` in a thread; return the thread, its
    result box, and every rank's record once all have written one."""
    box = {}

    def run():
        box["result"] = rpc_harness.run_world(worlds.endpoints_then_wait, world_size=2, args=(str(tmp_path),),
                                          deadline=30, **options)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    until = time.monotonic() + 120
    while len(list(tmp_path.glob("rank*.json"))) < 2 and time.monotonic() < until and thread.is_alive():
        time.sleep(0.05)
    records = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("rank*.json"))]
    return thread, box, records


def reachable(records) -> list[str]:
    """The rank endpoints this process (outside the world) can connect to."""
    reached = []
    for record in records:
        for port in record["ports"]:
            with socket.socket() as sock:
                sock.settimeout(2)
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    reached.append(f"tcp {port}")
        for name in record["abstract"]:
            with socket.socket(socket.AF_UNIX) as sock:
                try:
                    sock.connect("\0" + name)
                    reached.append(f"unix @{name}")
                except OSError:
                    pass
    return reached


def finish(tmp_path, thread, box):
    (tmp_path / "tried").write_text("")
    thread.join(90)
    assert not thread.is_alive()
    return box["result"]


@pytest.mark.skipif(not ISOLATED, reason=f"no network namespace can be made here: {WHY}")
@pytest.mark.parametrize("faults", [None, "msgdelay:worker0@PYTHON_CALL?=0s"], ids=["tcp", "shm"])
def test_nobody_outside_the_world_can_connect_to_its_ranks(tmp_path, faults):
    # "shm": message faults run torch's faulty agent, which also listens on
    # abstract unix sockets; those are per namespace too.
    thread, box, records = world_in_background(tmp_path, faults=faults)
    try:
        assert len(records) == 2 and all(r["ports"] for r in records), records
        if faults:
            assert all(r["abstract"] for r in records), "the shared-memory transport's sockets"
        ours = os.readlink("/proc/self/ns/net")
        assert {r["netns"] for r in records} != {ours} and len({r["netns"] for r in records}) == 1
        assert reachable(records) == []
    finally:
        result = finish(tmp_path, thread, box)
    assert result.ok and result.isolation.startswith("a network namespace of its own")


def test_without_isolation_the_same_listeners_are_reachable(tmp_path):
    # The control: the check above can fail. On the host's loopback any local
    # process reaches a rank's listeners (and RPC runs pickled code).
    thread, box, records = world_in_background(tmp_path, isolate=False)
    try:
        assert reachable(records), records
    finally:
        result = finish(tmp_path, thread, box)
    assert result.isolation.startswith("none: the world shares the host's loopback")


@pytest.mark.parametrize("faults", [None, "msgdelay:worker0@PYTHON_CALL?=0s"], ids=["tensorpipe", "faulty-agent"])
def test_transports_are_pinned_to_loopback_inside_every_rank(faults):
    # Outside a namespace of its own, so on the host's loopback. This host's
    # name resolves to 127.0.0.1, where TensorPipe and Gloo would bind anyway:
    # the addresses alone cannot tell pinned from unpinned, the variables
    # those transports read can. Both backends: the faulty agent (message
    # faults) reads them too.
    result = rpc_harness.run_world(worlds.loopback_pinning, world_size=2, faults=faults, isolate=False, deadline=30)
    for value in result.values:
        assert value["env"] == {"TP_SOCKET_IFNAME": "lo", "GLOO_SOCKET_IFNAME": "lo", "MASTER_ADDR": "127.0.0.1"}
        assert value["listening"] and set(value["listening"]) == {"0100007F"}, "127.0.0.1 only"


def test_a_required_namespace_that_cannot_be_made_is_refused(monkeypatch):
    def refuse():
        raise _netns.IsolationUnavailable("refused for this test")

    monkeypatch.setattr(_netns, "create", refuse)
    with pytest.raises(rpc_harness.WorldSpecError, match="cannot be made here: refused for this test"):
        rpc_harness.run_world(worlds.identity, world_size=2, isolate=True)
    result = rpc_harness.run_world(worlds.identity, world_size=2)
    assert result.ok and result.isolation == "none: the world shares the host's loopback (refused for this test)"
