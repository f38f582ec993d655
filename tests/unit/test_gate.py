"""A rank's gate alone (no world): a task's waits when control is given up
while it waits. The scheduler's end of the pipe is played by hand."""

from __future__ import annotations

import multiprocessing
import threading
import time

import pytest

from rpc_harness import _gate
from rpc_harness import _messages as msg


@pytest.fixture
def gate_and_scheduler(monkeypatch):
    # Only what these tests call: install() would patch threading for the whole process.
    monkeypatch.setitem(_gate._ORIGINAL, "sleep", time.sleep)
    scheduler, rank = multiprocessing.Pipe()
    gate = _gate.start(rank, 0)
    yield gate, scheduler
    _gate._gate = None  # (the module's one gate: no other test sees this one)
    scheduler.close()
    rank.close()


def test_a_sleep_that_control_given_up_let_go_sleeps_its_time_on_the_real_clock(gate_and_scheduler):
    # Under control a sleep ends on the schedule's clock; given up while it
    # waited for its turn, it returned at once, however long it was meant to be.
    gate, scheduler = gate_and_scheduler
    slept: list[float] = []

    def patched_task() -> None:
        gate.begin("t", "main", "start")
        started = time.monotonic()
        _gate._sleep(0.3)
        slept.append(time.monotonic() - started)

    def heard() -> object:
        assert scheduler.poll(30), "the task told the scheduler nothing"
        return scheduler.recv()

    thread = threading.Thread(target=patched_task, daemon=True)
    thread.start()
    assert isinstance(heard(), msg.Begin)
    scheduler.send(msg.Go("t"))
    blocked = heard()
    assert isinstance(blocked, msg.Block) and blocked.on == ("timer",)
    scheduler.send(msg.Release())
    thread.join(timeout=30)
    assert not thread.is_alive() and slept and slept[0] >= 0.3
