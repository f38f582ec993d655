"""A rank's side of a controlled schedule (see :mod:`rpc_harness.schedule`).

Every task of the rank (its entry or program, and each RPC handler a peer's
call starts) passes through this gate at its scheduling points: it tells
the supervisor's scheduler where it stands and waits for its Go. Waits are
where care is needed. A task releases its turn only for a wait the
scheduler can see the end of:

- a call issued under control (its handler is a task; or torch answers it
  in C++, which the scheduler waits for before choosing again);
- a future of the program's own, completed by ``set_result`` (patched);
- a condition or an event (``threading.Condition``, patched: a notify
  wakes the waiter through the scheduler; a timeout is on the schedule's
  own clock, which moves only when no task can run);
- ``time.sleep`` (the schedule's clock, likewise);
- an RRef whose creating ``remote()`` call is a task still to run.

An RPC's timeout (``rpc_sync``'s and ``rpc_async``'s, per call or the
world's) is on the schedule's clock too: torch is told the call never
expires, the program gets a future of the gate's (:func:`on_schedule_clock`)
that takes the answer, or torch's timeout error once the scheduler says the
schedule's clock passed the timeout (``TimedOut``). Control given up, the
rest of each timeout runs on the real clock, from when the call was issued.

Any other wait (a future torch made in C++, a lock) is part of the step
that reached it: the task keeps its turn. If that wait needs another task
to run, no step ends; the supervisor sees that no rank made progress,
says where every task was, and lets the world run free (the schedule is
then reported as no longer controlled) rather than hang.

Calls issued under control carry the caller's id for them (a small
picklable wrapper around the function sent), so the handler they start on
the callee is named after its caller, whatever order calls arrive in.

:func:`install` patches once per process (in the forkserver, with the RPC
hooks); nothing changes until :func:`start` opens a gate in a controlled
rank, and then only for threads that are tasks.
"""

from __future__ import annotations

import _thread
import itertools
import re
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from .. import _messages as msg

_gate: Gate | None = None
_local = threading.local()  # .task: the task this thread is; .follower: the callback it runs
_serials = itertools.count(1)
_RREF_ID_RE = re.compile(r"created_on=(\d+), local_id=(\d+)")
_ORIGINAL: dict[str, Any] = {}
_MARK = "_rpc_harness_gate"


def current_task() -> str | None:
    """The task this thread is running, under an open gate; None otherwise."""
    if _gate is None or _gate.released:
        return None
    return getattr(_local, "task", None)


def current_follower() -> str | None:
    """The program's callback on a controlled call's answer that this thread
    runs (``driver/2+cb1``), under an open gate; None otherwise."""
    if _gate is None or _gate.released:
        return None
    return getattr(_local, "follower", None)


def active() -> bool:
    """Whether this rank runs under a controlled schedule, still controlled."""
    return _gate is not None and not _gate.released


def start(conn: Any, rank: int) -> Gate:
    """Open this rank's gate: its tasks wait for their turn from now on."""
    global _gate
    _gate = Gate(conn, rank)
    return _gate


def close(timeout: float = 5.0) -> bool:
    """Forget this rank's gate, once control was given up and its reader
    has ended (a reused world's rank, between entries: the next entry's
    gate reads the same pipe). Whether it has (no gate: True)."""
    global _gate
    gate = _gate
    if gate is None:
        return True
    gate.reader.join(timeout)
    if gate.reader.is_alive():
        return False
    _gate = None
    return True


