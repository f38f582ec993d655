"""How a rank waits under a controlled schedule, one piece of the gate at a
time, without a world: what each task tells the scheduler, which waits
hand the turn over and which stay inside the step, and what a callback, a
free thread or control given up changes. The scheduler's end of the pipe
is a thread of the test that answers every wait with a Go (or holds it).

The patches themselves are called as functions, with the originals they
wrap (``_gate._ORIGINAL``) set for the test; one test installs them for
real and puts everything back."""

from __future__ import annotations

import multiprocessing
import pickle
import threading
import time

import pytest

from rpc_harness import _messages as msg
from rpc_harness._rank import gate as _gate

torch = pytest.importorskip("torch")

WAITS = (msg.Begin, msg.At, msg.Block, msg.Following)


class Scheduler:
    """The scheduler's end of a gate's pipe: hears every message and answers
    each wait with the task's Go (``notified``), unless ``hold``."""

    def __init__(self, gate: _gate.Gate, conn) -> None:
        self.gate, self.conn = gate, conn
        self.heard: list = []
        self.notified = True
        self.hold = False
        self.held: list[str] = []
        self._marks = 0
        self.error: BaseException | None = None
        self._changed = threading.Condition(threading.Lock())
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                message = self.conn.recv()
            except Exception as error:  # noqa: BLE001 - its pipe closed under it, at the test's end
                self.error = error
                return
            task = None
            if isinstance(message, WAITS):
                task = getattr(message, "task", None) or getattr(message, "follower", None)
            elif isinstance(message, msg.Issued) and message.by is None:
                task = message.call.split("/")[0]  # the tests' calls are named after their task
            with self._changed:
                self.heard.append(message)
                if task is not None and self.hold:
                    self.held.append(task)
                    task = None
                self._changed.notify_all()
            if task is not None:
                self.conn.send(msg.Go(task, self.notified))

    def said(self) -> list:
        """Every message the gate sent so far (the ones it sent before this
        call, all of them: a mark sent after them comes after them)."""
        self._marks += 1
        mark = msg.Unscheduled(f"mark {self._marks}")
        self.gate.conn.send(mark)  # (on the pipe itself: a released gate sends nothing)
        with self._changed:
            assert self._changed.wait_for(lambda: mark in self.heard, timeout=30), (self.heard, self.error)
            return [m for m in self.heard if not (isinstance(m, msg.Unscheduled) and m.why.startswith("mark "))]

    def wait_for(self, what) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: what(self.heard), timeout=30), self.heard

    def go(self, task: str, notified: bool = True) -> None:
        self.conn.send(msg.Go(task, notified))


@pytest.fixture
def scheduler(monkeypatch):
    monkeypatch.setattr(_gate, "_ORIGINAL", {"sleep": time.sleep, "wait": torch._C.Future.wait,
                                             "add_done_callback": torch._C.Future.add_done_callback,
                                             "then": torch._C.Future.then,
                                             "collect_all": torch.futures.collect_all,
                                             "cond_wait": threading.Condition.wait,
                                             "notify": threading.Condition.notify,
                                             "thread_start": threading.Thread.start})
    ours, theirs = multiprocessing.Pipe()
    gate = _gate.start(theirs, 3)
    fake = Scheduler(gate, ours)
    yield fake
    ours.send(msg.Release())  # its reader ends before its pipe closes under it
    for thread in threading.enumerate():
        if thread.name == "rpc-harness-gate":
            thread.join(timeout=30)
    monkeypatch.setattr(_gate, "_gate", None)
    # The fake scheduler's reader ends at the close of the gate's end, before
    # its own closes: a read on a closed pipe's number could take a later
    # test's messages.
    theirs.close()
    fake.thread.join(timeout=30)
    assert not fake.thread.is_alive()
    ours.close()


@pytest.fixture
def as_task(monkeypatch):
    """Makes this thread the task given (what ``begin`` does, without its wait)."""

    def become(task: str | None, follower: str | None = None) -> None:
        monkeypatch.setattr(_gate._local, "task", task, raising=False)
        monkeypatch.setattr(_gate._local, "follower", follower, raising=False)

    return become


def in_thread(target, *args) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


# -- who this thread is -------------------------------------------------------------------------


def test_a_thread_is_a_task_or_a_callback_only_under_an_open_gate(scheduler, as_task, monkeypatch):
    as_task("t", "t/1+cb1")
    assert _gate.current_task() == "t" and _gate.current_follower() == "t/1+cb1" and _gate.active()
    as_task(None)
    assert _gate.current_task() is None and _gate.current_follower() is None and _gate.active()
    as_task("t", "t/1+cb1")
    scheduler.gate.released = True
    assert _gate.current_task() is None and _gate.current_follower() is None and not _gate.active()
    scheduler.gate.released = False
    monkeypatch.setattr(_gate, "_gate", None)
    assert _gate.current_task() is None and _gate.current_follower() is None and not _gate.active()


def test_start_opens_the_ranks_one_gate(scheduler):
    gate = scheduler.gate
    assert _gate._gate is gate and gate.rank == 3 and not gate.released
    assert gate.opener == threading.get_ident(), "the thread that opened it runs the harness, not the program"
    # Its reader is named in a rank's stack dumps, and never holds the rank's exit.
    readers = [t for t in threading.enumerate() if t.name == "rpc-harness-gate" and t.is_alive()]
    assert len(readers) == 1 and readers[0].daemon


# -- what a task tells the scheduler ----------------------------------------------------------------


def test_a_task_begins_by_saying_what_it_is_and_where_and_waits_for_its_go(scheduler):
    scheduler.hold = True
    done = []

    def task() -> None:
        scheduler.gate.begin("t/1", "serving f (t/1)", "start", "t/1")
        done.append(_gate.current_task())

    thread = in_thread(task)
    scheduler.wait_for(lambda heard: heard)
    assert scheduler.heard == [msg.Begin("t/1", "serving f (t/1)", "start", "t/1")]
    assert not done and scheduler.gate.look("t/1").frames, "it waits for its Go, in its thread"
    scheduler.go("t/1")
    thread.join(30)
    assert done == ["t/1"]


