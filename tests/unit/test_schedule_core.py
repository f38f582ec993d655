"""The schedule core's pieces on their own: the recorder (steps, and replay
checked step by step and in length), virtual time (the earliest timers end
first, together, and cancelled ones never), and the supervisor's adapter
(ScheduleLink: messages in, decisions out, a stall named only when nothing
could run). No process, pipe or thread: fakes stand in for them."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from rpc_harness import _messages as msg
from rpc_harness import schedule as S
from rpc_harness._parent import schedule_link as _schedule_link
from rpc_harness._schedule.recorder import Recorder
from rpc_harness._schedule.virtual_time import VirtualTime
from rpc_harness.seeds import derive_seed


@dataclass
class Done:
    """A task as the recorder reads it."""

    id: str
    rank: int = 0
    label: str = "main"


def record(recorder: Recorder, *stops: tuple[str, str]) -> None:
    for index, (task, point) in enumerate(stops):
        recorder.record(Done(task, rank=index % 2), point, preempted=index == 1, started=index, ended=index + 0.5)


def replaying(*stops: tuple[str, str]) -> Recorder:
    free = Recorder(S.parse("controlled"), 1)
    record(free, *stops)
    return Recorder(S.parse(S.replay_schedule(free.steps)), 1)


# -- the recorder ---------------------------------------------------------------------------------


def test_each_ended_step_is_recorded_with_its_task_point_timing_and_count():
    recorder = Recorder(S.parse("controlled"), 3)
    record(recorder, ("a", "p"), ("b", "q"), ("a", "p"))
    assert [(s.index, s.rank, s.task, s.label, s.point, s.preempted, s.start, s.end) for s in recorder.steps] == [
        (0, 0, "a", "main", "p", False, 0, 0.5), (1, 1, "b", "main", "q", True, 1, 1.5),
        (2, 0, "a", "main", "p", False, 2, 2.5)]
    assert recorder.occurrences == {("a", "p"): 2, ("b", "q"): 1}
    assert recorder.last.id == "a" and not recorder.problems


def test_the_schedules_random_stream_comes_from_the_worlds_seed_alone():
    one, same, other = Recorder(S.parse("controlled"), 5), Recorder(S.parse("controlled"), 5), \
        Recorder(S.parse("controlled"), 6)
    draws = [one.rng.random() for _ in range(3)]
    assert draws == [same.rng.random() for _ in range(3)] != [other.rng.random() for _ in range(3)]
    assert one.seed == 5
    import random

    assert draws == [r.random() for r in [random.Random(derive_seed(5, "schedule"))] for _ in range(3)]


def test_a_replay_that_takes_its_recorded_steps_in_full_has_no_problem():
    recorder = replaying(("a", "p"), ("b", "q"))
    record(recorder, ("a", "p"), ("b", "q"))
    recorder.finish()
    assert recorder.problems == []


def test_a_replay_says_the_first_step_that_differs_once():
    recorder = replaying(("a", "p"), ("b", "q"), ("a", "r"))
    record(recorder, ("a", "p"), ("a", "q"), ("b", "x"))
    recorder.finish()
    assert recorder.problems == [
        "the replayed schedule diverged: step 1: expected b to reach q, a (main) reached q"]


def test_a_replay_with_the_right_task_at_another_point_diverged():
    recorder = replaying(("a", "p"))
    record(recorder, ("a", "elsewhere"))
    assert recorder.problems == ["the replayed schedule diverged: step 0: expected a to reach p, a (main) reached "
                                 "elsewhere"]


@pytest.mark.parametrize(("taken", "said"), [(1, "took 1 steps"), (3, "took 3 steps")])
def test_a_replay_of_another_length_diverged_saying_both_lengths(taken, said):
    stops = [("a", "p"), ("b", "q"), ("a", "r")]
    recorder = replaying(*stops[:2])
    record(recorder, *stops[:taken])
    recorder.finish()
    assert recorder.problems == [f"the replayed schedule diverged: the world {said}; the recorded schedule has 2"]


def test_only_a_replay_is_checked():
    recorder = Recorder(S.parse("pct:2"), 1)
    record(recorder, ("a", "p"))
    recorder.finish()
    assert recorder.problems == []


def test_named_steps_carry_their_ranks_worker_names_and_an_unknown_rank_none():
    recorder = Recorder(S.parse("controlled"), 1)
    recorder.record(Done("a", rank=1), "p", preempted=False, started=0, ended=1)
    recorder.record(Done("b", rank=2), "q", preempted=False, started=1, ended=2)
    recorder.record(Done("c", rank=4), "r", preempted=False, started=2, ended=3)
    assert [s.worker for s in recorder.named(("w0", "w1"))] == ["w1", "", ""]
    assert [s.worker for s in recorder.steps] == ["", "", ""], "the record itself is unchanged"


# -- virtual time ---------------------------------------------------------------------------------


def test_the_earliest_timers_end_first_together_and_move_the_clock():
    time = VirtualTime()
    assert time.timer("late", 5.0) == 5.0
    time.timer("early", 1.0)
    time.timer("also-early", 1.0)
    assert time.wake_due(lambda task, at: True) == ["early", "also-early"]
    assert time.now == 1.0
    assert time.timer("next", 2.0) == 3.0, "a timer counts from the schedule's now"
    assert time.wake_due(lambda task, at: True) == ["next"] and time.now == 3.0
    assert time.wake_due(lambda task, at: True) == ["late"] and time.now == 5.0
    assert time.wake_due(lambda task, at: True) == [] and time.now == 5.0


def test_a_cancelled_timer_never_ends_and_does_not_move_the_clock():
    time = VirtualTime()
    time.timer("woken-already", 1.0)
    time.timer("sleeper", 4.0)
    assert time.wake_due(lambda task, at: task != "woken-already") == ["sleeper"]
    assert time.now == 4.0
    time.timer("cancelled", 1.0)
    assert time.wake_due(lambda task, at: False) == [] and time.now == 4.0


def test_a_timer_set_again_ends_at_its_new_time_only():
    time = VirtualTime()
    time.timer("t", 1.0)
    time.timer("t", 3.0)  # the task waits again, with another timeout: its first timer is stale
    live = {"t": 3.0}
    assert time.wake_due(lambda task, at: live.get(task) == at) == ["t"] and time.now == 3.0


def test_a_negative_wait_ends_now():
    time = VirtualTime()
    time.timer("a", 2.0)
    time.wake_due(lambda task, at: True)
    assert time.timer("b", -1.0) == 2.0


# -- the supervisor's adapter -------------------------------------------------------------------


class FakeConn:
    """One end of a rank's pipe."""

    def __init__(self, *incoming: object, broken: bool = False) -> None:
        self.incoming, self.sent, self.broken, self.closed = list(incoming), [], broken, False

    def poll(self) -> bool:
        return bool(self.incoming)

    def recv(self) -> object:
        return self.incoming.pop(0)

    def send(self, message: object) -> None:
        if self.broken:
            raise BrokenPipeError
        self.sent.append(message)

    def close(self) -> None:
        self.closed = True


