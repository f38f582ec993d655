"""What a world left behind: every rank's fate, and a readable report of it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ._parent import nvml as _nvml
from ._parent.stacks import (
    FRAMES_ENV,
    hide_traceback_frames,
    readable_stacks,
    same_stacks,
    show_harness_frames,
)
from .events import FaultFired, faults_fired, last_hits
from .faults import FAULT_KINDS, FaultPlan
from .schedule import Step, digest

# A rank's fate. Only the FAILED ones make a world fail.
OK = "ok"  # entry returned, shutdown finished
RAISED = "raised"  # entry raised
SKIPPED = "skipped"  # entry called pytest.skip()
KILLED = "killed"  # died by a kill fault of the plan: expected
DIED = "died"  # exited or was signalled with no plan saying so
HUNG = "hung"  # still running at the deadline
STOPPED = "stopped"  # torn down because another rank failed first
FAILED = frozenset({RAISED, DIED, HUNG})

# How the problems of a world besides its ranks begin (see WorldResult.problems).
NAMES_MISMATCH = "the program named its workers"
NEVER_FIRED = "never fired"
LOST = "message(s) lost"
# A msgfail=N whose messages the world ended before torch's retries failed N times.
CUT_SHORT = "cut short by the world's end"
# A spawned program's planned kill that no surviving rank ran its own part of
# the program past: every survivor only served (its code went from init_rpc
# straight into rpc.shutdown(), and ended when the kill let it), or was
# stopped or died. The tutorials' observers and trainers are such ranks: the
# kill of their agent or server leaves every one of them "ok", and nothing
# of the program done. A survivor that called a peer from its own code and
# returned normally ran past it (a client that finished its calls).
UNFINISHED = "the program never got past the planned kill of"
INTERRUPTED = "the world was stopped from outside"
GROUP_NEVER_FORMED = "the default process group never formed"
# An entry of a reused world broke one of its rules (rpc_harness._rank.clean.RULES).
DIRTY = "the entry left the reused world dirty"


@dataclass
class RankOutcome:
    """How one rank ended, with everything it left behind."""

    rank: int
    name: str
    status: str = STOPPED
    value: Any = None
    exitcode: int | None = None
    signal: str | None = None
    error: str | None = None
    traceback: str | None = None
    output: str = ""
    stacks: str = ""
    events: list[dict] = field(default_factory=list)
    phase: str = "starting"  # the last phase it was seen in: starting, entry, shutdown, done
    progress: tuple[int, int, str] | None = None  # its last report: (done, total, unit)
    gpu_memory: int | None = None  # bytes of GPU memory it held as its world failed, where NVML said
    stopped_because: str = ""  # why the harness stopped it, where not because the world failed (a collective world)

    @property
    def failed(self) -> bool:
        return self.status in FAILED

    @property
    def label(self) -> str:
        # A spawned program names its ranks in init_rpc: one that never got
        # there has no name.
        return f"rank {self.rank} ({self.name})" if self.name else f"rank {self.rank}"

    def fired_faults(self) -> list[FaultFired]:
        """The faults that fired in this rank, in the order they fired."""
        return faults_fired(self.events)

    @property
    def hits(self) -> dict[str, int]:
        """The failpoints this rank reached, with hit counts (recorded in a
        rank a fault was aimed at)."""
        return last_hits(self.events)

    def describe(self) -> str:
        """One line: what happened to this rank."""
        frozen = any(fired.kind == "freeze" for fired in self.fired_faults())
        how = {
            OK: "ok",
            SKIPPED: f"skipped: {self.error}",
            KILLED: ("frozen (SIGSTOP) as the fault plan asked, then killed by the harness" if frozen
                     else f"killed by {self.signal} as the fault plan asked"),
            STOPPED: (f"stopped by the harness (SIGKILL): {self.stopped_because}" if self.stopped_because
                      else "stopped by the harness (SIGKILL) after the world failed"),
        }.get(self.status)
        if how is None:
            when = _PHASES.get(self.phase, f"during {self.phase}")
            if self.status == RAISED:
                how = f"raised {self.error} ({when}){_torch_note(self.error)}"
            elif self.status == HUNG and self.phase in ("starting", "start-up"):
                how = "had not joined the RPC world when the bring-up budget ran out"
            elif self.status == HUNG:
                how = f"hung: still {when}{self._where()} at the deadline"
            elif self.signal:
                how = f"{_signal_cause(self.signal)} {when}{self._where()}; the fault plan did not kill it"
            else:
                how = f"exited with code {self.exitcode} {when}{self._where()} without reporting a result"
        if self.gpu_memory:
            how += f"; it held {_nvml.describe(self.gpu_memory)} of GPU memory"
        return f"{self.label}: {how}"

    def _where(self) -> str:
        # How far it had come, when its code reported progress: a hang at
        # 12/24 batches reads differently from one at 0/24.
        if self.progress is None or self.phase != "entry":
            return ""
        done, total, unit = self.progress
        return f" (after {done}/{total} {unit})"


@dataclass
class WorldResult:
    """Every rank's outcome, in rank order, plus what the world was."""

    names: tuple[str, ...]
    seed: int
    faults: FaultPlan
    deadline: float
    ranks: list[RankOutcome]
    duration: float = 0.0
    timed_out: bool = False
    repro: str = ""
    workdir: str | None = None
    # Why the world failed besides its ranks: faults that never fired,
    # messages lost, a plan aimed at names the program never used.
    problems: list[str] = field(default_factory=list)
    budget: str = "deadline"  # which budget ran out when timed_out: "deadline" or "bring-up"
    bringup: float = 0.0  # the bring-up budget, seconds
    isolation: str = ""  # how the world was kept from other users (its own network namespace), or why not
    # Under a controlled schedule: every step in the order it ran, and whether
    # control held (schedule_note says so, or why it was given up).
    schedule: list[Step] = field(default_factory=list)
    schedule_note: str = ""
    # The step from which a controlled world ran free (None: control held, or
    # the world was never controlled); schedule_note says why and where every task was.
    control_lost_at: int | None = None
    # What besides the seed decided its order of events: the schedule it ran
    # under (its label; "free" when the OS decided) and the fuzz's delays.
    schedule_label: str = "free"
    fuzz: float = 0.0
    devices: str = ""  # the world option devices, and whether ranks shared them ("" for the CPU)
    # An entry of a reused world (rpc_world_module, rpc_world_session): which
    # entry of its world it was, or why the world was brought up anew ("": a world of its own).
    reuse: str = ""
    # Where each rank was in its collectives, for a world that hung, ran out
    # of time, failed or lost a rank (rpc_harness.c10d.history.where_ranks_are).
    collectives: list[str] = field(default_factory=list)
    # A collective world ended at a rank's death or freeze: which rank, and
    # why the others were stopped (rpc_harness._parent.supervisor, "collective worlds").
    ended_by: str = ""

    @property
    def schedule_digest(self) -> str:
        """A short string equal exactly when two worlds' schedules are equal
        ("" for a world whose order was the operating system's)."""
        return digest(self.schedule) if self.schedule else ""

    @property
    def controlled(self) -> bool:
        """Whether a controlled schedule held to the end: the world ran under
        one, and never let its tasks run free (``control_lost_at``). The one
        predicate; the note is for people."""
        return self.schedule_label != "free" and self.control_lost_at is None

    @property
    def world_size(self) -> int:
        return len(self.names)

    @property
    def failures(self) -> list[RankOutcome]:
        return [r for r in self.ranks if r.failed]

    @property
    def skipped(self) -> RankOutcome | None:
        return next((r for r in self.ranks if r.status == SKIPPED), None)

    @property
    def ok(self) -> bool:
        return not self.failures and self.skipped is None and not self.timed_out and not self.problems

    @property
    def values(self) -> list[Any]:
        """Each rank's return value (None for ranks that returned nothing or died)."""
        return [r.value for r in self.ranks]

    @property
    def dead(self) -> list[RankOutcome]:
        return [r for r in self.ranks if r.status in (KILLED, DIED)]

    @property
    def killed(self) -> list[RankOutcome]:
        return [r for r in self.ranks if r.status == KILLED]

    def fired_faults(self) -> list[FaultFired]:
        """Every fault that fired, in time order, with rank, point and hit
        (a message fault's record is one failed or delayed send)."""
        return sorted((fired for r in self.ranks for fired in r.fired_faults()), key=lambda fired: fired.t)

    def last_injected_error(self) -> FaultFired | None:
        """The last fault that fired as an error (``raise``), or None. In a
        world that hung it is often why: an error lost in a future nobody
        waited on (``rpc_async`` fired and forgotten) leaves no other trace
        but a hang and a line in one rank's output."""
        errors = [fired for fired in self.fired_faults() if FAULT_KINDS[fired.kind].raises]
        return errors[-1] if errors else None

    def fault_counts(self) -> dict[str, int]:
        """How often each fault of the plan fired (a send failed or delayed
        counts once), by the fault's text form."""
        fired = Counter(f.fault for f in self.fired_faults())
        return {str(f): fired.get(str(f), 0) for f in self.faults}

    def __getitem__(self, key: int | str) -> RankOutcome:
        if isinstance(key, str):
            return self.ranks[self.names.index(key)]
        return self.ranks[key]

    def __iter__(self) -> Iterator[RankOutcome]:
        return iter(self.ranks)

    def report(self, *, output_lines: int = 20, replay: bool = True, harness_frames: bool | None = None) -> str:
        """A multi-line account of the world, failures first, repro line last
        (``replay=False``: for a caller that prints its own).
        Ranks that ended alike share a line, and their output is shown once;
        every rank's stacks are shown, but a stack that an earlier rank's
        matches is named, not shown again.
        The harness's own frames are left out unless ``harness_frames``
        (None: ``RPC_HARNESS_FRAMES=1`` in the environment)."""
        stacks = _StackPrinter(self.timed_out, show_harness_frames() if harness_frames is None else harness_frames)
        lines = [self._headline()]
        if self.reuse:
            lines.append(f"  ran in {self.reuse}")
        lines += [f"  {problem}" for problem in self.problems]
        if self.ended_by:
            lines.append(f"  ended early: {self.ended_by}")
        groups = _alike(self.ranks)
        lines += ["  " + _group_line(group) for group in groups]
        lines += [f"  collectives: {line}" for line in self.collectives]
        for group in groups:
            outcome = group[0]
            if not outcome.failed:
                continue
            others = f" (and {len(group) - 1} more ranks alike)" if len(group) > 1 else ""
            if outcome.traceback:
                lines.append(f"--- {outcome.label} traceback{others}")
                lines.append(stacks.traceback(outcome.traceback).rstrip())
            for member in group:  # alike in how they ended, not in where: hung ranks wait in different places
                lines += stacks.section(member)
            if outcome.output.strip():
                tail = outcome.output.rstrip().splitlines()[-output_lines:]
                lines.append(f"--- {outcome.label} output (last {len(tail)} lines){others}")
                lines.extend(tail)
        # The ranks that did not fail but were still busy: often why another did.
        for outcome in self.ranks:
            if not outcome.failed:
                lines += stacks.section(outcome)
        if stacks.hidden:
            lines.append(f"({stacks.hidden} frames of the harness's own left out: {FRAMES_ENV}=1, or "
                         "report(harness_frames=True), shows them)")
        if self.repro and replay:
            lines.append(f"Replay: {self.repro}")
        return "\n".join(lines)

    def _headline(self) -> str:
        what = f"world_size={self.world_size}, seed={self.seed}"
        if self.faults:
            what += f", faults={self.faults}"
        if self.schedule_label != "free":
            what += f", schedule={self.schedule_label}"
        if self.fuzz:
            what += f", fuzz={self.fuzz:g}"
        if self.devices:
            what += f", devices={self.devices}"
        if self.timed_out and self.budget == "bring-up":
            waiting = sum(1 for r in self.ranks if r.status == HUNG)
            head = (f"rpc world did not come up: {waiting} of {self.world_size} ranks had not joined "
                    f"within the bring-up budget of {self.bringup:g}s (the deadline counts from when all have)")
        elif self.timed_out:
            head = (f"rpc world hung: deadline of {self.deadline:g}s passed "
                    "(counted from when every rank had joined)") + self._lost_error()
        elif self.failures:
            head = f"rpc world failed: {len(self.failures)} of {self.world_size} ranks failed"
        elif self.problems:
            head = "rpc world failed: " + self._problem_kind()
        elif self.skipped is not None:
            head = "rpc world skipped"
        elif self.ended_by:
            head = f"rpc world ended early by its fault plan in {self.duration:.2f}s"
        else:
            head = f"rpc world ok in {self.duration:.2f}s"
        return f"{head} ({what})"


    def _lost_error(self) -> str:
        """For a hang: the injected error seen last, which may never have
        reached code that would have reported it."""
        fired = self.last_injected_error()
        if fired is None:
            return ""
        return f"; last injected error: {fired.fault} in {self.ranks[fired.rank].label} on hit {fired.hit}"

    def _problem_kind(self) -> str:
        first = self.problems[0]
        if first.startswith(NAMES_MISMATCH):
            return "the program's worker names do not match the names it was run with"
        if NEVER_FIRED in first or CUT_SHORT in first:
            return "its fault plan did not do what it says"
        if LOST in first:
            return "its fault plan lost messages"
        if first.startswith(UNFINISHED):
            return "a planned kill ended its program"
        if first.startswith(GROUP_NEVER_FORMED):
            return GROUP_NEVER_FORMED
        if first.startswith(INTERRUPTED):
            return INTERRUPTED
        if first.startswith(DIRTY):
            return DIRTY
        return "see below"