def test_a_task_that_begins_once_control_is_given_up_runs_at_once_and_says_nothing(scheduler):
    scheduler.gate.released = True
    done = []

    def task() -> None:
        scheduler.gate.begin("t", "main", "start")
        done.append(_gate._local.task)

    in_thread(task).join(30)
    assert done == ["t"] and scheduler.said() == []


def test_a_point_a_block_and_the_end_of_a_task(scheduler):
    seen = []

    def task() -> None:
        gate = scheduler.gate
        gate.begin("t", "main", "start")
        gate.point("rpc.call:f")
        seen.append(gate.block(("call", "u/1"), "wait f", 2.5))
        scheduler.notified = False
        seen.append(gate.block(("timer",), "sleep", 1.0))
        gate.end(responds_later=True, failed=True, after="t/2")
        seen.append(_gate._local.task)
        gate.end()  # no task any more: nothing to end

    in_thread(task).join(30)
    assert scheduler.said() == [msg.Begin("t", "main", "start"), msg.At("t", "rpc.call:f"),
                                msg.Block("t", "wait f", ("call", "u/1"), 2.5),
                                msg.Block("t", "sleep", ("timer",), 1.0), msg.End("t", True, True, "t/2")]
    assert seen == [True, False, None], "woken by what it waited for, then by its timeout"
    assert scheduler.gate.look("t") == msg.Looked("t"), "an ended task has no thread"


def test_an_end_says_by_default_that_the_task_answered_and_did_not_fail(scheduler, as_task):
    as_task("t")
    scheduler.gate.end()
    assert scheduler.said() == [msg.End("t", False, False, None)]


def test_outside_a_task_a_point_passes_and_a_block_is_woken_at_once(scheduler, as_task):
    as_task(None)
    scheduler.gate.point("anywhere")
    assert scheduler.gate.block(("timer",), "sleep", 1.0) is True
    assert scheduler.said() == []


def test_a_call_issued_by_a_task_waits_for_its_go_and_by_a_callback_does_not(scheduler, as_task):
    as_task("t")
    scheduler.gate.issued("t/1", 2, True, "1:4", timeout=3.0)
    as_task(None, "u/1+cb1")
    scheduler.hold = True  # a callback's call is not a wait: nothing would let it go
    scheduler.gate.issued("u/1+cb1/1", 0, False, None)
    as_task(None)
    scheduler.gate.issued("x/1", 1, True, None)  # neither: not the schedule's
    assert scheduler.said() == [msg.Issued("t/1", 2, True, "1:4", timeout=3.0),
                                msg.Issued("u/1+cb1/1", 0, False, None, by="u/1+cb1", timeout=None)]


def test_a_callback_waits_for_its_turn_unless_control_was_given_up(scheduler):
    scheduler.gate.follow("t/1+cb1", "t/1")
    scheduler.gate.released = True
    scheduler.hold = True
    scheduler.gate.follow("t/1+cb2", "t/1")
    assert scheduler.said() == [msg.Following("t/1+cb1", "t/1")]


def test_something_the_schedule_cannot_order_is_said_with_why(scheduler):
    scheduler.gate.unscheduled("a thread of its own set an Event")
    assert scheduler.said() == [msg.Unscheduled("a thread of its own set an Event")]


def test_calls_are_numbered_per_task_and_per_callback(scheduler, as_task):
    gate = scheduler.gate
    as_task("trainer1")
    assert [gate.call_id(), gate.call_id()] == ["trainer1/1", "trainer1/2"]
    as_task(None, "driver/2+cb1")
    assert gate.call_id() == "driver/2+cb1/1"
    as_task("trainer1", "driver/2+cb1")
    assert gate.call_id() == "trainer1/3", "a task's own call, though a callback ran in its thread before"
    as_task(None)
    assert gate.call_id() == "?/1"


# -- the pipe ---------------------------------------------------------------------------------------


class BrokenPipe:
    """A pipe whose supervisor is gone: sending fails; nothing comes."""

    def __init__(self, error: type[BaseException]) -> None:
        self.error, self.sent = error, 0
        self.closed = threading.Event()

    def send(self, message) -> None:
        self.sent += 1
        raise self.error("gone")

    def recv(self):
        self.closed.wait(30)
        raise EOFError


@pytest.mark.parametrize("error", [OSError, EOFError, ValueError])
def test_a_gate_whose_supervisor_is_gone_runs_free(error, monkeypatch):
    pipe = BrokenPipe(error)
    gate = _gate.Gate(pipe, 0)
    try:
        gate.send(msg.At("t", "p"))
        assert gate.released and pipe.sent == 1
        gate.send(msg.At("t", "p"))
        assert pipe.sent == 1, "a released gate sends nothing"
    finally:
        pipe.closed.set()


@pytest.mark.parametrize("error", [EOFError, OSError])
def test_a_gate_whose_pipe_closes_releases_every_waiting_task(error):
    class Closing:
        def __init__(self) -> None:
            self.sent: list = []
            self.closed = threading.Event()

        def send(self, message) -> None:
            self.sent.append(message)

        def recv(self):
            self.closed.wait(30)
            raise error("closed")

    pipe = Closing()
    gate = _gate.Gate(pipe, 0)
    woken = []
    thread = in_thread(lambda: woken.append(gate._await("t", msg.At("t", "p"))))
    deadline = time.monotonic() + 30
    while not pipe.sent and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pipe.sent == [msg.At("t", "p")] and not woken
    pipe.closed.set()  # the supervisor is gone
    thread.join(30)
    assert woken == [None] and gate.released


