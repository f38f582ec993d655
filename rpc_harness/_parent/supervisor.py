"""The supervisor of one world: forks its ranks, watches every one of them,
brings the world down, and says what happened.

It waits on every rank's pipe and process sentinel at once; the first
unexpected failure stops the world. Two budgets bound it: bring-up (every
rank forked and through init_rpc) and then the deadline, counted from the
moment every rank has joined, so a short deadline measures the program, not
a loaded machine's start-up. When either runs out, every rank's stacks are
collected before the ranks are killed.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import re
import signal
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import wait
from typing import Any

from .. import _messages as msg
from .. import result as R
from .._rank import stackdump as _stackdump
from .._rank.boot import Boot, rank_file
from ..c10d.history import where_ranks_are
from ..context import read_event_lines
from ..errors import FaultPlanError
from ..events import faults_fired
from ..faults import ENDING_KINDS
from ..progress import WORLD_ENDED, WORLD_UP, Progress
from ..result import RankOutcome, WorldResult
from ..spec import WorldSpec
from . import nvml as _nvml
from . import tally as _tally
from .schedule_link import STALL_SECONDS, ScheduleLink
from .stacks import annotate_stacks, hide_hook_frames

_STACK_WAIT = 2.0  # seconds to wait for every rank's stack dump


class Supervisor:
    """One world, fresh (:meth:`run`) or reused (``rpc_harness._parent.live``, which
    brings it up through :meth:`bring_up` and watches each entry through
    :meth:`watch_until`)."""

    # A reused world's ranks run entries as they are told and stay up between
    # them: they are never told here to shut down or to exit.
    live = False

    def __init__(
        self,
        spec: WorldSpec,
        workdir: str,
        start_rank: Callable[[Boot], Any],
        on_progress: Callable[[Progress], None] | None = None,
        master_port: int = 0,
        netns: Any = None,
        isolation: str = "",
    ) -> None:
        """``start_rank(boot)`` starts one rank's process; ``netns`` is the
        world's network namespace (``isolation`` says how, or why none)."""
        self.spec = spec
        self.workdir = workdir
        self.start_rank = start_rank
        self.on_progress = on_progress
        self.master_port = master_port
        self.netns = netns
        self.isolation = isolation
        self.ready: set[int] = set()
        self.pickled_values: dict[int, bytes] = {}
        self.outcomes = [RankOutcome(rank, name) for rank, name in enumerate(spec.names)]
        self.names = spec.names
        self.procs: list[Any] = []
        self.conns: list[Any] = []
        self.schedule_conns: list[Any] = []  # each rank's pipe to the scheduler (None: the world has none)
        self.open_conns: set[int] = set()
        self.running: set[int] = set()
        self.shut: set[int] = set()  # ranks that reported a finished shutdown
        self.frozen: set[int] = set()  # ranks a freeze fault stopped: dead to the world
        self.shutdown_sent: bool | None = None  # None, or the graceful flag sent
        self.exit_sent = False
        self.stacks_read: dict[int, int] = {}  # bytes of a rank's stack file read for an earlier report
        # A world with a default process group (the world's, or a spawned
        # program's own): one rank's death ends it (see _on_death).
        self.collective = spec.options.process_group is not None
        self.ended_by = ""  # why a collective world was ended before its entries were done (see _end_collective)
        self.stopped_by_death: set[int] = set()  # ranks it stopped so
        # Ranks stopped without being asked for their stacks: their collective
        # histories may lack the completions of their last ops (see c10d.hooks.flush).
        self.unwritten: set[int] = set()
        self.hearing: set[int] = set()  # ranks whose messages are being heard (see _dead_peer)
        self.first_raised: int | None = None  # the first rank whose entry raised (see _first_dead_peer)
        self.killed: set[int] = set()  # ranks the harness itself SIGKILLed as the world ended (kill_all)
        schedule = spec.options.schedule_spec
        self.schedule_label = schedule.label
        self.link = ScheduleLink(schedule, spec.seed, len(spec.names), time.time) if schedule.controlled else None
        self.problems: list[str] = []
        self.timed_out = False
        self.budget = "deadline"
        self.started = 0.0
        self.forked_at = 0.0
        self.joined_at: float | None = None
        self.ended = 0.0

    # -- bring up -----------------------------------------------------------
    def run(self) -> None:
        """A fresh world: bring it up and watch it to its end (or its deadline)."""
        if self.bring_up():
            deadline = self.joined_at + self.spec.options.deadline  # type: ignore[operator]
            self.watch_until(lambda: not self.running, deadline, on_timeout=lambda: self.budget_ran_out("deadline"))
        self.ended = time.monotonic()
        self.tell(Progress(None, "world", note=WORLD_ENDED))

    def bring_up(self) -> bool:
        """Fork every rank and watch until all have joined; False: the world
        failed first or its bring-up budget ran out (its ranks are then
        stopped, and ``collect`` says why)."""
        self._fork_ranks()
        return self.watch_until(lambda: self.joined_at is not None, self.forked_at + self.spec.bringup,
                                on_timeout=lambda: self.budget_ran_out("bring-up"))

    def _fork_ranks(self) -> None:
        self.started = time.monotonic()
        for outcome in self.outcomes:
            boot = Boot(
                rank=outcome.rank, names=self.spec.names, workdir=self.workdir, entry=self.spec.entry,
                payload=self.spec.payload, options=self.spec.options, sys_path=tuple(sys.path),
                spawned=self.spec.spawned, master_port=self.master_port, netns=self.netns, live=self.live,
            )
            proc, conn, schedule_conn = self.start_rank(boot)
            self.procs.append(proc)
            self.conns.append(conn)
            self.schedule_conns.append(schedule_conn)
            if self.link is not None:
                self.link.add(schedule_conn)
            self.open_conns.add(outcome.rank)
            self.running.add(outcome.rank)
        # The bring-up clock starts once every rank is forked: the first world
        # of a process waits for the forkserver to import torch (seconds, more
        # on a loaded machine), which is not the world's time to spend.
        self.forked_at = time.monotonic()

    def tell(self, update: Progress) -> None:
        """Pass ``update`` on to the world's watcher, with the time since the first fork."""
        if self.on_progress is not None:
            self.on_progress(dataclasses.replace(update, elapsed=time.monotonic() - self.started))

    # -- watch ----------------------------------------------------------------
    def watch_until(self, done: Callable[[], bool], limit: float, *, on_timeout: Callable[[], None]) -> bool:
        """Watch every rank until ``done()``: True then; False when the world
        failed meanwhile (its survivors are then stopped) or ``limit`` (a
        ``time.monotonic()``) passed first, when ``on_timeout()`` is called."""
        while not done():
            remaining = limit - time.monotonic()
            if remaining <= 0:
                on_timeout()
                return False
            waitables = {self.conns[r]: ("conn", r) for r in self.open_conns}
            waitables.update({self.procs[r].sentinel: ("exit", r) for r in self.running})
            if self.link is not None:
                waitables.update({conn: ("schedule", r) for conn, r in self.link.waitables(self.running).items()})
                remaining = min(remaining, 0.5)  # to see a stalled schedule
            for ready in wait(list(waitables), timeout=remaining):
                what, rank = waitables[ready]
                if what == "conn":
                    self._drain(rank)
                elif what == "schedule":
                    self.link.drain(rank)  # type: ignore[union-attr]
                else:
                    self._on_exit(rank)
            if self.link is not None and self.joined_at is not None:  # bring-up has a budget of its own
                self._check_schedule()
            if any(o.failed or o.status == R.SKIPPED for o in self.outcomes) or self.problems:
                self._stop_survivors()
                return False
            if not self.live:
                self._maybe_release()
                self._maybe_let_exit()
        return True

    def _drain(self, rank: int) -> None:
        conn = self.conns[rank]
        try:
            while rank in self.open_conns and conn.poll():
                self.on_message(rank, conn.recv())
        except (EOFError, OSError):
            self.open_conns.discard(rank)

    def on_message(self, rank: int, message: msg.ToSupervisor) -> None:
        """What one message of ``rank``'s says (a subclass takes the kinds of its own first)."""
        outcome = self.outcomes[rank]
        match message:
            case msg.Joined(names, group):
                outcome.phase = "entry"
                self.ready.add(rank)
                self.collective = self.collective or group
                if self.spec.spawned and names:
                    self._named(rank, names)
                if len(self.ready) == len(self.outcomes):
                    self.joined_at = time.monotonic()
                    self.tell(Progress(None, "world", note=WORLD_UP))
            case msg.ProgressReported(done, total, unit, metrics):
                outcome.progress = (done, total, unit)
                self.tell(Progress(rank, outcome.name, done, total, unit, metrics))
            case msg.EntryDone(value) | msg.Value(value):
                if isinstance(message, msg.EntryDone):
                    outcome.phase = "done"
                # Unpickled in collect(), once the ranks are shutting down: tensors
                # unpickle at ~0.1 ms each, and a parameter server's log holds hundreds.
                if value is not None:
                    self.pickled_values[rank] = value
            case msg.ShutdownDone():
                self.shut.add(rank)
                outcome.phase = "exiting"
            case msg.Frozen():
                self.frozen.add(rank)
                outcome.phase = "frozen"
                if self.link is not None:
                    self.link.rank_gone(rank, frozen=True)
                if self.collective:
                    self._end_collective(outcome, "was frozen by the fault plan")
            case msg.Failed(phase, error, text, pickled, skipped) if (dead := self._dead_peer(rank, skipped, error)):
                self._end_collective(*dead)
                outcome.stopped_because = f"{self.ended_by} (it had raised: {error})"
                self.stopped_by_death.add(rank)
            case msg.Failed(phase, error, text, pickled, skipped):
                outcome.status = R.SKIPPED if skipped else R.RAISED
                if not skipped and self.first_raised is None:
                    self.first_raised = rank
                outcome.phase = {"starting": "start-up", "result": "entry"}.get(phase, phase)
                outcome.error = error
                outcome.traceback = text
                if pickled is not None:
                    try:
                        outcome.value = pickle.loads(pickled)
                    except Exception:  # noqa: BLE001 - the text form is already kept
                        pass
            case _:
                self.problems.append(f"{outcome.label} sent the harness something it does not know: {message!r}")

    def _named(self, rank: int, names: tuple[str, ...]) -> None:
        """A spawned program's rank joined: its init_rpc says every worker's name."""
        if self.names and all(self.names) and tuple(names) != tuple(self.names):
            self.problems.append(
                f"{R.NAMES_MISMATCH} {list(names)}, not {list(self.names)} as spawn(names=...) said")
            return
        if all(o.name for o in self.outcomes):
            return
        self.names = tuple(names)
        for outcome, name in zip(self.outcomes, names, strict=True):
            outcome.name = name
        try:
            self.spec.options.faults.validate(self.names, failpoints=self.spec.options.failpoints,
                                              where="spawn(): faults")
        except FaultPlanError as error:
            self.problems.append(str(error))

    def _on_exit(self, rank: int) -> None:
        self._drain(rank)  # its last words come before its exit status
        if self.link is not None:
            self.link.drain(rank)
        proc = self.procs[rank]
        proc.join(0)
        self.running.discard(rank)
        outcome = self.outcomes[rank]
        code = proc.exitcode
        outcome.exitcode = code
        if code is not None and code < 0:
            outcome.signal = _signal_name(-code)
        if outcome.status not in (R.RAISED, R.SKIPPED):
            if code == 0 and rank in self.shut:
                outcome.status = R.OK
            elif rank in self.stopped_by_death:
                outcome.status = R.STOPPED
            elif outcome.signal == "SIGKILL" and self._plan_killed(rank):
                outcome.status = R.KILLED
                if self.shutdown_sent:  # graceful shutdown would now wait for it forever
                    self._stop_survivors()
            else:
                outcome.status = R.DIED
            if self.collective and outcome.status in (R.KILLED, R.DIED):
                self._end_collective(outcome, "was killed by the fault plan" if outcome.status == R.KILLED
                                     else "died")
        if self.link is not None:
            self.link.rank_gone(rank, unexpected=outcome.failed or outcome.status == R.SKIPPED)

    # -- collective worlds ------------------------------------------------------------
    # A collective needs every rank of its group: once one is dead (or
    # frozen), every survivor's next collective with it fails (gloo: at once,
    # "Connection closed by peer"; measured on torch 2.13) or waits out the
    # group's timeout (gloo's 30 minutes, for a frozen peer whose sockets stay
    # open). So a collective world ends at the first death: the ranks still
    # in their entry are stopped (SIGKILL), each with the reason; ranks whose
    # entry had returned shut down as after any death. After a planned kill
    # the stopped ranks are not failures (the plan stopped them: the world is
    # ok, dead ranks still only the killed ones); after any other death the
    # world fails for it, and the survivors' stacks are kept.

    def _end_collective(self, dead: RankOutcome, how: str) -> None:
        """``dead`` is gone from a collective world (``how``: what happened
        to it): stop every rank still in its entry. Idempotent."""
        if self.shutdown_sent is not None:
            return  # every entry had returned: they shut down as after any death
        self.ended_by = self.ended_by or f"{dead.label} {how}, and a collective world cannot go on without one of its ranks"
        planned = "fault plan" in how
        if dead.rank in self.frozen:  # nobody will wait for it any more: its kill is the plan's (see _maybe_release)
            _signal(self.procs[dead.rank].pid, signal.SIGKILL)
        for rank in sorted(self.running):
            outcome = self.outcomes[rank]
            # (A rank its plan is killing too is left to its own kill: stopped
            # here first, it read as stopped by the harness, not killed as planned.)
            if (rank != dead.rank and rank not in self.frozen and rank not in self.stopped_by_death
                    and outcome.phase != "done" and not outcome.failed and not self._plan_killed(rank)):
                outcome.stopped_because = self.ended_by
                self.stopped_by_death.add(rank)
                if planned:  # otherwise the world has failed: _stop_survivors stops them, keeping their stacks
                    _signal(self.procs[rank].pid, signal.SIGKILL)
                    self.unwritten.add(rank)

    def _dead_peer(self, rank: int, skipped: bool, error: str = "") -> tuple[RankOutcome, str] | None:
        """A peer whose death ``rank``'s failure in a collective world came
        after (and what happened to it), or None. A planned kill is known
        before its SIGKILL (the rank writes its fault event first); another
        death, once its process has ended (its sockets close as it exits,
        before it is a zombie): both before any peer's collective can fail
        of it, and before its exit reaches this supervisor. Where no death
        explains it, a failure that says a peer's connection went (``error``)
        after another rank's entry raised is that rank's doing: the world
        is stopped once a rank fails, and its collectives with it. (The
        error also marks a world whose entry made its own group, which the
        supervisor is not told of, as collective.)"""
        peer_left = bool(_PEER_LEFT.search(error))
        if skipped or not (self.collective or peer_left):
            return None
        self.hearing.add(rank)
        try:
            dead = self._first_dead_peer(rank)
        finally:
            self.hearing.discard(rank)
        if dead is None and peer_left and self.first_raised not in (None, rank):
            return self.outcomes[self.first_raised], "raised"  # type: ignore[index]
        return dead

    def _first_dead_peer(self, rank: int) -> tuple[RankOutcome, str] | None:
        for other in self.outcomes:
            if other.rank == rank or other.rank in self.killed:
                continue  # (a rank the harness killed as the world ended explains no failure)
            if other.rank in self.running and _process_ended(self.procs[other.rank].pid):
                # Its last words first: a peer that raised of the same death and
                # exited, its failure still unread, is a survivor, not the dead.
                self._hear_last_words(other.rank)
            if other.status in (R.RAISED, R.SKIPPED, R.OK) or other.rank in self.stopped_by_death:
                continue
            if other.status == R.KILLED or (other.rank in self.running and self._plan_killed(other.rank)):
                return other, "was killed by the fault plan"
            if other.rank in self.frozen:
                continue
            if other.status == R.DIED or (other.rank in self.running and _process_ended(self.procs[other.rank].pid)):
                return other, "died"
        return None

    def _hear_last_words(self, rank: int) -> None:
        """Read what the ended ``rank`` still has to say (not again while its
        own message is being heard: that would hear it out of order)."""
        if rank in self.hearing or rank not in self.open_conns:
            return
        self.hearing.add(rank)
        try:
            self._drain(rank)
        finally:
            self.hearing.discard(rank)

    def _plan_killed(self, rank: int) -> bool:
        return any(fired.kind in ENDING_KINDS for fired in faults_fired(self.events_of(rank)))

    def events_of(self, rank: int) -> list[dict]:
        """The events of ``rank`` that belong to this world's report."""
        return _read_events(self.workdir, rank)

    def output_of(self, rank: int) -> str:
        """What ``rank`` printed, as far as it belongs to this world's report."""
        return _read_text(rank_file(self.workdir, rank, "log"))

    def _maybe_release(self) -> None:
        """Once every live rank finished its entry, tell all how to shut down
        (and end the frozen: nobody waits for them any more)."""
        if self.shutdown_sent is not None:
            return
        alive = [o for o in self.outcomes if o.rank in self.running and o.rank not in self.frozen]
        if not alive or any(o.phase != "done" for o in alive):
            return
        graceful = not self.frozen and not any(o.status == R.KILLED for o in self.outcomes)
        self.shutdown_sent = graceful
        if self.link is not None:  # handlers left over run free while the world shuts down
            self.link.scheduler.entries_done()
        for rank in sorted(self.frozen & self.running):
            _signal(self.procs[rank].pid, signal.SIGKILL)  # its exit is then seen as planned
        for outcome in alive:
            outcome.phase = "shutdown"
            try:
                self.conns[outcome.rank].send(msg.Shutdown(graceful))
            except OSError:  # it died meanwhile; its sentinel will say how
                pass

    def _maybe_let_exit(self) -> None:
        """Once every rank still running has shut down, let them all end
        (a rank waits for this: see ``Lifecycle.wait_for_exit``)."""
        if self.exit_sent or not self.running or not self.running <= self.shut:
            return
        self.exit_sent = True
        for rank in sorted(self.running):
            try:
                self.conns[rank].send(msg.Exit())
            except OSError:  # it died meanwhile; its sentinel will say how
                pass

    def _check_schedule(self) -> None:
        """A controlled world where nothing moves and no rank uses CPU is
        waiting where the scheduler cannot see: say where every task was,
        then let the world run free rather than hang."""
        assert self.link is not None
        alive = sorted(self.running)
        spinning = self.link.spinning()
        waiting = self.link.stalled([self.procs[r].pid for r in alive]) if spinning is None else None
        if spinning is None and waiting is None:
            return
        self.dump_stacks(alive)
        stacks = []
        for rank in alive:
            raw = _read_text(rank_file(self.workdir, rank, "stacks"))
            text = annotate_stacks(raw[self.stacks_read.get(rank, 0):])
            self.stacks_read[rank] = len(raw)  # a later failure's report shows its own dump only
            if text.strip():
                stacks.append(f"--- {self.outcomes[rank].label} stacks\n{text.rstrip()}")
        why = spinning or f"no step ended for {STALL_SECONDS:g}s while no rank thread could run: {waiting}"
        self.link.scheduler.release(f"{why}. The world ran free from step {len(self.link.scheduler.steps)} on"
                                    + ("\n" + "\n".join(stacks) if stacks else ""))

    # -- bring down -------------------------------------------------------------
    def _note_gpu_memory(self) -> None:
        """As a world fails, before its ranks are stopped: the GPU memory
        each one still running holds, where NVML lists it (a query of a few
        milliseconds; nothing on a machine without NVIDIA's driver)."""
        pids = {self.procs[rank].pid: rank for rank in self.running}
        for pid, held in _nvml.held_by(pids).items():
            self.outcomes[pids[pid]].gpu_memory = held

    def budget_ran_out(self, budget: str) -> None:
        """``budget`` ("bring-up", "deadline") ran out: every running rank's
        stacks, then every rank killed."""
        self.timed_out = True
        self.budget = budget
        self._note_gpu_memory()
        alive = sorted(self.running)
        self.dump_stacks(alive)
        for rank in alive:
            outcome = self.outcomes[rank]
            outcome.status = R.STOPPED if outcome.phase in ("done", "frozen") else R.HUNG
        self.kill_all()

    def stacks_now(self) -> str:
        """Every running rank's stacks, now, with the world's replay line:
        for a caller in another thread that is about to end this process
        (pytest-timeout's thread method), where no result will be made."""
        alive = sorted(set(self.running))
        self.dump_stacks(alive)
        lines = [f"rpc world of {len(self.outcomes)} ranks (seed={self.spec.seed}) still running"]
        for rank in alive:
            raw = _read_text(rank_file(self.workdir, rank, "stacks"))
            text = annotate_stacks(raw[self.stacks_read.get(rank, 0):]).rstrip()
            lines.append(f"--- {self.outcomes[rank].label} stacks\n{text or '(no answer)'}")
        if self.spec.repro:
            lines.append(f"Replay: {self.spec.repro}")
        return "\n".join(lines)

    def interrupted(self, error: BaseException) -> None:
        """Something from outside the world raised inside it (a test
        timeout, a progress callback): keep every running rank's stacks and
        say so, before the caller brings the world down."""
        what = f"{type(error).__name__}: {error}".rstrip(": ")
        self.problems.append(f"{R.INTERRUPTED} ({what})")
        self.ended = time.monotonic()
        self.dump_stacks(sorted(self.running))

    def _stop_survivors(self) -> None:
        self._note_gpu_memory()
        # Survivors keep the STOPPED status they started with: not failures.
        # Any of them may be why another rank failed (a peer stuck on a lock,
        # a server waiting on them, a passive rank inside its own shutdown
        # still serving a call): the stacks of every one still running are kept.
        busy = [r for r in sorted(self.running) if not self.outcomes[r].failed and r not in self.frozen]
        # A rank that has raised on its own (every rank's assert failing at
        # once) is reporting its failure: let it finish rather than call it stopped.
        self._await_reports([r for r in busy if self._raised(r)])
        busy = [r for r in busy if not self.outcomes[r].failed]
        if any(o.failed for o in self.outcomes) or self.problems:
            self.dump_stacks(busy)
        else:
            self.unwritten.update(busy)
        self.kill_all()

    def _raised(self, rank: int) -> bool:
        """Whether ``rank`` wrote its ``raised`` event (just before it sends its failure)."""
        return any(event.get("kind") == "raised" for event in self.events_of(rank))

    def _await_reports(self, ranks: list[int]) -> None:
        """Read the failures ``ranks`` are sending, for at most _STACK_WAIT."""
        until = time.monotonic() + _STACK_WAIT
        pending = {self.conns[r]: r for r in ranks if r in self.open_conns}
        while pending and (left := until - time.monotonic()) > 0:
            for ready in wait(list(pending), timeout=left):
                self._drain(pending[ready])
            pending = {c: r for c, r in pending.items() if r in self.open_conns and not self.outcomes[r].failed}

    def dump_stacks(self, ranks: list[int]) -> None:
        """Ask ``ranks`` for every thread's stack and wait, briefly, until each
        has written its dump. The safe way first, through the rank's FIFO
        (``_stackdump``); SIGUSR1 (faulthandler) only for a rank not armed yet
        or one that did not answer, where no thread of it could take the GIL."""
        if not ranks:
            return
        unarmed = {r for r in ranks if not _stackdump.request(rank_file(self.workdir, r, "dump"))}
        for rank in sorted(unarmed):
            _signal(self.procs[rank].pid, signal.SIGUSR1)
        # A frozen rank (SIGSTOP) answers neither way: no second wait for it.
        silent = self._await_stacks(ranks, signalled=unarmed) - unarmed - self.frozen
        # Its answer would have written its collectives' completions first:
        # those since its last look are unknown, not unfinished.
        self.unwritten.update(silent)
        for rank in sorted(silent):
            _signal(self.procs[rank].pid, signal.SIGUSR1)
        self._await_stacks(silent, signalled=silent)
        # A short grace: faulthandler's dump (no end line) finishes its write,
        # and a rank that torch takes down as the world fails (os.abort once a
        # peer's death has used up its retries) dies of that, not of the
        # SIGKILL that follows, and is reported so (tests/world/test_spawned_programs.py,
        # test_a_rank_that_aborts_itself_is_not_labelled_stopped_by_the_harness).
        time.sleep(0.05)

    def _await_stacks(self, ranks: list[int] | set[int], *, signalled: set[int]) -> set[int]:
        """Wait at most _STACK_WAIT for a dump from each of ``ranks``: a whole
        answer, or any dump at all from the ``signalled``. Those with none."""
        until = time.monotonic() + _STACK_WAIT
        pending = set(ranks)
        while pending and time.monotonic() < until:
            # A rank that exited meanwhile (one failing on its own as the
            # world is stopped) will never answer: not waited for.
            pending = {r for r in pending if not self._dumped(r, whole=r not in signalled) and not self._exited(r)}
            if pending:
                time.sleep(0.02)
        return pending

    def _exited(self, rank: int) -> bool:
        """Whether ``rank``'s process has ended (its sentinel says so; it is not reaped here)."""
        return bool(wait([self.procs[rank].sentinel], timeout=0))

    def _dumped(self, rank: int, *, whole: bool) -> bool:
        written = _read_text(rank_file(self.workdir, rank, "stacks"))[self.stacks_read.get(rank, 0):]
        return _stackdump.answered(written) if whole else bool(written)

    def kill_all(self) -> None:
        """SIGKILL every rank still running and reap it. Idempotent."""
        self.killed.update(self.running)
        for rank in sorted(self.running):
            _signal(self.procs[rank].pid, signal.SIGKILL)
        for rank in sorted(self.running):
            self.procs[rank].join(10)
            # What it sent before SIGKILL is still in its pipe: a rank that
            # failed on its own while the world was being stopped (every
            # rank's assert failing at once) is reported with its own error,
            # not as stopped. A message cut short by the kill reads as EOF.
            self._drain(rank)
        for rank in sorted(self.running):
            code = self.procs[rank].exitcode
            outcome = self.outcomes[rank]
            outcome.exitcode = code
            if code is not None and code < 0:
                outcome.signal = _signal_name(-code)
            if outcome.status != R.STOPPED:
                continue
            if outcome.signal == "SIGKILL" and self._plan_killed(rank):
                # Its kill fault fired just before a peer's report of the
                # death stopped the world: the fault event is written before SIGKILL.
                outcome.status = R.KILLED
            elif outcome.signal not in (None, "SIGKILL"):
                # It died of something of its own (torch aborting it, a crash)
                # before the harness's SIGKILL reached it: not stopped by us.
                outcome.status = R.DIED
        self.running.clear()
        for conn in self.conns:
            conn.close()
        self.open_conns.clear()
        if self.link is not None:
            self.link.close()
        for conn in self.schedule_conns:  # (a reused world's, which outlive each entry's link)
            if conn is not None:
                conn.close()

    # -- report -------------------------------------------------------------------
    def collect(self, repro: str) -> WorldResult:
        for rank, pickled in self.pickled_values.items():
            outcome = self.outcomes[rank]
            try:
                outcome.value = pickle.loads(pickled)
            except Exception as error:  # noqa: BLE001 - e.g. a class only the ranks can import
                outcome.status = R.RAISED
                outcome.phase = "result"
                outcome.error = (f"the entry's return value cannot be unpickled here: "
                                 f"{type(error).__name__}: {error}")
        for outcome in self.outcomes:
            outcome.output = self.output_of(outcome.rank)
            stacks = _read_text(rank_file(self.workdir, outcome.rank, "stacks"))
            outcome.stacks = annotate_stacks(stacks[self.stacks_read.get(outcome.rank, 0):])
            if outcome.traceback:
                outcome.traceback = hide_hook_frames(outcome.traceback)
            outcome.events = self.events_of(outcome.rank)
        plan = self.spec.options.faults
        _tally.add_message_failures(plan, self.outcomes)
        problems = list(self.problems) + _group_never_formed(self.outcomes, self.spec.options.process_group,
                                                                 joined=self.joined_at is not None)
        problems += _tally.lost_messages(plan, self.outcomes)
        stopped_early = self.timed_out or bool(self.problems) or any(
            o.failed or o.status == R.SKIPPED for o in self.outcomes)
        if not stopped_early:
            # Only a world that ran its course can say a fault never fired:
            # one stopped early never gave the others their chance.
            problems += _tally.unfired(plan, self.outcomes) + _tally.cut_short(plan, self.outcomes)
            if self.spec.spawned and self.spec.options.expect != "unfinished":
                problems += _unfinished(self.outcomes)
        lost = any(o.status in (R.KILLED, R.DIED) for o in self.outcomes)
        # Where each rank was in its collectives explains a hang, a deadline or a lost rank.
        collectives = where_ranks_are(self.workdir, len(self.outcomes), self.unwritten) if stopped_early or lost else []
        schedule, schedule_note, lost_at = [], "", None
        if self.link is not None:
            scheduler = self.link.scheduler
            scheduler.finish()
            problems += scheduler.problems
            schedule = scheduler.history.named(tuple(o.name for o in self.outcomes))
            schedule_note = (f"controlled ({self.spec.options.schedule}), {len(schedule)} steps" if scheduler.controlled
                             else f"no longer controlled: {scheduler.note}")
            lost_at = scheduler.lost_at
        return WorldResult(
            schedule=schedule,
            schedule_note=schedule_note,
            control_lost_at=lost_at,
            names=tuple(o.name for o in self.outcomes),
            seed=self.spec.seed,
            faults=plan,
            deadline=self.spec.options.deadline,
            ranks=self.outcomes,
            duration=(self.ended or time.monotonic()) - self.started,
            timed_out=self.timed_out,
            repro=repro,
            problems=problems,
            budget=self.budget,
            bringup=self.spec.bringup,
            isolation=self.isolation,
            schedule_label=self.schedule_label,
            fuzz=self.spec.options.fuzz or 0.0,
            devices=self.spec.device_note,
            collectives=collectives,
            ended_by=self.ended_by,
        )


