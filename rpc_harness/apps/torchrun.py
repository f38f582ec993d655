"""Run any scenario's ranks under ``torchrun``: the same world across machines.

The harness's own launcher forks every rank on one host. To spread a world
over several hosts, start this module with ``torchrun`` on each of them::

    torchrun --nnodes=2 --nproc-per-node=2 --node-rank=0 \\
        --master-addr=HOST0 --master-port=29500 \\
        -m rpc_harness.apps.torchrun --scenario ps --seed 5 --out result.json
    # and on the second host the same line with --node-rank=1

Each process reads ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and
``MASTER_PORT`` from the environment torchrun gives it, builds the same
:class:`~rpc_harness.context.RankContext` a harness rank gets (names from the
scenario, per-rank seed, fault plan), seeds the global RNGs the same way,
joins the RPC world through torchrun's store, runs ``scenario.entry(ctx,
config)`` and reports to rank 0. Rank 0 writes a JSON summary to ``--out``
and every rank's return value, as the harness's ``WorldResult.values`` would
hold it, to ``--out`` + ``.pt`` (``torch.load(path, weights_only=False)``):
a world run here can be compared gradient for gradient with the same seed run
by :func:`rpc_harness.run_world`.

``--scenario`` takes a registered scenario's name (``rpc-harness list``) or
``module:attribute`` naming any object of the scenario shape
(:class:`rpc_harness.scenario.Scenario`).
Without torchrun, set the four variables yourself and start one process per
rank: rank 0 then hosts the store on ``MASTER_PORT``.

After its entry every rank sends rank 0 its report (return value, error,
host, pid) and waits for rank 0's word on how to shut down: gracefully only
when every rank reported success, since a graceful shutdown waits for every
peer, as in the harness.

Networking: when ``MASTER_ADDR`` is a loopback address every rank is on this
host, and TensorPipe and Gloo are pinned to ``lo`` as in the harness. Across
hosts, choose the interface yourself (``TP_SOCKET_IFNAME``,
``GLOO_SOCKET_IFNAME``). RPC runs pickled code from any peer that reaches
it: run worlds only on a network you trust.

What torchrun cannot give: ``kill``, ``hang`` and ``freeze`` faults. torchrun treats a
dead worker as a failed job and tears down its workers (or restarts them),
and has no per-rank deadline, so "dead ranks are the killed ranks" cannot be
judged; use :func:`rpc_harness.run_world` or ``rpc-harness run`` for those. The
other faults (``delay``, ``raise``, ``msgfail``, ``msgdelay``) work as in the
harness. Every rank arms its own deadline (``--deadline``): past it, it dumps
every thread's stack to stderr and exits, so a hung world ends on its own
(``kill -USR1 PID`` dumps a rank's stacks at any time: faulthandler's dump,
which can crash a rank whose threads start or end meanwhile, so a last
resort). A rank dies with the
torchrun agent that started it, even one killed by SIGKILL.
"""

from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import ipaddress
import json
import math
import os
import pickle
import signal
import socket
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed.rpc as rpc

from rpc_harness import scenario as registry
from rpc_harness.context import RankContext, activate
from rpc_harness.errors import (
    FaultPlanError,
    ScenarioError,
    UsageError,
    WorldSpecError,
    clip,
    one_line,
)
from rpc_harness.faults import FAULT_KINDS, FaultPlan
from rpc_harness.options import COMMAND_LINE_DEADLINE, add_option, whole_argument
from rpc_harness.rank_setup import die_with_parent, rpc_backend, warm_math_kernels
from rpc_harness.rank_setup import pin_loopback as pin_to_lo
from rpc_harness.repro import Repro, scenario_call
from rpc_harness.scenario import Scenario
from rpc_harness.seeds import seed_everything

