"""Exhaustive exploration (rpc_harness._schedule.dpor) against the truth, on
a model of message passing: ranks with memory of their own, tasks (a
main per rank, a handler per call) that run one step at a time, calls that
start a handler on another rank and waits for its end. The model takes its
choices from the real strategy of a branch (``strategies.Branch``) and
records what the scheduler records (the tasks that could run, the step
that made the task ready), so the search is driven as a world drives it.

Each step records its footprint (the variable a load, store or append
touches; nothing for a call, a wait or a sleep, whose effects reach other
tasks as causes), so the search's finer dependence is what is checked;
``coarse=True`` leaves the footprints out (every step of a rank touching
all of its memory, as a real world's steps say) to measure what it saves.

Soundness: on every program here, and on programs Hypothesis writes, DPOR
reaches every final state that running every interleaving reaches, with
footprints and without, and the naive search runs exactly every
interleaving.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rpc_harness import schedule as S
from rpc_harness._schedule import dpor, strategies

# -- the model ---------------------------------------------------------------------------------
# A program: rank -> the ops of its main task. Ops, one step each:
#   ("load", var)             the task's register := the rank's var (0 if unset)
#   ("store", var, delta)     the rank's var := register + delta
#   ("append", var, item)     the rank's var gets item at its end
#   ("call", to, ops)         start a handler running ops on rank `to`
#   ("wait", n)               wait for the end of this task's n-th call (from 1)
#   ("sleep",)                a sleep on the schedule's clock: it ends only when no other task can run


@dataclass
class Task:
    id: str
    rank: int
    ops: tuple
    label: str = "main"
    point: str = ""
    notified: bool = True
    woken: bool = False  # the clock woke it from its sleep: it stays able to run, as in the scheduler
    pc: int = 0
    register: int = 0
    calls: list[str] = field(default_factory=list)
    cause: int = -1


@dataclass
class Taken:
    task: str
    rank: int
    ready: tuple[tuple[str, int], ...]
    cause: int
    timer: bool = False
    objects: frozenset[str] | None = None


class History:
    def __init__(self) -> None:
        self.steps: list[Taken] = []
        self.problems: list[str] = []
        self.last: Task | None = None

    def diverged(self, what: str) -> None:
        self.problems.append(what)


def run(program: dict[int, tuple], choose, *, coarse: bool = False) -> tuple[list[Taken], tuple, list[str]]:
    """Run the program to its end, ``choose(ready, history)`` picking each
    step; ``coarse``: steps without their footprints."""
    tasks = {f"r{rank}": Task(f"r{rank}", rank, ops) for rank, ops in program.items()}
    memory: dict[int, dict[str, object]] = {rank: {} for rank in program}
    ended: dict[str, int] = {}  # task -> its last step
    history = History()

    def can_run(task: Task) -> bool:
        if task.pc >= len(task.ops):
            return False
        op = task.ops[task.pc]
        if op[0] == "wait":
            return task.calls[op[1] - 1] in ended
        return op[0] != "sleep" or task.woken

    def sleeping(task: Task) -> bool:
        return task.pc < len(task.ops) and task.ops[task.pc][0] == "sleep"

    while True:
        ready = sorted((t for t in tasks.values() if can_run(t)), key=lambda t: t.id)
        if not ready:  # the clock moves on only when no task can run, and wakes every sleeping task
            for t in tasks.values():
                if sleeping(t):
                    t.woken, t.notified, t.cause = True, False, len(history.steps) - 1
            ready = sorted((t for t in tasks.values() if can_run(t)), key=lambda t: t.id)
            if not ready:
                break
        task = choose(ready, history)
        op = task.ops[task.pc]
        timer = op[0] == "sleep"
        cause = task.cause
        if op[0] == "wait":
            cause = ended[task.calls[op[1] - 1]]
        index = len(history.steps)
        mine = memory[task.rank]
        if op[0] == "load":
            task.register = mine.get(op[1], 0)
        elif op[0] == "store":
            mine[op[1]] = task.register + op[2]
        elif op[0] == "append":
            mine[op[1]] = (*mine.get(op[1], ()), op[2])
        elif op[0] == "call":
            handler = f"{task.id}/{len(task.calls) + 1}"
            task.calls.append(handler)
            tasks[handler] = Task(handler, op[1], op[2], label="handler", cause=index)
        task.pc += 1
        task.cause, task.woken, task.notified = -1, False, True
        objects = frozenset([op[1]]) if op[0] in ("load", "store", "append") else frozenset()
        history.steps.append(Taken(task.id, task.rank, tuple((t.id, t.rank) for t in ready), cause, timer,
                                   None if coarse else objects))
        history.last = task
        if task.pc >= len(task.ops):
            ended[task.id] = index
    outcome = tuple(sorted((rank, tuple(sorted(mem.items()))) for rank, mem in memory.items()))
    return history.steps, outcome, history.problems


def every_interleaving(program: dict[int, tuple]) -> set[tuple]:
    """The final states of all schedules, by brute force (no search involved)."""
    outcomes: set[tuple] = set()

    def explore(prefix: list[str]) -> None:
        choices: list[list[str]] = []

        def choose(ready, history):
            step = len(history.steps)
            choices.append([t.id for t in ready])
            wanted = prefix[step] if step < len(prefix) else ready[0].id
            return next(t for t in ready if t.id == wanted)

        steps, outcome, _ = run(program, choose)
        outcomes.add(outcome)
        for index in range(len(prefix), len(steps)):
            for other in choices[index][1:]:
                explore([s.task for s in steps[:index]] + [other])

    explore([])
    return outcomes


def search(program: dict[int, tuple], *, coarse: bool = False, **options) -> tuple[set[tuple], dpor.Search]:
    found, outcomes = dpor.Search(**options), set()
    while (branch := found.next()) is not None:
        strategy = strategies.make(S.parse(branch.schedule), None)  # type: ignore[arg-type]
        steps, outcome, problems = run(program, strategy.choose, coarse=coarse)
        assert not problems, problems
        outcomes.add(outcome)
        assert found.record(branch, steps) is None
        assert found.runs < 5000, "the search does not end"
    return outcomes, found


def interleavings(program: dict[int, tuple]) -> int:
    """How many schedules the naive search must run: counted by brute force."""
    count = 0

    def explore(prefix: list[str]) -> None:
        nonlocal count
        seen: list[list[str]] = []

        def choose(ready, history):
            step = len(history.steps)
            seen.append([t.id for t in ready])
            wanted = prefix[step] if step < len(prefix) else ready[0].id
            return next(t for t in ready if t.id == wanted)

        steps, _, _ = run(program, choose)
        count += 1
        for index in range(len(prefix), len(steps)):
            for other in seen[index][1:]:
                explore([s.task for s in steps[:index]] + [other])

    explore([])
    return count


# -- programs --------------------------------------------------------------------------------------
# Three callers each send one message to rank 0, whose handlers append it:
# every order of the three is an outcome (six), and only their order on rank 0 matters.
THREE_TO_ONE = {0: (), 1: (("call", 0, (("append", "log", 1),)),), 2: (("call", 0, (("append", "log", 2),)),),
                3: (("call", 0, (("append", "log", 3),)),)}
# The lost update: two deposits served on rank 0 read, then write.
BANK = {0: (), 1: (("call", 0, (("load", "balance"), ("store", "balance", 10))), ("wait", 1)),
        2: (("call", 0, (("load", "balance"), ("store", "balance", 5))), ("wait", 1))}
# Ranks that never talk: one schedule is all there is to it.
APART = {0: (("append", "a", 1), ("append", "a", 2)), 1: (("append", "b", 1), ("append", "b", 2)),
         2: (("append", "c", 1),)}
# A pipeline: rank 1 forwards to rank 2 after its own work; rank 0 calls both.
PIPELINE = {0: (("call", 1, (("append", "x", "a"), ("call", 2, (("append", "y", "a1"),)))),
                ("call", 2, (("append", "y", "b"),)), ("wait", 1)),
            1: (("append", "x", "own"),), 2: (("append", "y", "own"),)}
# A timeout: rank 1 gives up waiting (a sleep on the schedule's clock) and
# writes on rank 0, racing rank 2's handler there; when the clock fires
# depends on every other step, so it depends on them all.
TIMEOUT = {0: (), 1: (("sleep",), ("call", 0, (("append", "log", "late"),))),
           2: (("append", "own", 1), ("call", 0, (("append", "log", "early"),)), ("sleep",), ("append", "own", 2))}
# Two deposits served on rank 0 into two accounts: the handlers share a rank
# but no object, so one schedule is all there is to it (with footprints).
TWO_ACCOUNTS = {0: (), 1: (("call", 0, (("load", "alice"), ("store", "alice", 10))), ("wait", 1)),
                2: (("call", 0, (("load", "bob"), ("store", "bob", 5))), ("wait", 1))}
# Both: rank 0 serves two deposits to one account and a write to a log.
MIXED = {0: (), 1: (("call", 0, (("load", "balance"), ("store", "balance", 10))), ("call", 0, (("append", "log", 1),))),
         2: (("call", 0, (("load", "balance"), ("store", "balance", 5))),)}
# Two callers that sleep before their message to rank 0.
BOTH_SLEEP = {0: (), 1: (("sleep",), ("call", 0, (("append", "log", 1),))),
              2: (("sleep",), ("call", 0, (("append", "log", 2),)))}
PROGRAMS = {"three_to_one": THREE_TO_ONE, "bank": BANK, "apart": APART, "pipeline": PIPELINE, "timeout": TIMEOUT,
            "two_accounts": TWO_ACCOUNTS, "mixed": MIXED, "both_sleep": BOTH_SLEEP}


@pytest.mark.parametrize("coarse", [False, True], ids=["footprints", "coarse"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_dpor_reaches_every_outcome_that_every_interleaving_reaches(name: str, coarse: bool) -> None:
    program = PROGRAMS[name]
    truth = every_interleaving(program)
    reduced, found = search(program, coarse=coarse)
    assert reduced == truth
    assert found.exhausted


# Schedules DPOR runs to exhaust each program, with footprints and without,
# and how many of them ended with every task that could run asleep (measured;
# the naive search's are counted by brute force above).
RUNS = {"three_to_one": (6, 6, 0), "bank": (6, 6, 0), "apart": (1, 1, 0), "pipeline": (12, 18, 0),
        "timeout": (5, 5, 0), "two_accounts": (1, 6, 0), "mixed": (6, 30, 0), "both_sleep": (10, 10, 1)}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_footprints_save_schedules_where_steps_of_one_rank_touch_different_objects(name: str) -> None:
    _, fine = search(PROGRAMS[name])
    _, coarse = search(PROGRAMS[name], coarse=True)
    assert (fine.runs, coarse.runs, fine.redundant) == RUNS[name]
    assert coarse.redundant == fine.redundant


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_naive_search_runs_every_interleaving_once(name: str) -> None:
    program = PROGRAMS[name]
    outcomes, found = search(program, reduce=False)
    assert found.runs == interleavings(program)
    assert outcomes == every_interleaving(program)
    assert found.exhausted


def test_the_three_messages_to_one_rank_give_six_orders_and_dpor_runs_fewer_schedules() -> None:
    outcomes, found = search(THREE_TO_ONE)
    logs = {dict(dict(outcome)[0])["log"] for outcome in outcomes}
    assert logs == set(itertools.permutations((1, 2, 3)))
    naive = interleavings(THREE_TO_ONE)
    assert found.runs < naive


def test_ranks_that_never_talk_take_one_schedule() -> None:
    _, found = search(APART)
    assert found.runs == 1
    assert interleavings(APART) > 1


def test_the_lost_update_is_found() -> None:
    outcomes, _ = search(BANK)
    balances = {dict(dict(outcome)[0])["balance"] for outcome in outcomes}
    assert balances == {15, 10, 5}  # both, or one deposit lost


def test_a_preemption_bound_cuts_the_search_and_it_is_never_called_exhausted() -> None:
    outcomes, found = search(BANK, preemption_bound=0)
    assert found.cut > 0
    assert not found.exhausted
    assert outcomes <= every_interleaving(BANK)


def preemptions(steps: list[Taken]) -> int:
    """Steps whose task was chosen while the one that ran last could go on."""
    return sum(1 for k in range(1, len(steps))
               if steps[k].task != steps[k - 1].task and steps[k - 1].task in dict(steps[k].ready))


@pytest.mark.parametrize(("name", "bound", "runs", "cut", "most"), [
    ("bank", 0, 1, 1, 0), ("bank", 1, 4, 2, 1), ("bank", 2, 6, 0, 2), ("bank", 9, 6, 0, 2),
    # Three callers: every order of their messages needs no preemption (the
    # first choice, with no task run before it, is none).
    ("three_to_one", 0, 6, 0, 0),
    # Both callers sleep first: the clock wakes them together; which goes first
    # is the first choice, no preemption, but the other going on before the
    # first one's message is one.
    ("both_sleep", 0, 3, 1, 0)])
def test_a_preemption_bound_runs_every_branch_within_it_and_counts_those_it_leaves_out(name, bound, runs, cut,
                                                                                       most) -> None:
    # Measured: 6 schedules exhaust the lost update, 2 of them with 2 preemptions.
    found, seen = dpor.Search(preemption_bound=bound), 0
    while (branch := found.next()) is not None:
        steps, _, _ = run(PROGRAMS[name], strategies.make(S.parse(branch.schedule), None).choose)  # type: ignore[arg-type]
        seen = max(seen, preemptions(steps))
        assert found.record(branch, steps) is None
    assert (found.runs, found.cut, found.exhausted) == (runs, cut, cut == 0)
    assert seen == most


def test_a_world_that_does_not_show_what_it_showed_before_is_not_deterministic() -> None:
    found = dpor.Search()
    first = found.next()
    strategy = strategies.make(S.parse(first.schedule), None)  # type: ignore[arg-type]
    steps, _, _ = run(BANK, strategy.choose)
    assert found.record(first, steps) is None
    branch = found.next()
    assert branch is not None and branch.prefix
    # The same branch, but a task that could run before is missing now.
    index = len(branch.prefix) - 1
    changed = [dpor_step if i != index else Taken(dpor_step.task, dpor_step.rank, dpor_step.ready[:1] + (("ghost", 9),),
                                                  dpor_step.cause)
               for i, dpor_step in enumerate(run(BANK, strategies.make(S.parse(branch.schedule), None).choose)[0])]  # type: ignore[arg-type]
    problem = found.record(branch, changed)
    assert problem is not None and f"step {index}" in problem and "ghost" in problem


def test_compare_names_the_step_where_two_runs_of_one_schedule_differ() -> None:
    steps, _, _ = run(BANK, lambda ready, history: ready[0])
    assert dpor.compare(steps, steps) is None
    other = list(steps)
    other[2] = Taken(other[2].task, other[2].rank, other[2].ready + (("late", 1),), other[2].cause)
    assert dpor.compare(steps, other).startswith("step 2: the tasks that could run")
    assert "fewer" not in (dpor.compare(steps, steps[:-1]) or "") and dpor.compare(steps, steps[:-1]) is not None


def test_a_branch_never_chooses_a_sleeping_task_while_another_can_run() -> None:
    branch = strategies.Branch((), (("r1", 1, None),))
    history = History()
    ready = [Task("r1", 1, ()), Task("r2", 2, ())]
    history.last = ready[0]
    assert branch.choose(ready, history).id == "r2"


def test_a_step_wakes_the_sleeping_tasks_it_depends_on_once_it_has_run() -> None:
    # Asleep before the prefix's last step: r1 (footprint {a} on rank 1), r3 (unknown, rank 3).
    branch = strategies.Branch(("x",), (("r1", 1, frozenset({"a"})), ("r3", 3, None)))
    history = History()
    branch.choose([Task("x", 2, ())], history)
    # The prefix's step, on rank 2, wakes neither; r2's step on rank 1 touching {b} does not wake r1.
    history.steps.append(Taken("x", 2, (), -1, objects=frozenset({"a"})))
    assert branch.choose([Task("r1", 1, ()), Task("r2", 1, ())], history).id == "r2"
    history.steps.append(Taken("r2", 1, (), -1, objects=frozenset({"b"})))
    branch.choose([Task("r1", 1, ()), Task("r2", 1, ())], history)
    assert set(branch.sleep) == {"r1", "r3"}
    # A step of rank 1 touching {a} wakes r1; one of rank 3 with no footprint wakes r3.
    history.steps.append(Taken("r2", 1, (), -1, objects=frozenset({"a", "c"})))
    branch.choose([Task("r2", 1, ())], history)
    assert set(branch.sleep) == {"r3"}
    history.steps.append(Taken("r3b", 3, (), -1, objects=frozenset()))
    branch.choose([Task("r2", 1, ())], history)
    assert branch.sleep == {}


def test_a_step_the_clock_woke_wakes_every_sleeping_task() -> None:
    sleep = {"r1": (1, frozenset({"a"})), "r2": (2, None)}
    assert dpor.awake_after(sleep, Taken("t", 3, (), -1, timer=True, objects=frozenset())) == {}
    assert dpor.awake_after(sleep, Taken("t", 3, (), -1, objects=frozenset())) == sleep


@pytest.mark.parametrize(("a", "b", "commute"), [
    ((0, None), (1, None), True),  # different ranks
    ((0, None), (0, frozenset()), False),  # one footprint unknown
    ((0, frozenset()), (0, None), False),
    ((0, frozenset({"v"})), (0, frozenset({"w"})), True),  # one rank, different objects
    ((0, frozenset({"v", "w"})), (0, frozenset({"w"})), False),  # one object in common
    ((0, frozenset()), (0, frozenset()), True),
])
def test_steps_commute_on_different_ranks_or_on_disjoint_footprints(a, b, commute) -> None:
    assert dpor.independent(a, False, b, False) is commute
    assert dpor.independent(b, False, a, False) is commute
    assert not dpor.independent(a, True, b, False) and not dpor.independent(a, False, b, True)


def test_a_branch_schedule_carries_each_sleeping_tasks_footprint() -> None:
    branch = dpor.Branch(("r1", "r2"), (("r3", 0, frozenset({"v", "w"})), ("r4", 1, None), ("r5", 0, frozenset())))
    parsed = S.parse(branch.schedule)
    assert parsed.prefix == ("r1", "r2")
    assert parsed.sleep == (("r3", 0, frozenset({"v", "w"})), ("r4", 1, None), ("r5", 0, frozenset()))


# -- programs Hypothesis writes ------------------------------------------------------------------------

def _handler_ops() -> st.SearchStrategy:
    return st.lists(st.one_of(st.tuples(st.just("load"), st.sampled_from(["v", "w"])),
                              st.tuples(st.just("store"), st.sampled_from(["v", "w"]), st.integers(1, 3)),
                              st.tuples(st.just("append"), st.just("log"), st.integers(1, 9))),
                    min_size=1, max_size=2).map(tuple)


@st.composite
def programs(draw) -> dict[int, tuple]:
    ranks = draw(st.integers(2, 3))
    program = {}
    for rank in range(ranks):
        ops, calls = [], 0
        for _ in range(draw(st.integers(0, 3))):
            kind = draw(st.sampled_from(["load", "store", "append", "call", "wait", "sleep"]))
            if kind == "call":
                calls += 1
                ops.append(("call", draw(st.integers(0, ranks - 1)), draw(_handler_ops())))
            elif kind == "wait" and calls:
                ops.append(("wait", draw(st.integers(1, calls))))
            elif kind == "sleep":
                ops.append(("sleep",))
            elif kind == "load":
                ops.append(("load", "v"))
            elif kind == "store":
                ops.append(("store", "v", draw(st.integers(1, 3))))
            else:
                ops.append(("append", "log", draw(st.integers(1, 9))))
        program[rank] = tuple(ops)
    return program


# Under mutation (tools/mutation.py sets RPC_HARNESS_MUTATION) this test runs
# once per mutant: 20 programs there, 60 here.
@settings(max_examples=20 if os.environ.get("RPC_HARNESS_MUTATION") else 60, deadline=None)
@given(programs())
def test_dpor_misses_no_outcome_of_programs_hypothesis_writes(program: dict[int, tuple]) -> None:
    truth = every_interleaving(program)
    for coarse in (False, True):
        reduced, found = search(program, coarse=coarse)
        assert reduced == truth
        assert found.exhausted


# -- the determinism check, through explore_runs -----------------------------------------------------

def model_runner(program: dict[int, tuple], *, tamper_run: int | None = None, lose_control=lambda run: None):
    """explore_runs' ``run`` over the model: each schedule run as a world
    would run it. Run number ``tamper_run`` (from 1) shows one more task
    able to run at step 2 than the program has: a world that is not
    deterministic under its schedule. ``lose_control(run number)``: the
    step at which that run lost control (None: it did not)."""
    from rpc_harness import FaultPlan, WorldResult
    from rpc_harness.explore import Attempt
    from rpc_harness.result import RankOutcome

    calls: list[str] = []

    def run_one(seed: int, schedule: str) -> Attempt:
        calls.append(schedule)
        strategy = strategies.make(S.parse(schedule), None)  # type: ignore[arg-type]
        taken, _, problems = run(program, strategy.choose)
        steps = [S.Step(index=i, rank=t.rank, worker=f"r{t.rank}", task=t.task, label="", point=f"p{i}",
                        ready=t.ready + ((("ghost", 9),) if len(calls) == tamper_run and i == 2 else ()),
                        cause=t.cause, timer=t.timer, objects=t.objects) for i, t in enumerate(taken)]
        world = WorldResult(names=tuple(f"r{rank}" for rank in program), seed=seed, faults=FaultPlan(), deadline=5.0,
                            ranks=[RankOutcome(rank, f"r{rank}", status="ok") for rank in program],
                            schedule=steps, problems=problems, schedule_label="dpor",
                            control_lost_at=lose_control(len(calls)))
        return Attempt(seed, schedule, world, False)

    return run_one, calls


def test_every_nth_schedule_is_run_twice_and_compared_step_by_step() -> None:
    from rpc_harness.explore import explore_runs

    run_one, calls = model_runner(PIPELINE)
    found = explore_runs(run_one, seed=0, schedules=100, strategy="dpor", check_every=5)
    assert found.exhausted and not found.nondeterministic, found.verdict()
    assert len(found.attempts) == 12 and found.checks == 2
    # Each check runs the schedule just run again, whole: its prefix is every step's task.
    assert S.parse(calls[5]).prefix == tuple(step.task for step in run(PIPELINE, strategies.make(
        S.parse(calls[4]), None).choose)[0])  # type: ignore[arg-type]


def test_a_program_that_shows_other_tasks_when_a_schedule_runs_again_is_reported_and_not_explored_further() -> None:
    from rpc_harness.explore import explore_runs

    run_one, calls = model_runner(PIPELINE, tamper_run=6)  # the 6th run is the check of the 5th
    found = explore_runs(run_one, seed=0, schedules=100, strategy="dpor", check_every=5)
    ready = sorted(task for task, _ in found.attempts[4].world.schedule[2].ready) if found.attempts[4].world else []
    assert found.nondeterministic == (f"step 2: the tasks that could run were {{{', '.join(ready)}}} the first time, "
                                      f"{{{', '.join(sorted([*ready, 'ghost']))}}} the second")
    assert len(found.attempts) == 5 and len(calls) == 6 and found.checks == 1
    assert not found.exhausted
    assert found.verdict() == ("not exhausted: the program is not deterministic under its schedule "
                               f"({found.nondeterministic}); stopped after 5 schedules")


def test_a_schedule_run_twice_that_lost_control_at_another_step_is_not_called_nondeterministic() -> None:
    # Where a world loses control (a stall, a lock the scheduler cannot see)
    # depends on the real clock: the check compares the steps both runs chose.
    from rpc_harness.explore import explore_runs

    for lose_control in (lambda run: 5 if run % 2 else 4, lambda run: 4 if run % 2 else None):
        run_one, calls = model_runner(PIPELINE, lose_control=lose_control)
        found = explore_runs(run_one, seed=0, schedules=3, strategy="dpor", check_every=1)
        assert not found.nondeterministic and found.checks == len(found.attempts) >= 1, found.verdict()
        assert len(calls) == 2 * len(found.attempts)  # each schedule run, then run again
        assert not found.exhausted and any("lost control" in cut for cut in found.cut_by)
    # A step both chose that differs is still found.
    run_one, _ = model_runner(PIPELINE, tamper_run=2, lose_control=lambda run: 5 if run % 2 else 4)
    found = explore_runs(run_one, seed=0, schedules=3, strategy="dpor", check_every=1)
    assert found.nondeterministic.startswith("step 2: the tasks that could run were"), found.verdict()


# -- races with a step the clock woke, and the initials of a race --------------------------------------

@pytest.mark.parametrize("timer_at", [0, 1])
def test_a_step_the_clock_woke_races_with_a_later_step_even_on_another_rank(timer_at: int) -> None:
    # a (rank 0) then b (rank 1): they commute, unless the clock woke one of them.
    found = dpor.Search()
    branch = found.next()
    assert branch is not None
    steps = [Taken("a", 0, (("a", 0), ("b", 1)), -1, timer=timer_at == 0),
             Taken("b", 1, (("b", 1),), -1, timer=timer_at == 1)]
    assert found.record(branch, steps) is None
    assert found.nodes[0].backtrack == {"a", "b"}
    untimed = dpor.Search()
    assert untimed.record(untimed.next(), [Taken(s.task, s.rank, s.ready, s.cause) for s in steps]) is None  # type: ignore[arg-type]
    assert untimed.nodes[0].backtrack == {"a"}


def backtrack_after(first: list[Taken], second: list[Taken], explored: set[str] = frozenset()) -> set[str]:
    """The backtrack set at the first step, once the run ``first`` was
    recorded, ``explored`` added there (tasks tried there before), and
    the run ``second`` that shares its first step recorded as a branch."""
    found = dpor.Search()
    assert found.record(found.next(), first) is None  # type: ignore[arg-type]
    found.nodes[0].backtrack |= explored
    assert found.record(dpor.Branch((first[0].task,)), second) is None
    return found.nodes[0].backtrack


def test_a_race_whose_reversal_a_tried_initial_already_starts_adds_no_task() -> None:
    # a (rank 0) races with c (rank 0); b (rank 1) between them commutes with
    # both, so b and c are each an initial of running c first. The first run
    # (c before b) put c in the backtrack set: the second adds nothing.
    start = Taken("a", 0, (("a", 0), ("b", 1), ("c", 0)), -1)
    c_first = [start, Taken("c", 0, (("b", 1), ("c", 0)), -1), Taken("b", 1, (("b", 1),), -1)]
    b_first = [start, Taken("b", 1, (("b", 1), ("c", 0)), -1), Taken("c", 0, (("c", 0),), -1)]
    assert backtrack_after(c_first, b_first) == {"a", "c"}
    assert backtrack_after([start, b_first[1]], b_first) == {"a", "b"}  # else the first initial by name


def test_a_task_whose_step_must_follow_another_of_the_race_is_no_initial() -> None:
    # x's handler on rank 0 is started by b's call (its cause): x cannot run
    # before b, so b must be tried first, whatever was tried for x.
    start, b = Taken("a", 0, (("a", 0), ("b", 1)), -1), Taken("b", 1, (("b", 1),), -1)
    assert backtrack_after([start, b], [start, b, Taken("x", 0, (("x", 0),), 1)], {"x"}) == {"a", "b", "x"}


def backtracks(steps: list[Taken]) -> list[set[str]]:
    """Each state's backtrack set once the run ``steps`` is recorded."""
    found = dpor.Search()
    assert found.record(found.next(), steps) is None  # type: ignore[arg-type]
    return [node.backtrack for node in found.nodes]