class Gate:
    """The rank's end of the scheduler's pipe, shared by its tasks."""

    def __init__(self, conn: Any, rank: int) -> None:
        self.conn = conn
        self.rank = rank
        self.released = False
        # The rank's main thread (it opens the gate): outside its entry's
        # task it runs the harness's bring-up and wind-down, not the program.
        self.opener = _thread.get_ident()
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._goes: dict[str, _Signal] = {}
        self._notified: dict[str, bool] = {}
        self._seq: dict[str, itertools.count] = {}
        self._cond_waiters: dict[int, list[str]] = {}
        self._threads: dict[str, int] = {}  # task -> the ident of the thread that runs it
        self._timed: dict[str, _Timed] = {}  # calls whose timeout is the schedule's, until they end
        self.reader = threading.Thread(target=self._read, name="rpc-harness-gate", daemon=True)
        self.reader.start()

    # -- the pipe -----------------------------------------------------------------------
    def send(self, message: msg.ToScheduler) -> None:
        try:
            with self._send_lock:
                if self.released:  # (looked at under the lock: nothing follows the Released said)
                    return
                self.conn.send(message)
        except (OSError, EOFError, ValueError):  # the supervisor is gone: run free
            self.release()

    def _read(self) -> None:
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                self.release()
                return
            match message:
                case msg.Go(task, notified):
                    with self._lock:
                        self._notified[task] = notified
                        event = self._goes.get(task)
                    if event is not None:
                        event.set()
                case msg.TimedOut(call):
                    with self._lock:
                        timed = self._timed.get(call)
                    if timed is not None:  # its program callbacks wait for turns: not on this reader
                        _thread.start_new_thread(timed.expire, ())
                case msg.Look(task):
                    self.send(self.look(task))
                case msg.Release():
                    self.release()
                    try:
                        with self._send_lock:
                            self.conn.send(msg.Released())
                    except (OSError, EOFError, ValueError):
                        pass
                    return

    def release(self) -> None:
        """No more control: every waiting task goes on, every point passes."""
        with self._send_lock:
            self.released = True
        with self._lock:
            events = list(self._goes.values())
            timed = list(self._timed.values())
        for event in events:
            event.set()
        for call in timed:  # the rest of its timeout, on the real clock, as torch would have timed it
            _thread.start_new_thread(call.expire, (call.issued + call.seconds,))

    def _await(self, task: str, message: msg.ToScheduler) -> bool | None:
        """Send ``message`` and wait for ``task``'s Go (the signal exists
        before the message leaves: a Go may come back at once). What the
        Go said (False: a wait's timeout ended it); None when no Go came
        because control was given up."""
        event = _Signal()
        with self._lock:
            self._goes[task] = event
        if self.released:  # given up since the caller looked: release() may have missed this signal
            event.set()
        self.send(message)
        event.wait()
        with self._lock:
            self._goes.pop(task, None)
            return self._notified.pop(task, None)

    def look(self, task: str) -> msg.Looked:
        """Where ``task``'s thread stands now, and the CPU time it has used:
        evidence for the supervisor's watch on a step that runs on without
        a scheduling point (``_schedule_link``)."""
        ident = self._threads.get(task)
        frame = sys._current_frames().get(ident) if ident is not None else None
        if frame is None:
            return msg.Looked(task)
        try:
            cpu = time.clock_gettime(time.pthread_getcpuclockid(ident))  # type: ignore[arg-type]
        except (AttributeError, OSError):  # not Linux, or the thread just ended
            cpu = -1.0
        where = f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        frames = []
        while frame is not None:
            frames.append((id(frame), frame.f_code.co_filename, frame.f_code.co_name))
            frame = frame.f_back
        return msg.Looked(task, tuple(reversed(frames)), where, cpu)

    # -- what tasks do --------------------------------------------------------------------
    def begin(self, task: str, label: str, point: str, call: str | None = None) -> None:
        """This thread is now ``task``; it runs once the scheduler says so."""
        _local.task = task
        with self._lock:
            self._threads[task] = threading.get_ident()
        if not self.released:
            self._await(task, msg.Begin(task, label, point, call))

    def point(self, point: str) -> None:
        """The current task reached a scheduling point: wait for its turn."""
        task = current_task()
        if task is not None:
            self._await(task, msg.At(task, point))

    def block(self, on: tuple, point: str, timeout: float | None = None) -> bool | None:
        """The current task waits for ``on``, then for its turn; whether it
        was woken by what it waited for (False: by its timeout; None: by
        control given up, which ends every wait for a turn at once)."""
        task = current_task()
        if task is None:
            return True
        return self._await(task, msg.Block(task, point, on, timeout))

    def issued(self, call: str, to: int, python: bool, rref: str | None, timeout: float | None = None) -> None:
        """The current task issued ``call``: tell the scheduler, which lets it
        go on at once, or once the answer is in when no task of the world's
        makes it (torch answers in C++, or the callee is gone): whether such
        an answer came before the task's next look at its future must not be
        the clock's choice. A callback on an answer issued it: it runs
        between steps, and goes on at once."""
        task = current_task()
        if task is not None:
            self._await(task, msg.Issued(call, to, python, rref, timeout=timeout))
            return
        follower = current_follower()
        if follower is not None:
            self.send(msg.Issued(call, to, python, rref, by=follower, timeout=timeout))

    def follow(self, follower: str, call: str) -> None:
        """The program's callback ``follower`` on ``call``'s answer waits
        for its turn: callbacks on several answers would otherwise run at
        once, in whatever order torch's threads got to them."""
        if not self.released:
            self._await(follower, msg.Following(follower, call))

    def unscheduled(self, why: str) -> None:
        """Something the schedule cannot order happened: control is given up."""
        self.send(msg.Unscheduled(why))

    def end(self, *, responds_later: bool = False, failed: bool = False, after: str | None = None) -> None:
        task = getattr(_local, "task", None)
        _local.task = None
        if task is not None:
            with self._lock:
                self._threads.pop(task, None)
            self.send(msg.End(task, responds_later, failed, after))

    def call_id(self) -> str:
        """The id of the next call the current task (or callback) issues:
        ``trainer1/3``, ``driver/2+cb1/1``."""
        task = current_task() or current_follower() or "?"
        with self._lock:
            counter = self._seq.setdefault(task, itertools.count(1))
            return f"{task}/{next(counter)}"

    # -- conditions -------------------------------------------------------------------------
    def cond_wait(self, cond: Any, timeout: float | None) -> bool | None:
        task = current_task()
        assert task is not None
        key = id(cond)
        with self._lock:
            self._cond_waiters.setdefault(key, []).append(task)
        return self.block(("cond", key), "wait on a condition", timeout)

    def cond_notify(self, cond: Any, n: int) -> int:
        """Wake up to ``n`` tasks waiting on ``cond``, first come first; how many."""
        with self._lock:
            waiters = self._cond_waiters.get(id(cond), [])
            woken, waiters[:] = waiters[:n], waiters[n:]
        for task in woken:
            self.send(msg.Notified(task))
        return len(woken)

    def cond_forget(self, cond: Any, task: str) -> bool:
        """A waiter that timed out, or was let go by control given up, is no
        longer waiting; whether it still was (no notify took it)."""
        with self._lock:
            waiters = self._cond_waiters.get(id(cond), [])
            if task in waiters:
                waiters.remove(task)
                return True
            return False


    def timed(self, call: str, timed: _Timed | None) -> None:
        """Keep (or, None, forget) ``call``'s timeout on the schedule's clock."""
        with self._lock:
            if timed is None:
                self._timed.pop(call, None)
            else:
                self._timed[call] = timed
        if timed is not None and self.released:  # given up meanwhile: release() missed it
            _thread.start_new_thread(timed.expire, (timed.issued + timed.seconds,))