def _group_never_formed(outcomes: list[RankOutcome], backend: str | None, *, joined: bool) -> list[str]:
    """The problem of a world whose default process group never formed (the
    world's own, or a spawned program's): which ranks never reached
    ``init_process_group``, and which waited in it; or none. ``joined``:
    every rank joined its world (a reused world's entry sees only its own
    events, none of its bring-up)."""
    kinds = {o.rank: {event.get("kind") for event in o.events} for o in outcomes}
    waiting = [o.label for o in outcomes if "group_start" in kinds[o.rank] and "group_done" not in kinds[o.rank]]
    if not waiting and (joined or backend is None):
        return []  # nobody stuck in init_process_group; the world came up, or asked for no group
    if all("group_done" in seen for seen in kinds.values()):
        return []
    never = [o for o in outcomes if "group_start" not in kinds[o.rank]]
    parts = []
    for outcome in never:
        how = {R.DIED: "died", R.RAISED: "raised", R.KILLED: "was killed", R.HUNG: "hung"}.get(outcome.status)
        parts.append(f"{outcome.label} {how} before it reached init_process_group" if how
                     else f"{outcome.label} never reached init_process_group")
    if waiting:
        parts.append(f"{', '.join(waiting)} waited in init_process_group for {'it' if len(never) == 1 else 'them'}"
                     if never else f"{', '.join(waiting)} never got out of init_process_group")
    name = f" ({backend})" if backend else ""
    return [f"{R.GROUP_NEVER_FORMED}{name}: " + "; ".join(parts)]


