"""The scheduler of controlled worlds against a reference model (issue 30,
item 2), without processes or threads: a Hypothesis state machine plays the
ranks of a world, truthfully, by the gate's protocol. Tasks begin, reach
scheduling points, issue calls (to Python handlers, to torch's C++, making
RRefs), block on calls, RRefs and sleeps, end, and get their answers; the
program's callbacks on answers issue calls and return; ranks die or
freeze. After every rule, what the scheduler did is checked against a
simple model of its guarantees (docs/guides/schedules.md, "What the scheduler guarantees"):

1. A choice is made only when the world is quiet: no step running, every
   entry begun, every call to a live rank arrived at its handler, every
   answer due heard, every callback on an answer returned. Then exactly
   one task is let go. Callbacks go first, one at a time, the least id,
   once none runs, no task runs, every answer due is heard and the next
   callback of each answered call waits for its turn.
2. The task chosen could run: it is ready, or blocked on something
   resolved: a call answered (and the program's callbacks on the answer
   returned), an RRef whose constructor's handler ended or whose owner died.
   No task of a dead rank is ever chosen.
3. Schedule time: a sleep ends only when no task can run, the earliest
   first; the clock never goes back, and the woken task is told it was not
   notified.
4. Each stop of the running task is exactly one recorded step, in order,
   until every entry has ended: steps after that are not the schedule's.
5. The same inputs and seed give the same choices, every time; and a
   replay of the recorded steps, fed the same inputs, takes them without
   divergence, in the same number of steps.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from rpc_harness import _messages as msg
from rpc_harness import schedule as S
from rpc_harness._schedule.scheduler import Scheduler

RANKS = 3
STRATEGIES = ["random", "pct:1", "pct:2", "pct:3:30"]


class Call:
    def __init__(self, caller: str, caller_rank: int, to: int, python: bool, rref: str | None) -> None:
        self.caller, self.caller_rank, self.to, self.python, self.rref = caller, caller_rank, to, python, rref
        self.begun = self.ended = self.completed = False
        self.callbacks = 0  # the program's callbacks on its answer still to return
        self.registered = 0  # how many it had (they are numbered from 1)


class ScheduledWorld(RuleBasedStateMachine):
    """A world's ranks as the gate would report them, and the model."""

    @initialize(seed=st.integers(0, 2**20), kind=st.sampled_from(STRATEGIES))
    def start(self, seed: int, kind: str) -> None:
        self.seed, self.kind = seed, kind
        self.inputs: list[tuple] = []  # everything the scheduler was told, in order
        self.sent: list[tuple[int, object]] = []
        self.ticks = 0.0
        self.scheduler = self._new(S.parse(kind))
        # The model.
        self.state: dict[str, object] = {}  # task -> "ready" | "running" | ("blocked", on) | "ended"
        self.rank_of: dict[str, int] = {}
        self.begun: set[int] = set()
        self.gone: set[int] = set()
        self.running: str | None = None
        self.awaiting: str | None = None  # the call the running task waits, in its step, to hear answered
        self.calls: dict[str, Call] = {}
        self.rrefs: dict[str, str] = {}  # rref -> the call making it
        self.wakes: dict[str, float] = {}  # sleeping task -> the schedule time it wakes at
        self.timed_out: set[str] = set()  # woken by the clock, not yet let go: told so when they are
        self.now = 0.0
        self.stops: list[tuple[str, str]] = []  # (task, point) of each stop of the running task
        self.stopped_by: list[int] = []  # for each stop, how many inputs told the scheduler of it
        self.counter = 0
        self.turns: dict[str, str] = {}  # callbacks waiting for their turn -> their call
        self.following: str | None = None  # the call whose callback was let go, until it returns

    def _new(self, spec: S.ScheduleSpec, sent: list | None = None) -> Scheduler:
        out = self.sent if sent is None else sent
        clock = iter(range(1, 10**6))
        return Scheduler(spec, self.seed, RANKS, lambda rank, m: out.append((rank, m)), lambda: float(next(clock)))

    # -- telling the scheduler ---------------------------------------------------------------
    def _tell(self, rank: int, message: object) -> list[object]:
        before = len(self.sent)
        self.inputs.append(("message", rank, message))
        self.scheduler.on_message(rank, message)
        return [m for _, m in self.sent[before:]]

    def _fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def _entries_over(self) -> bool:
        return len(self.begun | self.gone) == RANKS and all(self.state[f"worker{r}"] == "ended" for r in self.begun)

    def _stop(self, point: str, state: object) -> None:
        task = self.running
        if not self._entries_over():
            self.stops.append((task, point))
            self.stopped_by.append(len(self.inputs) + 1)  # the input that tells it, about to be logged
        self.state[task] = state
        self.running = None

    # -- the model's view ------------------------------------------------------------------------
    def _due(self, call: Call) -> bool:
        """An answer the scheduler waits to hear."""
        if call.completed or call.caller_rank in self.gone:
            return False
        return call.ended or not call.python or call.to in self.gone

    def _quiet(self) -> bool:
        if self.running is not None:
            return False
        if any(rank not in self.begun for rank in range(RANKS) if rank not in self.gone):
            return False
        for call in self.calls.values():
            if call.python and not call.begun and call.to not in self.gone and call.caller_rank not in self.gone:
                return False  # on its way to its handler
            if self._due(call) or call.callbacks:
                return False
        return True

    def _resolved(self, on: tuple) -> bool:
        if on[0] == "call":  # answered, and the program's callbacks on the answer returned
            return self.calls[on[1]].completed and not self.calls[on[1]].callbacks
        if on[0] == "rref":  # made, or never to be: its owner died (a wait for it ends in an error)
            call = self.calls[self.rrefs[on[1]]]
            return call.ended or call.to in self.gone
        return False

    def _callback_due(self) -> str | None:
        """The callback let go at the next decision: with none running, no
        task running, every answer due heard, and the next callback of every
        answered call waiting for its turn, the least id."""
        live = [c for c, call in self.calls.items() if call.callbacks]
        if not live or self.following is not None or self.running is not None:
            return None
        if any(self._due(call) for call in self.calls.values()):
            return None
        if any(c not in self.turns.values() for c in live):
            return None
        return min(self.turns)

    def _can_run(self) -> set[str]:
        out = set()
        for task, state in self.state.items():
            if self.rank_of[task] in self.gone:
                continue
            if state == "ready" or (isinstance(state, tuple) and state[1][0] != "timer" and self._resolved(state[1])):
                out.add(task)
        return out

    # -- rules: the world ----------------------------------------------------------------------
    @precondition(lambda self: hasattr(self, "begun") and len(self.begun | self.gone) < RANKS)
    @rule(data=st.data())
    def an_entry_begins(self, data: st.DataObject) -> None:
        rank = data.draw(st.sampled_from([r for r in range(RANKS) if r not in self.begun | self.gone]))
        self.begun.add(rank)
        task = f"worker{rank}"
        self.rank_of[task], self.state[task] = rank, "ready"
        assert not [m for m in self._tell(rank, msg.Begin(task, "main", "start")) if isinstance(m, msg.Go)]

    @precondition(lambda self: hasattr(self, "scheduler"))
    @rule()
    def the_supervisor_decides(self) -> None:
        callback = self._callback_due()
        quiet, can_run = self._quiet(), self._can_run()
        sleeping = {t: at for t, at in self.wakes.items() if self.rank_of[t] not in self.gone and
                    isinstance(self.state[t], tuple)}
        before = len(self.sent)
        self.inputs.append(("decide",))
        self.scheduler.decide()
        goes = [m for _, m in self.sent[before:] if isinstance(m, msg.Go)]
        if callback is not None:  # callbacks on answers go first, one at a time, by id
            assert [g.task for g in goes] == [callback], f"the callback {callback} was due; sent {goes}"
            self.following = self.turns.pop(callback)
            return
        if not quiet or (not can_run and not sleeping):
            assert not goes, f"a choice in a world that is not quiet or has nothing to run: {goes}"
            return
        assert len(goes) == 1, f"one task at a time: {goes}"
        chosen = goes[0].task
        if can_run:
            assert chosen in can_run, f"{chosen} could not run; could: {sorted(can_run)}"
            assert goes[0].notified == (chosen not in self.timed_out), "only a sleep that ran out is not notified"
        else:  # time moves to the earliest sleep's end
            earliest = min(sleeping.values())
            assert chosen in {t for t, at in sleeping.items() if at == earliest}
            assert not goes[0].notified, "a sleep that ran out was not notified"
            assert earliest >= self.now
            self.now = earliest
            for task, at in list(sleeping.items()):
                if at == earliest:
                    self.state[task] = "ready"
                    self.timed_out.add(task)
                    del self.wakes[task]
        self.wakes.pop(chosen, None)
        self.timed_out.discard(chosen)
        self.state[chosen] = "running"
        self.running = chosen

    @precondition(lambda self: getattr(self, "running", None) is not None and self.awaiting is None)
    @rule(point=st.sampled_from(["failpoint:x", "rpc.serve:f", "cond.wait"]))
    def the_running_task_reaches_a_point(self, point: str) -> None:
        rank = self.rank_of[self.running]
        task = self.running
        self._stop(point, "ready")
        assert not [m for m in self._tell(rank, msg.At(task, point)) if isinstance(m, msg.Go)]

    @precondition(lambda self: getattr(self, "running", None) is not None and self.awaiting is None)
    @rule(to=st.integers(0, RANKS - 1), python=st.booleans(), makes_rref=st.booleans())
    def the_running_task_issues_a_call(self, to: int, python: bool, makes_rref: bool) -> None:
        task, rank = self.running, self.rank_of[self.running]
        call = self._fresh(f"{task}/")
        rref = self._fresh("rref") if python and makes_rref else None
        self.calls[call] = Call(task, rank, to, python, rref)
        if rref is not None:
            self.rrefs[rref] = call
        goes = [m for m in self._tell(rank, msg.Issued(call, to, python, rref)) if isinstance(m, msg.Go)]
        if python and to not in self.gone:
            assert [g.task for g in goes] == [task], "a Python call's caller goes on at once"
        else:
            assert not goes, "a call answered in C++ (or failing at a dead rank) holds its caller until it is"
            self.awaiting = call

    def _arriving(self) -> list[str]:
        return sorted(c for c, call in self.calls.items() if call.python and not call.begun and call.to not in self.gone)

    @precondition(lambda self: hasattr(self, "calls") and self._arriving())
    @rule(data=st.data())
    def a_handler_begins(self, data: st.DataObject) -> None:
        waiting = self._arriving()
        call_id = data.draw(st.sampled_from(waiting))
        call = self.calls[call_id]
        call.begun = True
        self.rank_of[call_id], self.state[call_id] = call.to, "ready"
        self._tell(call.to, msg.Begin(call_id, "serving f", "serve f", call=call_id))

    @precondition(lambda self: getattr(self, "running", None) is not None and self.awaiting is None)
    @rule(data=st.data())
    def the_running_task_waits_for_a_call(self, data: st.DataObject) -> None:
        mine = sorted(c for c, call in self.calls.items() if call.caller == self.running)
        if not mine:
            return
        call_id = data.draw(st.sampled_from(mine))
        task, rank = self.running, self.rank_of[self.running]
        self._stop("wait f", ("blocked", ("call", call_id)))
        self._tell(rank, msg.Block(task, "wait f", ("call", call_id)))

    @precondition(lambda self: getattr(self, "running", None) is not None and self.awaiting is None)
    @precondition(lambda self: getattr(self, "rrefs", None))
    @rule(data=st.data())
    def the_running_task_waits_for_an_rref(self, data: st.DataObject) -> None:
        rref = data.draw(st.sampled_from(sorted(self.rrefs)))
        task, rank = self.running, self.rank_of[self.running]
        self._stop("to_here", ("blocked", ("rref", rref)))
        self._tell(rank, msg.Block(task, "to_here", ("rref", rref)))

    @precondition(lambda self: getattr(self, "running", None) is not None and self.awaiting is None)
    @rule(seconds=st.sampled_from([0.0, 0.5, 1.0, 2.0]))
    def the_running_task_sleeps(self, seconds: float) -> None:
        task, rank = self.running, self.rank_of[self.running]
        self._stop("sleep", ("blocked", ("timer",)))
        self.wakes[task] = self.now + seconds
        self._tell(rank, msg.Block(task, "sleep", ("timer",), timeout=seconds))

    @precondition(lambda self: getattr(self, "running", None) is not None and self.awaiting is None)
    @rule()
    def the_running_task_ends(self) -> None:
        task, rank = self.running, self.rank_of[self.running]
        self._stop("end", "ended")
        if task in self.calls:
            self.calls[task].ended = True
        self._tell(rank, msg.End(task))

    @precondition(lambda self: hasattr(self, "calls") and any(self._due(call) for call in self.calls.values()))
    @rule(data=st.data(), callbacks=st.sampled_from([0, 0, 1, 2]))
    def an_answer_is_heard(self, data: st.DataObject, callbacks: int) -> None:
        due = sorted(c for c, call in self.calls.items() if self._due(call))
        call_id = data.draw(st.sampled_from(due))
        call = self.calls[call_id]
        call.completed, call.callbacks, call.registered = True, callbacks, callbacks
        goes = [m for m in self._tell(call.caller_rank, msg.Completed(call_id, callbacks)) if isinstance(m, msg.Go)]
        if self.awaiting == call_id:
            assert [g.task for g in goes] == [call.caller], "the caller held for this answer goes on"
            self.awaiting = None
        else:
            assert not goes

    def _reaching_their_turn(self) -> list[str]:
        return sorted(c for c, call in self.calls.items()
                      if call.callbacks and c not in self.turns.values() and c != self.following)

    @precondition(lambda self: hasattr(self, "calls") and self._reaching_their_turn())
    @rule(data=st.data())
    def a_callback_on_an_answer_waits_for_its_turn(self, data: st.DataObject) -> None:
        call_id = data.draw(st.sampled_from(self._reaching_their_turn()))
        call = self.calls[call_id]
        follower = f"{call_id}+cb{call.registered - call.callbacks + 1}"
        self.turns[follower] = call_id
        assert not [m for m in self._tell(call.caller_rank, msg.Following(follower, call_id)) if isinstance(m, msg.Go)]

    @precondition(lambda self: getattr(self, "following", None) is not None)
    @rule()
    def the_callback_let_go_returns(self) -> None:
        call_id, self.following = self.following, None
        self.calls[call_id].callbacks -= 1
        assert not [m for m in self._tell(self.calls[call_id].caller_rank, msg.Followed(call_id))
                    if isinstance(m, msg.Go)]

    @precondition(lambda self: getattr(self, "following", None) is not None)
    @rule(to=st.integers(0, RANKS - 1), python=st.booleans(), makes_rref=st.booleans())
    def the_callback_let_go_issues_a_call(self, to: int, python: bool, makes_rref: bool) -> None:
        # It runs between steps, in torch's thread: it waits for no Go, and
        # its call is waited for as a task's would be.
        answered = self.following
        rank = self.calls[answered].caller_rank
        by = f"{answered}+cb{self.calls[answered].registered - self.calls[answered].callbacks + 1}"
        call = self._fresh(f"{by}/")
        rref = self._fresh("rref") if python and makes_rref else None
        self.calls[call] = Call(by, rank, to, python, rref)
        if rref is not None:
            self.rrefs[rref] = call
        assert not [m for m in self._tell(rank, msg.Issued(call, to, python, rref, by=by)) if isinstance(m, msg.Go)]

    @precondition(lambda self: hasattr(self, "gone") and not self.gone and len(self.stops) > 3)
    @rule(rank=st.integers(0, RANKS - 1), frozen=st.booleans())
    def a_rank_dies_or_freezes(self, rank: int, frozen: bool) -> None:
        if self.running is not None and self.rank_of[self.running] == rank:
            if not self._entries_over():
                self.stops.append((self.running, "frozen" if frozen else "died"))
                self.stopped_by.append(len(self.inputs) + 1)
            self.running, self.awaiting = None, None
        self.gone.add(rank)
        for task, r in self.rank_of.items():
            if r == rank:
                self.state[task] = "ended"
                self.wakes.pop(task, None)
        for call in self.calls.values():  # nobody is left to run the callbacks of a dead caller's calls
            if call.caller_rank == rank:
                call.callbacks = 0
        self.turns = {f: c for f, c in self.turns.items() if self.calls[c].caller_rank != rank}
        if self.following is not None and self.calls[self.following].caller_rank == rank:
            self.following = None
        self.inputs.append(("gone", rank, frozen))
        self.scheduler.rank_gone(rank, frozen=frozen)

    # -- what is checked after every rule -------------------------------------------------------
    @invariant()
    def each_stop_of_the_running_task_is_one_step_in_order(self) -> None:
        if not hasattr(self, "scheduler"):
            return
        assert [(s.task, s.point) for s in self.scheduler.steps] == self.stops

    @invariant()
    def what_runs_and_the_clock_agree_with_the_model(self) -> None:
        if not hasattr(self, "scheduler"):
            return
        running = self.scheduler.running
        assert (running.id if running is not None else None) == self.running
        assert self.scheduler.now == self.now
        assert self.scheduler.controlled and not self.scheduler.problems

    def teardown(self) -> None:
        if not hasattr(self, "scheduler") or not self.scheduler.steps:
            return
        event(f"steps: {min(len(self.stops) // 10 * 10, 40)}+")
        event(f"calls: {min(len(self.calls) // 5 * 5, 20)}+, sleeps woken: {self.now > 0}")
        # The same inputs and seed: the same choices and steps.
        again: list[tuple[int, object]] = []
        self._replay(self._new(S.parse(self.kind), again))
        assert again == self.sent, "the same inputs and seed gave other choices"
        # The recorded steps, replayed: taken without divergence, and no more
        # (fed the inputs up to the last step's end: the world ends there).
        recorded = S.parse(S.replay_schedule(self.scheduler.steps))
        replayed = self._replay(self._new(recorded, []), self.inputs[: self.stopped_by[-1]])
        replayed.finish()
        assert not replayed.problems, replayed.problems
        assert [(s.task, s.point) for s in replayed.steps] == self.stops

    def _replay(self, scheduler: Scheduler, inputs: list[tuple] | None = None) -> Scheduler:
        for entry in self.inputs if inputs is None else inputs:
            if entry[0] == "message":
                scheduler.on_message(entry[1], entry[2])
            elif entry[0] == "decide":
                scheduler.decide()
            else:
                scheduler.rank_gone(entry[1], frozen=entry[2])
        return scheduler


# Under mutation (tools/mutation.py sets RPC_HARNESS_MUTATION) this test runs
# once for each of the scheduler's ~600 mutants: a third of the examples,
# and no shrinking (a mutant's failure needs no minimal example). The
# suite's own run keeps 300. (60 was too few: a caller recorded as None, so
# that no handler's answer is ever due, passed 60 and failed within 100.)
MUTATION = bool(os.environ.get("RPC_HARNESS_MUTATION"))
ScheduledWorld.TestCase.settings = settings(
    max_examples=100 if MUTATION else 300, stateful_step_count=80, deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate] if MUTATION else list(Phase),
    suppress_health_check=[HealthCheck.too_slow])
test_the_scheduler_keeps_its_guarantees_against_the_model = ScheduledWorld.TestCase