class _Signal:
    """A one-shot signal on a bare lock: a task's own wait for its Go, which
    must not pass through the patched ``threading.Condition`` (an Event would)."""

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._lock.acquire()

    def set(self) -> None:
        try:
            self._lock.release()
        except RuntimeError:  # set already
            pass

    def wait(self) -> None:
        self._lock.acquire()
        self._lock.release()  # stays set for anyone else


# -- calls ----------------------------------------------------------------------------------


class Tagged:
    """A function sent by a call issued under control, with the caller's id
    for that call, so that the handler it starts is named after it."""

    def __init__(self, call: str, func: Callable[..., Any]) -> None:
        self.call = call
        self.func = func
        if hasattr(func, "_wrapped_async_rpc_function"):  # torch reads it on the caller's side
            self._wrapped_async_rpc_function = func._wrapped_async_rpc_function

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def __reduce__(self) -> Any:
        return (Tagged, (self.call, self.func))


class _Track:
    """A future of a call issued under control: its callbacks of the
    program's are counted (those on futures ``then()`` made of it too: they
    run in the same thread, right after)."""

    def __init__(self, call: str, what: str, python: bool) -> None:
        self.call, self.what, self.python = call, what, python
        self.lock = threading.Lock()
        self.reported = False
        self.followers = 0  # those still to run when the answer came
        self.registered = 0  # all, numbered in the order the program added them


