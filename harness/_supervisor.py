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
import linecache
import os
import pickle
import re
import signal
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import wait
from typing import Any

from . import _tally
from . import result as R
from .context import read_event_lines
from .errors import FaultPlanError
from .faults import ENDING_KINDS
from .progress import WORLD_ENDED, WORLD_UP, Progress
from .result import RankOutcome, WorldResult
from .spec import WorldSpec

_STACK_WAIT = 2.0  # seconds to wait for every rank's stack dump


class Supervisor:
    def __init__(
        self,
        spec: WorldSpec,
        workdir: str,
        start_rank: Callable[[Any, Any], Any],
        on_progress: Callable[[Progress], None] | None = None,
        master_port: int = 0,
        netns: Any = None,
        isolation: str = "",
    ) -> None:
        """``start_rank(boot, outcome)`` starts one rank's process; ``netns``
        is the world's network namespace (``isolation`` says how, or why none)."""
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
        self.open_conns: set[int] = set()
        self.running: set[int] = set()
        self.shut: set[int] = set()  # ranks that reported a finished shutdown
        self.frozen: set[int] = set()  # ranks a freeze fault stopped: dead to the world
        self.shutdown_sent: bool | None = None  # None, or the graceful flag sent
        self.problems: list[str] = []
        self.timed_out = False
        self.budget = "deadline"
        self.started = 0.0
        self.forked_at = 0.0
        self.joined_at: float | None = None
        self.ended = 0.0

    # -- bring up -----------------------------------------------------------
    def run(self) -> None:
        from ._boot import Boot

        self.started = time.monotonic()
        for outcome in self.outcomes:
            boot = Boot(
                rank=outcome.rank, names=self.spec.names, seed=self.spec.seed, workdir=self.workdir,
                entry=self.spec.entry, payload=self.spec.payload, faults=self.spec.faults, fuzz=self.spec.fuzz,
                rpc_timeout=self.spec.rpc_timeout, deadline=self.spec.deadline, sys_path=tuple(sys.path),
                env=self.spec.env, spawned=self.spec.spawned, master_port=self.master_port, netns=self.netns,
            )
            proc, conn = self.start_rank(boot, outcome)
            self.procs.append(proc)
            self.conns.append(conn)
            self.open_conns.add(outcome.rank)
            self.running.add(outcome.rank)
        # The bring-up clock starts once every rank is forked: the first world
        # of a process waits for the forkserver to import torch (seconds, more
        # on a loaded machine), which is not the world's time to spend.
        self.forked_at = time.monotonic()
        self._watch()
        self.ended = time.monotonic()
        self._tell(Progress(None, "world", note=WORLD_ENDED))

    def _tell(self, update: Progress) -> None:
        if self.on_progress is not None:
            self.on_progress(dataclasses.replace(update, elapsed=time.monotonic() - self.started))

    # -- watch ----------------------------------------------------------------
    def _watch(self) -> None:
        while self.running:
            if self.joined_at is None:
                limit, budget = self.forked_at + self.spec.bringup, "bring-up"
            else:
                limit, budget = self.joined_at + self.spec.deadline, "deadline"
            remaining = limit - time.monotonic()
            if remaining <= 0:
                self._on_budget(budget)
                return
            waitables = {self.conns[r]: ("conn", r) for r in self.open_conns}
            waitables.update({self.procs[r].sentinel: ("exit", r) for r in self.running})
            for ready in wait(list(waitables), timeout=remaining):
                what, rank = waitables[ready]
                if what == "conn":
                    self._drain(rank)
                else:
                    self._on_exit(rank)
            if any(o.failed or o.status == R.SKIPPED for o in self.outcomes) or self.problems:
                self._stop_survivors()
                return
            self._maybe_release()

    def _drain(self, rank: int) -> None:
        conn = self.conns[rank]
        try:
            while rank in self.open_conns and conn.poll():
                self._on_message(rank, conn.recv())
        except (EOFError, OSError):
            self.open_conns.discard(rank)

    def _on_message(self, rank: int, message: tuple) -> None:
        outcome = self.outcomes[rank]
        kind = message[0]
        if kind == "ready":
            outcome.phase = "entry"
            self.ready.add(rank)
            if self.spec.spawned:
                self._named(rank, message[1])
            if len(self.ready) == len(self.outcomes):
                self.joined_at = time.monotonic()
                self._tell(Progress(None, "world", note=WORLD_UP))
        elif kind == "progress":
            _, done, total, unit, metrics = message
            outcome.progress = (done, total, unit)
            self._tell(Progress(rank, outcome.name, done, total, unit, metrics))
        elif kind in ("done", "result"):
            if kind == "done":
                outcome.phase = "done"
            # Unpickled in collect(), once the ranks are shutting down: tensors
            # unpickle at ~0.1 ms each, and a parameter server's log holds hundreds.
            if message[1] is not None:
                self.pickled_values[rank] = message[1]
        elif kind == "shut":
            self.shut.add(rank)
            outcome.phase = "exiting"
        elif kind == "frozen":
            self.frozen.add(rank)
            outcome.phase = "frozen"
        elif kind in ("raised", "skipped"):
            _, phase, error, text, pickled = message
            outcome.status = R.RAISED if kind == "raised" else R.SKIPPED
            outcome.phase = {"starting": "start-up", "result": "entry"}.get(phase, phase)
            outcome.error = error
            outcome.traceback = text
            if pickled is not None:
                try:
                    outcome.value = pickle.loads(pickled)
                except Exception:  # noqa: BLE001 - the text form is already kept
                    pass

    def _named(self, rank: int, names: tuple[str, ...]) -> None:
        """A spawned program's rank joined: its init_rpc says every worker's name."""
        if self.names and all(self.names) and tuple(names) != tuple(self.names):
            self.problems.append(
                f"the program named its workers {list(names)}, not {list(self.names)} as spawn(names=...) said")
            return
        if all(o.name for o in self.outcomes):
            return
        self.names = tuple(names)
        for outcome, name in zip(self.outcomes, names, strict=True):
            outcome.name = name
        try:
            self.spec.faults.validate(self.names, failpoints=self.spec.failpoints, where="spawn(): faults")
        except FaultPlanError as error:
            self.problems.append(str(error))

    def _on_exit(self, rank: int) -> None:
        self._drain(rank)  # its last words come before its exit status
        proc = self.procs[rank]
        proc.join(0)
        self.running.discard(rank)
        outcome = self.outcomes[rank]
        code = proc.exitcode
        outcome.exitcode = code
        if code is not None and code < 0:
            outcome.signal = _signal_name(-code)
        if outcome.status in (R.RAISED, R.SKIPPED):
            return
        if code == 0 and rank in self.shut:
            outcome.status = R.OK
        elif outcome.signal == "SIGKILL" and self._plan_killed(rank):
            outcome.status = R.KILLED
            if self.shutdown_sent:  # graceful shutdown would now wait for it forever
                self._stop_survivors()
        else:
            outcome.status = R.DIED

    def _plan_killed(self, rank: int) -> bool:
        events = _read_events(self.workdir, rank)
        return any(e.get("kind") == "fault" and e.get("fault_kind") in ENDING_KINDS for e in events)

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
        for rank in sorted(self.frozen & self.running):
            _signal(self.procs[rank].pid, signal.SIGKILL)  # its exit is then seen as planned
        for outcome in alive:
            outcome.phase = "shutdown"
            try:
                self.conns[outcome.rank].send(("shutdown", graceful))
            except OSError:  # it died meanwhile; its sentinel will say how
                pass

    # -- bring down -------------------------------------------------------------
    def _on_budget(self, budget: str) -> None:
        self.timed_out = True
        self.budget = budget
        alive = sorted(self.running)
        self._dump_stacks(alive)
        for rank in alive:
            outcome = self.outcomes[rank]
            outcome.status = R.STOPPED if outcome.phase in ("done", "frozen") else R.HUNG
        self.kill_all()

    def _stop_survivors(self) -> None:
        # Survivors keep the STOPPED status they started with: not failures.
        # Those still in their entry may be why another rank failed (a peer
        # stuck on a lock, a server waiting on them): their stacks are kept.
        busy = [r for r in sorted(self.running)
                if not self.outcomes[r].failed and self.outcomes[r].phase in ("starting", "entry")]
        if any(o.failed for o in self.outcomes) or self.problems:
            self._dump_stacks(busy)
        self.kill_all()

    def _dump_stacks(self, ranks: list[int]) -> None:
        """Ask ``ranks`` for every thread's stack (faulthandler on SIGUSR1)
        and wait, briefly, until each has written its dump."""
        if not ranks:
            return
        for rank in ranks:
            _signal(self.procs[rank].pid, signal.SIGUSR1)
        until = time.monotonic() + _STACK_WAIT
        pending = set(ranks)
        while pending and time.monotonic() < until:
            pending = {r for r in pending if not _stacks_written(self.workdir, r)}
            time.sleep(0.02)
        time.sleep(0.05)  # let the last dump finish its write

    def kill_all(self) -> None:
        """SIGKILL every rank still running and reap it. Idempotent."""
        for rank in sorted(self.running):
            _signal(self.procs[rank].pid, signal.SIGKILL)
        for rank in sorted(self.running):
            self.procs[rank].join(10)
            code = self.procs[rank].exitcode
            outcome = self.outcomes[rank]
            outcome.exitcode = code
            if code is not None and code < 0:
                outcome.signal = _signal_name(-code)
            # Its kill fault may have fired just before a peer's report of the
            # death stopped the world: the fault event is written before SIGKILL.
            if outcome.status == R.STOPPED and outcome.signal == "SIGKILL" and self._plan_killed(rank):
                outcome.status = R.KILLED
        self.running.clear()
        for conn in self.conns:
            conn.close()
        self.open_conns.clear()

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
            outcome.output = _read_text(os.path.join(self.workdir, f"rank{outcome.rank}.log"))
            outcome.stacks = annotate_stacks(
                _read_text(os.path.join(self.workdir, f"rank{outcome.rank}.stacks"))
            )
            if outcome.traceback:
                outcome.traceback = hide_hook_frames(outcome.traceback)
            outcome.events = _read_events(self.workdir, outcome.rank)
        plan = self.spec.faults
        _tally.add_message_failures(plan, self.outcomes)
        problems = list(self.problems) + _tally.lost_messages(plan, self.outcomes)
        if not self.timed_out and not any(o.failed or o.status == R.SKIPPED for o in self.outcomes):
            # Only a world that ran its course can say a fault never fired:
            # one stopped early never gave the others their chance.
            problems += _tally.unfired(plan, self.outcomes)
        return WorldResult(
            names=tuple(o.name for o in self.outcomes),
            seed=self.spec.seed,
            faults=plan,
            deadline=self.spec.deadline,
            ranks=self.outcomes,
            duration=(self.ended or time.monotonic()) - self.started,
            timed_out=self.timed_out,
            repro=repro,
            problems=problems,
            budget=self.budget,
            bringup=self.spec.bringup,
            isolation=self.isolation,
        )