def link_of(*conns: FakeConn | None, now: list[float]) -> _schedule_link.ScheduleLink:
    link = _schedule_link.ScheduleLink(S.parse("controlled"), 1, len(conns), lambda: now[0])
    for conn in conns:
        link.add(conn)
    return link


def test_the_link_hands_the_ranks_messages_to_the_scheduler_and_its_choice_back():
    now = [0.0]
    zero, one = FakeConn(msg.Begin("a", "main", "start")), FakeConn(msg.Begin("b", "main", "start"))
    link = link_of(zero, one, now=now)
    link.drain(0)
    assert zero.sent == one.sent == [], "no choice before every entry began"
    link.drain(1)
    goes = zero.sent + one.sent
    assert len(goes) == 1 and isinstance(goes[0], msg.Go) and goes[0].task in ("a", "b")
    assert (zero.sent and goes[0].task == "a") or (one.sent and goes[0].task == "b"), "sent to its own rank"


def test_a_rank_whose_pipe_broke_is_skipped_not_raised_on():
    now = [0.0]
    link = link_of(FakeConn(broken=True), None, now=now)
    link.scheduler.send(0, msg.Release())
    link.scheduler.send(1, msg.Release())
    link.scheduler.send(2, msg.Release())  # one past the ranks the link has
    link.scheduler.send(7, msg.Release())
    assert link.waitables({0, 1}) == {link.conns[0]: 0}