def test_the_reader_answers_a_look_and_stops_at_a_release(scheduler):
    scheduler.conn.send(msg.Look("nobody"))
    scheduler.wait_for(lambda heard: msg.Looked("nobody") in heard)
    scheduler.conn.send(msg.Go("never-waited"))  # a Go for no waiting task is kept for none
    scheduler.conn.send(msg.TimedOut("no-such-call"))  # a timeout of a call not on the schedule's clock: nothing
    scheduler.conn.send(msg.Release())
    for thread in threading.enumerate():
        if thread.name == "rpc-harness-gate":
            thread.join(timeout=30)
    assert scheduler.gate.released
    assert not any(t.name == "rpc-harness-gate" and t.is_alive() for t in threading.enumerate())


def test_a_go_says_whether_a_notify_or_the_timeout_ended_the_wait(scheduler):
    scheduler.hold = True
    got = []

    def task() -> None:
        got.append(scheduler.gate._await("t", msg.At("t", "p")))
        got.append(scheduler.gate._await("t", msg.At("t", "p")))

    thread = in_thread(task)
    scheduler.wait_for(lambda heard: len(heard) == 1)
    scheduler.go("t", False)
    scheduler.wait_for(lambda heard: len(heard) == 2)
    scheduler.go("t", True)
    thread.join(30)
    assert got == [False, True]
    assert scheduler.gate._goes == {} and scheduler.gate._notified == {}, "nothing kept once it went on"


def test_release_lets_every_waiting_task_go_and_a_wait_after_it_does_not_wait(scheduler):
    scheduler.hold = True
    got = []
    threads = [in_thread(lambda task=task: got.append(scheduler.gate._await(task, msg.At(task, "p"))))
               for task in ("a", "b")]
    scheduler.wait_for(lambda heard: len(heard) == 2)
    scheduler.gate.release()
    for thread in threads:
        thread.join(30)
    assert got == [None, None] and scheduler.gate.released
    assert scheduler.gate._await("c", msg.At("c", "p")) is None, "given up before it asked: no wait"


# -- conditions ---------------------------------------------------------------------------------------


def test_a_notify_wakes_the_waiters_of_that_condition_first_come_first(scheduler, as_task):
    gate, cond, other = scheduler.gate, threading.Condition(), threading.Condition()
    for task in ("a", "b", "c"):
        gate._cond_waiters.setdefault(id(cond), []).append(task)
    gate._cond_waiters.setdefault(id(other), []).append("z")
    assert gate.cond_notify(cond, 2) == 2
    assert gate.cond_notify(cond, 5) == 1
    assert gate.cond_notify(cond, 1) == 0
    assert gate.cond_notify(threading.Condition(), 1) == 0
    assert scheduler.said() == [msg.Notified("a"), msg.Notified("b"), msg.Notified("c")]
    assert gate._cond_waiters[id(other)] == ["z"]


def test_a_condition_wait_blocks_on_that_condition_and_a_waiter_forgotten_is_no_longer_woken(scheduler, as_task):
    gate, cond = scheduler.gate, threading.Condition()
    as_task("a")
    assert gate.cond_wait(cond, 0.5) is True
    assert scheduler.said() == [msg.Block("a", "wait on a condition", ("cond", id(cond)), 0.5)]
    assert gate._cond_waiters[id(cond)] == ["a"], "a waiter until a notify takes it"
    assert gate.cond_forget(cond, "a") is True and gate.cond_forget(cond, "a") is False
    assert gate.cond_forget(threading.Condition(), "a") is False
    assert gate.cond_notify(cond, 1) == 0


# -- a call's timeout on the schedule's clock --------------------------------------------------------


def test_the_timeout_error_is_torchs_in_whole_milliseconds():
    assert str(_gate.timeout_error(1.5)) == ("RPCErr:1:RPC ran for more than set timeout (1500 ms) and will now be "
                                             "marked with an error")
    assert str(_gate.timeout_error(0.0019)).startswith("RPCErr:1:RPC ran for more than set timeout (1 ms)")
    assert isinstance(_gate.timeout_error(1), RuntimeError)


def test_a_timed_call_is_kept_until_it_ends_and_one_kept_after_release_expires_on_the_real_clock(scheduler):
    gate = scheduler.gate
    future = torch.futures.Future()
    timed = _gate._Timed(gate, "a/1", future, 0.2)
    gate.timed("a/1", timed)
    assert gate._timed == {"a/1": timed}
    gate.timed("a/1", None)
    gate.timed("never/1", None)
    assert gate._timed == {}
    gate.released = True
    late = _gate._Timed(gate, "a/2", future, 0.2)
    gate.timed("a/2", late)
    assert future.wait is not None
    deadline = time.monotonic() + 30
    while not future.done() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert future.done() and time.monotonic() - late.issued >= 0.2
    with pytest.raises(RuntimeError, match=r"\(200 ms\)"):
        future.wait()


def test_a_timed_call_completes_once_with_its_answer_or_its_timeout(scheduler):
    future = torch.futures.Future()
    timed = _gate._Timed(scheduler.gate, "a/1", future, 1.0)
    scheduler.gate.timed("a/1", timed)
    answer = torch.futures.Future()
    answer.set_result(41)
    timed.answered(answer)
    timed.expire()
    assert future.wait() == 41 and timed.done and "a/1" not in scheduler.gate._timed
    expired = torch.futures.Future()
    _gate._Timed(scheduler.gate, "a/2", expired, 0.001).expire(at=time.monotonic() - 5)  # due long ago: at once
    with pytest.raises(RuntimeError, match=r"\(1 ms\)"):
        expired.wait()


def test_a_timed_call_waits_for_the_real_clock_to_reach_its_end(scheduler, monkeypatch):
    future = torch.futures.Future()
    timed = _gate._Timed(scheduler.gate, "a/1", future, 1.0)
    started = time.monotonic()
    timed.expire(at=started + 0.2)
    assert time.monotonic() - started >= 0.2 and future.done()
    monkeypatch.delitem(_gate._ORIGINAL, "sleep")  # before install(): time.sleep itself
    again = torch.futures.Future()
    started = time.monotonic()
    _gate._Timed(scheduler.gate, "a/2", again, 1.0).expire(at=started + 0.2)
    assert time.monotonic() - started >= 0.2 and again.done()