def timeout_error(seconds: float) -> RuntimeError:
    """The error torch's agent ends a call with at its timeout (rpc_agent.h's
    ``kRpcTimeoutErrorStr``, as an RPC error of type TIMEOUT, 1): the same
    type and message a free-running caller catches."""
    return RuntimeError(f"RPCErr:1:RPC ran for more than set timeout ({int(seconds * 1000)} ms) and will now be "
                        f"marked with an error")


class _Timed:
    """A call whose timeout is the schedule's: the program's future for it,
    completed once, by the answer or by the timeout, whichever is first."""

    def __init__(self, gate: Gate, call: str, future: Any, seconds: float) -> None:
        self.gate, self.call, self.future, self.seconds = gate, call, future, seconds
        self.issued = time.monotonic()
        self.lock = threading.Lock()
        self.done = False

    def answered(self, answer: Any) -> None:
        """torch's callback on the call's own future."""
        try:
            value = raw_wait(answer)
        except Exception as error:  # noqa: BLE001 - the program's to see, as torch raised it
            self._complete(error=error)
        else:
            self._complete(value=value)

    def expire(self, at: float | None = None) -> None:
        """The timeout passed (``at``: once the real clock is there)."""
        if at is not None:
            _ORIGINAL.get("sleep", time.sleep)(max(0.0, at - time.monotonic()))
        self._complete(error=timeout_error(self.seconds))

    def _complete(self, *, value: Any = None, error: BaseException | None = None) -> None:
        with self.lock:
            if self.done:
                return  # an answer after its timeout, or a timeout after its answer: too late
            self.done = True
        self.gate.timed(self.call, None)
        with plumbing():  # the harness's own completion, from whichever thread: not the program's
            if error is not None:
                self.future.set_exception(error)
            else:
                self.future.set_result(value)


def on_schedule_clock(answer: Any, call: str, seconds: float) -> Any:
    """The future the program gets for call ``call``, issued to torch with no
    timeout (``answer``: torch's future for it): it takes the answer, or
    torch's timeout error once ``seconds`` passed on the schedule's clock."""
    import torch

    gate = _gate
    assert gate is not None
    future = torch.futures.Future()
    timed = _Timed(gate, call, future, seconds)
    gate.timed(call, timed)
    _ORIGINAL["add_done_callback"](answer, timed.answered)
    return future


# Keyed by the futures themselves, weakly: an id could be reused once a future is gone.
_tracked: weakref.WeakKeyDictionary[Any, _Track] = weakref.WeakKeyDictionary()  # calls issued under control
_derived: weakref.WeakKeyDictionary[Any, list[Any]] = weakref.WeakKeyDictionary()  # then(), collect_all()
_type_fetches: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()  # RRef type fetches, by RRef id
_start_signals: weakref.WeakSet[threading.Condition] = weakref.WeakSet()  # new threads' "it runs" signals


def track_call(future: Any, call: str, what: str, python: bool) -> None:
    """Report when ``future`` (call ``call``'s) completes, with how many of
    the program's callbacks run after: the scheduler waits for them all.
    ``python``: a task of the world answers it (not torch, in C++)."""
    gate = _gate
    if gate is None:
        return
    track = _Track(call, what, python)
    _tracked[future] = track

    def report(_: Any) -> None:
        with track.lock:
            track.reported = True
            followers = track.followers
        gate.send(msg.Completed(call, followers))

    _ORIGINAL["add_done_callback"](future, report)


def call_of(future: Any) -> str | None:
    """The call issued under control whose answer completes ``future`` (its
    own future, or a ``then()`` of it), if there is one."""
    track = _tracked.get(future)
    return track.call if track is not None else None


def track_type_fetch(future: Any, rref: Any) -> None:
    """``future`` is torch's fetch of ``rref``'s type (a proxy call's first
    step), answered by its owner only once the RRef's value is made. When a
    task of this world still has to make it (a ``remote()`` whose constructor
    makes RPCs of its own), a controlled wait on the fetch waits for that
    through the scheduler: as part of the waiting task's step, it held every
    other task back, and control was lost at step 2 on every seed."""
    found = rref_id(rref)
    if found is not None:
        _type_fetches[future] = found


def rref_id(rref: Any) -> str | None:
    """``created_on:local_id`` of an RRef, the same on its owner and its users."""
    match = _RREF_ID_RE.search(str(rref))
    return f"{match[1]}:{match[2]}" if match else None


