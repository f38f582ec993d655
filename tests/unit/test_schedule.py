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

    def __init__(self, schedule: str = "controlled", seed: int = 7, ranks: int = 2) -> None:
        self.sent: list[tuple[int, object]] = []
        self.time = 0.0
        self.scheduler = Scheduler(S.parse(schedule), seed, ranks, lambda rank, m: self.sent.append((rank, m)),
                                   self.clock)

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