def test_a_rank_whose_pipe_ended_is_dropped_from_the_waitables():
    class Ended(FakeConn):
        def poll(self) -> bool:
            raise EOFError

    now = [0.0]
    link = link_of(Ended(), FakeConn(), now=now)
    link.drain(0)
    assert link.conns[0] is None and list(link.waitables({0, 1}).values()) == [1]


def test_a_stall_is_named_only_after_its_seconds_and_only_while_no_rank_thread_could_run(monkeypatch):
    now = [100.0]
    link = link_of(FakeConn(msg.Begin("a", "main", "start")), FakeConn(), now=now)
    link.drain(0)  # rank 1's entry never begins: the scheduler waits for it
    runnable, asked = [True], []
    monkeypatch.setattr(_schedule_link, "_any_runnable", lambda pids: asked.append(pids) or runnable[0])
    now[0] += _schedule_link.STALL_SECONDS - 0.1
    assert link.stalled([1, 2]) is None, "not yet"
    now[0] += 0.2
    assert link.stalled([1, 2]) is None, "a rank thread could run: starved, not stuck"
    runnable[0] = False
    assert link.stalled([1, 2]) is None, "its look reset the clock"
    now[0] += _schedule_link.STALL_SECONDS
    assert link.stalled([1, 2]) == "ranks [1] have not started their entry"
    assert asked and all(pids == [1, 2] for pids in asked), "the ranks' own processes are looked at"


def waiting_on_a_condition(now: list[float]) -> _schedule_link.ScheduleLink:
    """A one-rank world whose only task waits, with no timeout, on a
    condition nobody will notify: quiet, with a waiter and nothing ready."""
    link = link_of(FakeConn(), now=now)
    link.scheduler.on_message(0, msg.Begin("a", "main", "start"))
    link.scheduler.decide()
    link.scheduler.on_message(0, msg.Block("a", "cond.wait", ("cond", 1), None))
    link.scheduler.decide()
    return link


def test_a_world_whose_every_task_waits_is_called_stalled_naming_the_waits(monkeypatch):
    monkeypatch.setattr(_schedule_link, "_any_runnable", lambda pids: False)
    now = [0.0]
    link = waiting_on_a_condition(now)
    assert link.stalled([1]) is None
    now[0] += _schedule_link.STALL_SECONDS
    assert link.stalled([1]) == "every task waits: a (main) at cond.wait"


def test_a_world_that_runs_free_is_never_called_stalled(monkeypatch):
    monkeypatch.setattr(_schedule_link, "_any_runnable", lambda pids: False)
    now = [0.0]
    link = link_of(FakeConn(msg.Begin("a", "main", "start")), FakeConn(), now=now)
    link.drain(0)
    link.scheduler.release("for the test")
    now[0] += 10 * _schedule_link.STALL_SECONDS
    assert link.stalled([]) is None
    waits = waiting_on_a_condition(now)
    waits.scheduler.release("for the test")
    now[0] += 10 * _schedule_link.STALL_SECONDS
    assert waits.stalled([]) is None, "a task still waits, but nobody waits for it any more"


def test_a_world_whose_tasks_all_ended_is_never_called_stalled(monkeypatch):
    monkeypatch.setattr(_schedule_link, "_any_runnable", lambda pids: False)
    now = [0.0]
    link = link_of(FakeConn(), now=now)
    link.scheduler.on_message(0, msg.Begin("a", "main", "start"))
    link.scheduler.decide()
    link.scheduler.on_message(0, msg.End("a", False, False))
    now[0] += 10 * _schedule_link.STALL_SECONDS
    assert link.stalled([]) is None


def test_a_stall_is_counted_from_the_links_start_and_from_each_look_that_found_nothing_to_wait_for(monkeypatch):
    monkeypatch.setattr(_schedule_link, "_any_runnable", lambda pids: False)
    now = [50.0]
    link = link_of(FakeConn(), FakeConn(), now=now)  # no entry has begun: it waits for both from the start
    now[0] += _schedule_link.STALL_SECONDS
    assert link.stalled([]) == "ranks [0, 1] have not started their entry"
    quiet = link_of(FakeConn(), now=now)
    quiet.scheduler.on_message(0, msg.Begin("a", "main", "start"))
    quiet.scheduler.decide()
    quiet.scheduler.on_message(0, msg.End("a", False, False))
    assert quiet.stalled([]) is None  # nothing to wait for: the clock restarts here
    quiet.scheduler.on_message(0, msg.Begin("0/1", "serving f", "start", "0/1"))  # a late handler, not drained
    quiet.scheduler.decide()
    now[0] += _schedule_link.STALL_SECONDS - 0.1
    assert quiet.stalled([]) is None
    now[0] += 0.2
    assert quiet.stalled([]).startswith("0/1 (serving f) has not reached its next scheduling point")