class _StackPrinter:
    """Stacks and tracebacks for one report: each stack shown once (a rank
    whose stacks match an earlier rank's says so in one line), the harness's
    own frames counted as they are left out."""

    def __init__(self, timed_out: bool, harness_frames: bool) -> None:
        self.when = "at the deadline" if timed_out else "when the world was stopped"
        self.harness_frames = harness_frames
        self.shown: list[tuple[str, str]] = []  # (rank label, its stacks as shown)
        self.hidden = 0

    def traceback(self, text: str) -> str:
        if self.harness_frames:
            return text
        text, hidden = hide_traceback_frames(text)
        self.hidden += hidden
        return text

    def section(self, outcome: RankOutcome) -> list[str]:
        if not outcome.stacks:
            return []
        text, hidden = readable_stacks(outcome.stacks, harness_frames=self.harness_frames)
        self.hidden += hidden
        header = f"--- {outcome.label} stacks {self.when}"
        same = next((label for label, earlier in self.shown if same_stacks(text, earlier)), None)
        if same is not None:
            return [f"{header}: the same as {same}'s above"]
        self.shown.append((outcome.label, text))
        return [header, text.rstrip() or "  (only the harness's own frames: its entry had returned)"]


# torch errors whose message does not say what to do, and what it is.
_TORCH_NOTES = (
    ("Cannot extract tensors from value",
     "in a world with devices, TensorPipe pickles every value an RPC returns or an RRef owns to find its CUDA "
     "tensors, and torch's extractor skips plain locks, futures and RRefs only: give the object a __getstate__ "
     "that leaves out its RLocks, Conditions and threads, or use threading.Condition(threading.Lock())"),
    ("trying to initialize the default process group twice",
     "a world with process_group= has made the default group before the entry runs: use it (ctx.group, or "
     "torch.distributed's default group), or drop process_group= and let the program make its own"),
)


