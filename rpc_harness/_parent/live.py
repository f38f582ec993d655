"""Reused worlds: a live world per world shape, whose ranks run one entry
after another, each checked for what it left behind.

A fresh 4-rank world costs ~0.2 s here, nearly all of it torch's
``init_rpc``; an entry in a world that is already up costs milliseconds.
What an entry may not carry into the next one is checked between entries,
in every rank (``_clean``'s rules: no RRef left, no dist_autograd context
open, no pending future, every rank idle). An entry that breaks a rule fails
with the rule named, and the world is ended; so is a world where an entry
failed, hung, or lost a rank (a kill, a freeze, a death): the next entry of
that shape gets a fresh world, and its result says why (``WorldResult.reuse``).

Per entry: its seed (every RNG seeded again), its fault plan (failpoint
faults, armed for it alone, hit counts from zero), its deadline (counted
from its start), its schedule. Under a controlled schedule the entry has a
scheduler of its own: every rank's gate opens as its entry starts (its
first step is the entry's, its clock at 0, as a fresh world's once it has
joined: bring-up and teardown are no steps of either), and the schedule
ends when every entry has returned, as a fresh world's does at its
shutdown; the rules are checked after that. Every rank of a live world
has a pipe to a scheduler for this, read by one entry's schedule at a
time: before the check, each rank's gate is heard out (``Released``), so
nothing of one schedule reaches the next. Per world (its shape): the
names, the environment, ``rpc_timeout``, ``devices``, ``isolate``,
``setup`` (run once, as the world comes up). Refused, because they are
the agent's (built at ``init_rpc``) or the whole world's: message faults,
fuzzing, and programs that call ``init_rpc`` themselves (``spawn``): see
:func:`refusal`.

Nothing of a live world is named on disk but its private temp folder, so
parallel sessions (``pytest -n auto``: one process per worker) each keep
their own. Ranks die with the process that started them (``rank_setup``);
folders of a process killed outright are swept by the next (``_workdirs``).
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import shutil
import time
from collections import OrderedDict
from collections.abc import Callable
from multiprocessing.reduction import ForkingPickler
from typing import Any

from .. import _cuda_fork
from .. import _messages as msg
from .. import result as R
from .._rank.boot import rank_file
from .._rank.clean import RULES
from ..c10d.sequence import GroupWord, must_try, sequence_finding
from ..context import events_written, read_event_lines
from ..errors import WorldSpecError
from ..faults import FaultPlan
from ..options import DEFAULT_DEADLINE
from ..progress import WORLD_ENDED, WORLD_UP, Progress
from ..result import RankOutcome, WorldResult
from ..spec import WorldSpec
from . import torch_check as _torch_check
from . import workdirs as _workdirs
from .launcher import cuda_report, forkserver_context, rank_starter, running, world_namespace
from .schedule_link import ScheduleLink
from .supervisor import Supervisor

CHECK_BUDGET = 15.0  # seconds every rank has to answer a cleanliness check (it settles for at most _clean.SETTLE)
DEFAULT_LIMIT = 2  # live worlds a pool keeps at once; the least recently used is closed first


def refusal(spec: WorldSpec) -> tuple[str, str] | None:
    """Why ``spec`` cannot run in a reused world, as the world option that
    asks for what it cannot do ("" for ``spawn``, which is not one) and a
    sentence; None: it can."""
    if spec.spawned:
        return "", "a program that calls init_rpc and rpc.shutdown itself (spawn) needs a world of its own"
    if spec.options.fuzz:
        return "fuzz", "schedule fuzzing delays the agent's own sends, which are set up once, at init_rpc"
    messages = [str(fault) for fault in spec.options.faults if not fault.traits.at_failpoint]
    if messages:
        return "faults", (f"message faults ({', '.join(messages)}) need torch's faulty agent, built for them at "
                          "init_rpc")
    return None


def shape_of(spec: WorldSpec) -> tuple[Any, ...]:
    """What two entries must share to run in one live world: the names and
    every option but those each entry has for itself."""
    options = dataclasses.replace(spec.options, seed=None, deadline=DEFAULT_DEADLINE, faults=FaultPlan(),
                                  failpoints=None, expect=None, bringup=None, schedule="free")
    return spec.names, options


class LiveSupervisor(Supervisor):
    """The supervisor of a live world: brings it up once, as a fresh world
    is brought up, then watches one entry at a time (its report holds only
    that entry's output, events and stacks)."""

    live = True

    def __init__(self, spec: WorldSpec, workdir: str, start_rank: Callable[..., Any], *, netns: Any,
                 isolation: str) -> None:
        super().__init__(spec, workdir, start_rank, netns=netns, isolation=isolation)
        self.events_read: dict[int, int] = {}
        self.log_read: dict[int, int] = {}
        self.checked: dict[int, tuple[str, ...]] = {}
        self.words: dict[int, GroupWord] = {}  # what each rank said of its default group in its last answer
        self.checks_at_once = False  # the ranks take the quick look unasked (RunEntry.check)

    # -- the world's life -----------------------------------------------------------------
    def run_entry(self, spec: WorldSpec) -> str:
        """Run one entry in every rank and check what it left; returns why
        the world can run no more ("": it can)."""
        self._begin(spec)
        self.tell(Progress(None, "world", note=WORLD_UP))  # as a fresh world's watchers hear it
        try:
            return self._run_entry(spec)
        finally:
            self.tell(Progress(None, "world", note=WORLD_ENDED))

    def _run_entry(self, spec: WorldSpec) -> str:
        # Where the ranks check at once, the quick look is theirs to begin.
        self.checks_at_once = self.link is None and not spec.options.rpc
        self._tell_all(msg.RunEntry(spec.entry, spec.payload, spec.seed, spec.options.faults, spec.options.deadline,
                                    controlled=self.link is not None, check=self.checks_at_once))

        def done() -> bool:  # every rank not lost is through its entry
            return all(self.outcomes[r].phase == "done" for r in self.running - self.frozen)

        finished = self.watch_until(done, self.joined_at + spec.options.deadline,  # type: ignore[operator]
                                    on_timeout=lambda: self.budget_ran_out("deadline"))
        self.ended = time.monotonic()
        if finished and self.link is not None:
            finished = self._end_schedule()
        if not finished:
            return "failed"
        if self._gone():
            self.kill_all()
            return "lost " + ", ".join(o.label for o in self._gone())
        dirt = self._check()
        self.ended = time.monotonic()
        # A rank may fail, or not answer, while it checks: the world is over then too.
        broken = not self.running or bool(self.problems) or any(o.failed for o in self.outcomes)
        self.problems += dirt
        if dirt or broken:
            self.kill_all()
            return "dirty" if dirt else "failed"
        return ""

    def _gone(self) -> list[RankOutcome]:
        """The ranks this world has lost (dead, or frozen by a fault)."""
        return [self.outcomes[r] for r in range(len(self.outcomes)) if r not in self.running or r in self.frozen]

    def _end_schedule(self) -> bool:
        """Every entry returned: the controlled schedule ends, as a fresh
        world's does at its shutdown (handlers still waiting run free), and
        each rank's gate is heard out (its Released), so that nothing of
        this schedule's reaches the next entry's. False: a rank failed or
        did not answer meanwhile (the world is over)."""
        link = self.link
        assert link is not None
        link.end_entry()
        return self.watch_until(lambda: self.running - self.frozen <= link.released,
                                time.monotonic() + CHECK_BUDGET, on_timeout=self._gate_timed_out)

    def _gate_timed_out(self) -> None:
        assert self.link is not None
        silent = sorted(self.running - self.frozen - self.link.released)
        self.dump_stacks(silent)
        self.problems.append(f"{', '.join(self.outcomes[r].label for r in silent)} did not let go of the entry's "
                             f"controlled schedule within {CHECK_BUDGET:g}s of its end (their stacks follow)")
        self.kill_all()

    def _check_schedule(self) -> None:
        if self.link is not None and self.link.muted:
            return  # the schedule is over: the rest of the entry's time (its check) is not its
        super()._check_schedule()

    def _tell_all(self, message: Any) -> None:
        # Pickled once, as Connection.send pickles (the ranks' recv reads it):
        # an entry's order carries its plan and arguments, and every rank's
        # wake-up already spreads the order's arrival over a millisecond.
        data = ForkingPickler.dumps(message)
        for rank in sorted(self.running):
            try:
                self.conns[rank].send_bytes(data)
            except OSError:  # it died meanwhile: its sentinel says how
                pass

    def _begin(self, spec: WorldSpec) -> None:
        """Everything of the last entry forgotten: a new spec, new outcomes,
        and where each rank's files stand now."""
        self.spec = spec
        self.outcomes = [RankOutcome(rank, name, phase="entry") for rank, name in enumerate(self.names)]
        self.pickled_values, self.problems, self.checked, self.words = {}, [], {}, {}
        self.timed_out, self.budget = False, "deadline"
        # A controlled entry's schedule: a scheduler of its own (its first
        # step the entry's start, its clock at 0), over the world's pipes.
        schedule = spec.options.schedule_spec
        self.schedule_label = schedule.label
        self.link = None
        if schedule.controlled:
            self.link = ScheduleLink(schedule, spec.seed, len(self.names), time.time)
            for conn in self.schedule_conns:
                self.link.add(conn)
        for rank in range(len(self.outcomes)):
            self.events_read[rank] = events_written(rank_file(self.workdir, rank, "events"),
                                                    self.events_read.get(rank, 0))
            self.log_read[rank] = _size(rank_file(self.workdir, rank, "log"))
            self.stacks_read[rank] = len(_text(rank_file(self.workdir, rank, "stacks")))
        self.started = self.joined_at = time.monotonic()
        self.ended = 0.0

    def _check(self) -> list[str]:
        """Ask every rank what the entry left: a quick look, and where any
        rank found something, a thorough one everywhere, whose findings
        (with the RRefs left named) are the verdict. In a collective world
        whose ranks are all clean, the default group is then tried, where
        the entry's own collectives did not show it usable on every rank."""
        found = self._ask(msg.Check(thorough=False) if not self.checks_at_once else None)
        if found:
            found = self._ask(msg.Check(thorough=True))
        if not found and self.words and not self.problems and must_try(self.words):
            found = self._ask(msg.TryGroup())
        problems = []
        for line in found:
            rule, text = line.split(": ", 1)
            problems.append(f"{R.DIRTY}: rule {rule} ({RULES[rule]}): {text}")
        return problems

    def _ask(self, order: msg.Check | msg.TryGroup | None) -> list[str]:
        """Every rank's findings after ``order`` (None: the ranks began
        their look unasked, and their answers may be in already), with the
        sequence rule's, which their words on the default group judge."""
        if order is not None:
            self.checked, self.words = {}, {}
            self._tell_all(order)
        answered = self.watch_until(lambda: len(self.checked) == len(self.running),
                                    time.monotonic() + CHECK_BUDGET, on_timeout=self._check_timed_out)
        if not answered:
            return []
        apart = sequence_finding(self.words)
        return [line for rank in sorted(self.checked) for line in self.checked[rank]] + (
            [f"sequence: {apart}"] if apart else [])

    def _check_timed_out(self) -> None:
        silent = sorted(self.running - set(self.checked))
        self.dump_stacks(silent)
        self.problems.append(f"{R.DIRTY}: rule idle ({RULES['idle']}): "
                             f"{', '.join(self.outcomes[r].label for r in silent)} did not answer the check "
                             f"within {CHECK_BUDGET:g}s (their stacks follow)")
        self.kill_all()

    def on_message(self, rank: int, message: msg.ToSupervisor) -> None:
        match message:
            case msg.Checked():
                self._checked(rank, message)
            case msg.EntryDone(_, checked):
                super().on_message(rank, message)
                self.outcomes[rank].status = R.OK
                if checked is not None:
                    self._checked(rank, checked)
            case _:
                super().on_message(rank, message)

    def _checked(self, rank: int, answer: msg.Checked) -> None:
        self.checked[rank] = answer.problems
        if isinstance(answer.group, GroupWord):
            self.words[rank] = answer.group

    def alive(self) -> bool:
        """Whether every rank is still there (one may die between entries)."""
        return bool(self.running) and all(self.procs[r].exitcode is None for r in self.running)

    # -- one entry's report --------------------------------------------------------------------
    def events_of(self, rank: int) -> list[dict]:
        return read_event_lines(rank_file(self.workdir, rank, "events"), self.events_read.get(rank, 0))

    def output_of(self, rank: int) -> str:
        try:
            with open(rank_file(self.workdir, rank, "log"), "rb") as file:
                file.seek(self.log_read.get(rank, 0))
                return file.read().decode(errors="replace")
        except OSError:
            return ""


class LiveWorld:
    """One live world and the entries it ran. ``note``: why the world of
    its shape before it ended, if one did."""

    def __init__(self, note: str = "") -> None:
        self.note = note
        self.entries: list[str] = []  # the labels of the entries it ran, in order
        self.ended = ""  # why it can run no more entries ("" while it can)
        self._supervisor: LiveSupervisor | None = None
        self._workdir: str | None = None
        self._netns: Any = None

    def run(self, spec: WorldSpec, label: str, *, on_progress: Callable[[Progress], None] | None = None,
            on_interrupted: Callable[[WorldResult], None] | None = None) -> WorldResult:
        """Run ``spec``'s entry in this world (brought up first, if it is
        not up yet); ``label`` names the entry in later entries' reports."""
        fresh = self._supervisor is None
        if not fresh and not self._supervisor.alive():  # type: ignore[union-attr]
            self.close()
            self.note = f"a rank died while the world was idle, after {self.entries[-1]}"
            self.entries, fresh = [], True
        before = list(self.entries)
        try:
            if fresh and not self._bring_up(spec):
                result = self._collect(spec)
                self.ended = f"it did not come up for {label}"
                self.close()
                return result
            supervisor = self._supervisor
            assert supervisor is not None
            supervisor.on_progress = on_progress
            with running(supervisor):
                why = supervisor.run_entry(spec)
            result = self._collect(spec)
        except BaseException as error:
            supervisor = self._supervisor
            if on_interrupted is not None and supervisor is not None and not isinstance(error, KeyboardInterrupt):
                supervisor.interrupted(error)
                supervisor.kill_all()
                on_interrupted(self._collect(spec))
            self.ended = f"{label} was stopped from outside ({type(error).__name__})"
            self.close()
            raise
        self.entries.append(label)
        result.reuse = self._describe(fresh, before)
        if why:
            self.ended = f"{label} {_ending(result, why)}"
            result.reuse += f"; this entry ended it ({_ending(result, why)}): the next entry gets a fresh one"
            self.close()
        return result

    def _bring_up(self, spec: WorldSpec) -> bool:
        _torch_check.require(reused=True, store_rendezvous=spec.options.rendezvous == "store")
        self._workdir = _workdirs.make()
        _OPEN.add(self)
        self._netns, isolation = world_namespace(spec.options.isolate)
        world = dataclasses.replace(spec, options=dataclasses.replace(spec.options, faults=FaultPlan(),
                                                                      failpoints=None, schedule="free"))
        # Every rank gets a pipe to a scheduler: any entry may ask for a controlled schedule.
        self._supervisor = LiveSupervisor(world, self._workdir, rank_starter(forkserver_context(), controlled=True),
                                          netns=self._netns, isolation=isolation)
        up = self._supervisor.bring_up()
        _cuda_fork.warn_about_culprits(cuda_report())
        return up

    def _collect(self, spec: WorldSpec) -> WorldResult:
        assert self._supervisor is not None
        return self._supervisor.collect(spec.repro)

    def _describe(self, fresh: bool, before: list[str]) -> str:
        if fresh:
            why = f" (the one before ended: {self.note})" if self.note else ""
            return f"a reused world, brought up for this entry{why}"
        shown = ", ".join(before[-3:]) + (f" and {len(before) - 3} before them" if len(before) > 3 else "")
        return f"a reused world, entry {len(before) + 1} of it (after {shown})"

    def close(self) -> None:
        """Stop every rank and remove the world's folder (idempotent)."""
        supervisor, self._supervisor = self._supervisor, None
        if supervisor is not None:
            supervisor.kill_all()
        if self._netns is not None:
            self._netns.close()
            self._netns = None
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
        _OPEN.discard(self)


def _ending(result: WorldResult, why: str) -> str:
    """Why an entry ended its world, in a few words."""
    if result.timed_out:
        return f"hung past its deadline of {result.deadline:g}s"
    gone = result.dead or [o for o in result.ranks if o.status == R.KILLED]
    if gone:
        return "lost " + "; ".join(o.describe() for o in gone)
    if result.failures:
        return "failed: " + result.failures[0].describe()
    if result.skipped is not None:
        return "skipped (a rank called pytest.skip(), and its peers were stopped)"
    rules = sorted({problem.split("rule ", 1)[1].split(" ", 1)[0] for problem in result.problems
                    if problem.startswith(R.DIRTY)})
    if rules:
        return f"left it dirty (rule {', '.join(rules)})"
    if result.problems:
        return result.problems[0]
    return why


class WorldPool:
    """Live worlds by shape (:func:`shape_of`), at most ``limit`` at once:
    the least recently used is closed to make room."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self.limit = limit
        self._worlds: OrderedDict[tuple[Any, ...], LiveWorld] = OrderedDict()
        self._why: dict[tuple[Any, ...], str] = {}  # why a shape's last world ended

    def history(self, spec: WorldSpec) -> list[str]:
        """The entries the live world of ``spec``'s shape ran so far (none: a fresh one)."""
        world = self._worlds.get(shape_of(spec))
        return list(world.entries) if world is not None else []

    def run(self, spec: WorldSpec, label: str, **how: Any) -> WorldResult:
        """Run ``spec``'s entry in the live world of its shape (see :meth:`LiveWorld.run`)."""
        key = shape_of(spec)
        world = self._worlds.pop(key, None)
        if world is None:
            while len(self._worlds) >= self.limit:
                self._worlds.popitem(last=False)[1].close()
            world = LiveWorld(self._why.pop(key, ""))
        self._worlds[key] = world
        try:
            return world.run(spec, label, **how)
        finally:
            if world.ended:
                self._worlds.pop(key, None)
                self._why[key] = world.ended

    def close(self) -> None:
        """Close every live world."""
        while self._worlds:
            self._worlds.popitem()[1].close()


def run_in_reused_world(spec: WorldSpec, label: str) -> WorldResult:
    """Run ``spec``'s entry as the first of a live world brought up for it,
    its rules checked after it, then close the world: how a token of an
    entry of a reused world replays a broken rule, which a fresh world
    (``run_world``) never checks."""
    refused = refusal(spec)
    if refused is not None:
        raise WorldSpecError(f"{label}: {refused[1]}: it cannot run in a reused world")
    pool = WorldPool(limit=1)
    try:
        return pool.run(spec, label)
    finally:
        pool.close()


# Every live world of this process, closed at its exit at the latest.
_OPEN: set[LiveWorld] = set()


@atexit.register
def _close_all() -> None:
    for world in list(_OPEN):
        world.close()


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _text(path: str) -> str:
    try:
        with open(path, errors="replace") as file:
            return file.read()
    except OSError:
        return ""