def test_the_programs_future_for_a_timed_call_completes_from_torchs_answer(scheduler):
    answer = torch.futures.Future()
    future = _gate.on_schedule_clock(answer, "a/1", 2.0)
    assert isinstance(future, torch.futures.Future) and not future.done()
    assert scheduler.gate._timed["a/1"].seconds == 2.0 and scheduler.gate._timed["a/1"].future is future
    answer.set_result("x")
    assert future.wait() == "x" and scheduler.gate._timed == {}


# -- the gate's own signal --------------------------------------------------------------------------


def test_a_signal_set_lets_every_waiter_through_and_setting_it_twice_is_harmless():
    signal = _gate._Signal()
    waited = []
    thread = in_thread(lambda: (signal.wait(), waited.append(1)))
    signal.set()
    signal.set()
    thread.join(30)
    signal.wait()
    signal.wait()
    assert waited == [1]


# -- calls issued under control ---------------------------------------------------------------------


def _add(a, b):
    return a + b


def test_a_tagged_function_carries_its_call_runs_as_the_function_and_pickles_as_itself():
    tagged = _gate.Tagged("t/3", _add)
    assert tagged(2, b=3) == 5 and tagged.call == "t/3" and tagged.func is _add
    again = pickle.loads(pickle.dumps(tagged))
    assert isinstance(again, _gate.Tagged) and again.call == "t/3" and again(1, 1) == 2
    assert not hasattr(tagged, "_wrapped_async_rpc_function")

    def async_one():
        pass

    async_one._wrapped_async_rpc_function = _add
    assert _gate.Tagged("t/4", async_one)._wrapped_async_rpc_function is _add, "torch reads it on the caller"


def test_a_tracked_calls_completion_is_told_with_the_callbacks_still_to_run(scheduler, as_task):
    future = torch.futures.Future()
    _gate.track_call(future, "t/1", "f", True)
    assert _gate.call_of(future) == "t/1" and _gate.call_of(torch.futures.Future()) is None
    track = _gate._tracked[future]
    assert (track.call, track.what, track.python, track.reported, track.followers) == ("t/1", "f", True, False, 0)
    future.add_done_callback(_gate._follower(future, lambda f: None))
    future.set_result(1)
    assert track.reported
    scheduler.wait_for(lambda heard: msg.Completed("t/1", 1) in heard)


def test_no_call_is_tracked_without_a_gate(monkeypatch):
    monkeypatch.setattr(_gate, "_gate", None)
    future = torch.futures.Future()
    _gate.track_call(future, "t/1", "f", True)
    assert _gate.call_of(future) is None


def test_an_rrefs_id_is_where_it_was_made_and_its_number_there():
    class RRef:
        def __str__(self):
            return "UserRRef(RRefId = GloballyUniqueId(created_on=2, local_id=17), ForkId = ...)"

    assert _gate.rref_id(RRef()) == "2:17"
    assert _gate.rref_id("no id here") is None
    future = torch.futures.Future()
    _gate.track_type_fetch(future, RRef())
    assert _gate._type_fetches[future] == "2:17"
    other = torch.futures.Future()
    _gate.track_type_fetch(other, "no id")
    assert other not in _gate._type_fetches


# -- waits on futures ---------------------------------------------------------------------------------


class Future:
    """A future whose wait is recorded (``_ORIGINAL["wait"]`` is set to it)."""

    def __init__(self, done: bool = True, value="value") -> None:
        self._done, self.value = done, value

    def done(self) -> bool:
        return self._done


@pytest.fixture
def waits(scheduler, monkeypatch):
    waited = []
    monkeypatch.setitem(_gate._ORIGINAL, "wait", lambda future: waited.append(future) or future.value)
    return scheduler, waited


def test_a_wait_on_a_controlled_call_blocks_on_that_call(waits, as_task):
    scheduler, waited = waits
    as_task("t")
    future = Future(done=True)
    _gate._tracked[future] = _gate._Track("u/2", "f", True)
    assert _gate.wait(future) == "value" and waited == [future]
    assert scheduler.said() == [msg.Block("t", "wait f", ("call", "u/2"), None)], "done or not: a point"


def test_a_wait_on_an_rrefs_type_blocks_on_that_rref(waits, as_task):
    scheduler, waited = waits
    as_task("t")
    future = Future()
    _gate._type_fetches[future] = "1:5"
    assert _gate.wait(future) == "value" and waited == [future]
    assert scheduler.said() == [msg.Block("t", "wait rref type", ("rref", "1:5"), None)]


def test_a_wait_on_a_programs_own_future_blocks_on_its_serial_and_whether_it_was_done(waits, as_task):
    scheduler, waited = waits
    as_task("t")
    done, pending = Future(done=True), Future(done=False)
    done.__dict__["_rpch_serial"], pending.__dict__["_rpch_serial"] = 7, 8
    _gate.wait(done)
    _gate.wait(pending)
    assert waited == [done, pending]
    assert scheduler.said() == [msg.Block("t", "wait future", ("future", 7, True), None),
                                msg.Block("t", "wait future", ("future", 8, False), None)]


def test_a_wait_on_a_future_torch_made_is_part_of_the_step(waits, as_task):
    scheduler, waited = waits
    as_task("t")
    future = Future()
    assert _gate.wait(future) == "value" and waited == [future] and scheduler.said() == []


def test_a_wait_on_a_future_torch_made_in_cpp_is_part_of_the_step(scheduler, as_task):
    as_task("t")
    made = torch.futures.collect_all([])  # a torch._C.Future: no attributes of its own
    assert not hasattr(made, "__dict__") and made.done()
    assert _gate.wait(made) == [] and scheduler.said() == []


