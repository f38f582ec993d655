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


def test_a_look_at_a_running_task_says_its_calls_its_line_and_its_cpu_time(gate_and_scheduler):
    gate, scheduler = gate_and_scheduler
    stop: list[bool] = []  # plain memory: Event.is_set would be a call of its own in some looks

    def spins_here() -> None:
        while not stop:
            pass

    def task() -> None:
        gate.begin("t", "main", "start")
        spins_here()
        gate.end()

    thread = threading.Thread(target=task, daemon=True)
    thread.start()
    assert scheduler.poll(30) and isinstance(scheduler.recv(), msg.Begin)
    scheduler.send(msg.Go("t"))
    try:
        looks = []
        for _ in range(2):
            time.sleep(0.2)
            scheduler.send(msg.Look("t"))
            assert scheduler.poll(30), "no answer to the look"
            looks.append(scheduler.recv())
    finally:
        stop.append(True)
        thread.join(timeout=30)
    first, second = looks
    assert isinstance(first, msg.Looked) and first.task == "t"
    assert [name for _, _, name in first.frames][-2:] == ["task", "spins_here"], first.frames
    assert first.frames == second.frames, "the same calls, the same frames"
    assert "test_gate.py" in first.where and first.where.endswith("in spins_here")
    assert 0 <= first.cpu < second.cpu, "its thread's own CPU time, growing while it spins"
    assert gate.look("t") == msg.Looked("t"), "an ended task has no thread to look at"
    assert gate.look("never") == msg.Looked("never")
