"""How a rank leaves its world (``Lifecycle.leave``), with the supervisor's
pipe and torch's shutdown faked: after a death the harness does not run
torch's non-graceful teardown for an entry that returned (it crashed ranks
in about one parameter-server world in fifteen), and still does for a
program that calls ``rpc.shutdown()`` itself."""

from __future__ import annotations

import pytest

from rpc_harness import _messages as msg
from rpc_harness._rank import lifecycle as _lifecycle


class Pipe:
    def __init__(self, *words: object) -> None:
        self.words = list(words)

    def recv(self) -> object:
        return self.words.pop(0)


class Ctx:
    name, rank = "worker0", 0

    def flush_progress(self) -> None:
        pass

    def record_hits(self) -> None:
        pass


class Events:
    def __init__(self) -> None:
        self.kinds: list[str] = []

    def write(self, kind: str, **data: object) -> None:
        self.kinds.append(kind)


def leaving(monkeypatch, graceful_word: bool):
    calls: list[dict] = []
    monkeypatch.setattr(_lifecycle, "_original_shutdown", lambda **kw: calls.append(kw))
    sent: list[object] = []
    life = _lifecycle.Lifecycle(ctx=Ctx(), events=Events(), send=sent.append, conn=Pipe(msg.Shutdown(graceful_word)),
                                init_method="file:///nowhere", rpc_timeout=60.0, spawned=False)
    life.joined = life.announced = True  # through init_rpc, and the supervisor told
    return life, calls, sent


@pytest.mark.parametrize("after_entry", [True, False])
def test_a_graceful_shutdown_is_torchs_whoever_leaves(monkeypatch, after_entry):
    life, calls, sent = leaving(monkeypatch, graceful_word=True)
    life.leave(value=b"v", after_entry=after_entry)
    assert calls == [{"graceful": True, "timeout": 0}]
    assert isinstance(sent[0], msg.EntryDone) and isinstance(sent[-1], msg.ShutdownDone) and life.left


def test_after_a_death_an_entry_that_returned_skips_torchs_non_graceful_teardown(monkeypatch):
    life, calls, sent = leaving(monkeypatch, graceful_word=False)
    life.leave(value=b"v", after_entry=True)
    assert calls == [], "torch's teardown not run"
    assert isinstance(sent[-1], msg.ShutdownDone) and life.left and life.phase == "exiting"
    assert life.events.kinds[-2:] == ["shutdown_start", "shutdown_done"]


def test_after_a_death_a_programs_own_shutdown_is_still_torchs(monkeypatch):
    life, calls, _ = leaving(monkeypatch, graceful_word=False)
    life.leave(graceful=True)  # the program's rpc.shutdown(), through the harness's wrapper
    assert calls == [{"graceful": False, "timeout": 0}]