def test_a_wait_on_a_future_made_of_others_waits_for_each_of_them_first(waits, as_task):
    scheduler, waited = waits
    as_task("t")
    first, second, made = Future(), Future(), Future()
    _gate._tracked[first] = _gate._Track("t/1", "f", True)
    _gate._tracked[second] = _gate._Track("t/2", "g", True)
    _gate._derived[made] = [first, second]
    _gate._tracked[made] = _gate._tracked[first]  # a then() of a call is tracked as it: its parents come first
    _gate.wait(made)
    assert waited == [first, second, made]
    assert scheduler.said() == [msg.Block("t", "wait f", ("call", "t/1"), None),
                                msg.Block("t", "wait g", ("call", "t/2"), None)]


def test_a_wait_outside_a_task_is_the_plain_wait(waits, as_task, monkeypatch):
    scheduler, waited = waits
    as_task(None)
    future = Future(done=True)
    _gate._tracked[future] = _gate._Track("t/1", "f", True)
    _gate.wait(future)
    monkeypatch.setattr(_gate, "_gate", None)
    as_task("t")
    _gate.wait(future)
    assert waited == [future, future]
    monkeypatch.setattr(_gate, "_gate", scheduler.gate)
    assert scheduler.said() == []


def test_a_callback_that_waits_for_a_task_gives_control_up_saying_why(waits, as_task):
    scheduler, waited = waits
    as_task(None, "d/2+cb1")
    python, cpp, own = Future(done=False), Future(done=False), Future(done=False)
    _gate._tracked[python] = _gate._Track("d/3", "f", True)
    _gate._tracked[cpp] = _gate._Track("d/4", "g", False)
    for future in (python, cpp, own, Future(done=True)):
        _gate.wait(future)
    assert len(waited) == 4, "every wait still waits"
    why = ("d/2+cb1, a callback of the program's on an answer, waits for {}: a callback runs between steps, so no "
           "task can run for what it waits for")
    assert scheduler.said() == [msg.Unscheduled(why.format("call d/3 (f)")), msg.Unscheduled(why.format("a future"))]
    as_task(None)
    _gate.wait(Future(done=False))  # not a callback: torch's own plumbing
    assert scheduler.said() == [msg.Unscheduled(why.format("call d/3 (f)")), msg.Unscheduled(why.format("a future"))]


def test_the_harness_waits_as_torch_does(monkeypatch):
    future = torch.futures.Future()
    future.set_result(3)
    assert _gate.raw_wait(future) == 3
    monkeypatch.setitem(_gate._ORIGINAL, "wait", lambda f: "original")
    assert _gate.raw_wait(future) == "original"
    monkeypatch.delitem(_gate._ORIGINAL, "wait")
    assert _gate.raw_wait(future) == 3, "before install: the type's own wait"


# -- callbacks on a call's answer --------------------------------------------------------------------


def test_a_callback_on_a_controlled_call_is_counted_waits_for_its_turn_and_names_its_calls(scheduler):
    future = torch.futures.Future()
    _gate.track_call(future, "t/1", "f", True)
    seen = []

    def callback(fut):
        seen.append((fut.wait(), _gate.current_follower()))
        return "returned"

    first, second = _gate._follower(future, callback), _gate._follower(future, callback)
    track = _gate._tracked[future]
    assert first is not callback and (track.followers, track.registered) == (2, 2)
    future.set_result(5)
    assert first(future) == "returned"
    assert seen == [(5, "t/1+cb1")] and getattr(_gate._local, "follower", None) is None
    assert scheduler.said()[-2:] == [msg.Following("t/1+cb1", "t/1"), msg.Followed("t/1")]
    second(future)
    assert seen[-1] == (5, "t/1+cb2")


def test_a_callback_runs_inside_another_and_puts_the_outer_one_back(scheduler, as_task):
    future = torch.futures.Future()
    _gate.track_call(future, "t/1", "f", True)
    inner = _gate._follower(future, lambda fut: _gate.current_follower())
    as_task(None, "outer+cb1")
    future.set_result(1)
    assert _gate._follower(torch.futures.Future(), len) is len, "not a controlled call's: as it is"
    assert inner(future) == "t/1+cb1" and _gate.current_follower() == "outer+cb1"


def test_a_callback_added_once_the_answer_was_reported_runs_as_it_is(scheduler):
    future = torch.futures.Future()
    _gate.track_call(future, "t/1", "f", True)
    future.set_result(1)
    assert _gate._tracked[future].reported
    assert _gate._follower(future, len) is len and _gate._tracked[future].followers == 0


def test_no_callback_is_counted_without_a_gate(monkeypatch):
    future = torch.futures.Future()
    _gate._tracked[future] = _gate._Track("t/1", "f", True)
    monkeypatch.setattr(_gate, "_gate", None)
    assert _gate._follower(future, len) is len


def test_a_then_of_a_controlled_call_is_made_of_it_and_tracked_as_it(scheduler):
    future = torch.futures.Future()
    _gate.track_call(future, "t/1", "f", True)
    derived = _gate._then(future, lambda fut: fut.wait() + 1)
    assert _gate._derived[derived] == [future] and _gate._tracked[derived] is _gate._tracked[future]
    assert _gate._tracked[future].followers == 1, "its callback is counted"
    future.set_result(1)
    assert derived.wait() == 2
    plain = torch.futures.Future()
    then = _gate._then(plain, lambda fut: 0)
    assert _gate._derived[then] == [plain] and then not in _gate._tracked


def test_a_then_without_a_gate_is_torchs(monkeypatch):
    monkeypatch.setitem(_gate._ORIGINAL, "then", torch._C.Future.then)
    monkeypatch.setattr(_gate, "_gate", None)
    future = torch.futures.Future()
    then = _gate._then(future, lambda fut: 0)
    assert then not in _gate._derived


def test_a_then_on_an_rrefs_type_fetch_in_a_task_waits_for_the_fetch_first(scheduler, as_task, monkeypatch):
    fetch = torch.futures.Future()
    fetch.set_result(int)
    _gate._type_fetches[fetch] = "0:3"
    as_task("t")
    derived = _gate._then(fetch, lambda fut: "called")
    assert derived.wait() == "called"
    assert scheduler.said() == [msg.Block("t", "wait rref type", ("rref", "0:3"), None)]
    as_task(None)
    _gate._then(fetch, lambda fut: "called")
    assert len(scheduler.said()) == 1, "outside a task: no wait"