def wait(future: Any) -> Any:
    """``future.wait()`` under control (see the module docstring). A wait the
    scheduler can see the end of is always a scheduling point, done or not:
    whether a call answered in C++ is done already when its caller waits is
    the clock's business, and the scheduler's answer must not depend on it."""
    task = current_task()
    original = _ORIGINAL["wait"]
    if task is None or _gate is None:
        if _gate is not None and not future.done():
            _check_callback_wait(future)
        return original(future)
    parents = _derived.get(future)
    if parents is not None:  # then()/collect_all(): wait for what it is made of first
        for parent in parents:
            wait(parent)
        return original(future)
    track = _tracked.get(future)
    if track is not None:
        _gate.block(("call", track.call), f"wait {track.what}")
        return original(future)
    fetched = _type_fetches.get(future)
    if fetched is not None:  # an RRef's type: its owner answers once the RRef's value is made
        _gate.block(("rref", fetched), "wait rref type")
        return original(future)
    serial = getattr(future, "__dict__", {}).get("_rpch_serial")
    if serial is not None:  # a torch.futures.Future of the program's own
        _gate.block(("future", serial, future.done()), "wait future")
        return original(future)
    return original(future)  # a future torch made: part of this step


def _check_callback_wait(future: Any) -> None:
    """A callback on an answer runs between steps: the world is not quiet,
    and no task is chosen, until it returns. A wait in it for anything but
    a call torch answers in C++ waits for a task that cannot run, so control
    is given up at once, saying why, rather than at the stall watch."""
    follower = current_follower()
    track = _tracked.get(future)
    if follower is None or _gate is None or (track is not None and not track.python):
        return
    what = f"call {track.call} ({track.what})" if track is not None else "a future"
    _gate.unscheduled(f"{follower}, a callback of the program's on an answer, waits for {what}: a callback runs "
                      f"between steps, so no task can run for what it waits for")


# -- the patches ------------------------------------------------------------------------------


def install() -> None:
    """Patch what a controlled task may wait in (idempotent; inert until
    :func:`start`, and then only for threads that are tasks)."""
    import torch
    import torch.distributed.autograd as dist_autograd
    import torch.futures
    from torch.distributed.optim import DistributedOptimizer

    future_type = torch._C.Future
    if getattr(future_type.wait, _MARK, False):
        return
    _ORIGINAL.update(
        wait=future_type.wait, then=future_type.then, add_done_callback=future_type.add_done_callback,
        set_result=torch.futures.Future.set_result, set_exception=torch.futures.Future.set_exception,
        collect_all=torch.futures.collect_all, cond_wait=threading.Condition.wait,
        notify=threading.Condition.notify, sleep=time.sleep, backward=dist_autograd.backward,
        thread_start=threading.Thread.start,
        optimizer_step=DistributedOptimizer.step,
    )
    future_type.wait = _marked(wait)
    torch.futures.Future.__init__ = _marked(_numbered(torch.futures.Future.__init__))
    future_type.then = _marked(_then)
    future_type.add_done_callback = _marked(_add_done_callback)
    torch.futures.Future.set_result = _marked(_resolving(_ORIGINAL["set_result"]))
    torch.futures.Future.set_exception = _marked(_resolving(_ORIGINAL["set_exception"]))
    torch.futures.collect_all = _marked(_collect_all)
    torch.futures.wait_all = _marked(_wait_all)
    threading.Condition.wait = _marked(_cond_wait)
    threading.Condition.notify = _marked(_notify)
    threading.Condition.notify_all = _marked(lambda self: _notify(self, sys.maxsize))
    time.sleep = _marked(_sleep)
    threading.Thread.start = _marked(_start_thread)
    dist_autograd.backward = _marked(_at_point("dist_autograd.backward", _ORIGINAL["backward"]))
    DistributedOptimizer.step = _marked(_at_point("DistributedOptimizer.step", _ORIGINAL["optimizer_step"]))


def _marked(function: Callable[..., Any]) -> Callable[..., Any]:
    setattr(function, _MARK, True)
    return function