def test_a_rank_gone_tells_the_scheduler_how_and_the_next_task_goes():
    now = [0.0]
    zero, one = FakeConn(msg.Begin("a", "main", "start")), FakeConn(msg.Begin("b", "main", "start"))
    link = link_of(zero, one, now=now)
    link.drain(0)
    link.drain(1)
    first = (zero.sent + one.sent)[0].task
    gone, other = (0, one) if first == "a" else (1, zero)
    other.sent.clear()
    link.rank_gone(gone)
    scheduler = link.scheduler
    assert scheduler.gone == {gone} and not scheduler.frozen and not scheduler.halted, "died as planned"
    assert [m.task for m in other.sent] == ["b" if gone == 0 else "a"], "the other task is let go at once"
    link.rank_gone(1 - gone, frozen=True)
    assert scheduler.frozen == {1 - gone} and not scheduler.halted
    surprise = link_of(FakeConn(), FakeConn(), now=now)
    surprise.rank_gone(1, unexpected=True)
    assert surprise.scheduler.halted and surprise.scheduler.gone == {1}, "a death the plan did not ask for"


def test_closing_the_link_closes_every_pipe_once():
    now = [0.0]
    conns = [FakeConn(), None, FakeConn()]
    link = link_of(*conns, now=now)
    link.close()
    assert conns[0].closed and conns[2].closed and link.conns == [None, None, None]


def test_a_process_with_a_running_thread_is_runnable_and_a_gone_one_is_not():
    import os

    assert _schedule_link._any_runnable([os.getpid()]), "this test's own thread is running"
    assert not _schedule_link._any_runnable([2 ** 22 + 12345]), "no such process"
    assert _schedule_link._any_runnable([2 ** 22 + 12345, os.getpid()]), "a gone process is passed over"


def test_a_threads_state_is_read_after_its_name_whatever_the_name_holds(monkeypatch):
    # /proc/PID/task/TID/stat: "TID (NAME) STATE ...", and NAME may hold ") ".
    import io

    stats = {"/proc/1/task/10/stat": "10 (odd) name) S 1 2", "/proc/1/task/11/stat": None,
             "/proc/1/task/12/stat": "12 (a) b) c) R 1 2"}

    def fake_open(path, *args, **kwargs):
        if stats.get(path) is None:
            raise FileNotFoundError(path)  # a thread that ended between the listing and the read
        return io.StringIO(stats[path])

    monkeypatch.setattr(_schedule_link.os, "listdir", lambda path: ["10", "11", "12"])
    monkeypatch.setattr("builtins.open", fake_open)
    assert _schedule_link._any_runnable([1]), "the third thread runs"
    stats["/proc/1/task/12/stat"] = "12 (R) S 1 2"
    assert not _schedule_link._any_runnable([1]), "R in a name is not a state"


# -- a step that spins -----------------------------------------------------------------------------

SPINNING = ((1, "prog.py", "run_worker"), (2, "prog.py", "spin"))


def running_while_another_waits(now: list[float]) -> tuple[_schedule_link.ScheduleLink, str, str, FakeConn]:
    """Two mains on two ranks: the chosen one runs, the other waits for its turn."""
    zero, one = FakeConn(msg.Begin("a", "main", "start")), FakeConn(msg.Begin("b", "main", "start"))
    link = link_of(zero, one, now=now)
    link.drain(0)
    link.drain(1)
    running = link.scheduler.running.id
    return link, running, "b" if running == "a" else "a", zero if running == "a" else one