LEADER = 0  # the rank that collects every rank's report and writes the summary
# How ranks find the store. env:// reads MASTER_ADDR/MASTER_PORT, and torch's
# env:// handler connects to it as a *client* when torchrun sets
# TORCHELASTIC_USE_AGENT_STORE=True: torchrun's agent already serves a
# TCPStore on MASTER_PORT (static and c10d rendezvous alike), so a rank must
# not try to start a second server there. Without torchrun, rank 0 hosts it.
INIT_METHOD = "env://"
_MAX_LIST = 1000  # the JSON summary keeps at most this many items of a list
_SMALL_TENSOR = 16  # tensors up to this many elements are written out in full


# -- what torchrun gives --------------------------------------------------------------


@dataclass(frozen=True)
class LaunchEnv:
    """This process's place in the world, from the environment torchrun sets."""

    rank: int
    world_size: int
    master_addr: str
    master_port: int
    local_rank: int = 0
    agent_store: bool = False  # torchrun's agent hosts the store; ranks are its clients

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> LaunchEnv:
        """Read and check RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for var, kind in (("RANK", int), ("WORLD_SIZE", int), ("MASTER_ADDR", str), ("MASTER_PORT", int)):
            text = environ.get(var)
            if not text:
                raise UsageError(
                    f"environment variable {var} is not set; start this module with torchrun "
                    "(or set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT yourself)"
                )
            try:
                values[var] = kind(text)
            except ValueError:
                raise UsageError(f"environment variable {var}={clip(text)} is not an integer") from None
        env = cls(
            rank=values["RANK"],
            world_size=values["WORLD_SIZE"],
            master_addr=values["MASTER_ADDR"],
            master_port=values["MASTER_PORT"],
            local_rank=int(environ.get("LOCAL_RANK", "0") or 0),
            agent_store=environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True",
        )
        if env.world_size < 1 or not 0 <= env.rank < env.world_size:
            raise UsageError(f"RANK={env.rank} does not fit WORLD_SIZE={env.world_size}")
        return env


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name) means this machine only."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)


# -- the scenario ----------------------------------------------------------------------


def load_scenario(name: str) -> Scenario:
    """A registered scenario, or ``module:attribute`` of the scenario shape."""
    try:
        return registry.resolve(name)
    except ScenarioError as error:
        raise UsageError(f"--scenario {clip(name)}: {error}") from None


def build_config(scenario: Scenario, pairs: Sequence[str] = (), steps: int | None = None) -> Any:
    """The scenario's config with ``--set KEY=VALUE`` (and ``--steps``)
    applied, typed and validated exactly as ``rpc-harness run`` does."""
    try:
        return registry.make_config(scenario, registry.parse_overrides(scenario, pairs, steps))
    except WorldSpecError as error:
        raise UsageError(str(error)) from None


def build_plan(text: str | None, names: Sequence[str], failpoints: Sequence[str] | None) -> FaultPlan:
    """Parse and check ``--faults`` for this world; refuse what torchrun cannot judge."""
    plan = FaultPlan.parse(text, where="--faults")
    plan.validate(names, failpoints=failpoints, where="--faults")
    refused = [str(f) for f in plan if not f.traits.under_torchrun]
    if refused:
        *most, last = [name for name, kind in FAULT_KINDS.items() if not kind.under_torchrun]
        kinds = f"{', '.join(most)} and {last}" if most else last
        raise FaultPlanError(
            f"--faults: {', '.join(refused)}: {kinds} faults need the harness's supervisor "
            "(torchrun tears a job down when a worker dies and has no per-rank deadline); "
            "run them with rpc_harness.run_world or `rpc-harness run`"
        )
    return plan


# -- joining the RPC world --------------------------------------------------------------


def pin_loopback(master_addr: str) -> bool:
    """Pin TensorPipe and Gloo to ``lo`` when the world is on this host only.

    Otherwise they bind to whatever the host name resolves to, as the harness
    found; across hosts the user picks the interface, so nothing is forced.
    """
    if not is_loopback(master_addr):
        return False
    pin_to_lo()
    return True


# -- reports, gathered on the leader -----------------------------------------------------


@dataclass
class RankReport:
    """What one rank sends the leader after its entry."""

    rank: int
    name: str
    host: str
    pid: int
    status: str  # "ok" or "raised"
    seconds: float
    value: Any = None
    error: str | None = None
    traceback: str | None = None


class _Inbox:
    """The leader's collection of reports. Every other rank waits (without
    holding an RPC thread: an async_execution future) for the leader's verdict
    on how to shut down, as the harness's supervisor tells its ranks."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self.reports: dict[int, RankReport] = {}
        self._waiting: list[torch.futures.Future] = []
        self._verdict: bool | None = None

    def put(self, report: RankReport) -> torch.futures.Future:
        future: torch.futures.Future = torch.futures.Future()
        with self._lock:
            self.reports[report.rank] = report
            verdict = self._verdict
            if verdict is None:
                self._waiting.append(future)
            self._lock.notify_all()
        if verdict is not None:
            future.set_result(verdict)
        return future

    def wait_for(self, count: int, until: float) -> dict[int, RankReport]:
        with self._lock:
            while len(self.reports) < count and time.monotonic() < until:
                self._lock.wait(min(1.0, max(0.0, until - time.monotonic())))
            return dict(self.reports)

    def decide(self, graceful: bool) -> None:
        with self._lock:
            self._verdict = graceful
            waiting, self._waiting = self._waiting, []
        for future in waiting:
            future.set_result(graceful)