def test_a_step_happens_after_the_step_that_made_its_task_ready_even_the_first() -> None:
    # y's step 0 starts x, and both touch v: no race, x could not run first.
    steps = [Taken("y", 0, (("w", 1), ("y", 0)), -1, objects=frozenset("v")),
             Taken("x", 0, (("w", 1), ("x", 0)), 0, objects=frozenset("v")),
             Taken("w", 1, (("w", 1),), -1, objects=frozenset())]
    assert backtracks(steps)[0] == {"y"}


def test_what_happens_before_a_steps_cause_happens_before_the_step_past_an_independent_one() -> None:
    # y's step 0 (touching v) starts x; a's step 1 (w) commutes with it; x's
    # step 2 (v and w) races with a's only: y's is before it through its cause.
    steps = [Taken("y", 0, (("a", 0), ("y", 0)), -1, objects=frozenset("v")),
             Taken("a", 0, (("a", 0), ("x", 0)), -1, objects=frozenset("w")),
             Taken("x", 0, (("x", 0),), 0, objects=frozenset("vw"))]
    assert backtracks(steps)[:2] == [{"y"}, {"a", "x"}]


def test_what_happens_before_a_tasks_own_last_step_happens_before_its_next() -> None:
    # y's step 0 (u, v) is before x's step 1 (u); z's step 2 (w) wakes x, whose
    # step 3 (v) so follows y's through x's own step 1, which it commutes with.
    steps = [Taken("y", 0, (("x", 0), ("y", 0), ("z", 0)), -1, objects=frozenset("uv")),
             Taken("x", 0, (("x", 0), ("z", 0)), -1, objects=frozenset("u")),
             Taken("z", 0, (("z", 0),), -1, objects=frozenset("w")),
             Taken("x", 0, (("x", 0),), 2, objects=frozenset("v"))]
    assert backtracks(steps)[0] == {"x", "y"}


def test_a_task_tried_at_a_state_whose_run_was_never_recorded_sleeps_with_no_footprint_known() -> None:
    # A branch whose world ended (or lost control) before its choices is not
    # recorded: its task sleeps in the next branch with its rank, all of its memory.
    found = dpor.Search()
    assert found.record(found.next(), [Taken("a", 0, (("a", 0), ("b", 1), ("c", 2)), -1,
                                             objects=frozenset("v"))]) is None  # type: ignore[arg-type]
    found.nodes[0].backtrack |= {"b", "c"}
    assert found.next() == dpor.Branch(("b",), (("a", 0, frozenset("v")),))
    assert found.next() == dpor.Branch(("c",), (("a", 0, frozenset("v")), ("b", 1, None)))