def answer_looks(link: _schedule_link.ScheduleLink, conn: FakeConn, rank: int, frames: tuple, cpu: float) -> int:
    """Answer every look sent to ``conn`` so far; how many there were."""
    looks = [m for m in conn.sent if isinstance(m, msg.Look)]
    conn.sent = [m for m in conn.sent if not isinstance(m, msg.Look)]
    for look in looks:
        conn.incoming.append(msg.Looked(look.task, frames, "prog.py:9 in spin", cpu))
    link.drain(rank)
    return len(looks)


def watch(link, conn, rank, *, seconds: float, now: list[float], frames=lambda i: SPINNING,
          cpu=lambda i: 0.5 * i) -> str | None:
    """Run the spin watch every half second for ``seconds``, each look answered."""
    said = None
    for i in range(int(seconds / 0.5) + 1):
        said = link.spinning()
        if said is not None:
            return said
        answer_looks(link, conn, rank, frames(i), cpu(i))
        now[0] += 0.5
    return said


def test_a_step_that_stays_in_the_same_calls_on_a_cpu_while_another_waits_is_named_a_stall_of_the_schedule():
    now = [0.0]
    link, running, other, conn = running_while_another_waits(now)
    rank = 0 if running == "a" else 1
    said = watch(link, conn, rank, seconds=_schedule_link.SPIN_SECONDS + 1, now=now)
    assert said is not None and now[0] >= _schedule_link.SPIN_SECONDS, "named only once its seconds passed"
    assert said.startswith(f"{running} (main) ran for ") and "without reaching a scheduling point since start" in said
    assert "(at prog.py:9 in spin)" in said and f"while {other} (main) at start waited for a turn" in said
    assert said.endswith("A stall of the schedule's making, not a hang of the program's: free-running, the program "
                         "may pass"), said


def test_a_step_whose_calls_change_keeps_its_turn_however_long_it_runs():
    now = [0.0]
    link, running, _, conn = running_while_another_waits(now)
    rank = 0 if running == "a" else 1
    moving = watch(link, conn, rank, seconds=4 * _schedule_link.SPIN_SECONDS, now=now,
                   frames=lambda i: SPINNING + ((3 + i % 3, "prog.py", f"layer{i % 3}"),))
    assert moving is None, "a computation that moves through its code is not a spin"
    # Once it stays in one place, the window starts there: not at the step's start.
    started = now[0]
    said = watch(link, conn, rank, seconds=2 * _schedule_link.SPIN_SECONDS, now=now)
    assert said is not None and now[0] - started >= _schedule_link.SPIN_SECONDS


def test_a_step_that_uses_no_cpu_is_not_a_spin_and_a_look_is_no_progress(monkeypatch):
    now = [0.0]
    link, running, _, conn = running_while_another_waits(now)
    rank = 0 if running == "a" else 1
    heard = link.heard
    assert watch(link, conn, rank, seconds=3 * _schedule_link.SPIN_SECONDS, now=now, cpu=lambda i: 0.001 * i) is None
    assert link.heard == heard, "answers to the link's looks do not reset the watch for a blocked step"
    unknown = watch(link, conn, rank, seconds=3 * _schedule_link.SPIN_SECONDS, now=now, cpu=lambda i: -1.0)
    assert unknown is None, "no CPU time known: no evidence"
    gone = watch(link, conn, rank, seconds=3 * _schedule_link.SPIN_SECONDS, now=now, frames=lambda i: ())
    assert gone is None, "no thread to look at: no evidence"


def test_a_step_nobody_waits_for_is_never_looked_at():
    now = [0.0]
    conn = FakeConn(msg.Begin("a", "main", "start"))
    link = link_of(conn, now=now)
    link.drain(0)
    assert link.scheduler.running is not None
    for _ in range(4 * int(_schedule_link.SPIN_SECONDS)):
        assert link.spinning() is None
        now[0] += 0.5
    assert not [m for m in conn.sent if isinstance(m, msg.Look)], "alone, it may compute as long as it likes"


def test_the_running_task_is_looked_at_every_half_second_and_a_stale_answer_is_dropped():
    now = [0.0]
    link, running, other, conn = running_while_another_waits(now)
    rank = 0 if running == "a" else 1
    link.spinning()
    link.spinning()
    assert [m for m in conn.sent if isinstance(m, msg.Look)] == [msg.Look(running)], "one look per half second"
    now[0] += _schedule_link.LOOK_SECONDS
    link.spinning()
    assert answer_looks(link, conn, rank, SPINNING, 1.0) == 2
    conn.incoming.append(msg.Looked(other, SPINNING, "x", 1.0))  # not the running task: ignored
    link.drain(rank)
    assert link.looks.last[1].task == running


