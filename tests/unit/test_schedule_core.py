"""The schedule core's pieces on their own: the recorder (steps, and replay
checked step by step and in length), virtual time (the earliest timers end
first, together, and cancelled ones never), and the supervisor's adapter
(ScheduleLink: messages in, decisions out, a stall named only when nothing
could run). No process, pipe or thread: fakes stand in for them."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from rpc_harness import _messages as msg
from rpc_harness import _schedule_link
from rpc_harness import schedule as S
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
    runnable = [True]
    monkeypatch.setattr(_schedule_link, "_any_runnable", lambda pids: runnable[0])
    now[0] += _schedule_link.STALL_SECONDS - 0.1
    assert link.stalled([1, 2]) is None, "not yet"
    now[0] += 0.2
    assert link.stalled([1, 2]) is None, "a rank thread could run: starved, not stuck"
    runnable[0] = False
    assert link.stalled([1, 2]) is None, "its look reset the clock"
    now[0] += _schedule_link.STALL_SECONDS
    assert link.stalled([1, 2]) == "ranks [1] have not started their entry"


def test_a_world_that_runs_free_is_never_called_stalled(monkeypatch):
    now = [0.0]
    link = link_of(FakeConn(msg.Begin("a", "main", "start")), FakeConn(), now=now)
    link.drain(0)
    link.scheduler.release("for the test")
    monkeypatch.setattr(_schedule_link, "_any_runnable", lambda pids: False)
    now[0] += 10 * _schedule_link.STALL_SECONDS
    assert link.stalled([]) is None


def test_closing_the_link_closes_every_pipe_once():
    now = [0.0]
    conns = [FakeConn(), None, FakeConn()]
    link = link_of(*conns, now=now)
    link.close()
    assert conns[0].closed and conns[2].closed and link.conns == [None, None, None]


def test_a_process_with_a_running_thread_is_runnable_and_a_gone_one_is_not(tmp_path, monkeypatch):
    import os

    assert _schedule_link._any_runnable([os.getpid()]), "this test's own thread is running"
    assert not _schedule_link._any_runnable([2 ** 22 + 12345]), "no such process"