_inbox = _Inbox()


@rpc.functions.async_execution
def _report_to_leader(report: RankReport) -> torch.futures.Future:
    """Runs on the leader: file ``report``; answer the shutdown verdict when known."""
    return _inbox.put(report)


# -- one rank ----------------------------------------------------------------------


@dataclass(frozen=True)
class RunArgs:
    """Everything a rank needs besides the environment."""

    scenario: str
    seed: int
    faults: str | None = None
    overrides: tuple[str, ...] = ()
    steps: int | None = None
    fuzz: float = 0.0
    deadline: float = COMMAND_LINE_DEADLINE
    out: str | None = None


def run_rank(args: RunArgs, env: LaunchEnv) -> int:
    """Run this process's rank of the world; the exit status to return."""
    started = time.monotonic()
    until = started + args.deadline
    # A hung world must end by itself: torchrun has no deadline of its own.
    faulthandler.dump_traceback_later(args.deadline, exit=True)
    faulthandler.register(signal.SIGUSR1, all_threads=True, chain=False)

    scenario = load_scenario(args.scenario)
    config = build_config(scenario, args.overrides, args.steps)
    try:
        names = registry.world_names(scenario, env.world_size, where="WORLD_SIZE")
    except WorldSpecError as error:
        raise UsageError(str(error)) from None
    plan = build_plan(args.faults, names, scenario.failpoints)

    pin_loopback(env.master_addr)
    # init_rpc's device-map exchange trips a torch deprecation warning (as in _rank.py).
    warnings.filterwarnings("ignore", message="You are using a Backend")
    ctx = RankContext(rank=env.rank, names=names, world_seed=args.seed, faults=plan, fuzz=args.fuzz,
                      deadline=args.deadline)
    activate(ctx)
    seed_everything(ctx.seed)
    warm_math_kernels()  # before init_rpc starts the threads that could race for them (rank_setup)

    backend, options = rpc_backend(ctx, INIT_METHOD, rpc_timeout=args.deadline)
    rpc.init_rpc(ctx.name, backend=backend, rank=ctx.rank, world_size=ctx.world_size, rpc_backend_options=options)

    report = _run_entry(scenario, ctx, config)
    report.seconds = time.monotonic() - started
    _check_sendable(report)
    if ctx.rank != LEADER:
        return _follow(report, names[LEADER], until)
    return _lead(report, args, scenario, config, ctx, plan, until, started)


def _run_entry(scenario: Scenario, ctx: RankContext, config: Any) -> RankReport:
    report = RankReport(ctx.rank, ctx.name, socket.gethostname(), os.getpid(), "ok", 0.0)
    try:
        report.value = scenario.entry(ctx, config)
    except BaseException as error:  # noqa: BLE001 - every failure goes into the report
        report.status = "raised"
        report.error = one_line(error)
        report.traceback = "".join(traceback.format_exception(error))
        print(report.traceback, file=sys.stderr, flush=True)
    return report


