"""Bring a world up, watch every rank, bring it down: the supervisor.

Ranks are forked from a multiprocessing forkserver that has torch imported
already (~0.1 s a world instead of ~2 s of ``import torch`` per rank). The
rendezvous is a FileStore in the world's private temporary folder, so no port
is chosen by anyone but the kernel and parallel worlds (``pytest -n auto``)
cannot collide. The supervisor waits on every rank's pipe and process
sentinel at once; the first unexpected failure stops the world, and the
deadline collects every rank's stacks before it kills them.
"""

from __future__ import annotations

import dataclasses
import io
import linecache
import multiprocessing
import os
import pickle
import re
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from multiprocessing import forkserver, popen_forkserver, spawn, util
from multiprocessing.connection import wait
from multiprocessing.context import ForkServerProcess, reduction, set_spawning_popen
from typing import Any

from . import result as R
from .context import read_event_lines
from .errors import WorldFailed, WorldTimeout
from .faults import FaultPlan
from .progress import WORLD_ENDED, WORLD_UP, Progress
from .result import RankOutcome, WorldResult
from .spec import WorldSpec, make_spec

# Imported once in the forkserver instead of once per rank: torch._dynamo (the
# first optimizer a rank builds imports it, ~1 s) and torch.distributed.optim
# (DistributedOptimizer; it pulls in fsdp/dtensor, ~1.5 s).
_PRELOAD = ["harness._rank", "torch._dynamo", "torch.distributed.optim"]
_STACK_WAIT = 2.0  # seconds to wait for every rank's stack dump at the deadline


def preload(*modules: str) -> None:
    """Import ``modules`` once in the forkserver instead of once per rank.

    Takes effect for a forkserver that has not started yet (the first world
    of a process starts it).
    """
    for module in modules:
        if module not in _PRELOAD:
            _PRELOAD.append(module)


def _mp_context() -> Any:
    ctx = multiprocessing.get_context("forkserver")
    extra = [m for m in os.environ.get("RPC_HARNESS_PRELOAD", "").split(",") if m]
    ctx.set_forkserver_preload(_PRELOAD + extra)
    return ctx


class _RankPopen(popen_forkserver.Popen):
    """multiprocessing's forkserver launch, minus re-running the parent's
    ``__main__`` in the child: ranks load their entry by name, and re-running
    a script (or pytest's entry point) in every rank is slow at best and, for
    a script without a ``__main__`` guard, starts worlds inside worlds."""

    def _launch(self, process_obj: Any) -> None:
        prep_data = spawn.get_preparation_data(process_obj._name)
        prep_data.pop("init_main_from_path", None)
        prep_data.pop("init_main_from_name", None)
        buf = io.BytesIO()
        set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            set_spawning_popen(None)
        self.sentinel, w = forkserver.connect_to_new_process(self._fds)
        # The child watches this duplicate of the write end: EOF means we died.
        parent_w = os.dup(w)
        self.finalizer = util.Finalize(self, util.close_fds, (parent_w, self.sentinel))
        with open(w, "wb", closefd=True) as file:
            file.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class _RankProcess(ForkServerProcess):
    @staticmethod
    def _Popen(process_obj: Any) -> _RankPopen:
        return _RankPopen(process_obj)


def run_world(
    entry: Callable[..., Any] | str,
    world_size: int | None = None,
    *,
    names: Sequence[str] | str | None = None,
    seed: int | None = None,
    deadline: float | None = None,
    faults: FaultPlan | str | None = None,
    failpoints: Sequence[str] | None = None,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    fuzz: float = 0.0,
    env: Mapping[str, str] | None = None,
    repro: str = "",
    check: bool = True,
    on_progress: Callable[[Progress], None] | None = None,
) -> WorldResult:
    """Run ``entry(ctx, *args, **kwargs)`` in every rank of a fresh RPC world.

    Every input is validated before any process starts. With ``check=True``
    an unexpected failure of any rank raises :class:`WorldFailed` (or
    :class:`WorldTimeout` at the deadline) listing every failed rank;
    otherwise the :class:`WorldResult` is returned as it is.
    ``on_progress`` is called in this process with every
    :class:`~harness.progress.Progress` the ranks report, as they report it.
    """
    spec = make_spec(
        entry,
        world_size,
        names=names,
        seed=seed,
        deadline=deadline,
        faults=faults,
        failpoints=failpoints,
        args=args,
        kwargs=kwargs,
        fuzz=fuzz,
        env=env,
        repro=repro,
    )
    result = launch(spec, on_progress=on_progress)
    if check:
        raise_for_failures(result)
    return result


def raise_for_failures(result: WorldResult) -> None:
    """Raise :class:`WorldTimeout` or :class:`WorldFailed` for a failed world."""
    if result.timed_out:
        raise WorldTimeout(result)
    if result.failures:
        raise WorldFailed(result)


def launch(
    spec: WorldSpec,
    *,
    keep_workdir: bool = False,
    on_progress: Callable[[Progress], None] | None = None,
) -> WorldResult:
    """Run one world described by a validated spec; always returns a result
    (unless ``on_progress`` raises: then every rank is killed and the error
    goes on)."""
    workdir = tempfile.mkdtemp(prefix="rpc-world-")
    supervisor = _Supervisor(spec, workdir, on_progress)
    try:
        supervisor.run()
    finally:
        supervisor.kill_all()
    result = supervisor.collect()
    if keep_workdir:
        result.workdir = workdir
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return result