def test_a_done_callback_of_a_controlled_call_is_counted(scheduler):
    future = torch.futures.Future()
    _gate.track_call(future, "t/1", "f", True)
    ran = []
    _gate._add_done_callback(future, lambda fut: ran.append(_gate.current_follower()))
    assert _gate._tracked[future].followers == 1
    future.set_result(1)
    assert ran == ["t/1+cb1"]
    scheduler.wait_for(lambda heard: msg.Followed("t/1") in heard)


# -- the program's own futures ---------------------------------------------------------------------------


def test_every_future_the_program_makes_gets_the_next_serial():
    made = []

    class Made:
        def __init__(self, value):
            """doc"""
            made.append(value)

    init = _gate._numbered(Made.__init__)
    assert init.__name__ == "__init__" and init.__doc__ == "doc"
    one, two = Made.__new__(Made), Made.__new__(Made)
    init(one, 1)
    init(two, value=2)
    assert made == [1, 2] and two.__dict__["_rpch_serial"] == one.__dict__["_rpch_serial"] + 1


def test_completing_a_programs_own_future_is_told_with_its_serial(scheduler, as_task):
    completed = []

    def set_result(self, value):
        """original doc"""
        completed.append(value)

    resolve = _gate._resolving(set_result)
    assert resolve.__name__ == "set_result" and resolve.__doc__ == "original doc"
    future = Future()
    future.__dict__["_rpch_serial"] = 11
    as_task("t")
    resolve(future, "v")
    resolve(Future(), "torch's")  # no serial: not the program's
    assert completed == ["v", "torch's"]
    assert scheduler.said() == [msg.Resolved(11)]


def test_a_free_thread_that_completes_a_programs_future_gives_control_up(scheduler, as_task):
    future = Future()
    future.__dict__["_rpch_serial"] = 12
    as_task(None)
    resolve = _gate._resolving(lambda self, value: None)
    in_thread(resolve, future, 1).join(30)
    said = scheduler.said()
    assert said[-1] == msg.Resolved(12) and len(said) == 2
    assert said[0].why.startswith("thread 'Thread-") and said[0].why.endswith(
        ", which is neither a task nor a callback on a controlled call's answer, completed a future of the "
        "program's: when it did is the clock's choice, not the schedule's")


def test_nothing_is_told_of_a_future_without_a_gate(monkeypatch):
    monkeypatch.setattr(_gate, "_gate", None)
    future = Future()
    future.__dict__["_rpch_serial"] = 13
    _gate._resolving(lambda self, value: None)(future, 1)  # would fail on a gate of None


# -- free threads ----------------------------------------------------------------------------------------


def test_only_a_thread_that_is_neither_task_callback_plumbing_nor_the_opener_gives_control_up(scheduler, as_task):
    as_task("t")
    _gate._from_a_free_thread("did a")
    as_task(None, "t/1+cb1")
    _gate._from_a_free_thread("did b")
    as_task(None)
    _gate._from_a_free_thread("did c")  # this thread opened the gate: the harness's
    assert scheduler.said() == []
    with _gate.plumbing():
        assert _gate._local.plumbing is True
        in_thread(_gate._from_a_free_thread, "did d").join(30)  # plumbing is this thread's only
    assert [m.why for m in scheduler.said()][0].endswith(", did d: when it did is the clock's choice, not the "
                                                         "schedule's")

    def plumbing_thread():
        with _gate.plumbing():
            with _gate.plumbing():
                pass
            _gate._from_a_free_thread("did e")  # still plumbing after the inner one ended
        _gate._from_a_free_thread("did f")

    in_thread(plumbing_thread).join(30)
    said = [m.why for m in scheduler.said()]
    assert len(said) == 2 and "did d" in said[0] and "did f" in said[1]
    scheduler.gate.released = True
    in_thread(_gate._from_a_free_thread, "did g").join(30)
    assert len(scheduler.said()) == 2


def test_a_free_threads_notify_gives_control_up_but_a_new_threads_start_signal_does_not(scheduler, as_task):
    def notify(cond: threading.Condition) -> None:
        with cond:
            _gate._notify(cond)

    cond = threading.Condition()
    _gate._start_signals.add(cond)
    in_thread(notify, cond).join(30)
    assert scheduler.said() == []
    in_thread(notify, threading.Condition()).join(30)
    assert [m.why for m in scheduler.said()][0].endswith(
        "notified a condition (set an Event, put to a Queue): when it did is the clock's choice, not the "
        "schedule's")


def test_a_notify_wakes_the_gates_waiters_first_and_the_rest_as_python_would(scheduler, as_task, monkeypatch):
    notified = []
    monkeypatch.setitem(_gate._ORIGINAL, "notify", lambda cond, n: notified.append(n))
    cond = threading.Condition()
    scheduler.gate._cond_waiters[id(cond)] = ["a", "b"]
    as_task("t")
    _gate._notify(cond, 3)
    _gate._notify(cond)
    scheduler.gate._cond_waiters[id(cond)] = ["c"]
    _gate._notify(cond, 1)
    assert notified == [1, 1], "two of three to the gate's, one to a plain wait; then one plain"
    assert scheduler.said() == [msg.Notified("a"), msg.Notified("b"), msg.Notified("c")]
    monkeypatch.setattr(_gate, "_gate", None)
    _gate._notify(cond, 2)
    assert notified == [1, 1, 2]


# -- waits on conditions, sleeps, threads ----------------------------------------------------------------