_RANK_FILE = os.path.join("harness", "_rank.py")
_HOOKS_FILE = os.path.join("harness", "_rpc_hooks.py")
_WATCH_FILE = os.path.join("harness", "rank_setup.py")
_FRAME_RE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>.+)$')


def annotate_stacks(text: str) -> str:
    """Make a faulthandler dump readable: add each frame's source line (the
    dump has none, and ``failpoint("trainer.step")`` is what a reader needs),
    drop the harness's own watchdog thread and the bootstrap frames below a
    rank's entry."""
    blocks = []
    for block in text.strip().split("\n\n"):
        lines = block.splitlines()
        if any(_WATCH_FILE in line and line.endswith(" in watch") for line in lines):
            continue
        out = []
        for line in lines:
            match = _FRAME_RE.match(line)
            if match and match["file"].endswith(_HOOKS_FILE):
                continue  # the harness's RPC wrappers: between the program's frames and torch's
            out.append(line)
            if not match:
                continue
            source = linecache.getline(match["file"], int(match["line"])).strip()
            if source:
                out.append(f"    {source}")
            if match["file"].endswith(_RANK_FILE):
                out.append("  (harness bootstrap frames omitted)")
                break
        blocks.append("\n".join(out))
    return "\n\n".join(blocks)


_TRACEBACK_FRAME_RE = re.compile(r'^  File "(?P<file>[^"]+)", line \d+, in ')


def hide_hook_frames(text: str) -> str:
    """A Python traceback without the frames of the harness's RPC wrappers
    (each a ``File`` line and the indented lines under it)."""
    out, skipping = [], False
    for line in text.splitlines(keepends=True):
        match = _TRACEBACK_FRAME_RE.match(line)
        if match:
            skipping = match["file"].endswith(_HOOKS_FILE)
        elif not line.startswith("    "):
            skipping = False
        if not skipping:
            out.append(line)
    return "".join(out)


def _stacks_written(workdir: str, rank: int) -> bool:
    try:
        return os.path.getsize(os.path.join(workdir, f"rank{rank}.stacks")) > 0
    except OSError:
        return False


def _read_text(path: str) -> str:
    try:
        with open(path, errors="replace") as file:
            return file.read()
    except OSError:
        return ""


def _read_events(workdir: str, rank: int) -> list[dict]:
    return read_event_lines(os.path.join(workdir, f"rank{rank}.events"))


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
