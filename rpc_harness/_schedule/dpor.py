"""Exhaustive exploration of a controlled world's schedules: stateless
dynamic partial-order reduction with sleep sets (Flanagan and Godefroid,
POPL 2005; sleep sets after Godefroid 1996), and the naive depth-first
search it is measured against.

A controlled world is deterministic under its choices: the tasks that can
run at each choice depend on the choices before it and nothing else (the
scheduler waits for a quiet world before each). So a schedule is its
sequence of choices, and a branch is explored by running a new world from
the start (stateless, as VeriSoft and loom do) that takes a prefix of
choices and then goes on as :class:`~.strategies.Branch` does. Whether the
world really is deterministic is checked, not assumed: every run must
show, along its prefix, the sets of tasks that could run which the runs
before it showed (:meth:`Search.record`), and :func:`compare` checks a
whole schedule run twice.

**Dependence**, when two steps may not commute: they run on the same rank
(a rank's tasks share its memory), or one of them was woken by the
schedule's clock (a wait that timed out runs only when no task can run,
so it depends on everything). Steps on different ranks share nothing: a
step changes another rank only through messages, which the scheduler
delivers before the next choice and which start or wake a task there,
an order of cause and effect kept as ``Step.cause``. This is the coarse,
sound relation; a finer one (steps of one rank touching different
objects) would explore less, and is not claimed here.

**Happens-before** within one run: a task's steps in order; the step that
made a task ready (``Step.cause``: the call that started a handler, the
handler's end that answered a call) before that task's step; dependent
steps in the order they ran; and what follows from these. A **race** is
two dependent steps of different tasks, the earlier not happening before
the later through other steps. For each race, some way of running the
later step's side first is tried at the earlier step's state: unless one
is there already, a task is added to its backtrack set that can start
such a run (an *initial*; source-DPOR, Abdulla, Aronis, Jonsson and
Sagonas, POPL 2014), which never tries more than Flanagan and Godefroid's
rule (the later task if it could run there, else every task that could).

**Sleep sets**: once a state's branch for task t is explored, t sleeps in
the later branches of that state until a step dependent with it runs; a
branch never chooses a sleeping task while another can run, and one where
every task that can run sleeps is redundant from there on (counted, and
not analysed further).

**Bounds**: a preemption bound (the choice, at a branch, of a task other
than the one that ran last while that one could go on) cuts branches, and
then the search is never said to be exhausted.

Pure: no torch, no process. The tests drive it over a model of message
passing (tests/unit/test_dpor.py); :mod:`rpc_harness.explore` drives it
over real worlds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from .. import schedule as S


class Taken(Protocol):
    """What the search reads of one step of a run (:class:`~rpc_harness.schedule.Step` is one)."""

    task: str
    rank: int
    ready: tuple[tuple[str, int], ...]
    cause: int
    timer: bool


def independent(rank_a: int, timer_a: bool, rank_b: int, timer_b: bool) -> bool:
    """Whether two steps commute: on different ranks, neither woken by the clock."""
    return rank_a != rank_b and not timer_a and not timer_b


def _dependent(a: Taken, b: Taken) -> bool:
    return not independent(a.rank, a.timer, b.rank, b.timer)


@dataclass(frozen=True)
class Branch:
    """One schedule to run: the task chosen at each of the first steps, and
    the tasks asleep after them (task, rank)."""

    prefix: tuple[str, ...]
    sleep: tuple[tuple[str, int], ...] = ()

    @property
    def schedule(self) -> str:
        """The world option that runs this branch."""
        return S.branch_schedule(self.prefix, self.sleep)


@dataclass
class _Node:
    """A state of the current run: what could run there, what ran, what is
    left to try, what was tried, what sleeps."""

    enabled: dict[str, int]  # task -> rank
    chosen: str
    timer: bool  # the clock woke the tasks that could run here
    preempting: bool  # choosing ``chosen`` here stopped the task that ran last while it could go on
    backtrack: set[str] = field(default_factory=set)
    done: set[str] = field(default_factory=set)
    sleep: dict[str, int] = field(default_factory=dict)


class Search:
    """A depth-first search over the schedules of a deterministic world.

    ``reduce=True``: DPOR with sleep sets; ``reduce=False``: every task that
    can run, at every state (the naive search, for comparison). Use::

        search = Search()
        while (branch := search.next()) is not None:
            steps = run_a_world(branch.schedule)
            problem = search.record(branch, steps)
    """

    def __init__(self, *, reduce: bool = True, preemption_bound: int | None = None) -> None:
        self.reduce = reduce
        self.bound = preemption_bound
        self.nodes: list[_Node] = []
        self.runs = 0
        self.redundant = 0  # runs in which every task that could run slept, from some step on
        self.cut = 0  # branches the preemption bound left out
        self._first: Branch | None = Branch(())

    @property
    def exhausted(self) -> bool:
        """Every branch was run and none was cut (:meth:`next` said None)."""
        return self._first is None and not self.nodes and not self.cut

    def next(self) -> Branch | None:
        """The next branch to run, deepest first; None when none is left."""
        if self._first is not None:
            first, self._first = self._first, None
            return first
        while self.nodes:
            index = len(self.nodes) - 1
            node = self.nodes[index]
            for task in sorted(node.backtrack - node.done - set(node.sleep)):
                node.done.add(task)
                last = self.nodes[index - 1].chosen if index else None
                preempting = last is not None and last in node.enabled and task != last
                if self.bound is not None and \
                        sum(n.preempting for n in self.nodes[:index]) + preempting > self.bound:
                    self.cut += 1
                    continue
                node.chosen, node.preempting = task, preempting
                return Branch(tuple(n.chosen for n in self.nodes), self._sleep_after(node, task))
            self.nodes.pop()
        return None

    def _sleep_after(self, node: _Node, task: str) -> tuple[tuple[str, int], ...]:
        """The sleep set once ``task`` ran at ``node``: the node's, and the
        branches of it explored before, that ``task``'s step commutes with."""
        if not self.reduce:
            return ()
        pool = dict(node.sleep)
        pool.update({done: node.enabled[done] for done in node.done if done != task})
        rank = node.enabled[task]
        return tuple(sorted((t, r) for t, r in pool.items() if independent(r, node.timer, rank, node.timer)))

    def record(self, branch: Branch, steps: Sequence[Taken]) -> str | None:
        """What the world run for ``branch`` did: its controlled steps, in
        order (a world that lost control: only the steps before). Returns
        why the search cannot go on (the world did not show, along the
        branch, what it showed before: it is not deterministic under its
        schedule), else None."""
        self.runs += 1
        prefix = branch.prefix
        for index, step in enumerate(steps[:len(prefix)]):
            node = self.nodes[index] if index < len(self.nodes) else None
            if step.task != prefix[index]:
                return f"step {index}: the branch chose {prefix[index]}, but {step.task} ran"
            if node is not None and dict(step.ready) != node.enabled:
                return (f"step {index}: the tasks that could run were {_listed(node.enabled)} before, "
                        f"{_listed(dict(step.ready))} now")
        if len(steps) < len(prefix):
            return f"the world took {len(steps)} steps, fewer than the {len(prefix)} its branch chooses"
        del self.nodes[len(prefix):]
        sleep = dict(branch.sleep) if self.reduce else {}
        for index in range(len(prefix), len(steps)):
            step = steps[index]
            enabled = dict(step.ready)
            if step.task in sleep:  # every task that could run slept: explored in another branch
                self.redundant += 1
                break
            last = steps[index - 1].task if index else None
            self.nodes.append(_Node(enabled, step.task, step.timer,
                                    preempting=last is not None and last in enabled and step.task != last,
                                    backtrack={step.task} if self.reduce else set(enabled),
                                    done={step.task}, sleep=dict(sleep)))
            sleep = {t: r for t, r in sleep.items() if independent(r, False, step.rank, step.timer)}
        if self.reduce:
            self._add_races(steps[:len(self.nodes)])
        return None

    def _add_races(self, steps: Sequence[Taken]) -> None:
        """For every race of the run, a backtrack point before its first step."""
        before: list[int] = []  # per step, a bit set of the steps that happen before it (and itself)
        last_of: dict[str, int] = {}
        for j, step in enumerate(steps):
            clock = 0
            if step.task in last_of:
                clock |= before[last_of[step.task]]
            if 0 <= step.cause < j:
                clock |= before[step.cause]
            races = []
            for i in range(j - 1, -1, -1):
                other = steps[i]
                if not _dependent(other, step) or (clock >> i) & 1:
                    continue
                if other.task != step.task:
                    races.append(i)
                clock |= before[i]
            before.append(clock | (1 << j))
            last_of[step.task] = j
            for i in races:
                self._reverse(i, j, steps, before)

    def _reverse(self, i: int, j: int, steps: Sequence[Taken], before: list[int]) -> None:
        """Race (i, j): make sure some way of running step j's side of the
        race before step i is tried at step i's state. Those ways start
        with an *initial*: a task whose first step among those that need not
        follow step i (and j's) happens after none of the others. If no
        initial is to be tried there yet, one is added (source-DPOR's rule,
        Abdulla et al., POPL 2014): never more than Flanagan and Godefroid's."""
        node = self.nodes[i]
        later = [k for k in range(i + 1, j) if not (before[k] >> i) & 1] + [j]
        initials = {steps[k].task for n, k in enumerate(later)
                    if not any((before[k] >> other) & 1 for other in later[:n])}
        if initials & node.backtrack:
            return
        possible = sorted(initials & set(node.enabled))
        if possible:
            node.backtrack.add(possible[0])
        else:  # (not seen: an initial can always run there; kept as the sound fallback)
            node.backtrack.update(node.enabled)


def compare(first: Sequence[Taken], second: Sequence[Taken]) -> str | None:
    """Where two runs of one schedule differ (the task that ran, or the
    tasks that could run), or None: the determinism check."""
    for index, (a, b) in enumerate(zip(first, second, strict=False)):
        if a.task != b.task:
            return f"step {index}: {a.task} ran the first time, {b.task} the second"
        if dict(a.ready) != dict(b.ready):
            return (f"step {index}: the tasks that could run were {_listed(dict(a.ready))} the first time, "
                    f"{_listed(dict(b.ready))} the second")
    if len(first) != len(second):
        return f"the schedule took {len(first)} steps the first time, {len(second)} the second"
    return None


def _listed(tasks: dict[str, int]) -> str:
    return "{" + ", ".join(sorted(tasks)) + "}"
