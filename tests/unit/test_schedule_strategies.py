"""Each strategy of controlled schedules on its own, through its one method
``choose(ready, history)`` and a hand-made history: no scheduler, no world."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from rpc_harness import schedule as S
from rpc_harness._schedule import strategies
from rpc_harness.schedule import Step


@dataclass(eq=False)
class Task:
    id: str
    label: str = "main"
    point: str = "p"


@dataclass
class History:
    seed: int = 5
    rng: random.Random = field(default_factory=lambda: random.Random(11))
    steps: list[Step] = field(default_factory=list)
    occurrences: dict[tuple[str, str], int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    last: Task | None = None

    def diverged(self, what: str) -> None:
        self.problems.append(what)

    def ran(self, task: Task, point: str = "p") -> None:
        self.steps.append(Step(len(self.steps), 0, "", task.id, task.label, point, False, 0.0, 0.0))
        self.occurrences[(task.id, point)] = self.occurrences.get((task.id, point), 0) + 1
        self.last = task


TASKS = [Task("a"), Task("b"), Task("c")]


def run(strategy, history, steps):
    chosen = []
    for _ in range(steps):
        task = strategy.choose(TASKS, history)
        chosen.append(task.id)
        history.ran(task)
    return chosen


def test_pct_of_depth_one_never_preempts_its_highest_task():
    history = History()
    chosen = run(strategies.make(S.parse("pct:1:20"), history), history, 20)
    assert len(set(chosen)) == 1


def test_pct_drops_the_task_that_ran_below_every_other_at_each_change_point():
    history = History()
    pct = strategies.make(S.parse("pct:3:20"), history)
    changes = list(pct.changes)
    assert len(changes) == 2 and all(1 <= c < 20 for c in changes)
    chosen = run(pct, history, 20)
    first, second = changes
    assert len(set(chosen[:first])) == 1, "one task until the first change point"
    assert chosen[first] != chosen[first - 1], "at the change point the task that ran drops"
    assert chosen[first - 1] not in chosen[first:], "and stays below the others"
    if second > first:
        assert chosen[second] not in (chosen[first - 1], chosen[second - 1])


def test_pcts_priorities_come_from_the_seed_and_the_task_not_the_order_tasks_arrive_in():
    one, other = History(), History()
    a = strategies.make(S.parse("pct:1"), one).choose(TASKS, one)
    b = strategies.make(S.parse("pct:1"), other).choose(list(reversed(TASKS)), other)
    assert a.id == b.id


def test_the_random_walk_draws_from_the_schedules_stream_alone():
    runs = [run(strategies.make(S.parse("random"), h), h, 30) for h in (History(), History())]
    assert runs[0] == runs[1] and set(runs[0]) == {"a", "b", "c"}
    assert run(strategies.make(S.parse("random"), History(rng=random.Random(12))), History(rng=random.Random(12)),
               30) != runs[0]


def test_a_replay_takes_its_steps_and_says_where_it_can_no_longer():
    recorded = S.parse(S.replay_schedule([("b", "p"), ("c", "p")]))
    history = History()
    replay = strategies.make(recorded, history)
    assert replay.choose(TASKS, history).id == "b"
    history.ran(TASKS[1])
    assert replay.choose([TASKS[0], TASKS[1]], history).id == "b", "c cannot run: the task that ran goes on"
    assert history.problems == ["step 1: expected c to run, but it could not; ready: a (main) at p, b (main) at p"]
    history = History()
    for task in (TASKS[1], TASKS[2]):
        history.ran(task)
    replay.choose(TASKS, history)
    assert history.problems == ["step 2: the recorded schedule ended after 2 steps, but the world went on: "
                                "a (main) at p, b (main) at p, c (main) at p could run"]


def test_a_guide_follows_its_choices_where_the_same_moment_comes_and_else_goes_on():
    guide = strategies.make(S.parse(S.without([("a", "p"), ("c", "p"), ("b", "p")], 1)), History())
    history = History()
    assert guide.choose(TASKS, history).id == "a", "the first choice, kept"
    history.ran(TASKS[0])
    assert guide.choose(TASKS, history).id == "a", "the dropped choice: the task that ran goes on"
    history.ran(TASKS[0])
    assert guide.choose(TASKS, history).id == "a", "a moment the guide never saw: go on"
    history.ran(TASKS[2])
    assert guide.choose(TASKS, history).id == "b", "after c's first stop at p, the kept choice: b"


def test_going_on_is_the_task_that_ran_last_or_else_the_first_by_id():
    history = History()
    assert strategies.continuing(TASKS, history).id == "a", "nothing ran yet"
    history.ran(TASKS[2])
    assert strategies.continuing(TASKS, history).id == "c"
    assert strategies.continuing(TASKS[:2], history).id == "a", "the task that ran cannot: the first by id"


def test_a_guides_first_choice_is_kept_even_where_going_on_would_choose_another():
    guide = strategies.make(S.parse(S.without([("c", "p"), ("a", "p"), ("b", "p")], 2)), History())
    history = History()
    assert guide.choose(TASKS, history).id == "c", "the recorded first choice, not the first by id"
    history.ran(TASKS[2])
    assert guide.choose(TASKS, history).id == "a", "after c's first stop at p: a, as recorded"


def test_pcts_change_points_fall_on_steps_one_to_its_length_less_one():
    points = set()
    for seed in range(60):
        history = History(rng=random.Random(seed))
        points.update(strategies.make(S.parse("pct:2:3"), history).changes)
    assert points == {1, 2}, "never before the first step, never at the length"


def test_pcts_priority_of_a_task_is_derived_from_the_seed_and_its_id_alone():
    from rpc_harness.seeds import derive_seed

    # The whole order over eight tasks (one of 40,320), not just the first.
    history = History(seed=5)
    pct = strategies.make(S.parse("pct:1"), history)
    left = [Task(name) for name in "abcdefgh"]
    order = []
    while left:
        chosen = pct.choose(left, history)
        order.append(chosen.id)
        left.remove(chosen)
    assert order == sorted("abcdefgh", key=lambda task: derive_seed(5, "pct", task), reverse=True), (
        "the same priorities every version")


def test_a_task_pct_lowers_later_goes_below_one_it_lowered_earlier():
    history = History()
    pct = strategies.make(S.parse("pct:3:20"), history)
    pct.changes = [1, 2]  # lower the task that ran at steps 1 and 2
    top = pct.choose(TASKS, history)
    history.ran(top)
    second = pct.choose(TASKS, history)
    history.ran(second)
    pct.choose(TASKS, history)
    assert [t for t in pct.lowered] == [top.id, second.id]
    # Only the two lowered ones can run: the one lowered first is above the one lowered last.
    both = sorted([top, second], key=lambda t: t.id, reverse=top.id < second.id)
    assert pct.choose(both, history).id == top.id


def test_a_random_walk_with_one_task_ready_draws_nothing():
    # A forced step takes no draw: the choices after it stay the seed's.
    history = History()
    state = history.rng.getstate()
    assert strategies.make(S.parse("random"), history).choose([TASKS[1]], history).id == "b"
    assert history.rng.getstate() == state