def test_a_condition_wait_in_a_task_hands_the_turn_over_and_says_whether_a_notify_ended_it(scheduler, as_task):
    cond = threading.Condition()
    as_task("t")
    with cond:
        assert _gate._cond_wait(cond, 1.0) is True
        assert cond._is_owned(), "the lock is held again when it returns"
        scheduler.notified = False
        assert _gate._cond_wait(cond) is False
    assert scheduler.said() == [msg.Block("t", "wait on a condition", ("cond", id(cond)), 1.0),
                                msg.Block("t", "wait on a condition", ("cond", id(cond)), None)]
    # The first wait's waiter is left for a notify to take (the Go stands
    # for one here); the second, ended by its timeout, took itself out.
    assert scheduler.gate._cond_waiters[id(cond)] == ["t"]


def test_a_condition_waits_timeout_takes_the_waiter_out(scheduler, as_task):
    cond = threading.Condition()
    as_task("t")
    scheduler.notified = False
    with cond:
        assert _gate._cond_wait(cond, 1.0) is False
    assert scheduler.gate._cond_waiters[id(cond)] == []


def test_a_condition_wait_must_hold_its_lock(scheduler, as_task):
    as_task("t")
    with pytest.raises(RuntimeError, match="cannot wait on un-acquired lock"):
        _gate._cond_wait(threading.Condition(), 1.0)
    assert scheduler.said() == []


def test_a_poll_a_plain_wait_and_a_wait_outside_a_task_wait_as_python_does(scheduler, as_task, monkeypatch):
    plain = []
    monkeypatch.setitem(_gate._ORIGINAL, "cond_wait", lambda cond, timeout: plain.append(timeout) or "plain")
    cond = threading.Condition()
    as_task("t")
    assert _gate._cond_wait(cond, 0) == "plain" and _gate._cond_wait(cond, -1) == "plain"
    monkeypatch.setattr(_gate._local, "plain_waits", True, raising=False)
    assert _gate._cond_wait(cond, 5) == "plain"
    monkeypatch.setattr(_gate._local, "plain_waits", False)
    as_task(None)
    assert _gate._cond_wait(cond, 6) == "plain"
    monkeypatch.setattr(_gate, "_gate", None)
    as_task("t")
    assert _gate._cond_wait(cond) == "plain"
    assert plain == [0, -1, 5, 6, None]


@pytest.mark.parametrize("notify_first", [False, True])
def test_a_condition_wait_that_control_given_up_let_go_waits_again_on_the_real_clock(scheduler, monkeypatch,
                                                                                   notify_first):
    plain = []
    monkeypatch.setitem(_gate._ORIGINAL, "cond_wait", lambda cond, timeout: plain.append(timeout) or "plain")
    cond = threading.Condition()
    got = []

    def waiter() -> None:
        _gate._local.task = "t"
        with cond:
            got.append(_gate._cond_wait(cond, 2.0))

    scheduler.hold = True
    thread = in_thread(waiter)
    scheduler.wait_for(lambda heard: any(isinstance(m, msg.Block) for m in heard))
    if notify_first:  # a notify took it while control was being given up: it was woken
        assert scheduler.gate.cond_notify(cond, 1) == 1
    scheduler.gate.release()  # its wait for its turn ends with None: not a wake-up
    thread.join(30)
    assert got == ([True] if notify_first else ["plain"]), "still a waiter: its own wait now, on the real clock"
    assert plain == ([] if notify_first else [2.0]) and scheduler.gate._cond_waiters[id(cond)] == []


def test_a_sleep_in_a_task_is_a_block_on_the_schedules_clock(scheduler, as_task, monkeypatch):
    slept = []
    monkeypatch.setitem(_gate._ORIGINAL, "sleep", slept.append)
    as_task("t")
    assert _gate._sleep(30.0) is None
    assert slept == [] and scheduler.said() == [msg.Block("t", "sleep", ("timer",), 30.0)]
    as_task(None)
    _gate._sleep(0.25)
    monkeypatch.setattr(_gate, "_gate", None)
    as_task("t")
    _gate._sleep(0.5)
    assert slept == [0.25, 0.5]


def test_a_thread_a_task_starts_is_told_to_the_scheduler_while_it_lives(scheduler, as_task):
    as_task("t")
    ran = []
    thread = threading.Thread(target=lambda: ran.append(getattr(_gate._local, "plain_waits", False)),
                              name="program-thread")
    _gate._start_thread(thread)
    thread.join(30)
    assert ran == [False], "its own waits are not plain: only the start's"
    assert getattr(_gate._local, "plain_waits", False) is False
    assert scheduler.said() == [msg.ProgramThread("program-thread", alive=True),
                                msg.ProgramThread("program-thread", alive=False)]
    assert thread._started._cond in _gate._start_signals


def test_a_thread_started_outside_a_task_or_after_release_is_not_told(scheduler, as_task):
    as_task(None)
    thread = threading.Thread(target=lambda: None)
    _gate._start_thread(thread)
    thread.join(30)
    as_task(None, "t/1+cb1")
    by_callback = threading.Thread(target=lambda: None, name="by-callback")
    _gate._start_thread(by_callback)
    by_callback.join(30)
    as_task("t")
    scheduler.gate.released = True
    late = threading.Thread(target=lambda: None)
    _gate._start_thread(late)
    late.join(30)
    scheduler.gate.released = False
    assert scheduler.said() == [msg.ProgramThread("by-callback", alive=True),
                                msg.ProgramThread("by-callback", alive=False)]


def test_a_threads_start_waits_plainly_for_its_signal(scheduler, as_task, monkeypatch):
    during = []
    monkeypatch.setitem(_gate._ORIGINAL, "thread_start",
                        lambda thread: during.append(_gate._local.plain_waits))
    as_task(None)
    _gate._start_thread(threading.Thread(target=lambda: None))
    monkeypatch.setattr(_gate._local, "plain_waits", "outer", raising=False)
    _gate._start_thread(threading.Thread(target=lambda: None))
    assert during == [True, True] and _gate._local.plain_waits == "outer"


# -- collected futures -------------------------------------------------------------------------------


@pytest.fixture
def counted_callbacks(monkeypatch):
    """torch's add_done_callback patched as install() does (put back after)."""
    monkeypatch.setattr(torch._C.Future, "add_done_callback", _gate._add_done_callback)