def looks_sent(conn: FakeConn) -> list:
    return [m for m in conn.sent if isinstance(m, msg.Look)]


def test_a_spin_is_named_the_moment_its_window_reaches_its_seconds_with_the_steps_own_figures():
    now = [100.0]  # the link's clock is not the world's start: the step's time is counted from its Go
    link, running, _, conn = running_while_another_waits(now)
    rank = 0 if running == "a" else 1
    # Looks at 100.0, 100.5, ..., each answered at once: the window is 5.0 s at the look of 105.5.
    said = watch(link, conn, rank, seconds=2 * _schedule_link.SPIN_SECONDS, now=now, cpu=lambda i: 2.0 + 0.5 * i)
    assert now[0] == 100.0 + _schedule_link.SPIN_SECONDS + 0.5
    assert f"{running} (main) ran for 5.5s without reaching a scheduling point since start, in the same calls " \
           "for the last 5.0s (at prog.py:9 in spin) and on a CPU for 5.0s of them" in said


def test_a_spin_needs_its_cpu_share_and_exactly_that_share_is_enough(monkeypatch):
    monkeypatch.setattr(_schedule_link, "SPIN_CPU_SHARE", 0.0625)  # exact in binary, as 8 + 0.3125 is
    share = 0.0625 * _schedule_link.SPIN_SECONDS
    for base, used, named in ((8.0, share, True), (8.0, share / 2, False)):
        now = [0.0]
        link, running, _, conn = running_while_another_waits(now)
        rank = 0 if running == "a" else 1
        # From a CPU time of 10 s before the window (a thread that computed before it spun).
        steps = int(_schedule_link.SPIN_SECONDS / 0.5)
        said = watch(link, conn, rank, seconds=_schedule_link.SPIN_SECONDS + 0.5, now=now,
                     cpu=lambda i, base=base, used=used, steps=steps: base + (used if i >= steps else 0.0))
        assert (said is not None) == named, (base, used, said)


def test_a_spin_in_a_step_that_began_with_no_point_says_since_it_began():
    now = [0.0]
    zero, one = FakeConn(msg.Begin("a", "main", "")), FakeConn(msg.Begin("b", "main", ""))
    link = link_of(zero, one, now=now)
    link.drain(0)
    link.drain(1)
    running = link.scheduler.running.id
    conn, rank = (zero, 0) if running == "a" else (one, 1)
    said = watch(link, conn, rank, seconds=2 * _schedule_link.SPIN_SECONDS, now=now)
    assert "without reaching a scheduling point since it began, in the same calls" in said


def test_a_released_or_halted_schedule_looks_at_nothing():
    for stop in (lambda s: s.release("for the test"), lambda s: s.halt()):
        now = [0.0]
        link, running, _, conn = running_while_another_waits(now)
        rank = 0 if running == "a" else 1
        stop(link.scheduler)
        assert link.scheduler.running is not None and link.scheduler.waiting_for_turn()
        assert watch(link, conn, rank, seconds=3 * _schedule_link.SPIN_SECONDS, now=now) is None
        assert looks_sent(conn) == []


def test_a_step_that_ran_alone_is_looked_at_once_another_task_waits_for_its_turn():
    now = [0.0]
    zero, one = FakeConn(msg.Begin("a", "main", "start")), FakeConn()
    link = link_of(zero, one, now=now)
    link.scheduler.on_message(1, msg.Begin("b", "main", "start"))  # rank 1's entry began first
    link.drain(0)
    running = link.scheduler.running
    assert running is not None and link.scheduler.waiting_for_turn()
    # Then the other ends its step and waits; the first runs alone, and is not looked at.
    conn = zero if running.id == "a" else one
    other_conn = one if conn is zero else zero
    assert link.spinning() is None and looks_sent(conn) == [msg.Look(running.id)]
    conn.sent.clear()
    rank = 0 if conn is zero else 1
    conn.incoming.append(msg.End(running.id, False, False))
    link.drain(rank)
    alone = link.scheduler.running
    assert alone is not None and not link.scheduler.waiting_for_turn()
    now[0] += 1.0
    assert link.spinning() is None and looks_sent(other_conn) == []
    # A handler arrives and waits for its turn: the running step is looked at again.
    link.scheduler.on_message(rank, msg.Begin("9/1", "serving f", "start", "9/1"))
    assert link.scheduler.waiting_for_turn()
    assert link.spinning() is None
    assert looks_sent(other_conn) == [msg.Look(alone.id)]