def _follow(report: RankReport, leader: str, until: float) -> int:
    try:
        graceful = _send(report, leader, until)
    except Exception as error:  # the leader is gone: nobody to wait for
        print(f"rank {report.rank} ({report.name}): cannot report to {leader}: {one_line(error)}", file=sys.stderr)
        rpc.shutdown(graceful=False)
        return 1
    rpc.shutdown(graceful=graceful)
    return 0 if report.status == "ok" else 1


def _send(report: RankReport, leader: str, until: float) -> bool:
    timeout = max(1.0, until - time.monotonic())
    return bool(rpc.rpc_sync(leader, _report_to_leader, args=(report,), timeout=timeout))


def _check_sendable(report: RankReport) -> None:
    """A value that cannot be pickled can neither reach the leader nor be
    saved: report that instead, as the harness does."""
    try:
        pickle.dumps(report.value)
    except Exception as error:  # noqa: BLE001 - whatever pickling raises
        report.status, report.value = "raised", None
        report.error = f"TypeError: the entry's return value cannot be sent back: {error}"


def _lead(
    report: RankReport,
    args: RunArgs,
    scenario: Scenario,
    config: Any,
    ctx: RankContext,
    plan: FaultPlan,
    until: float,
    started: float,
) -> int:
    _inbox.put(report)
    # Leave time to write the summary before this rank's own deadline fires.
    margin = min(10.0, args.deadline / 10)
    reports = _inbox.wait_for(ctx.world_size, until - margin)
    ok = len(reports) == ctx.world_size and all(r.status == "ok" for r in reports.values())
    # A graceful shutdown waits for every peer: only safe when all reported well.
    _inbox.decide(ok)
    summary = summarise_world(
        scenario, config, ctx, plan, reports, seconds=time.monotonic() - started, fuzz=args.fuzz
    )
    if args.out:
        write_outputs(args.out, summary, [reports[r].value if r in reports else None for r in range(ctx.world_size)])
    print(summary["headline"], flush=True)
    if not ok:
        # A non-graceful shutdown drops replies still in flight: give the
        # verdicts just sent a moment to leave, so the followers hear it.
        time.sleep(0.2)
    rpc.shutdown(graceful=ok)
    return 0 if ok else 1


# -- the summary ----------------------------------------------------------------------


def summarise_world(
    scenario: Scenario,
    config: Any,
    ctx: RankContext,
    plan: FaultPlan,
    reports: Mapping[int, RankReport],
    *,
    seconds: float,
    fuzz: float = 0.0,
) -> dict[str, Any]:
    """The JSON-ready summary the leader writes."""
    ranks = []
    for rank, name in enumerate(ctx.names):
        r = reports.get(rank)
        if r is None:
            ranks.append({"rank": rank, "name": name, "status": "missing",
                          "error": "sent no report before the deadline (hung, or died)"})
            continue
        ranks.append({
            "rank": rank, "name": name, "host": r.host, "pid": r.pid, "status": r.status,
            "seconds": r.seconds, "error": r.error, "traceback": r.traceback, "value": summarise(r.value),
        })
    ok = all(entry["status"] == "ok" for entry in ranks)
    failed = [f"{e['name']} {e['status']}" for e in ranks if e["status"] != "ok"]
    label = scenario.name
    headline = (
        f"rpc-harness torchrun: {label} world of {ctx.world_size} "
        + (f"ok in {seconds:.2f}s" if ok else f"failed ({', '.join(failed)})")
        + f" (seed {ctx.world_seed})"
    )
    overrides = registry.config_overrides(scenario, config)
    replay = scenario_call(Repro(world_size=ctx.world_size, seed=ctx.world_seed, scenario=label, config=overrides,
                                 options={"faults": plan, "fuzz": fuzz}))
    return {
        "headline": headline,
        "ok": ok,
        "scenario": label,
        "module": type(scenario).__module__,
        "world_size": ctx.world_size,
        "names": list(ctx.names),
        "seed": ctx.world_seed,
        "faults": str(plan),
        "fuzz": fuzz,
        "config": summarise(dataclasses.asdict(config)) if dataclasses.is_dataclass(config) else None,
        "seconds": seconds,
        "hosts": sorted({e["host"] for e in ranks if "host" in e}),
        "torch": torch.__version__,
        "ranks": ranks,
        # The same world in one host's harness, for a side-by-side replay.
        "replay": replay,
    }