def test_collected_calls_in_a_task_complete_after_each_ones_callbacks(scheduler, as_task, counted_callbacks):
    first, second = torch.futures.Future(), torch.futures.Future()
    _gate.track_call(first, "t/1", "f", True)
    _gate.track_call(second, "t/2", "g", True)
    as_task("t")
    gathered = _gate._collect_all([first, second])
    assert _gate._derived[gathered] == [first, second]
    assert _gate._tracked[first].followers == 1 and _gate._tracked[second].followers == 1
    first.set_result(1)
    assert not gathered.done(), "one answer of two"
    second.set_result(2)
    assert gathered.done() and [f.wait() for f in gathered.wait()] == [1, 2]


def test_collected_calls_end_in_torchs_error_when_one_failed(scheduler, as_task, counted_callbacks):
    first, second = torch.futures.Future(), torch.futures.Future()
    _gate.track_call(first, "t/1", "f", True)
    _gate.track_call(second, "t/2", "g", True)
    as_task("t")
    gathered = _gate._collect_all(iter([first, second]))
    first.set_exception(ValueError("one failed"))
    second.set_result(2)
    assert gathered.done()
    with pytest.raises(ValueError, match="one failed"):
        gathered.wait()


def test_collected_futures_outside_a_task_or_none_controlled_are_torchs(scheduler, as_task, monkeypatch,
                                                                        counted_callbacks):
    first, second = torch.futures.Future(), torch.futures.Future()
    as_task("t")
    plain = _gate._collect_all([first, second])
    assert _gate._derived[plain] == [first, second]
    tracked = torch.futures.Future()
    _gate.track_call(tracked, "t/1", "f", True)
    as_task(None)
    free = _gate._collect_all([tracked])
    assert _gate._derived[free] == [tracked] and _gate._tracked[tracked].followers == 0
    as_task(None, "d/1+cb1")
    by_callback = _gate._collect_all([tracked])
    assert _gate._tracked[tracked].followers == 1, "a callback's collection follows the calls too"
    assert by_callback is not free
    monkeypatch.setattr(_gate, "_gate", None)
    alone = _gate._collect_all([torch.futures.Future()])
    assert alone not in _gate._derived


def test_wait_all_waits_for_each_in_order():
    waited = []

    class Waits:
        def __init__(self, n):
            self.n = n

        def wait(self):
            waited.append(self.n)
            return self.n

    assert _gate._wait_all([Waits(1), Waits(2)]) == [1, 2] and waited == [1, 2]


# -- points at torch's own steps, and install ----------------------------------------------------------


def test_a_function_at_a_point_waits_for_its_turn_there_first(scheduler, as_task, monkeypatch):
    def step(a, b=0):
        """steps"""
        return (a, b)

    at = _gate._at_point("DistributedOptimizer.step", step)
    assert at.__name__ == "step" and at.__doc__ == "steps"
    as_task("t")
    assert at(1, b=2) == (1, 2)
    assert scheduler.said() == [msg.At("t", "DistributedOptimizer.step")]
    nameless = _gate._at_point("dist_autograd.backward", lambda: None)
    assert nameless.__name__ == "<lambda>"
    monkeypatch.setattr(_gate, "_gate", None)
    assert at(3) == (3, 0)


def test_install_patches_every_wait_marks_it_and_keeps_the_originals_once(monkeypatch):
    import torch.distributed.autograd as dist_autograd
    from torch.distributed.optim import DistributedOptimizer

    places = [(torch._C.Future, "wait"), (torch._C.Future, "then"), (torch._C.Future, "add_done_callback"),
              (torch.futures.Future, "__init__"), (torch.futures.Future, "set_result"),
              (torch.futures.Future, "set_exception"), (torch.futures, "collect_all"), (torch.futures, "wait_all"),
              (threading.Condition, "wait"), (threading.Condition, "notify"), (threading.Condition, "notify_all"),
              (time, "sleep"), (threading.Thread, "start"), (dist_autograd, "backward"),
              (DistributedOptimizer, "step")]
    before = {(owner, name): getattr(owner, name) for owner, name in places}
    for owner, name in places:  # put back when the test ends
        monkeypatch.setattr(owner, name, before[owner, name])
    monkeypatch.setattr(_gate, "_ORIGINAL", {})
    monkeypatch.setattr(_gate, "_gate", None)
    _gate.install()
    patched = {(owner, name): getattr(owner, name) for owner, name in places}
    assert all(getattr(patched[place], "_rpc_harness_gate", False) for place in places)
    assert all(patched[place] is not before[place] for place in places)
    assert _gate._ORIGINAL == {
        "wait": before[torch._C.Future, "wait"], "then": before[torch._C.Future, "then"],
        "add_done_callback": before[torch._C.Future, "add_done_callback"],
        "set_result": before[torch.futures.Future, "set_result"],
        "set_exception": before[torch.futures.Future, "set_exception"],
        "collect_all": before[torch.futures, "collect_all"], "cond_wait": before[threading.Condition, "wait"],
        "notify": before[threading.Condition, "notify"], "sleep": before[time, "sleep"],
        "backward": before[dist_autograd, "backward"], "thread_start": before[threading.Thread, "start"],
        "optimizer_step": before[DistributedOptimizer, "step"]}
    _gate.install()
    assert {(owner, name): getattr(owner, name) for owner, name in places} == patched, "once"
    # Inert without a gate: futures, conditions and threads work as before.
    future = torch.futures.Future()
    then = future.then(lambda fut: fut.wait() * 2)
    future.set_result(21)
    assert then.wait() == 42 and torch.futures.collect_all([future]).wait()[0].wait() == 21
    assert future.__dict__["_rpch_serial"] > 0
    cond = threading.Condition()
    with cond:
        cond.notify_all()
        assert cond.wait(0.001) is False
    time.sleep(0)
    assert torch.futures.wait_all([future]) == [21]
    assert dist_autograd.backward.__name__ == before[dist_autograd, "backward"].__name__