def test_a_spin_names_every_task_that_waited_for_its_turn():
    now = [0.0]
    conns = [FakeConn(msg.Begin(task, "main", "start")) for task in ("a", "b", "c")]
    link = link_of(*conns, now=now)
    for rank in range(3):
        link.drain(rank)
    running = link.scheduler.running.id
    rank = "abc".index(running)
    said = watch(link, conns[rank], rank, seconds=2 * _schedule_link.SPIN_SECONDS, now=now)
    others = [task for task in "abc" if task != running]
    assert f"while {others[0]} (main) at start; {others[1]} (main) at start waited for a turn" in said


def test_messages_after_a_looks_answer_are_read_in_the_same_drain():
    now = [0.0]
    link, running, other, conn = running_while_another_waits(now)
    rank = 0 if running == "a" else 1
    link.spinning()  # a look is asked for
    conn.incoming += [msg.Looked(running, SPINNING, "x", 1.0), msg.End(running, False, False)]
    link.drain(rank)
    assert conn.incoming == [] and link.scheduler.running.id == other, "the End behind the answer was read"


def test_a_pipe_that_ended_counts_as_news_for_the_stall_watch(monkeypatch):
    class Ended(FakeConn):
        def poll(self) -> bool:
            raise EOFError

    monkeypatch.setattr(_schedule_link, "_any_runnable", lambda pids: False)
    now = [50.0]
    link = link_of(Ended(), FakeConn(), now=now)  # no entry has begun: the scheduler waits for both
    now[0] += 2 * _schedule_link.STALL_SECONDS
    link.drain(0)  # rank 0's pipe ends: something happened just now
    assert link.stalled([]) is None
    now[0] += _schedule_link.STALL_SECONDS
    assert link.stalled([]) == "ranks [0, 1] have not started their entry"


def test_an_entrys_end_tells_every_rank_release_once_and_then_sends_nothing():
    # A reused world's next entry reads the same pipes: a second Release, or
    # a Go sent after the first, would be heard by the next entry's gate.
    now = [0.0]
    zero, one = FakeConn(msg.Begin("a", "main", "start")), FakeConn(msg.Begin("b", "main", "start"))
    link = link_of(zero, one, now=now)
    link.drain(0)
    link.drain(1)
    chosen = next(m.task for m in zero.sent + one.sent if isinstance(m, msg.Go))
    link.end_entry()
    link.end_entry()
    assert [m for m in zero.sent if isinstance(m, msg.Release)] == [msg.Release()]
    assert [m for m in one.sent if isinstance(m, msg.Release)] == [msg.Release()]
    assert link.scheduler.halted and link.muted
    sent = len(zero.sent) + len(one.sent)
    (zero if chosen == "a" else one).incoming.append(msg.At(chosen, "rpc.call:f"))
    link.drain(0 if chosen == "a" else 1)
    assert len(zero.sent) + len(one.sent) == sent, "nothing after the end"


def test_a_release_given_before_the_entrys_end_is_not_told_again():
    now = [0.0]
    zero = FakeConn(msg.Begin("a", "main", "start"))
    link = link_of(zero, now=now)
    link.drain(0)
    link.scheduler.release("lost control")
    link.end_entry()
    assert [m for m in zero.sent if isinstance(m, msg.Release)] == [msg.Release()]


def test_a_gates_released_is_its_last_word_and_not_the_schedulers():
    now = [0.0]
    zero = FakeConn(msg.Begin("a", "main", "start"), msg.Released())
    link = link_of(zero, now=now)
    heard = []
    link.scheduler.on_message = lambda rank, message: heard.append(message)  # type: ignore[method-assign]
    link.drain(0)
    assert link.released == {0} and heard == [msg.Begin("a", "main", "start")]