def summarise(value: Any, depth: int = 0) -> Any:
    """A JSON-ready picture of a return value: tensors as shape, dtype, norm
    (and values when small), dataclasses as dicts, non-finite floats as text."""
    if depth > 8:
        return _short_repr(value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, torch.Tensor):
        tensor = value.detach()
        out: dict[str, Any] = {"tensor": list(tensor.shape), "dtype": str(tensor.dtype).replace("torch.", "")}
        if tensor.is_floating_point() or tensor.is_complex():
            out["norm"] = summarise(float(tensor.double().norm()) if tensor.numel() else 0.0)
        if tensor.numel() <= _SMALL_TENSOR:
            out["values"] = summarise(tensor.tolist(), depth + 1)
        return out
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: summarise(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)}
        return {"type": type(value).__name__, **fields}
    if isinstance(value, Mapping):
        return {str(k): summarise(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = list(value)
        out_list = [summarise(v, depth + 1) for v in items[:_MAX_LIST]]
        if len(items) > _MAX_LIST:
            out_list.append(f"... {len(items) - _MAX_LIST} more")
        return out_list
    return _short_repr(value)


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


def write_outputs(out: str, summary: Mapping[str, Any], values: list[Any]) -> None:
    """``out``: the JSON summary; ``out + ".pt"``: every rank's return value."""
    folder = os.path.dirname(os.path.abspath(out))
    os.makedirs(folder, exist_ok=True)
    values_path = out + ".pt"
    torch.save(values, values_path)
    document = dict(summary, values_file=os.path.abspath(values_path))
    tmp = out + ".tmp"
    with open(tmp, "w") as file:
        json.dump(document, file, indent=2, allow_nan=False)
        file.write("\n")
    os.replace(tmp, out)  # a reader never sees half a summary


# -- command line ------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m rpc_harness.apps.torchrun",
        description="Run one rank of a scenario's RPC world; start it with torchrun on every host.",
    )
    parser.add_argument("--scenario", required=True,
                        help="a registered scenario (rpc-harness list) or module:attribute of the scenario shape")
    add_option(parser, "seed", required=True, help="the world's root seed (same on every host)")
    parser.add_argument("--faults", default=None, help="fault plan (delay, raise, msgfail, msgdelay)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a scenario config field (repeatable)")
    parser.add_argument("--steps", type=whole_argument, default=None, help="the scenario's training budget")
    add_option(parser, "fuzz", default=0.0)
    add_option(parser, "deadline", default=COMMAND_LINE_DEADLINE,
               help=f"seconds before a rank dumps its stacks and exits (default {COMMAND_LINE_DEADLINE:g})")
    parser.add_argument("--out", default=None, help="rank 0's JSON summary; return values go to OUT.pt")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rpc_harness.apps.torchrun ...``: run this process's rank."""
    ns = _parser().parse_args(argv)
    args = RunArgs(
        scenario=ns.scenario, seed=ns.seed, faults=ns.faults, overrides=tuple(ns.overrides),
        steps=ns.steps, fuzz=ns.fuzz, deadline=ns.deadline, out=ns.out,
    )
    # torchrun starts each worker in a session of its own: a torchrun killed
    # by SIGKILL would leave its workers running without this.
    die_with_parent()
    try:
        env = LaunchEnv.from_environ()
        return run_rank(args, env)
    except (UsageError, FaultPlanError) as error:
        print(f"rpc_harness.apps.torchrun: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    # Run the module's own import, not this ``__main__`` copy: RPC pickles
    # functions by module name, and the leader's report inbox must be the one
    # the handlers in ``rpc_harness.apps.torchrun`` reach.
    from rpc_harness.apps.torchrun import main as _main

    sys.exit(_main())
