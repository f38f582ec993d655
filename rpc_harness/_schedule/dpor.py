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
and may touch the same object of its memory, or one of them was woken by
the schedule's clock (a wait that timed out runs only when no task can run,
so it depends on everything). A step may carry its *footprint*
(``Taken.objects``): every object of its rank's memory it reads or writes,
a sound over-approximation; None (the default, and every step of a real
world today: a rank cannot see what a stretch of Python code touches)
means all of them. So steps on different ranks never depend on each other,
and steps on one rank only when a footprint is unknown or the two overlap.

Why steps that share no object commute (the proof; the relation is only
as sound as this). Let a and b be steps of different tasks t and u, neither
woken by the clock, both able to run in a state s, with footprints A and B
that are disjoint (steps on different ranks: A and B lie in different
memories, so this covers them too). A world's state is each rank's memory,
each task's own state (where it stopped, its frame), the messages in
flight and the schedule's clock. A step of t changes only t's own state,
objects in its footprint, and sends messages, which the scheduler delivers
before the next choice and which start or wake tasks (an order of cause and
effect, kept as ``Step.cause``). Run from s, a then b, or b then a:
(1) a reads only objects of A, which b does not write, so a reads the same
values in both orders and writes the same values to A; likewise b to B;
the memory ends the same. (2) t's and u's own states follow from what their
steps read, the same in both orders. (3) The messages each sends follow
from what it read: the same in both orders, delivered before the next
choice either way. (4) Neither disables the other: a task that can run
waits only for its turn (a future once completed stays completed, a
condition's notify is kept, an RRef's value once made stays made), and
neither enables the other: both could run in s already. (5) The clock
moves only in a step the clock wakes, and neither is one. So both orders
reach the same state, and each step is the same step in both: the two
commute. A sleep set keeps, for each sleeping task, the footprint of the
step it took where it was put to sleep; that step stays the task's next
step while only steps independent of it run (by the same argument), so its
footprint is still the one recorded.

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
    objects: frozenset[str] | None  # the step's footprint in its rank's memory; None: unknown, all of it


Footprint = tuple[int, "frozenset[str] | None"]  # (rank, objects) of a step: where it may touch memory


def independent(a: Footprint, a_timer: bool, b: Footprint, b_timer: bool) -> bool:
    """Whether two steps commute (the proof is in the module's docstring):
    neither woken by the clock, and on different ranks, or on one rank
    with footprints both known and disjoint."""
    if a_timer or b_timer:
        return False
    (rank_a, objects_a), (rank_b, objects_b) = a, b
    return rank_a != rank_b or (objects_a is not None and objects_b is not None and not objects_a & objects_b)


def footprint(step: Taken) -> Footprint:
    """Where ``step`` may touch memory: its rank, and its objects if known."""
    return step.rank, step.objects


def _dependent(a: Taken, b: Taken) -> bool:
    return not independent(footprint(a), a.timer, footprint(b), b.timer)


@dataclass(frozen=True)
class Branch:
    """One schedule to run: the task chosen at each of the first steps, and
    the tasks asleep before the last of them (task, rank, objects: the
    footprint of the step each would take); the last chosen step wakes
    those it depends on, once its own footprint is seen."""

    prefix: tuple[str, ...]
    sleep: tuple[tuple[str, int, frozenset[str] | None], ...] = ()

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
    preempting: bool  # choosing ``chosen`` here stopped the task that ran last while it could go on
    backtrack: set[str] = field(default_factory=set)
    done: set[str] = field(default_factory=set)
    sleep: dict[str, Footprint] = field(default_factory=dict)  # task -> its next step's footprint
    taken: dict[str, Footprint] = field(default_factory=dict)  # task run here -> its step's footprint


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
                return Branch(tuple(n.chosen for n in self.nodes), self._asleep_at(node, task))
            self.nodes.pop()
        return None

    def _asleep_at(self, node: _Node, task: str) -> tuple[tuple[str, int, frozenset[str] | None], ...]:
        """What sleeps at ``node`` when ``task`` is chosen there: the node's
        sleep set, and the branches of it explored before (with the
        footprints their steps had). ``task``'s own step, not run yet,
        wakes those it depends on once it is seen (:meth:`record`, and
        :class:`~.strategies.Branch` in the world)."""
        if not self.reduce:
            return ()
        pool = dict(node.sleep)
        pool.update({done: node.taken.get(done, (node.enabled[done], None)) for done in node.done if done != task})
        return tuple(sorted((t, rank, objects) for t, (rank, objects) in pool.items()))

    def record(self, branch: Branch, steps: Sequence[Taken]) -> str | None:
        """What the world run for ``branch`` did: its controlled steps, in
        order (a world that lost control: only the steps before). Returns
        why the search cannot go on (the world did not show, along the
        branch, what it showed before: it is not deterministic under its
        schedule), else None."""
        self.runs += 1
        prefix = branch.prefix
        for index, step in enumerate(steps[:len(prefix)]):
            node = self.nodes[index]  # (a branch's prefix is a path of the search's states)
            if step.task != prefix[index]:
                return f"step {index}: the branch chose {prefix[index]}, but {step.task} ran"
            if dict(step.ready) != node.enabled:
                return (f"step {index}: the tasks that could run were {_listed(node.enabled)} before, "
                        f"{_listed(dict(step.ready))} now")
        if len(steps) < len(prefix):
            return f"the world took {len(steps)} steps, fewer than the {len(prefix)} its branch chooses"
        del self.nodes[len(prefix):]
        sleep = {t: (rank, objects) for t, rank, objects in branch.sleep} if self.reduce else {}
        if prefix:  # the last chosen step: now seen, it wakes what it depends on
            last_step = steps[len(prefix) - 1]
            self.nodes[-1].taken[last_step.task] = footprint(last_step)
            sleep = awake_after(sleep, last_step)
        for index in range(len(prefix), len(steps)):
            step = steps[index]
            enabled = dict(step.ready)
            if step.task in sleep:  # every task that could run slept: explored in another branch
                self.redundant += 1
                break
            last = steps[index - 1].task if index else None
            self.nodes.append(_Node(enabled, step.task,
                                    preempting=last is not None and last in enabled and step.task != last,
                                    backtrack={step.task} if self.reduce else set(enabled),
                                    done={step.task}, sleep=dict(sleep), taken={step.task: footprint(step)}))
            sleep = awake_after(sleep, step)
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
            if step.cause >= 0:  # (a step's cause ran before it)
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


def awake_after(sleep: dict[str, Footprint], step: Taken) -> dict[str, Footprint]:
    """The sleep set once ``step`` ran: the sleeping tasks whose next step
    commutes with it (the others wake)."""
    return {t: where for t, where in sleep.items() if independent(where, False, footprint(step), step.timer)}


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
