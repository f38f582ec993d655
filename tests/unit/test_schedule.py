"""Controlled schedules without processes: the scheduler fed by hand with
what ranks would say, the schedule's text forms, and how a schedule reads."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rpc_harness import WorldSpecError
from rpc_harness import _messages as msg
from rpc_harness import schedule as S
from rpc_harness._schedule.scheduler import Scheduler
from rpc_harness.strategies import schedules


class World:
    """A scheduler and what it sent, with a clock that ticks per look."""

    def __init__(self, schedule: str | S.ScheduleSpec = "controlled", seed: int = 7, ranks: int = 2) -> None:
        self.sent: list[tuple[int, object]] = []
        self.time = 0.0
        spec = schedule if isinstance(schedule, S.ScheduleSpec) else S.parse(schedule)
        self.scheduler = Scheduler(spec, seed, ranks, lambda rank, m: self.sent.append((rank, m)), self.clock)

    def clock(self) -> float:
        self.time += 1.0
        return self.time

    def say(self, rank: int, *messages: object) -> None:
        for message in messages:
            self.scheduler.on_message(rank, message)
        self.scheduler.decide()

    def goes(self) -> list[str]:
        """The tasks let go, in order (an issued call's ack to the task
        already running is not a choice: repeats in a row count once)."""
        out: list[str] = []
        for _, m in self.sent:
            if isinstance(m, msg.Go) and (not out or out[-1] != m.task):
                out.append(m.task)
        return out

    def all_goes(self) -> list[str]:
        return [m.task for _, m in self.sent if isinstance(m, msg.Go)]


def two_mains(world: World) -> None:
    world.say(0, msg.Begin("a", "main", "start"))
    assert world.goes() == [], "no choice before every rank's entry has begun"
    world.say(1, msg.Begin("b", "main", "start"))


def test_nothing_runs_until_every_entry_has_begun_then_one_task_at_a_time():
    world = World()
    two_mains(world)
    assert len(world.goes()) == 1
    first = world.goes()[0]
    world.say(0 if first == "a" else 1, msg.At(first, "rpc.call:f"))
    assert len(world.goes()) == 2, "the step ended: the next one is chosen"


def test_no_choice_while_an_issued_call_has_not_arrived_or_been_answered():
    world = World(schedule="pct:1")  # no preemptions: the running task goes on while it can
    two_mains(world)
    runner = world.goes()[0]
    rank = 0 if runner == "a" else 1
    other = 1 - rank
    world.say(rank, msg.Issued(f"{runner}/1", other, python=True), msg.Block(runner, "wait f", ("call", f"{runner}/1")))
    assert len(world.goes()) == 1, "the call's handler has not begun: no choice yet"
    world.say(other, msg.Begin(f"{runner}/1", "serving f", "serve f", call=f"{runner}/1"))
    assert len(world.goes()) == 2
    handler_or_other = world.goes()[1]
    world.say(other, msg.End(handler_or_other) if handler_or_other == f"{runner}/1" else
              msg.At(handler_or_other, "x"))
    # Whatever ran, the caller stays blocked until its answer is heard.
    assert world.scheduler.tasks[runner].state == "blocked"


def test_a_call_torch_answers_in_cpp_holds_its_caller_until_the_answer_is_in():
    # Whether such an answer came before the caller looks at its future is
    # the clock's business: the caller goes on only once it has.
    world = World(schedule="random")
    two_mains(world)
    runner = world.goes()[0]
    rank = 0 if runner == "a" else 1
    world.say(rank, msg.Issued(f"{runner}/1", 1 - rank, python=False))
    assert world.all_goes() == [runner], "no ack, and no other task, before the answer"
    world.say(rank, msg.Completed(f"{runner}/1"))
    assert world.all_goes() == [runner, runner], "the answer is in: the caller goes on, still in its step"
    # An answer heard before the call itself was reported (two threads, one pipe) acks at once.
    world.say(rank, msg.Completed(f"{runner}/2"), msg.Issued(f"{runner}/2", 1 - rank, python=False))
    assert world.all_goes() == [runner, runner, runner]
    world.say(rank, msg.Block(runner, "wait g", ("call", f"{runner}/2")))
    assert world.scheduler.tasks[runner].state in ("ready", "running"), "an answered call is not waited for"


def test_a_python_call_to_a_live_rank_is_acked_at_once():
    world = World(schedule="random")
    two_mains(world)
    runner = world.goes()[0]
    rank = 0 if runner == "a" else 1
    world.say(rank, msg.Issued(f"{runner}/1", 1 - rank, python=True))
    assert world.all_goes() == [runner, runner]


def test_an_answer_heard_before_its_handlers_end_is_not_waited_for_again():
    # The caller's report and the callee's end come over different pipes, in either order.
    world = World(schedule="pct:1")
    two_mains(world)
    runner = world.goes()[0]
    rank, other = (0, 1) if runner == "a" else (1, 0)
    call = f"{runner}/1"
    world.say(rank, msg.Issued(call, other, python=True), msg.Block(runner, "wait f", ("call", call)))
    world.say(other, msg.Begin(call, "serving f", "serve f", call=call))
    while world.goes()[-1] != call:
        task = world.goes()[-1]
        world.say(other if task != "a" and task != "b" else (0 if task == "a" else 1), msg.At(task, "x"))
    world.say(rank, msg.Completed(call))  # heard first ...
    world.say(other, msg.End(call))  # ... its handler's end second
    assert call not in world.scheduler.answers
    assert world.scheduler.quiet() or world.scheduler.running is not None


def test_the_same_seed_makes_the_same_choices_and_another_seed_others():
    def choices(seed: int, schedule: str) -> list[str]:
        world = World(schedule=schedule, seed=seed, ranks=3)
        for rank, name in enumerate("abc"):
            world.say(rank, msg.Begin(name, "main", "start"))
        for _ in range(30):
            task = world.goes()[-1]
            world.say("abc".index(task), msg.At(task, "p"))
        return world.goes()

    for schedule in ("random", "pct:3"):
        assert choices(1, schedule) == choices(1, schedule)
        assert len({tuple(choices(seed, schedule)) for seed in range(8)}) > 1, schedule


def test_a_replay_that_takes_another_step_says_where_it_diverged():
    world = World(schedule=S.replay_schedule([("a", "p"), ("b", "q")]))
    two_mains(world)
    assert world.goes() == ["a"], "the recorded first step's task runs first"
    world.say(0, msg.At("a", "elsewhere"))
    assert world.scheduler.problems == [
        "the replayed schedule diverged: step 0: expected a to reach p, a (main) reached elsewhere"]


def test_a_replay_that_ends_early_diverged():
    world = World(schedule=S.replay_schedule([("a", "p"), ("b", "q"), ("a", "end")]))
    two_mains(world)
    world.say(0, msg.At("a", "p"))
    world.say(1, msg.End("b"))
    world.scheduler.finish()
    assert world.scheduler.problems[0].startswith("the replayed schedule diverged: step 1: expected b to reach q")


def test_timers_end_only_when_no_task_can_run_earliest_first():
    world = World(schedule="pct:1")
    two_mains(world)
    runner = world.goes()[0]
    rank, other = (0, 1) if runner == "a" else (1, 0)
    other_task = "b" if runner == "a" else "a"
    world.say(rank, msg.Block(runner, "sleep", ("timer",), 5.0))
    assert world.goes()[-1] == other_task, "the sleeper waits while another task can run"
    world.say(other, msg.Block(other_task, "sleep", ("timer",), 1.0))
    assert world.goes()[-1] == other_task and world.scheduler.now == 1.0, "the earliest timer ends first"
    world.say(other, msg.End(other_task))
    assert world.goes()[-1] == runner and world.scheduler.now == 5.0
    assert [m.notified for _, m in world.sent if isinstance(m, msg.Go)][-1] is False, "it timed out"


def test_a_notify_wakes_a_condition_waiter_and_cancels_its_timeout():
    world = World(schedule="pct:1")
    two_mains(world)
    runner = world.goes()[0]
    rank, other = (0, 1) if runner == "a" else (1, 0)
    other_task = "b" if runner == "a" else "a"
    world.say(rank, msg.Block(runner, "wait on a condition", ("cond", 9), 3.0))
    world.say(other, msg.Notified(runner), msg.At(other_task, "p"))
    assert world.scheduler.tasks[runner].state in ("ready", "running")
    assert world.scheduler.tasks[runner].notified is True


def test_a_failing_entry_ends_the_schedule_there():
    world = World()
    two_mains(world)
    runner = world.goes()[0]
    world.say(0 if runner == "a" else 1, msg.End(runner, failed=True))
    assert len(world.goes()) == 1, "no step after the failure: how many would be the clock's choice"


def test_a_stalled_world_says_what_it_waits_for_and_gives_up_control():
    world = World()
    two_mains(world)
    runner = world.goes()[0]
    assert world.scheduler.busy()
    assert f"{runner} (main) has not reached its next scheduling point" in world.scheduler.stalled()
    world.scheduler.release("stalled")
    assert not world.scheduler.controlled and world.scheduler.note == "stalled"
    assert [rank for rank, m in world.sent if isinstance(m, msg.Release)] == [0, 1]


# -- the scheduler's edges, on a steady schedule -------------------------------------------
# A guide with no recorded choices: the task that ran goes on while it can,
# else the first ready task by id. So each test knows which task is chosen.
STEADY = S.ScheduleSpec("guide")


def steady(ranks: int = 2) -> World:
    """A world whose mains ("a" on rank 0, "b" on rank 1, ...) have begun; "a" runs."""
    world = World(schedule=STEADY, ranks=ranks)
    for rank in range(ranks):
        world.say(rank, msg.Begin("abcd"[rank], "main", "start"))
    assert world.goes() == ["a"]
    return world


def stops(world: World) -> list[tuple[str, str]]:
    return [(step.task, step.point) for step in world.scheduler.steps]


def releases(world: World) -> list[int]:
    return [rank for rank, m in world.sent if isinstance(m, msg.Release)]


@pytest.mark.parametrize(("frozen", "point"), [(False, "died"), (True, "frozen")])
def test_a_rank_lost_mid_step_ends_that_step_and_its_tasks_for_good(frozen, point):
    world = steady()
    s = world.scheduler
    s.rank_gone(0, frozen=frozen)
    assert stops(world) == [("a", point)]
    assert s.running is None and s.tasks["a"].state == "ended"
    assert (s.frozen, s.gone) == (({0}, set()) if frozen else (set(), {0}))
    assert not s.halted, "a death the plan asked for does not end the schedule"
    world.say(1)
    assert world.goes() == ["a", "b"]


def test_a_lost_ranks_ready_tasks_are_never_chosen_again():
    world = steady()
    s = world.scheduler
    s.rank_gone(1)
    assert s.tasks["b"].state == "ended" and "b" not in s.ready
    assert stops(world) == [], "b was not running: no step ends"
    world.say(0, msg.At("a", "p"))
    assert world.goes() == ["a"] and s.running is s.tasks["a"]


def test_a_death_nobody_planned_ends_the_schedule():
    world = steady()
    world.scheduler.rank_gone(1, unexpected=True)
    assert world.scheduler.halted
    world.say(0, msg.At("a", "p"))
    assert world.all_goes() == ["a"], "no step after an unplanned death"


def test_a_rank_that_dies_before_its_entry_begins_is_not_waited_for():
    world = World(schedule=STEADY)
    world.say(0, msg.Begin("a", "main", "start"))
    assert world.goes() == []
    world.scheduler.rank_gone(1)
    world.say(0)
    assert world.goes() == ["a"]


def test_calls_from_a_dead_caller_are_no_longer_waited_for():
    world = steady()
    s = world.scheduler
    world.say(0, msg.Issued("a/1", 1, python=True))  # on its way to its handler
    world.say(0, msg.Issued("a/2", 1, python=False))  # answered in C++: a is held for it
    assert s.arrivals == {"a/1"} and s.answers == {"a/2"}
    s.rank_gone(0)
    assert s.arrivals == set() and s.answers == set() and s.quiet()
    world.say(1)
    assert world.goes() == ["a", "b"]


def test_callbacks_of_a_dead_callers_call_are_no_longer_waited_for():
    world = steady()
    s = world.scheduler
    world.say(0, msg.Issued("a/1", 1, python=False), msg.Completed("a/1", followers=1), msg.At("a", "p"))
    assert world.goes() == ["a"] and s.followers == {"a/1": 1}, "its callback has not returned: no choice"
    s.rank_gone(0)
    assert s.followers == {}
    world.say(1)
    assert world.goes() == ["a", "b"]


def test_a_call_to_a_rank_that_dies_ends_in_an_error_its_caller_must_hear():
    world = steady()
    s = world.scheduler
    world.say(0, msg.Issued("a/1", 1, python=True), msg.Block("a", "wait f", ("call", "a/1")))
    assert s.arrivals == {"a/1"}
    s.rank_gone(1)
    assert s.arrivals == set() and s.answers == {"a/1"}, "no handler will begin; the error is due"
    world.say(0)
    assert world.goes() == ["a"] and s.tasks["a"].state == "blocked"
    world.say(0, msg.Completed("a/1"))
    assert s.running is s.tasks["a"] and stops(world) == [("a", "wait f")], "heard: a runs again"


def test_answered_calls_to_a_rank_that_dies_are_not_due_again():
    world = steady()
    s = world.scheduler
    world.say(0, msg.Issued("a/1", 1, python=False), msg.Completed("a/1"))  # answered, settled
    world.say(0, msg.Issued("a/2", 1, python=False), msg.Completed("a/2", followers=1))  # its callback runs
    assert s.answers == set()
    s.rank_gone(1)
    assert s.answers == set() and s.followers == {"a/2": 1}


def test_a_wait_for_an_rref_whose_owner_dies_ends():
    world = steady()
    s = world.scheduler
    world.say(0, msg.Issued("a/1", 1, python=True, rref="r1"), msg.Block("a", "to_here", ("rref", "r1")))
    assert s.pending_rrefs == {"r1": "a/1"} and s.tasks["a"].state == "blocked"
    s.rank_gone(1)
    assert s.pending_rrefs == {} and s.tasks["a"].state == "ready", "its value will never be made"
    world.say(0, msg.Completed("a/1"))  # the call's error, heard
    assert s.running is s.tasks["a"] and stops(world) == [("a", "to_here")]


def test_an_rref_still_being_made_outlives_another_ranks_death():
    world = steady(ranks=3)
    s = world.scheduler
    world.say(0, msg.Issued("a/1", 1, python=True, rref="r1"), msg.Block("a", "to_here", ("rref", "r1")))
    s.rank_gone(2)
    assert s.pending_rrefs == {"r1": "a/1"} and s.tasks["a"].state == "blocked"


def test_the_death_of_an_rrefs_owner_after_it_was_made_wakes_nobody():
    world = steady()
    s = world.scheduler
    world.say(0, msg.Issued("a/1", 1, python=True, rref="r1"), msg.Block("a", "wait f", ("call", "a/1")))
    world.say(1, msg.Begin("a/1", "serving f", "serve f", call="a/1"))
    world.say(1, msg.End("a/1"))
    assert s.pending_rrefs == {}
    s.rank_gone(1)
    assert s.tasks["a"].state == "blocked" and s.answers == {"a/1"}

def test_an_end_a_frozen_rank_sent_before_its_freeze_heard_after_it_changes_nothing():
    # The freeze is reported on the rank's main pipe, its scheduler messages on
    # another: a handler's End sent just before can be read just after.
    world = steady()
    s = world.scheduler
    world.say(0, msg.Issued("a/1", 1, python=True, rref="r1"), msg.Block("a", "to_here", ("rref", "r1")))
    world.say(1, msg.Begin("a/1", "serving f", "serve f", call="a/1"))
    assert s.running is s.tasks["a/1"]
    s.rank_gone(1, frozen=True)
    assert s.pending_rrefs == {} and s.tasks["a"].state == "ready"
    world.say(1, msg.End("a/1"))
    assert stops(world) == [("a", "to_here"), ("a/1", "frozen")] and s.tasks["a/1"].state == "ended"
    assert s.answers == {"a/1"} and s.tasks["a"].state == "ready", "its caller still waits for the timeout's error"

def test_reports_a_frozen_rank_sent_before_its_freeze_read_after_it_are_ignored():
    # The freeze is reported on the rank's main pipe, its scheduler messages on
    # another: b called its own rank, and the call and its handler's Begin are
    # read only after the freeze. Nobody is left to hear that call's answer, and
    # the handler must never be chosen (its rank is stopped).
    world = steady()
    s = world.scheduler
    world.say(0, msg.Block("a", "w", ("cond", 1)))
    assert world.goes() == ["a", "b"]
    s.rank_gone(1, frozen=True)
    world.say(1, msg.Issued("b/1", 1, python=True), msg.Begin("b/1", "serving f", "serve f", call="b/1"))
    assert s.answers == set() and s.arrivals == set() and "b/1" not in s.tasks
    world.say(0, msg.Notified("a"))
    assert world.goes() == ["a", "b", "a"] and [rank for rank, _ in world.sent] == [0, 1, 0]

def test_an_rref_is_made_when_its_handler_ends():
    world = steady()
    s = world.scheduler
    world.say(0, msg.Issued("a/1", 1, python=True, rref="r1"), msg.Block("a", "to_here", ("rref", "r1")))
    world.say(1, msg.Begin("a/1", "serving f", "serve f", call="a/1"))
    assert world.goes() == ["a", "a/1"], "a waits; the handler is first by id"
    world.say(1, msg.End("a/1"))
    assert s.pending_rrefs == {} and s.answers == {"a/1"}
    world.say(0, msg.Completed("a/1"))
    assert world.goes() == ["a", "a/1", "a"]


def test_a_handler_that_responds_later_is_not_answered_at_its_end():
    world = steady()
    s = world.scheduler
    world.say(0, msg.Issued("a/1", 1, python=True), msg.Block("a", "wait f", ("call", "a/1")))
    world.say(1, msg.Begin("a/1", "serving f", "serve f", call="a/1"))
    world.say(1, msg.End("a/1", responds_later=True))
    assert s.answers == set() and world.goes() == ["a", "a/1", "b"], "nothing is due: the next step is chosen"
    world.say(1, msg.Due("a/1"))
    assert s.answers == {"a/1"}, "its answer, made later, is due"


def test_a_frozen_ranks_callers_wait_for_real_time_which_is_not_busy():
    world = steady()
    s = world.scheduler
    world.say(0, msg.Issued("a/1", 1, python=True), msg.Block("a", "wait f", ("call", "a/1")))
    s.rank_gone(1, frozen=True)
    assert s.answers == {"a/1"} and not s.quiet()
    assert not s.busy(), "the call ends at its RPC timeout: nothing the scheduler was told will come"
    assert s.stalled() == "calls ['a/1'] were never answered"


def test_a_dead_ranks_callers_are_busy_waiting_for_the_error():
    world = steady()
    s = world.scheduler
    world.say(0, msg.Issued("a/1", 1, python=True), msg.Block("a", "wait f", ("call", "a/1")))
    s.rank_gone(1)
    assert s.busy(), "the error of a call to a dead rank comes at once"


@pytest.mark.parametrize("what", ["running", "mains", "arrivals", "followers"])
def test_busy_while_anything_is_outstanding_even_with_a_frozen_callee(what):
    world = World(schedule=STEADY, ranks=3)
    s = world.scheduler
    world.say(0, msg.Begin("a", "main", "start"))
    if what != "mains":
        world.say(1, msg.Begin("b", "main", "start"))
        world.say(2, msg.Begin("c", "main", "start"))
    s.rank_gone(2, frozen=True)
    if what == "mains":
        assert s.busy()
        return
    world.say(0, msg.Issued("a/1", 2, python=True))  # held: its callee is frozen
    assert s.answers == {"a/1"} and s.running is not None
    if what == "running":
        assert s.busy()
        return
    world.say(0, msg.Block("a", "wait", ("cond", 1)))
    assert not s.busy()
    if what == "arrivals":
        world.scheduler.on_message(0, msg.Issued("x/1", 1, python=True))  # no task running: no ack
    else:
        world.scheduler.on_message(0, msg.Issued("x/1", 1, python=False))
        world.scheduler.on_message(0, msg.Completed("x/1", followers=1))
    assert s.busy()


def test_a_call_to_a_frozen_rank_holds_its_caller_until_its_timeout_error():
    world = steady()
    s = world.scheduler
    s.rank_gone(1, frozen=True)
    world.say(0, msg.Issued("a/1", 1, python=True, rref="r1"))
    assert world.all_goes() == ["a"] and s.acks == {"a/1": s.tasks["a"]}
    assert s.arrivals == set() and s.pending_rrefs == {}, "no handler will begin, no value be made"
    world.say(0, msg.Completed("a/1"))
    assert world.all_goes() == ["a", "a"] and s.acks == {}


def test_a_python_call_to_a_dead_rank_fails_at_once_and_holds_its_caller_until_heard():
    world = steady()
    s = world.scheduler
    s.rank_gone(1)
    world.say(0, msg.Issued("a/1", 1, python=True))
    assert world.all_goes() == ["a"] and s.answers == {"a/1"} and s.arrivals == set()


def test_the_stalled_report_names_each_thing_waited_for():
    world = World(schedule=STEADY, ranks=3)
    s = world.scheduler
    world.say(0, msg.Begin("a", "main", ""))
    assert s.stalled() == "ranks [1, 2] have not started their entry"
    assert steady().scheduler.stalled() == "a (main) has not reached its next scheduling point since start"
    world.say(1, msg.Begin("b", "main", "start"))
    world.say(2, msg.Begin("c", "main", "start"))
    assert s.stalled() == "a (main) has not reached its next scheduling point since it began"
    world.say(0, msg.At("a", "rpc.call:f"))
    assert s.stalled() == "a (main) has not reached its next scheduling point since rpc.call:f"
    world.say(0, msg.Issued("a/1", 1, python=True), msg.Issued("a/2", 2, python=False))
    world.say(0, msg.Completed("a/2", followers=1), msg.Issued("a/3", 2, python=False))
    assert s.stalled() == ("a (main) has not reached its next scheduling point since rpc.call:f; "
                           "calls ['a/1'] were issued but their handlers never began; "
                           "calls ['a/3'] were never answered; callbacks on calls ['a/2'] never returned")


def test_the_stalled_report_of_a_world_where_every_task_waits_names_them():
    world = steady()
    s = world.scheduler
    world.say(0, msg.Block("a", "wait f", ("cond", 1)))
    world.say(1, msg.Block("b", "lock", ("cond", 2)))
    assert world.goes() == ["a", "b"]
    assert s.stalled() == "every task waits: a (main) at wait f; b (main) at lock"
    s.rank_gone(0)
    s.rank_gone(1)
    assert s.stalled() == "every task waits: none is left"


def test_entries_done_ends_the_schedule_and_lets_every_live_rank_run_free():
    world = steady(ranks=3)
    s = world.scheduler
    s.rank_gone(1)
    world.say(0, msg.At("a", "p"))
    before = len(world.goes())
    s.entries_done()
    assert s.halted and releases(world) == [0, 2]
    s.entries_done()
    assert releases(world) == [0, 2], "once"
    world.say(0, msg.At("a", "q"))
    assert len(world.goes()) == before, "no step after the entries are done"


def test_entries_done_after_a_failure_or_a_release_sends_nothing():
    world = steady()
    world.say(0, msg.End("a", failed=True))
    world.scheduler.entries_done()
    assert releases(world) == []
    world = steady()
    world.scheduler.release("stalled")
    world.scheduler.entries_done()
    assert releases(world) == [0, 1] and not world.scheduler.halted


def test_release_is_said_once_to_each_live_rank_and_then_nothing_is_controlled():
    world = steady(ranks=3)
    s = world.scheduler
    world.say(0, msg.At("a", "p"))
    s.rank_gone(2)
    s.release("stalled")
    assert (s.controlled, s.note, s.lost_at) == (False, "stalled", 1)
    assert releases(world) == [0, 1]
    s.release("again")
    assert s.note == "stalled" and releases(world) == [0, 1]
    world.say(0, msg.At("a", "q"), msg.Begin("x", "main", "start"))
    assert "x" not in s.tasks and len(s.steps) == 1, "what the ranks say is no longer heard"
    assert not s.busy()
    s.finish()
    assert s.problems == []


def test_an_answer_heard_before_its_call_settles_it_at_once():
    world = steady()
    s = world.scheduler
    world.say(0, msg.Completed("a/1"))
    assert s.heard == {"a/1"}
    world.say(0, msg.Issued("a/1", 1, python=False))
    assert world.all_goes() == ["a", "a"], "already answered: the caller goes on"
    assert s.heard == set() and s.calls["a/1"].completed and s.calls["a/1"].settled and s.answers == set()
    world.say(0, msg.Block("a", "wait f", ("call", "a/1")))
    assert s.tasks["a"].state == "running" and world.goes() == ["a"]


def test_an_answer_heard_before_its_call_with_callbacks_settles_when_they_return():
    world = steady()
    s = world.scheduler
    world.say(0, msg.Completed("a/1", followers=1), msg.Issued("a/1", 1, python=False))
    assert world.all_goes() == ["a", "a"]
    assert s.calls["a/1"].completed and not s.calls["a/1"].settled
    world.say(0, msg.Block("a", "wait f", ("call", "a/1")))
    assert s.tasks["a"].state == "blocked"
    world.say(0, msg.Followed("a/1"))
    assert s.calls["a/1"].settled and s.running is s.tasks["a"] and stops(world) == [("a", "wait f")]


def test_a_call_settles_only_when_each_of_its_callbacks_returned():
    world = steady()
    s = world.scheduler
    world.say(0, msg.Issued("a/1", 1, python=False), msg.Completed("a/1", followers=2))
    world.say(0, msg.Block("a", "wait f", ("call", "a/1")))
    assert s.followers == {"a/1": 2} and not s.quiet()
    world.say(0, msg.Followed("a/1"))
    assert s.followers == {"a/1": 1} and not s.quiet() and s.tasks["a"].state == "blocked"
    world.say(0, msg.Followed("a/1"))
    assert s.followers == {} and s.calls["a/1"].settled
    assert world.goes() == ["a"] and s.running is s.tasks["a"], "its waiter woke and, first by id, runs"
    assert s.waiting == {}


def test_callbacks_reported_twice_for_one_call_add_up():
    world = steady()
    s = world.scheduler
    world.say(0, msg.Issued("a/1", 1, python=False), msg.Completed("a/1", followers=1))
    world.say(0, msg.Completed("a/1", followers=2))
    assert s.followers == {"a/1": 3}


def test_an_answer_is_due_only_for_a_known_unanswered_call_with_a_live_caller():
    world = steady(ranks=3)
    s = world.scheduler
    world.say(0, msg.Issued("a/1", 1, python=True), msg.Issued("a/2", 1, python=True))
    world.say(1, msg.Due("zz"))
    assert s.answers == set(), "a call never reported is not waited for"
    world.say(1, msg.Due("a/1"))
    assert s.answers == {"a/1"}
    world.say(0, msg.Completed("a/1"))
    world.say(1, msg.Due("a/1"))
    assert s.answers == set(), "already answered"
    s.rank_gone(0)
    world.say(1, msg.Due("a/2"))
    assert s.answers == set(), "nobody is left to hear it"


def test_a_notify_before_its_wait_makes_the_wait_end_at_once():
    world = steady()
    s = world.scheduler
    world.say(1, msg.Notified("a"))  # a is still running: the notify came first
    assert s.notified_early == {"a"}
    world.say(0, msg.Block("a", "cond.wait", ("cond", 1), 5.0))
    assert s.notified_early == set() and s.tasks["a"].timer is None
    assert world.goes() == ["a"] and s.running is s.tasks["a"] and s.tasks["a"].notified


def test_a_wait_on_a_condition_without_a_notify_waits_with_its_timer():
    world = steady()
    s = world.scheduler
    world.say(0, msg.Block("a", "cond.wait", ("cond", 1), 5.0))
    assert s.tasks["a"].state == "blocked" and s.tasks["a"].timer == 5.0 and s.waiting == {
        ("cond", 1): {"a": s.tasks["a"]}}
    assert world.goes() == ["a", "b"]


def test_a_notify_before_a_wait_on_something_else_does_not_end_it():
    world = steady()
    s = world.scheduler
    world.say(0, msg.Issued("a/1", 1, python=False), msg.Completed("a/1", followers=1))
    world.say(1, msg.Notified("a"))
    world.say(0, msg.Block("a", "wait f", ("call", "a/1")))
    assert s.tasks["a"].state == "blocked" and s.notified_early == {"a"}


def test_a_notify_that_comes_to_a_task_waiting_on_a_call_is_kept_for_its_condition_wait():
    world = steady()
    s = world.scheduler
    world.say(0, msg.Issued("a/1", 1, python=False), msg.Completed("a/1", followers=1))
    world.say(0, msg.Block("a", "wait f", ("call", "a/1")))
    world.say(1, msg.Notified("a"))
    assert s.tasks["a"].state == "blocked" and s.notified_early == {"a"}


def test_an_early_notify_is_forgotten_when_its_handler_ends():
    world = steady()
    s = world.scheduler
    world.say(0, msg.Issued("a/1", 1, python=True), msg.Block("a", "wait f", ("call", "a/1")))
    world.say(1, msg.Begin("a/1", "serving f", "serve f", call="a/1"))
    world.say(0, msg.Notified("a/1"), msg.Notified("zz"))
    world.say(1, msg.End("a/1"))
    assert s.notified_early == {"zz"}


def test_a_handler_that_begins_before_its_call_is_reported_is_not_waited_for():
    world = steady()
    s = world.scheduler
    world.say(1, msg.Begin("a/1", "serving f", "serve f", call="a/1"))
    assert s.early == {"a/1"} and s.arrivals == set()
    world.say(0, msg.Issued("a/1", 1, python=True))
    assert s.early == set() and s.arrivals == set() and world.all_goes() == ["a", "a"]
    world.say(0, msg.Block("a", "wait f", ("call", "a/1")))
    assert world.goes() == ["a", "a/1"], "quiet: the handler, first by id, runs"


def test_a_futures_wait_ends_when_its_rank_resolved_it():
    world = steady()
    s = world.scheduler
    world.say(0, msg.Resolved(3), msg.Block("a", "wait fut", ("future", 3)))
    assert s.running is s.tasks["a"], "resolved already: no wait"
    world.say(0, msg.Block("a", "wait fut", ("future", 4, True)))
    assert s.running is s.tasks["a"], "completed before the gate knew of it: no wait"
    assert [m.notified for _, m in world.sent] == [True, True, True], "no wait timed out"
    world.say(0, msg.Block("a", "wait fut", ("future", 5)))
    assert s.tasks["a"].state == "blocked" and world.goes()[-1] == "b"
    world.say(1, msg.Resolved(5))
    assert s.tasks["a"].state == "blocked", "rank 1's future 5 is another one"
    world.say(0, msg.Resolved(5))
    assert s.tasks["a"].state == "ready" and s.waiting == {}


def test_a_step_that_another_task_takes_from_a_ready_one_is_marked_preempted():
    world = World(schedule=S.ScheduleSpec("guide", prefs=(("a", "p", 1, "b"),)))
    two_mains(world)
    world.say(0, msg.At("a", "p"))
    world.say(1, msg.Block("b", "wait", ("cond", 1)))
    world.say(0, msg.At("a", "q"))
    world.say(0, msg.At("a", "r"))
    assert world.goes() == ["a", "b", "a"]
    assert [step.preempted for step in world.scheduler.steps] == [False, True, False, False], (
        "a blocked task, or the one that goes on, is not preempted")


def test_a_step_is_timed_from_its_go_to_its_stop_by_the_clock():
    world = steady()
    world.say(0, msg.At("a", "p"))
    step = world.scheduler.steps[0]
    assert (step.start, step.end, step.rank, step.label) == (1.0, 2.0, 0, "main")
    assert world.scheduler.step_started == 3.0


def test_each_go_goes_to_its_tasks_rank_and_a_woken_wait_is_told_it_was_notified():
    world = steady()
    world.say(0, msg.Issued("a/1", 1, python=True))
    assert world.sent == [(0, msg.Go("a")), (0, msg.Go("a"))], "the choice and the ack, to rank 0"
    world.say(1, msg.Begin("a/1", "serving f", "serve f", call="a/1"))
    world.say(0, msg.Block("a", "wait f", ("call", "a/1")))
    assert world.sent[-1] == (1, msg.Go("a/1"))
    world.say(1, msg.Issued("a/1/1", 0, python=False))
    assert world.sent[-1] == (1, msg.Go("a/1"))
    world.say(0, msg.Completed("a/1/1"))
    assert world.sent[-1] == (1, msg.Go("a/1")), "the held caller's ack, to its rank"
    world.say(1, msg.End("a/1"))
    world.say(0, msg.Completed("a/1"))
    assert world.sent[-1] == (0, msg.Go("a", True)), "its wait ended by the answer, not a timeout"


def test_every_task_waiting_on_one_call_wakes_when_it_settles():
    world = steady()
    s = world.scheduler
    world.say(0, msg.Issued("a/1", 1, python=True), msg.Block("a", "wait f", ("call", "a/1")))
    world.say(1, msg.Begin("a/1", "serving f", "serve f", call="a/1"))
    world.say(1, msg.End("a/1", responds_later=True))
    world.say(1, msg.Block("b", "wait f too", ("call", "a/1")))
    assert world.goes() == ["a", "a/1", "b"] and s.running is None
    world.say(1, msg.Due("a/1"), msg.Completed("a/1"))
    assert s.tasks["b"].state == "running" and s.tasks["a"].state == "ready" and s.waiting == {}


def test_an_ended_task_is_ended_and_its_step_ends_at_end():
    world = steady()
    world.say(0, msg.End("a"))
    assert world.scheduler.tasks["a"].state == "ended" and stops(world) == [("a", "end")]
    assert world.goes() == ["a", "b"]

def test_a_new_scheduler_controls_and_has_lost_nothing():
    s = World(schedule=STEADY).scheduler
    assert (s.controlled, s.halted, s.note, s.lost_at, s.now) == (True, False, "", None, 0.0)
    assert s.steps == [] and s.problems == [] and s.mains_pending == {0, 1} and not s.quiet()


def test_a_callbacks_return_for_a_call_with_no_count_settles_it():
    world = steady()
    s = world.scheduler
    world.say(0, msg.Issued("a/1", 1, python=True), msg.Followed("a/1"))
    assert s.calls["a/1"].settled and s.followers == {}


def test_a_wait_for_a_call_never_reported_or_an_rref_already_made_does_not_wait():
    world = steady()
    s = world.scheduler
    world.say(0, msg.Block("a", "wait f", ("call", "zz/1")))
    assert s.running is s.tasks["a"] and stops(world) == [("a", "wait f")]
    world.say(0, msg.Block("a", "to_here", ("rref", "r9")))
    assert s.running is s.tasks["a"] and s.waiting == {}


def test_a_task_that_timed_out_is_told_so_once_its_next_go_says_notified():
    world = steady(ranks=1)
    world.say(0, msg.Block("a", "sleep", ("timer",), 1.0))
    world.say(0, msg.At("a", "p"))
    assert world.sent == [(0, msg.Go("a", True)), (0, msg.Go("a", False)), (0, msg.Go("a", True))]

def test_reports_of_unknown_tasks_change_nothing():
    world = steady()
    s = world.scheduler
    world.say(0, msg.At("zz", "p"), msg.Block("zz", "w", ("cond", 1)), msg.End("zz"), msg.Notified("zz"))
    assert s.waiting == {} and stops(world) == [] and s.running is s.tasks["a"]


def test_a_stale_timer_of_a_woken_or_dead_task_does_not_move_the_clock():
    world = steady()
    s = world.scheduler
    world.say(0, msg.Block("a", "cond.wait", ("cond", 1), 3.0))
    world.say(1, msg.Notified("a"), msg.Block("b", "sleep", ("timer",), 1.0))
    assert world.goes() == ["a", "b", "a"] and s.now == 0.0, "notified: a's timer is cancelled"
    world.say(0, msg.Block("a", "sleep", ("timer",), 10.0))
    assert world.goes()[-1] == "b" and s.now == 1.0
    world.say(1, msg.Block("b", "sleep", ("timer",), 20.0))
    assert world.goes()[-1] == "a" and s.now == 10.0, "a's first timer, at 3, was cancelled"
    world.say(0, msg.Block("a", "sleep", ("timer",), 5.0))
    s.rank_gone(0)
    world.say(1)
    assert world.goes()[-1] == "b" and s.now == 21.0, "a dead task's timer ends nothing"


def test_when_every_task_waits_without_a_timer_nothing_is_chosen():
    world = steady()
    s = world.scheduler
    world.say(0, msg.Block("a", "w", ("cond", 1)))
    world.say(1, msg.Block("b", "w", ("cond", 2)))
    sent = len(world.sent)
    s.decide()
    assert len(world.sent) == sent and s.now == 0.0 and s.running is None


def test_timers_ending_together_wake_together_and_the_first_by_id_runs_told_it_timed_out():
    world = steady(ranks=3)
    s = world.scheduler
    world.say(0, msg.Block("a", "sleep", ("timer",), 2.0))
    world.say(1, msg.Block("b", "sleep", ("timer",), 2.0))
    world.say(2, msg.Block("c", "sleep", ("timer",), 3.0))
    assert world.goes() == ["a", "b", "c", "a"] and s.now == 2.0
    assert {t: s.tasks[t].state for t in "bc"} == {"b": "ready", "c": "blocked"}
    assert not s.tasks["b"].notified and s.tasks["b"].timer is None and s.tasks["c"].timer == 3.0
    assert [m.notified for _, m in world.sent if isinstance(m, msg.Go)][-1] is False


# -- the text forms --------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["free", "controlled", "random", "pct", "pct:1", "pct:20", "pct:3:500"])
def test_schedules_that_parse(text):
    assert S.parse(text).kind in ("free", "random", "pct")


@pytest.mark.parametrize("text", ["", "sometimes", "pct:0", "pct:21", "pct:x", "pct:3:0", "replay:!!", "guide:zz",
                                  "pct:-1", "pct:", "pct:2:"])
def test_schedules_that_do_not_parse_are_refused_naming_where(text):
    with pytest.raises(WorldSpecError, match=r"^here: (invalid schedule|a (replay|guide) schedule that cannot)"):
        S.parse(text, where="here")


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "a/1", "b/2/3"]), st.sampled_from(["p", "end", "wait f"])),
                max_size=30))
def test_a_replay_schedule_round_trips(steps):
    parsed = S.parse(S.replay_schedule(steps))
    assert parsed.kind == "replay" and list(parsed.steps) == steps and parsed.digest == S.digest(steps)


def test_a_guide_without_one_choice_keeps_the_others_by_their_moment():
    steps = [("a", "p"), ("b", "q"), ("a", "p"), ("b", "end")]
    kept = S.parse(S.without(steps, 2)).prefs
    assert kept == (("", "", 0, "a"), ("a", "p", 1, "b"), ("a", "p", 2, "b"))


def test_a_schedule_reads_as_runs_of_steps_with_its_preemptions_marked():
    steps = [S.Step(0, 0, "ps", "ps", "main", "rpc.call:f"), S.Step(1, 0, "ps", "ps", "main", "wait f"),
             S.Step(2, 1, "t1", "t1", "main", "dist_autograd.backward", preempted=True)]
    assert S.summary(steps, failed_at="t1 raised") == [
        "ps (main): 2 steps, up to wait f",
        "-> t1 (main), preempting: 1 step, up to dist_autograd.backward",
        "then: t1 raised",
    ]
    assert S.preemptions(steps) == 1
    assert S.digest(steps) == S.digest([("ps", "rpc.call:f"), ("ps", "wait f"), ("t1", "dist_autograd.backward")])


@given(schedules())
def test_drawn_schedules_are_controlled_and_parse(text):
    assert S.parse(text).controlled


@pytest.mark.parametrize(("text", "label"), [
    ("free", "free"), ("controlled", "controlled"), ("random", "controlled"), ("pct", f"pct:{S.DEFAULT_DEPTH}"),
    ("pct:2", "pct:2"), ("pct:2:500", "pct:2:500"),
])
def test_a_schedule_is_labelled_as_it_was_given(text, label):
    assert S.parse(text).label == label


def test_a_replayed_schedule_is_labelled_by_its_length_not_its_blob():
    assert S.parse(S.replay_schedule([("w0", "rpc.call:f"), ("w1", "end")])).label == "replay of 2 steps"


def test_a_call_a_callback_issues_is_waited_for_and_acks_no_task_that_happens_to_run():
    # a's call a/1 to b's rank is answered; its handler's End has not been
    # read yet when the caller's callback issues a/1+cb1/1: the task still
    # running (the handler) did not issue it and is not let go by it.
    world = steady()
    s = world.scheduler
    world.say(0, msg.Issued("a/1", 1, python=True), msg.Block("a", "wait f", ("call", "a/1")))
    world.say(1, msg.Begin("a/1", "serving f", "serve f", call="a/1"))
    assert world.goes() == ["a", "a/1"]
    world.say(0, msg.Completed("a/1", followers=1), msg.Issued("a/1+cb1/1", 1, python=True, by="a/1+cb1"))
    assert world.all_goes().count("a/1") == 1, "the running handler was not acked by a call it did not issue"
    assert s.calls["a/1+cb1/1"].rank == 0, "its answer is heard on the callback's rank"
    world.say(1, msg.End("a/1"))
    world.say(0, msg.Followed("a/1"))
    assert s.arrivals == {"a/1+cb1/1"} and world.goes() == ["a", "a/1"], "no choice before its handler begins"
    world.say(1, msg.Begin("a/1+cb1/1", "serving g", "serve g", call="a/1+cb1/1"))
    assert world.goes() == ["a", "a/1", "a"], "quiet again: a, woken by its call's answer, is first by id"
    world.say(0, msg.Block("a", "wait c", ("cond", 1)))
    assert world.goes()[-1] == "a/1+cb1/1"
    world.say(1, msg.End("a/1+cb1/1"))
    assert s.answers == {"a/1+cb1/1"}, "its answer is due at the callback's rank, which is alive"
    s.rank_gone(0)
    assert s.answers == set(), "its caller's rank is gone: nobody is left to hear it"


def test_something_the_schedule_cannot_order_gives_up_control_at_once_with_the_ranks_words():
    world = steady()
    s = world.scheduler
    world.say(0, msg.At("a", "p"))
    world.say(0, msg.Unscheduled("rpc_sync of f to w1 was issued by thread 'prefetcher'"))
    assert not s.controlled and s.lost_at == 1 and releases(world) == [0, 1]
    assert s.note == "rpc_sync of f to w1 was issued by thread 'prefetcher'. The world ran free from step 1 on"


def test_a_world_whose_entries_are_done_does_not_call_a_late_unscheduled_rpc_lost_control():
    world = steady()
    s = world.scheduler
    s.entries_done()
    world.say(0, msg.Unscheduled("rpc_sync of f to w1 was issued by thread 'late'"))
    assert s.controlled and s.note == ""


def test_a_handler_that_ends_after_its_caller_froze_is_not_waited_for_to_be_heard():
    # Found by the model: a frozen rank's reports are ignored, so an answer
    # due there would be waited for until the stall watch gave control up.
    world = steady()
    s = world.scheduler
    world.say(0, msg.Issued("a/1", 1, python=True), msg.End("a"))
    world.say(1, msg.Begin("a/1", "serving f", "serve f", call="a/1"))
    assert world.goes() == ["a", "a/1"]
    s.rank_gone(0, frozen=True)
    world.say(1, msg.End("a/1"))
    assert s.answers == set() and world.goes() == ["a", "a/1", "b"], "quiet: b, the one left, runs"


def test_callbacks_on_answers_go_one_at_a_time_by_id_to_their_own_rank_once_each_is_at_its_turn():
    world = steady()
    s = world.scheduler
    world.say(0, msg.At("a", "p"))
    world.say(0, msg.Block("a", "wait c", ("cond", 1)))
    assert world.goes() == ["a", "b"]
    world.say(1, msg.Issued("b/1", 0, python=False), msg.Completed("b/1", followers=1))
    world.say(1, msg.Issued("b/2", 0, python=False), msg.Completed("b/2", followers=1))
    world.say(1, msg.Block("b", "wait c", ("cond", 2)))
    world.say(1, msg.Following("b/2+cb1", "b/2"))
    assert world.goes() == ["a", "b"], "b/1's callback is not at its turn yet: which goes first is not known"
    world.say(1, msg.Following("b/1+cb1", "b/1"))
    assert world.sent[-1] == (1, msg.Go("b/1+cb1")), "the least id, on its own rank"
    world.say(1)
    assert world.all_goes().count("b/2+cb1") == 0, "one at a time"
    world.say(1, msg.Followed("b/1"))
    assert world.sent[-1] == (1, msg.Go("b/2+cb1"))
    world.say(1, msg.Followed("b/2"))
    assert s.followers == {} and s.turns == {}


def test_no_callback_goes_while_a_task_runs_or_an_answer_is_due():
    world = steady()
    s = world.scheduler
    world.say(0, msg.Issued("a/1", 1, python=False), msg.Completed("a/1", followers=1))
    world.say(0, msg.Following("a/1+cb1", "a/1"))
    assert "a/1+cb1" not in world.all_goes(), "a runs on: its step ends first"
    world.say(0, msg.Issued("a/2", 1, python=False))
    assert s.answers == {"a/2"}
    world.say(0, msg.Completed("a/2"), msg.Block("a", "wait c", ("cond", 1)))
    assert world.all_goes()[-1] == "a/1+cb1"


def test_a_lost_rank_takes_its_callbacks_turns_and_lets_the_next_callback_go():
    world = steady(ranks=3)
    s = world.scheduler
    world.say(0, msg.Issued("a/1", 2, python=False), msg.Completed("a/1", followers=1))
    world.say(0, msg.Block("a", "wait c", ("cond", 1)))
    world.say(1, msg.Issued("b/1", 2, python=False), msg.Completed("b/1", followers=1))
    world.say(1, msg.Block("b", "wait c", ("cond", 2)))
    world.say(0, msg.Following("a/1+cb1", "a/1"))
    world.say(1, msg.Following("b/1+cb1", "b/1"))
    assert world.sent[-1] == (0, msg.Go("a/1+cb1")) and s.turns == {"b/1+cb1": (1, "b/1")}
    assert s.stalled().endswith("callbacks ['b/1+cb1'] wait for their turn")
    s.rank_gone(2)
    assert s.turns == {"b/1+cb1": (1, "b/1")}, "another rank's loss takes nothing"
    s.decide()
    assert world.sent[-1] == (0, msg.Go("a/1+cb1")), "a/1's callback still runs"
    s.rank_gone(0)
    s.decide()
    assert world.sent[-1] == (1, msg.Go("b/1+cb1")), "its rank lost, a/1's callback runs no more"
    s.rank_gone(1)
    assert s.turns == {} and s.followers == {}


def test_a_lost_rank_takes_the_turns_of_its_callbacks_still_waiting():
    world = steady()
    s = world.scheduler
    world.say(0, msg.Issued("a/1", 1, python=False), msg.Completed("a/1", followers=1))
    world.say(0, msg.Following("a/1+cb1", "a/1"))
    assert s.turns == {"a/1+cb1": (0, "a/1")}, "a still runs: its callback waits"
    s.rank_gone(1)
    assert s.turns == {"a/1+cb1": (0, "a/1")}
    s.rank_gone(0)
    assert s.turns == {}


def test_an_async_execution_handler_that_returned_a_calls_future_is_answered_once_that_call_settles():
    # b's handler of a/1 returned the future of its own call a/1/1 (with a
    # callback on it): torch answers a/1 from the thread that completes
    # a/1/1, right after its callbacks, and tells nobody. Its answer is due
    # from then, before the world can look quiet again.
    world = steady()
    s = world.scheduler
    world.say(0, msg.Issued("a/1", 1, python=True), msg.Block("a", "wait f", ("call", "a/1")))
    world.say(1, msg.Begin("a/1", "serving relay", "serve relay", call="a/1"))
    world.say(1, msg.Issued("a/1/1", 0, python=False), msg.End("a/1", responds_later=True, after="a/1/1"))
    assert s.answers == {"a/1/1"} and s.relays == {"a/1/1": ["a/1"]}
    world.say(1, msg.Completed("a/1/1", followers=1))
    assert s.answers == set(), "not due before its callbacks returned"
    world.say(1, msg.Following("a/1/1+cb1", "a/1/1"))
    world.say(1, msg.Followed("a/1/1"))
    assert s.answers == {"a/1"} and not s.quiet(), "due at once: no choice before it is heard"
    world.say(0, msg.Completed("a/1"))
    assert s.answers == set() and s.relays == {}


def test_a_relay_whose_call_settled_before_its_end_was_read_is_due_at_once():
    world = steady()
    s = world.scheduler
    world.say(0, msg.Issued("a/1", 1, python=True), msg.Block("a", "wait f", ("call", "a/1")))
    world.say(1, msg.Begin("a/1", "serving relay", "serve relay", call="a/1"))
    world.say(1, msg.Issued("a/1/1", 0, python=False), msg.Completed("a/1/1"))
    world.say(1, msg.End("a/1", responds_later=True, after="a/1/1"))
    assert s.answers == {"a/1"} and s.relays == {}


# -- an RPC's timeout, on the schedule's clock -----------------------------------------------------


def caller_and_sleeping_handler(timeout: float, sleep: float) -> tuple[World, str]:
    """``a`` (rank 0) calls rank 1 with ``timeout``; the handler sleeps ``sleep``."""
    world = World(schedule="pct:1")
    world.say(0, msg.Begin("a", "main", "start"))
    world.say(1, msg.Begin("b", "main", "start"))
    first = world.goes()[0]
    if first == "b":  # rank 1's main waits out of the way first
        world.say(1, msg.Block("b", "wait forever", ("cond", 9)))
    else:
        world.say(0, msg.At("a", "start"))
        world.say(1, msg.Block("b", "wait forever", ("cond", 9)))
    assert world.goes()[-1] == "a"
    world.say(0, msg.Issued("a/1", 1, python=True, timeout=timeout), msg.Block("a", "wait slow", ("call", "a/1")))
    world.say(1, msg.Begin("a/1", "serving slow for a", "serve slow", call="a/1"))
    assert world.goes()[-1] == "a/1"
    world.say(1, msg.Block("a/1", "sleep", ("timer",), sleep))
    return world, "a/1"


def timed_out(world: World) -> list[tuple[int, str]]:
    return [(rank, m.call) for rank, m in world.sent if isinstance(m, msg.TimedOut)]


def test_a_call_not_answered_by_its_timeout_times_out_on_the_schedules_clock_before_a_longer_sleep():
    # Free-running, a caller that gives up after 20 s on a handler that sleeps 60 s
    # gets torch's timeout error. Half on the real clock, it was answered.
    world, call = caller_and_sleeping_handler(timeout=20.0, sleep=60.0)
    s = world.scheduler
    assert timed_out(world) == [(0, call)] and s.now == 20.0, "the earliest end is the call's timeout"
    assert s.tasks["a"].state == "blocked" and not s.quiet(), "its completion (the error) is due from its rank"
    world.say(0, msg.Completed(call))
    assert world.goes()[-1] == "a" and not s.tasks["a"].notified, "the caller goes on, woken by the clock"
    world.say(0, msg.End("a"))
    assert world.goes()[-1] == "a/1" and s.now == 60.0, "then the handler's sleep ends"
    world.say(1, msg.End("a/1"))
    assert s.quiet() and call not in s.answers, "no answer is due for a call that timed out"


def test_a_call_answered_before_its_timeout_never_times_out():
    world, call = caller_and_sleeping_handler(timeout=20.0, sleep=5.0)
    s = world.scheduler
    assert world.goes()[-1] == "a/1" and s.now == 5.0, "the sleep ends first"
    world.say(1, msg.End("a/1"))
    world.say(0, msg.Completed(call))
    assert world.goes()[-1] == "a"
    world.say(0, msg.Block("a", "sleep", ("timer",), 100.0))
    assert timed_out(world) == [] and s.now == 105.0, "the answered call's timer ended nothing"


def test_a_call_with_no_timeout_never_times_out():
    world, _ = caller_and_sleeping_handler(timeout=None, sleep=60.0)
    assert timed_out(world) == [] and world.goes()[-1] == "a/1" and world.scheduler.now == 60.0


def test_a_timeout_and_a_sleep_ending_together_end_together():
    world, call = caller_and_sleeping_handler(timeout=30.0, sleep=30.0)
    assert timed_out(world) == [(0, call)] and world.scheduler.now == 30.0
    assert world.goes()[-1] == "a/1", "the sleeper woke at the same moment"


def test_a_call_to_a_frozen_rank_times_out_on_the_schedules_clock_not_the_real_one():
    world = World(schedule="pct:1")
    world.say(0, msg.Begin("a", "main", "start"))
    world.say(1, msg.Begin("b", "main", "start"))
    s = world.scheduler
    s.rank_gone(1, frozen=True)
    s.decide()
    assert world.goes()[-1] == "a"
    world.say(0, msg.Issued("a/1", 1, python=True, timeout=7.0))
    assert world.all_goes()[-1] == "a", "its caller goes on at once: nothing answers a frozen rank"
    world.say(0, msg.Block("a", "wait f", ("call", "a/1")))
    assert timed_out(world) == [(0, "a/1")] and s.now == 7.0
    # One issued before the freeze: its timeout too, not an answer, ends it.
    other = World(schedule="pct:1")
    other.say(0, msg.Begin("a", "main", "start"))
    other.say(1, msg.Begin("b", "main", "start"))
    if other.goes()[0] == "b":
        other.say(1, msg.Block("b", "wait forever", ("cond", 9)))
    else:
        other.say(0, msg.At("a", "start"))
        other.say(1, msg.Block("b", "wait forever", ("cond", 9)))
    other.say(0, msg.Issued("a/1", 1, python=True, timeout=3.0), msg.Block("a", "wait f", ("call", "a/1")))
    other.scheduler.rank_gone(1, frozen=True)
    other.scheduler.decide()
    assert timed_out(other) == [(0, "a/1")] and other.scheduler.now == 3.0


def test_while_a_thread_of_the_programs_own_lives_the_schedules_clock_waits_for_it():
    # It runs free, on the real clock: jumping to a call's timeout while it
    # was about to set the Event the call's handler waits on timed the call
    # out where free-running it is answered (tests/programs/thread_issuer.py).
    world, call = caller_and_sleeping_handler(timeout=20.0, sleep=60.0)
    fresh = World(schedule="pct:1")
    fresh.say(0, msg.Begin("a", "main", "start"))
    fresh.say(1, msg.Begin("b", "main", "start"))
    s = fresh.scheduler
    runner = fresh.goes()[0]
    rank = 0 if runner == "a" else 1
    fresh.say(rank, msg.ProgramThread("setter", alive=True), msg.Block(runner, "sleep", ("timer",), 5.0))
    other = "b" if runner == "a" else "a"
    fresh.say(1 - rank, msg.Block(other, "sleep", ("timer",), 7.0))
    assert s.now == 0.0 and fresh.goes() == [runner, other], "no jump while the setter lives"
    assert s.stalled().endswith("and the schedule's clock waits for threads of the program's own, which run "
                                f"free: 'setter' on rank {rank}"), s.stalled()
    fresh.say(rank, msg.ProgramThread("setter", alive=False))
    assert s.now == 5.0 and fresh.goes() == [runner, other, runner], "it ended: the clock goes on"
    assert timed_out(world) == [(0, call)], "(without such a thread, the timeout came at once)"


def test_steps_after_every_entry_ended_run_but_are_not_the_schedules():
    # Whether the world's shutdown gives up control before or after such a
    # step ends is the clock's choice: one seed took two digests.
    world = World(schedule="pct:1")
    world.say(0, msg.Begin("a", "main", "start"))
    world.say(1, msg.Begin("b", "main", "start"))
    s = world.scheduler
    if s.running.id == "a":
        world.say(0, msg.Block("a", "sleep", ("timer",), 1.0))
    world.say(1, msg.End("b"))
    assert s.running.id == "a" and s.tasks["b"].state == "ended"
    world.say(0, msg.Issued("a/1", 1, python=True, timeout=20.0), msg.Block("a", "wait slow", ("call", "a/1")))
    world.say(1, msg.Begin("a/1", "serving slow for a", "serve slow", call="a/1"))
    slept_at = s.now
    world.say(1, msg.Block("a/1", "sleep", ("timer",), 60.0))
    world.say(0, msg.Completed("a/1"))
    assert timed_out(world) == [(0, "a/1")] and world.goes()[-1] == "a"
    world.say(0, msg.End("a"))
    steps = [(step.task, step.point) for step in s.steps]
    assert steps[-1] == ("a", "end")
    assert world.goes()[-1] == "a/1" and s.now == slept_at + 60.0, "the handler's sleep still ends, on its clock"
    world.say(1, msg.End("a/1"))
    assert [(step.task, step.point) for step in s.steps] == steps, "its step is not recorded"
