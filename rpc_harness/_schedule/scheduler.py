"""The scheduler of a controlled world (see :mod:`rpc_harness.schedule`).

It runs one task of the whole world at a time. The ranks' tasks report
where they stand (``_gate``); the scheduler lets one go, and chooses the
next only when the world is *quiet*: no step running, every call issued
under control arrived (its handler's task has begun) or answered, every
callback of the program's on an answered call returned. So the set of
tasks that can run at each choice depends on the choices before it and
nothing else, and the seed's choices give the same schedule every time.
Such a callback runs between two steps, then, and callbacks run one at a
time, by id, once every answer due is heard; a call one issues is issued
under control all the same, named after the callback (``driver/2+cb1/1``).
What the schedule cannot order (an RPC from a thread of the program's own)
is reported by the rank (``Unscheduled``), and control is given up.

Waits the scheduler cannot see the end of stay inside a step (``_gate``).
A step that never ends, or a world in which every task waits, is not
waited for forever: the supervisor sees no progress, asks
:meth:`Scheduler.stalled` what is outstanding and lets the world run free.

Time under control is the schedule's own (:mod:`.virtual_time`): a
sleep, or a wait with a timeout, ends when no task can run and it is the
earliest to end. A delay fault is such a sleep. So does an RPC's timeout:
torch is told the call never expires, and when the schedule's clock passes
its timeout unanswered, the caller's rank is told (``TimedOut``) and ends
it in torch's own timeout error. Half on each clock, a call whose handler
slept past its caller's timeout was answered: an execution no free-running
world can have. The steps, and replay
checked against them, are the :mod:`.recorder`'s; the choice among the
tasks that can run is the strategy's (:mod:`.strategies`).

It talks to the ranks through ``send`` alone and reads the wall clock
through ``clock`` alone (for the steps' timings): no process, pipe or
thread is in it, so a test drives it with fake tasks
(tests/unit/test_scheduler_model.py). The supervisor's adapter is
:mod:`rpc_harness._parent.schedule_link`; the rank's is :mod:`rpc_harness._rank.gate`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .. import _messages as msg
from ..schedule import ScheduleSpec, Step
from . import strategies
from .recorder import Recorder
from .virtual_time import VirtualTime

READY, RUNNING, BLOCKED, ENDED = "ready", "running", "blocked", "ended"


@dataclass
class Task:
    id: str
    rank: int
    label: str
    state: str = READY
    point: str = ""  # where it stands (or waits)
    on: tuple | None = None  # what it waits for, when blocked
    notified: bool = True  # what its next Go says (False: its wait timed out)
    timer: float | None = None  # the schedule's time at which its wait times out
    cause: int = -1  # the step whose effects made it ready (-1: its own last step), for exploration


@dataclass
class Call:
    id: str
    rank: int  # its caller's (a task's, or a callback's on an answer)
    to: int
    rref: str | None = None
    settled: bool = False
    completed: bool = False  # its caller heard the answer (maybe before its handler's end reached us)
    timer: float | None = None  # the schedule's time at which it times out, unanswered
    timed_out: bool = False


class Scheduler:
    """Chooses, one step at a time, which task of a controlled world runs."""

    def __init__(self, schedule: ScheduleSpec, seed: int, world_size: int, send: Callable[[int, object], None],
                 clock: Callable[[], float]) -> None:
        self.schedule = schedule
        self.send = send
        self.clock = clock  # the wall clock, for the steps' timings only
        self.history = Recorder(schedule, seed)
        self.world_size = world_size
        self.tasks: dict[str, Task] = {}  # every task the world had (ended ones too: their ranks are asked)
        self.ready: dict[str, Task] = {}  # the tasks that could run now
        self.waiting: dict[tuple, dict[str, Task]] = {}  # blocked tasks by what they wait for
        self.calls: dict[str, Call] = {}
        self.mains_pending = set(range(world_size))
        self.arrivals: set[str] = set()  # calls whose handler has not begun
        self.early: set[str] = set()  # handlers that began before their call was reported
        self.answers: set[str] = set()  # calls whose completion is due
        self.heard: set[str] = set()  # calls whose completion came before the call itself was reported
        self.acks: dict[str, Task] = {}  # callers waiting, in their step, for an answer no task makes
        self.followers: dict[str, int] = {}  # calls whose program callbacks still run
        self.relays: dict[str, list[str]] = {}  # call -> served calls answered once it settles (@async_execution)
        self.turns: dict[str, tuple[int, str]] = {}  # callbacks waiting for their turn: id -> (rank, call)
        self.resolved: set[tuple[int, int]] = set()  # (rank, serial) of the program's futures
        self.pending_rrefs: dict[str, str] = {}  # rref id -> the call creating it, until its handler ends
        self.notified_early: set[str] = set()
        self.program_threads: dict[tuple[int, str], int] = {}  # (rank, name) -> how many live threads of the program's
        self.gone: set[int] = set()
        self.frozen: set[int] = set()
        self.time = VirtualTime()
        self.running: Task | None = None
        self.step_started = 0.0
        self.step_preempted = False
        self.step_choice: tuple[tuple[tuple[str, int], ...], int, bool] = ((), -1, False)  # ready, cause, timer
        self.controlled = True
        self.halted = False  # the world is failing: no more steps (how many more would be the clock's choice)
        self.note = ""  # why control was given up, if it was
        self.lost_at: int | None = None  # the step from which the world ran free, if control was given up
        self._strategy = strategies.make(schedule, self.history)

    @property
    def steps(self) -> list[Step]:
        return self.history.steps

    @property
    def problems(self) -> list[str]:
        """A replay that diverged, said once."""
        return self.history.problems

    @property
    def now(self) -> float:
        """The schedule's time, seconds."""
        return self.time.now

    # -- what the ranks say ---------------------------------------------------------------
    def on_message(self, rank: int, message: msg.ToScheduler) -> None:
        # A lost rank's reports read after its loss are ignored: a frozen
        # rank's scheduler pipe can still hold what it sent just before its
        # freeze (reported on another pipe), and none of its tasks runs again.
        if not self.controlled or rank in self.gone or rank in self.frozen:
            return
        match message:
            case msg.Begin(task, label, point, call):
                self._begin(rank, task, label, point, call)
            case msg.At(task, point):
                self._stop(task, point, READY)
            case msg.Block(task, point, on, timeout):
                self._block(rank, task, point, on, timeout)
            case msg.End(task, responds_later, failed, after):
                self._end(task, responds_later, after)
                if failed:
                    self.halt()
            case msg.Issued(call, to, python, rref, by, timeout):
                self._issued(rank, call, to, python, rref, by, timeout)
            case msg.Completed(call, followers):
                self.answers.discard(call)
                if call in self.calls:
                    self.calls[call].completed = True
                else:
                    self.heard.add(call)
                caller = self.acks.pop(call, None)
                if caller is not None:
                    self.send(caller.rank, msg.Go(caller.id))
                if followers:
                    self.followers[call] = self.followers.get(call, 0) + followers
                else:
                    self._settle(call)
            case msg.Following(follower, call):
                self.turns[follower] = (rank, call)
            case msg.Followed(call):
                left = self.followers.get(call, 1) - 1
                if left > 0:
                    self.followers[call] = left
                else:
                    self.followers.pop(call, None)
                    self._settle(call)
            case msg.Due(call):
                self._due(call)
            case msg.Resolved(serial):
                self.resolved.add((rank, serial))
                self._wake(("future", rank, serial))
            case msg.Notified(task):
                self._notified(task)
            case msg.ProgramThread(name, alive):
                key = (rank, name)
                left = self.program_threads.get(key, 0) + (1 if alive else -1)
                if left > 0:
                    self.program_threads[key] = left
                else:
                    self.program_threads.pop(key, None)
            case msg.Unscheduled(why):
                if not self.halted:  # (once the entries are done, the world runs free anyway)
                    self.release(f"{why}. The world ran free from step {len(self.steps)} on")

    def _begin(self, rank: int, task_id: str, label: str, point: str, call: str | None) -> None:
        if call is None:
            self.mains_pending.discard(rank)
        elif call in self.arrivals:
            self.arrivals.discard(call)
        else:
            self.early.add(call)
        task = self.tasks[task_id] = Task(task_id, rank, label, BLOCKED, point)
        self._ready(task, notified=True)

    def _stop(self, task_id: str, point: str, state: str) -> Task | None:
        task = self.tasks.get(task_id)
        if task is None:
            return None
        if self.running is task:
            self._record(task, point)
            self.running = None
        self._leave(task)
        task.state, task.point = state, point
        if state == READY:  # a scheduling point, not a wait: its Go says nothing timed out
            task.notified, task.cause = True, -1
            self.ready[task.id] = task
        return task

    def _leave(self, task: Task) -> None:
        """Take ``task`` out of the indexes of its current state."""
        self.ready.pop(task.id, None)
        if task.state == BLOCKED and task.on is not None:
            waiters = self.waiting.get(task.on)
            if waiters is not None:
                waiters.pop(task.id, None)
                if not waiters:
                    del self.waiting[task.on]

    def _block(self, rank: int, task_id: str, point: str, on: tuple, timeout: float | None) -> None:
        done_already = on[0] == "future" and len(on) > 2 and on[2]  # completed before the gate knew of it
        key = ("future", rank, on[1]) if on[0] == "future" else on
        task = self._stop(task_id, point, BLOCKED)
        if task is None:
            return
        task.on = key
        self.waiting.setdefault(key, {})[task.id] = task
        if done_already:
            self._ready(task, notified=True)
        elif key[0] == "cond" and task_id in self.notified_early:
            self.notified_early.discard(task_id)
            self._ready(task, notified=True)
        elif self._resolvable(key):
            self._ready(task, notified=True)
        elif timeout is not None:
            task.timer = self.time.timer(task.id, timeout)

    def _end(self, task_id: str, responds_later: bool, after: str | None = None) -> None:
        task = self._stop(task_id, "end", ENDED)
        call = self.calls.get(task_id)
        if call is None:
            return
        if after is not None:  # (told only of a handler that responds later)
            # An @async_execution handler returned a call's future (or a
            # then() of it): its answer leaves once that call is answered
            # and its callbacks returned, from torch's thread, with nothing
            # told in between. It is due from that moment, not from a Due
            # that could come after the world looked quiet.
            if after in self.calls and self.calls[after].settled:
                self._due(call.id)
            else:
                self.relays.setdefault(after, []).append(call.id)
        if call.rref is not None and self.pending_rrefs.pop(call.rref, None) is not None:
            self._wake(("rref", call.rref))
        if not responds_later and not call.completed and self._alive_caller(call):
            self.answers.add(call.id)  # (the caller's report may have come first: pipes race)
        if task is not None and task.id in self.notified_early:
            self.notified_early.discard(task.id)

    def _issued(self, rank: int, call_id: str, to: int, python: bool, rref: str | None, by: str | None,
                timeout: float | None = None) -> None:
        # A callback of the program's on an answer runs between steps (the
        # world is not quiet until it returns), and a call it issues waits
        # for no Go (its turn came before it ran): whatever task is running
        # is not its caller.
        running = self.running if by is None else None
        call = self.calls[call_id] = Call(call_id, rank, to, rref)  # (its caller's rank told it)
        if timeout is not None:
            call.timer = self.time.timer(("call", call_id), timeout)
        if to in self.frozen and call.timer is not None and call_id not in self.heard:
            pass  # nothing answers it: it ends at its timeout, on the schedule's clock; its caller goes on
        elif python and to not in self.gone and to not in self.frozen:
            if call_id in self.early:
                self.early.discard(call_id)
            else:
                self.arrivals.add(call_id)
            if rref is not None:
                self.pending_rrefs[rref] = call_id
        elif call_id in self.heard:  # answered in C++, or failed at a gone callee, already
            self.heard.discard(call_id)
            call.completed = True
            call.settled = call_id not in self.followers
        else:  # its caller goes on once it is (at once, or a frozen callee's timeout)
            self.answers.add(call_id)
            if running is not None:
                self.acks[call_id] = running
                return
        if running is not None:
            self.send(running.rank, msg.Go(running.id))

    def _settle(self, call_id: str) -> None:
        call = self.calls.get(call_id)
        if call is not None:
            call.settled = True
        for served in self.relays.pop(call_id, []):
            self._due(served)
        # A wait ended by the call's timeout was ended by the schedule's
        # clock, as a sleep's is: its Go says so (exploration reads it).
        self._wake(("call", call_id), notified=call is None or not call.timed_out)

    def _due(self, call_id: str) -> None:
        """Served call ``call_id``'s answer is on its way to its caller."""
        call = self.calls.get(call_id)
        if call is not None and not call.completed and self._alive_caller(call):
            self.answers.add(call_id)

    def _notified(self, task_id: str) -> None:
        task = self.tasks.get(task_id)
        if task is not None and task.state == BLOCKED and task.on is not None and task.on[0] == "cond":
            self._ready(task, notified=True)
        else:
            self.notified_early.add(task_id)

    def _resolvable(self, key: tuple) -> bool:
        kind = key[0]
        if kind == "call":
            call = self.calls.get(key[1])
            return call is None or call.settled  # a call the scheduler never saw is not waited for
        if kind == "future":
            return (key[1], key[2]) in self.resolved
        if kind == "rref":
            return key[1] not in self.pending_rrefs
        return False  # conditions and timers: woken by a notify or the clock

    def _wake(self, key: tuple, *, notified: bool = True) -> None:
        for task in sorted(self.waiting.get(key, {}).values(), key=lambda t: t.id):
            self._ready(task, notified=notified)

    def _ready(self, task: Task, *, notified: bool) -> None:
        self._leave(task)
        task.state, task.notified, task.on, task.timer = READY, notified, None, None
        task.cause = self._current_step()
        self.ready[task.id] = task

    def _current_step(self) -> int:
        """The step whose effects are happening now: the running one, or,
        between steps, the last (the world is quiet before each choice, so
        what arrives between steps -- a handler beginning, an answer, a
        notify -- was caused by the step before)."""
        return len(self.steps) if self.running is not None else len(self.steps) - 1

    def _alive_caller(self, call: Call) -> bool:
        """Whether the call's caller can still hear its answer (a frozen
        rank's reports are ignored: an answer due there would never be heard)."""
        return call.rank not in self.gone and call.rank not in self.frozen

    # -- ranks that died or froze ---------------------------------------------------------------
    def rank_gone(self, rank: int, *, frozen: bool = False, unexpected: bool = False) -> None:
        """A rank died (or froze: its calls end at their timeouts): its tasks
        are over, calls to it end in errors, calls from it are not answered.
        A death the plan did not ask for ends the world, and the schedule."""
        if unexpected:
            self.halt()
        (self.frozen if frozen else self.gone).add(rank)
        self.mains_pending.discard(rank)
        for task in self.tasks.values():
            if task.rank == rank and task.state != ENDED:
                if self.running is task:
                    self._record(task, "frozen" if frozen else "died")
                    self.running = None
                self._leave(task)
                task.state = ENDED
        self.turns = {f: turn for f, turn in self.turns.items() if turn[0] != rank}
        for call in self.calls.values():
            if call.rank == rank:  # nobody is left to hear its answer
                self.arrivals.discard(call.id)
                self.answers.discard(call.id)
                self.followers.pop(call.id, None)
            elif call.to == rank and not call.settled and call.id not in self.followers:
                self.arrivals.discard(call.id)  # it ends in an error at its caller
                if frozen and call.timer is not None and not call.completed:
                    self.answers.discard(call.id)  # at its timeout, on the schedule's clock
                elif self._alive_caller(call):
                    self.answers.add(call.id)
            if call.to == rank and call.rref is not None and self.pending_rrefs.pop(call.rref, None) is not None:
                self._wake(("rref", call.rref))  # its value will never be made: a wait for it ends, in an error

    # -- choosing ---------------------------------------------------------------------------------
    def quiet(self) -> bool:
        """Nothing running, nothing on its way: the next choice can be made."""
        return (self.running is None and not self.mains_pending and not self.arrivals and not self.answers
                and not self.followers)

    def halt(self) -> None:
        """The world is failing: its schedule ends here."""
        self.halted = True

    def entries_done(self) -> None:
        """Every entry has returned and the world shuts down: the schedule
        ends here, and the handlers still left (a late ping, a call the
        program never waited for) run free rather than wait for turns into
        a shutdown that would not wait for them (after a death torch's does not)."""
        if self.controlled and not self.halted:
            self.halt()
            for rank in range(self.world_size):
                if rank not in self.gone:
                    self.send(rank, msg.Release())

    def decide(self) -> None:
        """If the world is quiet, let the chosen task go; before that, the
        program's callbacks on answers, one at a time."""
        if not self.controlled or self.halted:
            return
        self._let_a_callback_go()
        if not self.quiet():
            return
        ready = sorted(self.ready.values(), key=lambda t: t.id)
        if not ready:
            if self._free_threads():
                return  # what a thread of the program's does comes on the real clock: the schedule's waits for it
            due = self.time.wake_due(self._timer_live)
            if not due:
                return  # every task waits: for the real world (a death), or forever
            woken = [self.tasks[key] for key in due if isinstance(key, str)]
            for key in due:
                if isinstance(key, tuple):
                    self._time_out(self.calls[key[1]])
            for task in woken:
                self._ready(task, notified=False)
            if not woken:
                return  # calls timed out: their callers' ranks end them, and the world is quiet again once they did
            ready = sorted(woken, key=lambda t: t.id)
        # After every entry ended, steps are no longer the schedule's (see
        # _record): the least id runs, and the strategy is not asked.
        chosen = ready[0] if self._entries_over() else self._strategy.choose(ready, self.history)
        last = self.history.last
        self.step_preempted = last is not None and last.state == READY and chosen is not last and last in ready
        self.step_choice = (tuple((t.id, t.rank) for t in ready), chosen.cause, not chosen.notified)
        self._leave(chosen)
        self.running = chosen
        chosen.state = RUNNING
        self.step_started = self.clock()
        self.send(chosen.rank, msg.Go(chosen.id, chosen.notified))

    def _let_a_callback_go(self) -> None:
        """Callbacks on answers run between steps, one at a time, by id,
        once every answer due has been heard (so every callback that could
        run is known) and the next callback of each answered call is
        waiting for its turn. A call's own callbacks run one after another,
        in the thread that completed it: while one runs, its call has none
        waiting, and no other is let go. Which one runs first is then not
        the clock's choice."""
        if not self.followers or self.running is not None or self.answers:
            return
        waiting = {call for _, call in self.turns.values()}
        if any(call not in waiting for call in self.followers):
            return
        follower = min(self.turns)
        rank, _ = self.turns.pop(follower)
        self.send(rank, msg.Go(follower))

    def _free_threads(self) -> list[str]:
        """The live threads of the program's own on live ranks, named."""
        return [f"{name!r} on rank {rank}" for (rank, name) in sorted(self.program_threads)
                if rank not in self.gone and rank not in self.frozen]

    def _entries_over(self) -> bool:
        """Whether every rank's entry (its main task) has ended."""
        return not self.mains_pending and all(t.state == ENDED for t in self.tasks.values() if t.label == "main")

    def _timer_live(self, key: str | tuple, at: float) -> bool:
        if isinstance(key, tuple):  # a call's timeout: live until it is answered
            call = self.calls.get(key[1])
            return (call is not None and call.timer == at and not call.completed and not call.timed_out
                    and self._alive_caller(call))
        task = self.tasks.get(key)
        return task is not None and task.timer == at and task.state == BLOCKED

    def _time_out(self, call: Call) -> None:
        """``call`` was not answered by its timeout: its caller's rank ends it
        in torch's timeout error, and its completion is then due."""
        call.timed_out = True
        self.answers.add(call.id)
        self.send(call.rank, msg.TimedOut(call.id))

    def _record(self, task: Task, point: str) -> None:
        if self._entries_over():
            # Steps after every entry ended (a handler of a call nobody
            # waits for, still sleeping) run on, their time on the schedule's
            # clock, but are not the schedule's: whether the world's
            # shutdown releases control before or after such a step ends
            # (two pipes) is the clock's choice, and it gave one seed two digests.
            return
        ready, cause, timer = self.step_choice
        self.history.record(task, point, preempted=self.step_preempted, started=self.step_started,
                            ended=self.clock(), ready=ready, cause=cause, timer=timer, clock=self.time.now)

    def finish(self) -> None:
        """The world is over: a replay under control to its end that took
        fewer or more steps diverged."""
        if self.controlled:
            self.history.finish()

    # -- giving up control ----------------------------------------------------------------------------
    def busy(self) -> bool:
        """Whether the scheduler waits for something it was told will happen
        (a step to end, a call to arrive or be answered)."""
        return self.controlled and not self.quiet() and not self._only_real_time()

    def _only_real_time(self) -> bool:
        # What a frozen rank's callers wait for ends at their RPC timeouts.
        if self.running is not None or self.mains_pending or self.arrivals or self.followers:
            return False
        return all(self.calls[c].to in self.frozen for c in self.answers if c in self.calls)

    def waiting_for_turn(self) -> list[str]:
        """The tasks (and callbacks on answers) that could run but wait for
        the running step to end, for a report."""
        ready = [f"{t.id} ({t.label}) at {t.point}" for t in sorted(self.ready.values(), key=lambda t: t.id)]
        return ready + [f"callback {follower}" for follower in sorted(self.turns)]

    def stalled(self) -> str:
        """What the scheduler is waiting for, for a report."""
        parts = []
        if self.running is not None:
            parts.append(f"{self.running.id} ({self.running.label}) has not reached its next scheduling point "
                         f"since {self.running.point or 'it began'}")
        if self.mains_pending:
            parts.append(f"ranks {sorted(self.mains_pending)} have not started their entry")
        if self.arrivals:
            parts.append(f"calls {sorted(self.arrivals)} were issued but their handlers never began")
        if self.answers:
            parts.append(f"calls {sorted(self.answers)} were never answered")
        if self.followers:
            parts.append(f"callbacks on calls {sorted(self.followers)} never returned")
        if self.turns:
            parts.append(f"callbacks {sorted(self.turns)} wait for their turn")
        if not parts:
            waiting = [f"{t.id} ({t.label}) at {t.point}" for tasks in self.waiting.values() for t in tasks.values()]
            threads = self._free_threads()
            parts.append("every task waits: " + ("; ".join(waiting) or "none is left")
                         + (f"; and the schedule's clock waits for threads of the program's own, which run free: "
                            f"{', '.join(threads)}" if threads else ""))
        return "; ".join(parts)

    def release(self, why: str) -> None:
        """Stop controlling: every task runs free from now on."""
        if not self.controlled:
            return
        self.controlled = False
        self.note = why
        self.lost_at = len(self.steps)
        for rank in range(self.world_size):
            if rank not in self.gone:
                self.send(rank, msg.Release())