def _at_point(point: str, original: Callable[..., Any]) -> Callable[..., Any]:
    def at_point(*args: Any, **kwargs: Any) -> Any:
        if _gate is not None:
            _gate.point(point)
        return original(*args, **kwargs)

    at_point.__name__ = getattr(original, "__name__", point)
    at_point.__doc__ = getattr(original, "__doc__", None)
    return at_point


def _follower(future: Any, callback: Callable[..., Any]) -> Callable[..., Any]:
    """The program's callback on a tracked call's future, counted: the
    scheduler waits until it has run (it runs in torch's thread that
    completed the future, outside any task)."""
    track = _tracked.get(future)
    if track is None or _gate is None:
        return callback
    with track.lock:
        if track.reported:
            return callback  # completed already: it runs now, in this thread's step
        track.followers += 1
        track.registered += 1
        follower = f"{track.call}+cb{track.registered}"
    gate = _gate

    def counted(fut: Any) -> Any:
        gate.follow(follower, track.call)
        outer = getattr(_local, "follower", None)
        _local.follower = follower  # the calls it issues are named after it
        try:
            return callback(fut)
        finally:
            _local.follower = outer
            gate.send(msg.Followed(track.call))

    return counted


def _then(self: Any, callback: Callable[..., Any]) -> Any:
    if current_task() is not None and self in _type_fetches:
        # An RRef proxy's rpc_async: torch fetches the RRef's type, then
        # issues the call in a callback on the fetch, which would run on
        # torch's thread, outside any task. Fetched now, in this task's
        # step, the callback runs here and the call is the task's own. A
        # scheduling point whether the fetch is done or not: which it is
        # is the clock's business (a fetch answered in time took a step
        # fewer, and a seed two schedules).
        wait(self)
    derived = _ORIGINAL["then"](self, _follower(self, callback))
    if _gate is not None:
        _derived[derived] = [self]
        track = _tracked.get(self)
        if track is not None:  # it completes in the callback's thread: its own callbacks follow the call too
            _tracked[derived] = track
    return derived


def _add_done_callback(self: Any, callback: Callable[..., Any]) -> None:
    return _ORIGINAL["add_done_callback"](self, _follower(self, callback))


def _numbered(original: Callable[..., Any]) -> Callable[..., Any]:
    """Every future the program makes gets a serial: its completion is told
    to the scheduler, which is then sure of who a wait on it waits for."""

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.__dict__["_rpch_serial"] = next(_serials)

    init.__name__, init.__doc__ = original.__name__, original.__doc__
    return init


def _resolving(original: Callable[..., Any]) -> Callable[..., Any]:
    def resolve(self: Any, value: Any) -> None:
        original(self, value)
        serial = self.__dict__.get("_rpch_serial")
        if serial is not None and _gate is not None:
            _from_a_free_thread("completed a future of the program's")
            _gate.send(msg.Resolved(serial))

    resolve.__name__ = original.__name__
    resolve.__doc__ = original.__doc__
    return resolve


def _collect_all(futures: list[Any]) -> Any:
    futures = list(futures)
    collected = _ORIGINAL["collect_all"](futures)
    if _gate is None:
        return collected
    if (current_task() is None and current_follower() is None) or not any(f in _tracked for f in futures):
        _derived[collected] = futures
        return collected
    # Torch completes its collected future in the thread of the last answer,
    # once that answer's callbacks were counted: a callback on it would run
    # outside any task, past the quiet moment. This one completes, with
    # torch's value or error, in a callback counted on each answer, so that
    # the program's callbacks on it follow the last answer as its own do.
    import torch

    gathered = torch.futures.Future()
    left = [len(futures)]
    lock = threading.Lock()

    def one_done(_: Any) -> None:
        with lock:
            left[0] -= 1
            if left[0]:
                return
        try:  # torch's own callback on each answer ran before this one: it is done
            value = raw_wait(collected)
        except Exception as error:
            gathered.set_exception(error)
        else:
            gathered.set_result(value)

    for future in futures:
        future.add_done_callback(one_done)  # (patched: counted on each controlled call)
    _derived[gathered] = futures
    return gathered


def _wait_all(futures: list[Any]) -> list[Any]:
    return [future.wait() for future in futures]


