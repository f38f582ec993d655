"""A rank's gate alone (no world): a task's waits when control is given up
while it waits. The scheduler's end of the pipe is played by hand."""

from __future__ import annotations

import multiprocessing
import threading
import time

import pytest

from rpc_harness import _messages as msg
from rpc_harness._rank import gate as _gate


@pytest.fixture
def gate_and_scheduler(monkeypatch):
    # Only what these tests call: install() would patch threading for the whole process.
    monkeypatch.setitem(_gate._ORIGINAL, "sleep", time.sleep)
    scheduler, rank = multiprocessing.Pipe()
    gate = _gate.start(rank, 0)
    yield gate, scheduler
    scheduler.send(msg.Release())  # its reader ends before its pipe closes under it
    for thread in threading.enumerate():
        if thread.name == "rpc-harness-gate":
            thread.join(timeout=30)
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


@pytest.fixture
def timed_call(gate_and_scheduler, monkeypatch):
    """A call issued with its timeout on the schedule's clock: torch's own
    future for it, and the one the program gets."""
    torch = pytest.importorskip("torch")
    monkeypatch.setitem(_gate._ORIGINAL, "add_done_callback", torch._C.Future.add_done_callback)
    gate, scheduler = gate_and_scheduler
    answer = torch.futures.Future()
    return gate, scheduler, answer, _gate.on_schedule_clock(answer, "a/1", 0.3)


def test_a_call_the_scheduler_times_out_ends_in_torchs_timeout_error_and_its_late_answer_is_dropped(timed_call):
    gate, scheduler, answer, future = timed_call
    scheduler.send(msg.TimedOut("a/1"))
    with pytest.raises(RuntimeError) as error:
        future.wait()
    assert str(error.value) == "RPCErr:1:RPC ran for more than set timeout (300 ms) and will now be marked with an error"
    answer.set_result("late")
    assert future.done() and "a/1" not in gate._timed


def test_a_call_answered_in_time_gives_its_answer_or_its_error(timed_call):
    gate, _, answer, future = timed_call
    answer.set_result("answered")
    assert future.wait() == "answered" and "a/1" not in gate._timed
    failing = pytest.importorskip("torch").futures.Future()
    relayed = _gate.on_schedule_clock(failing, "a/2", 5.0)
    failing.set_exception(ValueError("the handler's own"))
    with pytest.raises(ValueError, match="the handler's own"):
        relayed.wait()


def test_a_call_control_given_up_let_go_times_out_on_the_real_clock_from_when_it_was_issued(timed_call):
    gate, scheduler, _, future = timed_call
    issued = gate._timed["a/1"].issued
    scheduler.send(msg.Release())
    deadline = time.monotonic() + 30
    while not future.done() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert future.done(), "its timeout never came"
    assert time.monotonic() - issued >= 0.3, "not before its timeout, on the real clock"
    with pytest.raises(RuntimeError, match="more than set timeout"):
        future.wait()


def test_a_released_gate_says_released_last_and_closes_once_its_reader_ended(gate_and_scheduler):
    # A reused world's next entry opens a gate of its own on the same pipe:
    # nothing of this one may come after its Released, nor its reader stay.
    gate, scheduler = gate_and_scheduler
    scheduler.send(msg.Release())
    assert scheduler.poll(30) and scheduler.recv() == msg.Released()
    gate.send(msg.At("t", "later"))  # a task of the old entry, after its release: not heard
    assert not scheduler.poll(0.2)
    assert _gate.close(timeout=30) and _gate._gate is None and not gate.reader.is_alive()


def test_a_gate_not_released_yet_is_not_closed(gate_and_scheduler):
    gate, _ = gate_and_scheduler
    assert not _gate.close(timeout=0.1)
    assert _gate._gate is gate