def _unfinished(outcomes: list[RankOutcome]) -> list[str]:
    """The problem of a planned kill that the program never got past (see
    ``result.UNFINISHED``), or none."""
    killed = [o for o in outcomes if o.status == R.KILLED]
    if not killed or any(o.status == R.OK and _called_from_its_code(o) for o in outcomes):
        return []
    survivors = [o for o in outcomes if o.status != R.KILLED]
    served = [o.label for o in survivors if o.status == R.OK]
    others = [o.describe() for o in survivors if o.status != R.OK]
    how = [f"{', '.join(served)} only served (init_rpc, then its own rpc.shutdown()) and returned once the "
           "kill let them"] if served else []
    return [f"{R.UNFINISHED} {', '.join(o.label for o in killed)}: no surviving rank called a peer from its own "
            f"code and returned normally ({'; '.join(how + others)}). If this kill may end the program, say so: "
            "expect='unfinished'"]


def _called_from_its_code(outcome: RankOutcome) -> bool:
    """Whether a rank's own code, in the thread that called init_rpc and
    before its shutdown, issued an RPC: it ran a part of the program, not
    only the handlers its peers called."""
    start = next((e for e in outcome.events if e.get("kind") == "entry_start"), None)
    if start is None:
        return False
    for event in outcome.events:
        if event.get("kind") == "entry_done":
            return False
        if event.get("kind") == "rpc_begin" and event.get("tid") == start.get("tid"):
            return True
    return False


# What a rank's collective says when a peer's process has gone (torch 2.13:
# gloo's "[.../gloo/transport/tcp/pair.cc:553] Connection closed by peer",
# "Read error ...: Connection reset by peer", a write's "Broken pipe";
# NCCL's "remote process exited").
_PEER_LEFT = re.compile(r"gloo/transport\S* .*(?:Connection (?:closed|reset) by peer|Broken pipe)"
                        r"|NCCL.*remote process exited")


def _process_ended(pid: int | None) -> bool:
    """Whether process ``pid`` has exited (a zombie, or gone), asked of
    /proc: its forkserver reports the exit only once it has reaped it."""
    if pid is None or not os.path.isdir("/proc/self"):
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


def _read_text(path: str) -> str:
    try:
        with open(path, errors="replace") as file:
            return file.read()
    except OSError:
        return ""


def _read_events(workdir: str, rank: int) -> list[dict]:
    return read_event_lines(rank_file(workdir, rank, "events"))


def _signal(pid: int | None, sig: int) -> None:
    if pid is None:
        return
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