def _cond_wait(self: threading.Condition, timeout: float | None = None) -> bool:
    task = current_task()
    if task is None or _gate is None or getattr(_local, "plain_waits", False):
        return _ORIGINAL["cond_wait"](self, timeout)
    if timeout is not None and timeout <= 0:  # a poll (Semaphore.acquire(timeout=0)): it waits for nothing
        return _ORIGINAL["cond_wait"](self, timeout)
    if not self._is_owned():  # type: ignore[attr-defined]
        raise RuntimeError("cannot wait on un-acquired lock")
    saved = self._release_save()  # type: ignore[attr-defined]
    gate = _gate
    try:
        notified = gate.cond_wait(self, timeout)
    finally:
        self._acquire_restore(saved)  # type: ignore[attr-defined]
    if notified is None:  # control was given up while it waited: not a wake-up
        if gate.cond_forget(self, task):  # (under the condition's lock: no notify can come between)
            return _ORIGINAL["cond_wait"](self, timeout)  # its own wait now, on the real clock
        return True  # a notify took it first
    if not notified:
        gate.cond_forget(self, task)
    return notified


def _notify(self: threading.Condition, n: int = 1) -> None:
    if self not in _start_signals:
        _from_a_free_thread("notified a condition (set an Event, put to a Queue)")
    # (Once control is given up too: a task it let go may still be on its
    # way back to its own wait, listed as a waiter; the notify is its.)
    woken = _gate.cond_notify(self, n) if _gate is not None else 0
    if n > woken:
        _ORIGINAL["notify"](self, n - woken)


def _from_a_free_thread(what: str) -> None:
    """A thread that is neither a task nor a callback on an answer did
    ``what``: whatever it wakes, or whatever finds it done, goes by the
    clock, not the schedule, so control is given up, saying which thread.
    (A new thread's signal that it started is not counted: ``Thread.start``
    waits for it within the starting task's step.)"""
    gate = _gate
    if gate is None or gate.released or current_task() is not None or current_follower() is not None:
        return
    if getattr(_local, "plumbing", False) or _thread.get_ident() == gate.opener:
        return
    gate.unscheduled(f"thread {threading.current_thread().name!r}, which is neither a task nor a callback on a "
                     f"controlled call's answer, {what}: when it did is the clock's choice, not the schedule's")


class plumbing:
    """Marks the current thread as running torch's own RPC plumbing (init's
    and shutdown's all-gathers, RRef type queries), not the program's code:
    what it notifies is not reported as a free thread's."""

    def __enter__(self) -> None:
        self.outer = getattr(_local, "plumbing", False)
        _local.plumbing = True

    def __exit__(self, *_: object) -> None:
        _local.plumbing = self.outer


def _start_thread(self: threading.Thread) -> None:
    # Thread.start waits for the new thread's signal that it runs: a wait
    # for no task, kept inside the starting task's step. As a scheduling
    # point it was woken by that signal whenever the new thread got to it.
    # (The signal is sent before the new thread is registered: asking
    # threading.current_thread() there makes a dummy thread of it.)
    started = getattr(getattr(self, "_started", None), "_cond", None)
    if started is not None:
        _start_signals.add(started)
    gate = _gate
    if gate is not None and not gate.released and (current_task() is not None or current_follower() is not None):
        # It runs free, on the real clock: while it lives, the schedule's
        # clock does not jump past what it may yet do (set an Event a
        # handler waits on, before that handler's call times out).
        run, name = self.run, self.name

        def run_and_tell() -> None:
            try:
                run()
            finally:
                gate.send(msg.ProgramThread(name, alive=False))

        self.run = run_and_tell  # type: ignore[method-assign]
        gate.send(msg.ProgramThread(name, alive=True))
    outer = getattr(_local, "plain_waits", False)
    _local.plain_waits = True
    try:
        _ORIGINAL["thread_start"](self)
    finally:
        _local.plain_waits = outer


def _sleep(seconds: float) -> None:
    if current_task() is None or _gate is None:
        return _ORIGINAL["sleep"](seconds)
    if _gate.block(("timer",), "sleep", seconds) is None:  # control given up: it sleeps on the real clock
        _ORIGINAL["sleep"](seconds)
    return None


def raw_wait(future: Any) -> Any:
    """``future.wait()`` as torch does it, for the harness's own callbacks
    (never a scheduling point, even when it runs inline in a task)."""
    return _ORIGINAL.get("wait", type(future).wait)(future)