class _Supervisor:
    def __init__(
        self, spec: WorldSpec, workdir: str, on_progress: Callable[[Progress], None] | None = None
    ) -> None:
        self.spec = spec
        self.workdir = workdir
        self.on_progress = on_progress
        self.ready: set[int] = set()
        self.pickled_values: dict[int, bytes] = {}
        self.outcomes = [RankOutcome(rank, name) for rank, name in enumerate(spec.names)]
        self.procs: list[Any] = []
        self.conns: list[Any] = []
        self.open_conns: set[int] = set()
        self.running: set[int] = set()
        self.shut: set[int] = set()  # ranks that reported a finished shutdown
        self.shutdown_sent: bool | None = None  # None, or the graceful flag sent
        self.timed_out = False
        self.started = 0.0
        self.ended = 0.0

    # -- bring up -----------------------------------------------------------
    def run(self) -> None:
        from ._rank import Boot, main

        ctx = _mp_context()
        self.started = time.monotonic()
        for outcome in self.outcomes:
            boot = Boot(
                rank=outcome.rank,
                names=self.spec.names,
                seed=self.spec.seed,
                workdir=self.workdir,
                entry=self.spec.entry,
                payload=self.spec.payload,
                faults=self.spec.faults,
                fuzz=self.spec.fuzz,
                rpc_timeout=self.spec.deadline,
                deadline=self.spec.deadline,
                sys_path=tuple(sys.path),
                env=self.spec.env,
            )
            ours, theirs = ctx.Pipe(duplex=True)
            proc = _RankProcess(
                target=main, args=(theirs, boot), name=f"rpc-{outcome.name}", daemon=True
            )
            proc.start()
            theirs.close()
            self.procs.append(proc)
            self.conns.append(ours)
            self.open_conns.add(outcome.rank)
            self.running.add(outcome.rank)
        # The clock starts once every rank is forked: the first world of a
        # process waits for the forkserver to import torch (seconds, more on a
        # loaded machine), which is not the world's time to spend.
        self._watch(time.monotonic() + self.spec.deadline)
        self.ended = time.monotonic()
        self._tell(Progress(None, "world", note=WORLD_ENDED))

    def _tell(self, update: Progress) -> None:
        if self.on_progress is not None:
            self.on_progress(dataclasses.replace(update, elapsed=time.monotonic() - self.started))

    # -- watch ----------------------------------------------------------------
    def _watch(self, deadline_at: float) -> None:
        while self.running:
            remaining = deadline_at - time.monotonic()
            if remaining <= 0:
                self._on_deadline()
                return
            waitables = {self.conns[r]: ("conn", r) for r in self.open_conns}
            waitables.update({self.procs[r].sentinel: ("exit", r) for r in self.running})
            for ready in wait(list(waitables), timeout=remaining):
                what, rank = waitables[ready]
                if what == "conn":
                    self._drain(rank)
                else:
                    self._on_exit(rank)
            if any(o.failed or o.status == R.SKIPPED for o in self.outcomes):
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
            if len(self.ready) == len(self.outcomes):
                self._tell(Progress(None, "world", note=WORLD_UP))
        elif kind == "progress":
            _, done, total, unit, metrics = message
            outcome.progress = (done, total, unit)
            self._tell(Progress(rank, outcome.name, done, total, unit, metrics))
        elif kind == "done":
            outcome.phase = "done"
            # Unpickled in collect(), once the ranks are shutting down: tensors
            # unpickle at ~0.1 ms each, and a parameter server's log holds hundreds.
            self.pickled_values[rank] = message[1]
        elif kind == "shut":
            self.shut.add(rank)
            outcome.phase = "exiting"
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
        return any(e.get("kind") == "fault" and e.get("fault_kind") == "kill" for e in events)

    def _maybe_release(self) -> None:
        """Once every live rank finished its entry, tell all how to shut down."""
        if self.shutdown_sent is not None:
            return
        alive = [o for o in self.outcomes if o.rank in self.running]
        if not alive or any(o.phase != "done" for o in alive):
            return
        graceful = not any(o.status == R.KILLED for o in self.outcomes)
        self.shutdown_sent = graceful
        for outcome in alive:
            outcome.phase = "shutdown"
            try:
                self.conns[outcome.rank].send(("shutdown", graceful))
            except OSError:  # it died meanwhile; its sentinel will say how
                pass

    # -- bring down -------------------------------------------------------------
    def _on_deadline(self) -> None:
        self.timed_out = True
        alive = sorted(self.running)
        self._dump_stacks(alive)
        for rank in alive:
            outcome = self.outcomes[rank]
            outcome.status = R.STOPPED if outcome.phase == "done" else R.HUNG
        self.kill_all()

    def _stop_survivors(self) -> None:
        # Survivors keep the STOPPED status they started with: not failures.
        # Those still in their entry may be why another rank failed (a peer
        # stuck on a lock, a server waiting on them): their stacks are kept.
        busy = [r for r in sorted(self.running) if self.outcomes[r].phase in ("starting", "entry")]
        if any(o.failed for o in self.outcomes):
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
    def collect(self) -> WorldResult:
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
            outcome.events = _read_events(self.workdir, outcome.rank)
        return WorldResult(
            names=self.spec.names,
            seed=self.spec.seed,
            faults=self.spec.faults,
            deadline=self.spec.deadline,
            ranks=self.outcomes,
            duration=(self.ended or time.monotonic()) - self.started,
            timed_out=self.timed_out,
            repro=self.spec.repro or default_repro(self.spec),
        )


def default_repro(spec: WorldSpec) -> str:
    """A Python call that runs the same world again."""
    text = f"harness.run_world({spec.entry!s}, names={list(spec.names)}, seed={spec.seed}"
    if spec.faults:
        text += f", faults={str(spec.faults)!r}"
    if spec.fuzz:
        text += f", fuzz={spec.fuzz}"
    return text + ")"


_RANK_FILE = os.path.join("harness", "_rank.py")
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
            out.append(line)
            match = _FRAME_RE.match(line)
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