def _torch_note(error: str | None) -> str:
    for says, note in _TORCH_NOTES:
        if error and says in error:
            return f" [{note}]"
    return ""


# How a phase reads after "raised X" or "killed by Y".
_PHASES = {
    "starting": "while starting", "start-up": "while starting", "entry": "in its entry",
    "done": "after its entry, waiting to shut down", "shutdown": "while shutting down",
    "exiting": "after its shutdown", "frozen": "while frozen", "result": "returning its result",
    "group": "while bringing up its process group (init_process_group)",
}


def _signal_cause(name: str) -> str:
    """Who sends such a signal, as far as a report can say."""
    if name == "SIGKILL":
        return "killed by SIGKILL from outside the harness (the kernel's OOM killer, or a user)"
    if name == "SIGABRT":
        return "aborted itself (SIGABRT: torch aborts a rank on a fatal error, e.g. a peer gone for good)"
    if name in ("SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE"):
        return f"crashed ({name})"
    return f"killed by {name}"


def _alike(ranks: list[RankOutcome], least: int = 3) -> list[list[RankOutcome]]:
    """Ranks in order, those that ended exactly alike (status, phase, error)
    grouped when there are ``least`` or more of them."""
    by_kind: dict[tuple, list[RankOutcome]] = {}
    for outcome in ranks:
        by_kind.setdefault((outcome.status, outcome.phase, outcome.error, outcome.signal, outcome.stopped_because), []).append(outcome)
    groups, seen = [], set()
    for outcome in ranks:
        key = (outcome.status, outcome.phase, outcome.error, outcome.signal, outcome.stopped_because)
        if key in seen:
            continue
        members = by_kind[key]
        if len(members) >= least:
            seen.add(key)
            groups.append(members)
        else:
            groups.append([outcome])
    return groups


def _group_line(group: list[RankOutcome]) -> str:
    if len(group) == 1:
        return group[0].describe()
    head = group[0].describe().split(": ", 1)[1]
    ranks = ", ".join(str(o.rank) for o in group[:8]) + (f" and {len(group) - 8} more" if len(group) > 8 else "")
    return f"{len(group)} ranks ({ranks}): {head}"
