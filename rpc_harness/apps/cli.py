"""The ``rpc-harness`` command: run scenarios, replay failures, draw, benchmark.

    rpc-harness run [SCENARIO ... | all] [-n N] [--seed S] [--faults PLAN] ...
    rpc-harness replay TOKEN
    rpc-harness timeline TRACE.json [-o PICTURE.svg]
    rpc-harness bench [--quick] [--json PATH] [--scenario NAME]
    rpc-harness list
    rpc-harness --version

Scenarios come from the registry (the ``rpc_harness.scenarios`` entry-point
group), built-in and installed alike. Exit codes: 0 all good, 1 a scenario
failed (or a replay reproduced its failure), 2 bad input, 130 interrupted.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import NoReturn

from rpc_harness import scenario as registry
from rpc_harness.errors import (
    FaultPlanError,
    MissingExtra,
    ReplayError,
    ScenarioError,
    Unsupported,
    UsageError,
    WorldSpecError,
    clip,
)
from rpc_harness.extras import EXTRA_OF, installed
from rpc_harness.faults import FaultPlan
from rpc_harness.interrupts import terminate_as_interrupt
from rpc_harness.options import (
    COMMAND_LINE_DEADLINE,
    DEFAULT_DEADLINE,
    WorldOptions,
    add_option,
    default_bringup,
    whole_argument,
)
from rpc_harness.progress import ProgressBar
from rpc_harness.repro import Repro, decode, scenario_call
from rpc_harness.scenario import Scenario, ScenarioReport
from rpc_harness.schedule import parse as parse_schedule
from rpc_harness.seeds import fresh_seed
from rpc_harness.spec import check_waits_can_end, check_world_size

from .bench import SECTIONS

INPUT_ERRORS = (MissingExtra, WorldSpecError, FaultPlanError, ReplayError, ScenarioError, UsageError, Unsupported)
PROGRESS_MODES = ("auto", "live", "lines", "off")
DEFAULT_BENCH_SVG = "rpc-harness-out/bringup.svg"


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.error(f"no command given; one of {', '.join(args.commands)}")
    except SystemExit as stop:  # argparse has said what was wrong (or printed --help)
        return int(stop.code or 0)
    terminate_as_interrupt()  # SIGTERM unwinds like Ctrl-C: ranks killed, world folders removed
    try:
        return args.func(args)
    except INPUT_ERRORS as error:
        print(f"rpc-harness: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rpc-harness: interrupted; every rank was stopped", file=sys.stderr)
        return 130


def _versions() -> str:
    """What a bug report needs: this harness's version, torch's and Python's."""
    return (f"rpc-harness {_installed('rpc-harness')} (torch {_installed('torch')}, "
            f"Python {platform.python_version()})")


def _installed(distribution: str) -> str:
    # Built with every parser: a source tree run without installing must not fail on it.
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "(not installed)"


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose bad-input message is one line, as every
    other refusal of this CLI is (argparse prints its whole usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="rpc-harness", description=__doc__.split("\n\n")[0].replace("``", ""))
    parser.add_argument("--version", action="version", version=_versions())
    # Not required here but in main: argparse would say "required: command"
    # before naming an option it does not know (rpc-harness --bogus).
    sub = parser.add_subparsers(dest="command")

    run = sub.add_parser("run", help="run scenarios against their single-process baselines")
    run.add_argument("scenarios", nargs="*", default=["all"],
                     help="registered scenario names, or all (default); `rpc-harness list` shows them")
    run.add_argument("--world-size", "-n", type=whole_argument, action="append",
                     help="world size; repeat for several (default: each scenario's)")
    add_option(run, "seed")
    add_option(run, "faults", help="run only this fault plan, e.g. kill:trainer2@trainer.step#3 "
                                   "(default: a clean world plus each scenario's fault checks)")
    run.add_argument("--no-fault-checks", action="store_true",
                     help="run only the clean world of each scenario, not its fault checks")
    run.add_argument("--steps", type=whole_argument, default=None,
                     help="training budget in the scenario's own unit, at least what its judge needs "
                          "(`rpc-harness list` names both); the summary counts optimizer steps")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a scenario config field")
    add_option(run, "deadline", default=COMMAND_LINE_DEADLINE,
               help=f"deadline of each world in seconds (default: {COMMAND_LINE_DEADLINE:g}, for whole "
                    f"training runs; a test's world has {DEFAULT_DEADLINE:g})")
    add_option(run, "fuzz", default=0.0)
    add_option(run, "devices", help="where the scenarios' models train: cpu (the default), cuda (each rank's "
                                    "model on its GPU, cuda:(rank mod count), judged against the CPU baseline "
                                    "with GPU tolerances), or a list cuda:0,cuda:1 that the ranks take in turn; "
                                    "refused with exit 2 where CUDA is not available")
    add_option(run, "process_group", help="a default process group in every world besides the scenario's own "
                                          "needs: gloo or nccl (default: none)")
    add_option(run, "rpc", help="no: worlds without an RPC agent, for scenarios of collectives only (with "
                                "--process-group); the default is yes")
    add_option(run, "schedule", default="free",
               help="the order of each world's steps: free (the operating system's, the default), controlled "
                    "(random), pct or pct:D, dpor, or replay:... ; with --repeat N a controlled run explores N "
                    "schedules (dpor: every schedule that can differ, at most N), stops at the first that fails "
                    "and shrinks it")
    run.add_argument("--repeat", type=whole_argument, default=1, metavar="N",
                     help="run every world N times, with seeds S, S+1, ..., and count how many failed or hung "
                          "(a soak test of the fault contracts)")
    run.add_argument("--out", default=None, help="folder for traces, timelines, curves and a JSON summary of every world")
    run.add_argument("--progress", choices=PROGRESS_MODES, default="auto",
                     help="progress bars: redrawn in place (live), a line per quarter (lines), none (off); "
                          "auto: live on a terminal, lines otherwise")
    run.set_defaults(func=cmd_run)

    replay = sub.add_parser("replay", help="run a failing world again from its repro token")
    replay.add_argument("token", help="the token printed after 'rpc-harness replay'")
    add_option(replay, "deadline", default=COMMAND_LINE_DEADLINE,
               help=f"deadline of the world in seconds (default: {COMMAND_LINE_DEADLINE:g}, as for run: a "
                    "token may hold a whole training run; the token does not carry the deadline it failed under, its "
                    "printed line does)")
    replay.add_argument("--out", default=None, help="folder for the trace, timeline and curves")
    replay.add_argument("--progress", choices=PROGRESS_MODES, default="auto", help="progress bar style, as for run")
    replay.set_defaults(func=cmd_replay)

    timeline = sub.add_parser("timeline", help="draw a world's Chrome trace as an SVG timeline")
    timeline.add_argument("trace", help="a .trace.json written by rpc-harness or its pytest plugin")
    timeline.add_argument("-o", "--output", default=None,
                          help="the SVG to write (default: the trace's name, ending .timeline.svg)")
    timeline.set_defaults(func=cmd_timeline)

    bench = sub.add_parser("bench", help="measure world bring-up, failure latency, failpoint overhead, scenarios")
    bench.add_argument("--quick", action="store_true", help="fewer repetitions and sizes (a smoke run)")
    bench.add_argument("--json", default="rpc-harness-out/bench.json", help="where to write the figures as JSON")
    bench.add_argument("--repeat", type=whole_argument, default=None, help="repetitions per harness measurement")
    bench.add_argument("--scenario", action="append", default=None,
                       help="measure this scenario (repeatable; default: every registered one)")
    bench.add_argument("--only", action="append", default=None, choices=SECTIONS,
                       help="measure only this section (repeatable; default: all)")
    bench.add_argument("--svg", default=None,
                       help=f"where to draw the bring-up growth curve (default: {DEFAULT_BENCH_SVG}; "
                            "not with --device)")
    add_option(bench, "devices", help="cuda (or cuda:N): measure only the GPU against the CPU on this machine "
                                      "(a 4-rank world's bring-up, a 1 MB rpc_sync round trip along the device "
                                      "maps, each scenario's steps per second), not with --only or --svg; cpu: "
                                      "the whole bench, as without it; refused with exit 2 where CUDA is not "
                                      "available")
    bench.set_defaults(func=cmd_bench)

    listing = sub.add_parser("list", help="the registered scenarios: sizes, budget, failpoints, config")
    listing.set_defaults(func=cmd_list)
    parser.set_defaults(commands=tuple(sub.choices))  # for main's "no command given"
    return parser


# -- run --------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """One world of a run: a scenario at a size, under a fault plan."""

    scenario: Scenario
    repro: Repro
    label: str  # "clean", or what the fault check is ("kill", "slow")

    @property
    def stem(self) -> str:
        suffix = "" if self.label == "clean" else f"-{self.label}"
        return f"{self.scenario.name}-w{self.repro.world_size}{suffix}"


def cmd_run(args: argparse.Namespace) -> int:
    seed = args.seed if args.seed is not None else fresh_seed()
    check_run_input(args)  # what needs no scenario, before loading one imports torch
    jobs = plan_jobs(args, seed)  # every input checked before any world starts
    check_devices_here(args.device, fuzz=args.fuzz, jobs=jobs)
    if args.out:
        check_writable_folder(args.out, "--out")
    names = ", ".join(dict.fromkeys(job.scenario.name for job in jobs))
    print(f"rpc-harness run: scenarios {names}, seed {seed}, {len(jobs)} world(s)")
    if args.repeat > 1 and parse_schedule(args.schedule).controlled:
        return explore_jobs(jobs, args)
    rows = []
    for job in jobs:
        report = run_job(job, deadline=args.deadline, progress=args.progress)
        rows.append((job, report))
        print_outcome(report, job)
        if args.out:
            write_outputs(args.out, report, job)
    print()
    print(summary_table(rows) if args.repeat == 1 else repeat_table(rows))
    if args.out:
        write_summary(args.out, rows, seed)
        print(f"\nwrote traces, timelines, curves and summary.json to {args.out}")
    return 0 if all(report.ok for _, report in rows) else 1


def explore_jobs(jobs: Sequence[Job], args: argparse.Namespace) -> int:
    """``--schedule controlled --repeat N``: for each scenario, size and plan,
    try N schedules (seeds S, S+1, ...), stop at the first that fails its
    checks, shrink it to the fewest preemptions, print it and its replay."""
    from rpc_harness.explore import Attempt, explore_runs, world_signature

    groups: dict[tuple, Job] = {}
    for job in jobs:
        groups.setdefault((job.scenario.name, job.repro.world_size, job.label), job)
    failed = 0
    for first in groups.values():
        def run(seed: int, schedule: str, first: Job = first) -> Attempt:
            options = dict(first.repro.options, schedule=schedule)
            job = dataclasses.replace(first, repro=dataclasses.replace(first.repro, seed=seed, options=options))
            report = run_job(job, deadline=args.deadline, progress=args.progress)
            print_outcome(report, job)
            world = report.world
            signature = (report.contract_ok, report.outcome_ok, bool(report.mismatches)) + (
                world_signature(world) if world is not None else ())
            return Attempt(seed, schedule, world, not report.ok, signature if not report.ok else (), report)  # type: ignore[arg-type]

        found = explore_runs(run, seed=first.repro.seed, schedules=args.repeat, strategy=args.schedule)
        print()
        print(f"{first.scenario.name} world {first.repro.world_size} ({first.label}): " + found.summary()[0])
        if found.found is None:
            print("\n".join(found.summary()[1:]))
            continue
        failed += 1
        best = found.shrunk or found.found
        replay = dataclasses.replace(first.repro, seed=best.seed,
                                     options=dict(first.repro.options, schedule=found.replay_schedule))
        found.replay = [replay.command(args.deadline), scenario_call(replay)]
        print("\n".join(found.summary()[1:]))
    return 1 if failed else 0


def check_run_input(args: argparse.Namespace) -> None:
    """Refuse the input of ``run`` that can be judged without a scenario:
    loading one imports torch (seconds, 15 under load), and ``-n 0`` must
    not wait for that. What depends on the scenario (its least world size,
    its config fields, its budget's minimum, its worker names) is checked
    once it is loaded, still before any process starts."""
    if args.repeat < 1:
        raise UsageError(f"--repeat {args.repeat}: use a whole number >= 1")
    for size in args.world_size or ():
        check_world_size(size, where=f"-n {size}",
                         needs="a world has 1 rank or more (each scenario's least: `rpc-harness list`)")
    if args.steps is not None and args.steps < 1:
        raise WorldSpecError(f"--steps {args.steps}: the training budget must be a whole number >= 1")
    for pair in args.set:
        key, sep, _ = pair.partition("=")
        if not sep or not key:
            raise WorldSpecError(f"--set {clip(pair)}: use KEY=VALUE")
    if args.faults is not None and not args.faults:
        # Without --faults, run checks each scenario's fault contracts; an
        # empty plan would run the clean world alone, under the label
        # "faults", and drop those checks without a word.
        raise UsageError("--faults: the plan is empty; give a fault plan, e.g. kill:trainer2@trainer.step#3, or "
                         "--no-fault-checks to run only the clean world of each scenario")
    known = registry.registry()
    for name in args.scenarios:
        if name != "all" and name not in known:
            raise ScenarioError(f"unknown scenario {clip(name)}; registered scenarios: "
                                f"{', '.join(sorted(known)) or 'none: is rpc-harness installed (pip install -e .)?'}")


def check_devices_here(devices: Sequence[str] | None, *, fuzz: float = 0.0, jobs: Sequence[Job] = (),
                       where: str = "--device") -> None:
    """``--device cuda`` (or a token's devices, ``where`` says which) on a
    machine that cannot run it (no CUDA, an index past its GPUs, or a plan
    that needs torch's faulty agent): refused, one line, before any world
    starts, by the options' own checks of this machine (``WorldOptions.check_here``)."""
    if not devices:
        return
    for options in [{**job.repro.options, "fuzz": fuzz} for job in jobs] or [{"fuzz": fuzz}]:
        checked = WorldOptions.from_values({**options, "devices": devices}, where=where)
        checked.check_here(where)


def plan_jobs(args: argparse.Namespace, seed: int) -> list[Job]:
    """Every world the command line asks for, validated: scenario names,
    sizes, config overrides, fault plans (options were read by argparse)."""
    jobs = []
    for sc in scenarios_named(args.scenarios):
        registry.check_rpc_option(sc, getattr(args, "rpc", None), where="--rpc no")
        if args.device and not registry.runs_on_devices(sc):
            if "all" not in args.scenarios and sc.name in args.scenarios:
                registry.check_devices_option(sc, args.device, where="--device")
            print(f"  {sc.name}: left out under --device (it trains on the CPU only)", flush=True)
            continue
        overrides = registry.parse_overrides(sc, args.set, args.steps)
        config = registry.make_config(sc, overrides)
        for size in args.world_size or [sc.default_world_size]:
            names = registry.world_names(sc, size, where=f"-n {size}")
            if args.faults is not None:
                plans = {"faults": str(args.faults)}
            else:
                plans = {"clean": ""}
                if not args.no_fault_checks:
                    plans.update(fault_checks(sc, size, config))
            for label, text in plans.items():
                plan = FaultPlan.parse(text, where="--faults")
                plan.validate(names, failpoints=sc.failpoints, where="--faults")
                check_waits_can_end(plan, bringup=default_bringup(size), deadline=args.deadline, where="--faults")
                for repeat in range(args.repeat):
                    jobs.append(_job(sc, args, size, names, config, overrides, plan, label, seed + repeat))
    return jobs


def _job(sc: Scenario, args: argparse.Namespace, size: int, names: tuple[str, ...], config: object,
         overrides: dict, plan: FaultPlan, label: str, seed: int) -> Job:
    """One world of the run, its config checked at this size and seed."""
    registry.validate_config(sc, config, size, seed, where=f"{sc.name} at world size {size}")
    options = {"faults": plan, "fuzz": args.fuzz, "schedule": args.schedule}
    if getattr(args, "device", None):  # a CPU run's tokens stay as they were
        options["devices"] = args.device
    for name in ("process_group", "rpc"):  # given: carried by the tokens; left out: the scenario's own
        if getattr(args, name, None) is not None:
            options[name] = getattr(args, name)
    repro = Repro(world_size=size, seed=seed, scenario=sc.name, names=names, config=overrides, options=options)
    return Job(sc, repro, label)


def fault_checks(sc: Scenario, world_size: int, config: object) -> dict[str, str]:
    """The fault plans a scenario declares for its contracts at this size, by label."""
    return dict(sc.fault_checks(world_size, config))


def scenarios_named(requested: Sequence[str]) -> list[Scenario]:
    """The scenarios asked for, ``all`` meaning every registered one."""
    out: dict[str, Scenario] = {}
    for name in requested:
        for one in registry.available() if name == "all" else [name]:
            if one not in out:
                out[one] = registry.load(one)
    if not out:
        raise UsageError("no scenario is registered: is rpc-harness installed (pip install -e .)?")
    return list(out.values())


def run_job(job: Job, *, deadline: float, progress: str = "auto") -> ScenarioReport:
    """Run one world of the run, with a progress bar."""
    repro = job.repro
    what = f", faults {repro.faults}" if repro.faults else ""
    if repro.options.get("devices"):
        what += f", devices {','.join(repro.options['devices'])}"
    print(f"  running {job.scenario.name} (world {repro.world_size}, seed {repro.seed}{what}) ...", flush=True)
    bar = None
    if progress != "off":
        live = {"live": True, "lines": False}.get(progress)
        label = f"{job.scenario.name} w{repro.world_size}" + ("" if job.label == "clean" else f" {job.label}")
        bar = ProgressBar(label, live=live, after_world="comparing with the single-process baseline")
    try:
        report = registry.run_scenario(
            job.scenario, repro.config, world_size=repro.world_size, on_progress=bar, deadline=deadline,
            **repro.world_options(),  # every option the token carries
        )
    except BaseException:
        if bar is not None:
            bar.finish("interrupted")
        raise
    if bar is not None:
        bar.finish("ok" if report.ok else "FAILED")
    return report


def print_outcome(report: ScenarioReport, job: Job) -> None:
    mark = "ok" if report.ok else "FAILED"
    # A world that left nothing to compare (a killed server's) must not read as a perfect match.
    grads = (f"max grad diff {report.max_grad_diff:.2g} over {report.grads_checked} tensors"
             if report.grads_checked else "no gradients compared")
    print(f"  {mark}: {report.scenario} world {report.world_size} ({job.label}): {report.metric_name} "
          f"{report.metric:.4g} after {report.steps} optimizer steps, {grads}, {report.duration:.1f}s")
    if report.world is not None and report.world.schedule_note:
        digest = f", digest {report.world.schedule_digest}" if report.world.schedule else ""
        print(f"    schedule: {report.world.schedule_note.splitlines()[0]}{digest}")
    if report.ok:
        if report.contract_note:
            print(f"    contract: {report.contract_note.splitlines()[0]}")
        if math.isnan(report.metric):  # ok on the contract alone: say what was not judged
            print(f"    outcome: {(report.outcome_note or 'no value').splitlines()[0]}")
        return
    for problem in report.problems():  # the contract's first, when it failed
        print(f"    {problem.splitlines()[0]}")
    world = report.world
    if world is not None and (world.failures or world.timed_out):  # the ranks' side of it
        print("\n".join("    " + line for line in world.report(replay=False).splitlines()))
    print(f"  Replay: {report.replay}")
    if report.python_replay:
        print(f"      or: {report.python_replay}")


def summary_table(rows: Sequence[tuple[Job, ScenarioReport]]) -> str:
    """The run's table: one row per world, with the fault check it ran."""
    # "optimizer steps": what the judge counted, not the --steps budget (epochs, episodes or batches).
    header = ("scenario", "world", "faults", "optimizer steps", "outcome metric", "max grad diff", "grads", "time",
              "result")
    table = [header]
    notes = []
    for job, r in rows:
        metric = f"{r.metric_name} {r.metric:.4g}"
        if math.isnan(r.metric):
            notes.append(nan_note(len(notes) + 1, job, r))
            metric += f" [{len(notes)}]"
        table.append((
            r.scenario, str(r.world_size), job.label if not job.repro.faults else f"{job.label}: {job.repro.faults}",
            str(r.steps), metric, f"{r.max_grad_diff:.2g}" if r.grads_checked else "-",
            str(r.grads_checked),
            f"{r.duration:.1f}s", "ok" if r.ok else "FAILED",
        ))
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines + ([""] + notes if notes else []))


def nan_note(number: int, job: Job, r: ScenarioReport) -> str:
    """Why a row's metric is nan and what its verdict rests on. A judge
    leaves the metric nan when the world left nothing to train on or
    compare: a killed server's world (rnn, ps) returns no records, so no
    gradient is compared and no outcome judged, and "ok" there means the
    fault contract held, nothing more."""
    why = (r.outcome_note or "the judge gave no value").splitlines()[0]
    if r.ok:
        checked = ("its fault contract alone (no gradient compared, no outcome judged)" if not r.grads_checked
                   else f"its fault contract and {r.grads_checked} gradient tensors compared")
        verdict = f"ok rests on {checked}; the contract held: {r.contract_note.splitlines()[0]}"
    else:
        problems = r.problems()
        verdict = "FAILED" + (f": {problems[0].splitlines()[0]}" if problems else "")
    return (f"[{number}] {r.scenario} world {r.world_size} ({job.label}): {r.metric_name} is nan, {why}. "
            f"{verdict}")


def repeat_table(rows: Sequence[tuple[Job, ScenarioReport]]) -> str:
    """A soak run's table: per scenario, size and plan, how many worlds were
    ok, failed their checks, or hung."""
    groups: dict[tuple, list[ScenarioReport]] = {}
    for job, report in rows:
        groups.setdefault((job.scenario.name, job.repro.world_size, job.label, job.repro.faults), []).append(report)
    header = ("scenario", "world", "faults", "worlds", "ok", "failed", "hung", "median time")
    table = [header]
    for (scenario, size, label, faults), reports in groups.items():
        hung = sum(1 for r in reports if r.world is not None and r.world.timed_out)
        ok = sum(1 for r in reports if r.ok)
        times = sorted(r.duration for r in reports)
        table.append((scenario, str(size), label if not faults else f"{label}: {faults}", str(len(reports)),
                      str(ok), str(len(reports) - ok - hung), str(hung), f"{times[len(times) // 2]:.1f}s"))
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def check_writable_folder(folder: str, option: str) -> None:
    """Create ``folder`` and prove it can be written, before any work is done."""
    try:
        os.makedirs(folder, exist_ok=True)
        probe = os.path.join(folder, f".rpc-harness-probe-{os.getpid()}")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as error:
        raise UsageError(f"{option} {clip(folder)}: cannot write there ({error.strerror or error})") from None


def check_writable_file(path: str, option: str) -> None:
    """The folder of ``path`` exists (or can be made) and ``path`` can be written."""
    check_writable_folder(os.path.dirname(os.path.abspath(path)), option)
    if os.path.isdir(path):
        raise UsageError(f"{option} {clip(path)}: is a folder, not a file")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise UsageError(f"{option} {clip(path)}: cannot write there (permission denied)")


def write_outputs(folder: str, report: ScenarioReport, job: Job) -> None:
    from rpc_harness.plots import write_curves
    from rpc_harness.timeline import write_timeline
    from rpc_harness.trace import write_trace

    stem = os.path.join(folder, job.stem)
    title = f"{report.scenario}, world {report.world_size}, seed {report.seed}" + (
        f", {job.repro.faults}" if job.repro.faults else "")
    if report.world is not None:
        trace = write_trace(report.world, stem + ".trace.json")
        write_timeline(trace, stem + ".timeline.svg", title=title)
    series = {"distributed": list(report.history)}
    if report.baseline_history:
        series["baseline"] = list(report.baseline_history)
    write_curves(stem + ".curves.svg", title, report.metric_name, series)


def write_summary(folder: str, rows: Sequence[tuple[Job, ScenarioReport]], seed: int) -> None:
    worlds = [dict(registry.summary(report), check=job.label, faults=job.repro.faults) for job, report in rows]
    with open(os.path.join(folder, "summary.json"), "w") as file:
        json.dump({"seed": seed, "worlds": worlds}, file, indent=2, default=float, allow_nan=False)


# -- replay -----------------------------------------------------------------------


def cmd_replay(args: argparse.Namespace) -> int:
    if args.token.isdigit():
        raise UsageError(
            f"{args.token} is a seed, not a repro token: run it with `rpc-harness run SCENARIO --seed "
            f"{args.token}` (and the same -n, --faults, --steps), or in pytest with --rpc-seed={args.token}"
        )
    repro = decode(args.token)
    if args.out:
        check_writable_folder(args.out, "--out")
    if repro.entry is not None:
        return _replay_entry(repro, args.deadline)
    sc = registry.load(repro.scenario or "")
    expected = registry.world_names(sc, repro.world_size, where="repro token")
    if repro.names and tuple(repro.names) != expected:
        raise ReplayError(
            f"the token's worker names {list(repro.names)} are not what {sc.name} gives a world of "
            f"{repro.world_size} today ({list(expected)}): the scenario changed since the token was made"
        )
    check_devices_here(repro.options.get("devices"), fuzz=repro.fuzz, jobs=[Job(sc, repro, "replay")],
                       where="repro token field 'dev'")
    print(f"rpc-harness replay: {repro.scenario}, world {repro.world_size}, seed {repro.seed}"
          + (f", faults {repro.faults}" if repro.faults else "") + (f", fuzz {repro.fuzz}" if repro.fuzz else ""))
    job = Job(sc, repro, "replay")
    report = run_job(job, deadline=args.deadline, progress=args.progress)
    print_outcome(report, job)
    if args.out:
        write_outputs(args.out, report, job)
    if report.ok:
        print("replay: the world did NOT fail this time: the failure does not reproduce from this token "
              "(fixed, or it depended on timing outside the seed)")
        return 0
    print("replay: the failure reproduced")
    return 1


def _replay_entry(repro: Repro, deadline: float) -> int:
    from rpc_harness import preload, run_world, spawn

    # The entry's module is imported the way the test run that printed the
    # token imported it: from its folder, or from here.
    for folder in (repro.path, os.getcwd()):
        if folder and folder not in sys.path:
            sys.path.insert(0, folder)
    import_first(repro.modules)
    preload(*(module for module, _ in repro.modules))  # the ranks get them as the original ranks did
    common = dict(repro.world_options(), deadline=deadline, kwargs=repro.kwargs, repro=repro.command(deadline),
                  check=False)
    if repro.spawned:
        result = spawn(repro.entry or "", args=repro.args, nprocs=repro.world_size, names=repro.names or None,
                       **common)
    elif repro.reused:
        # An entry of a reused world: replayed in one, as the first entry of
        # a live world, whose rules are checked after it (in a fresh world a
        # broken rule passed, and read as a flaky test).
        from rpc_harness._parent.live import run_in_reused_world
        from rpc_harness.spec import make_spec

        del common["check"]
        spec = make_spec(repro.entry or "", repro.world_size, names=repro.names or None, args=repro.args,
                         where="repro token", **common)
        result = run_in_reused_world(spec, "the token's entry")
    else:
        result = run_world(repro.entry or "", names=repro.names or None, world_size=repro.world_size,
                           args=repro.args, **common)
    print(result.report(replay=not result.ok))  # a world that did not fail has nothing to replay
    if result.ok:
        print("replay: the world did NOT fail this time: the failure does not reproduce from this token"
              + (" (its entry ran first in a reused world, as the pytest line replays it alone; one that needs "
                 "what earlier entries left is replayed by the pytest line that runs them before it)"
                 if repro.reused else ""))
        return 0
    print("replay: the failure reproduced")
    return 1


def import_first(modules: Sequence[tuple[str, str]]) -> None:
    """Import what the run that printed a token had imported before its world
    (its test module, whose import-time setup the program may need), in
    order, before any process starts; refuse, naming the module, if one fails."""
    import importlib

    for module, folder in modules:
        if folder and folder not in sys.path:
            sys.path.insert(0, folder)
        try:
            importlib.import_module(module)
        except (Exception, SystemExit) as error:  # noqa: BLE001 - a module's import may do anything, exit too
            what = f"exit {error.code}" if isinstance(error, SystemExit) else f"{type(error).__name__}: {error}"
            raise ReplayError(
                f"the world of this token ran after importing {module} (for its import-time setup), which cannot "
                f"be imported here from {folder or os.getcwd()} ({what}); run the pytest line that printed the "
                "token instead"
            ) from None


# -- timeline ---------------------------------------------------------------------


def cmd_timeline(args: argparse.Namespace) -> int:
    from rpc_harness.timeline import timed_events, write_timeline

    try:
        with open(args.trace, encoding="utf-8") as file:
            document = json.load(file)
    except OSError as error:
        raise UsageError(f"cannot read the trace {args.trace!r}: {error.strerror or error}") from None
    except ValueError as error:
        raise UsageError(f"{args.trace!r} is not JSON: {error}") from None
    events = document.get("traceEvents") if isinstance(document, dict) else document
    if not isinstance(events, list):
        raise UsageError(f"{args.trace!r} is not a Chrome trace: no list of traceEvents")
    if not timed_events(document):
        raise UsageError(f"{args.trace!r} has nothing to draw: no event with a pid, a time (ts) and a kind the "
                         "timeline shows (ph X, b, e, i, I or C)")
    stem = args.trace.removesuffix(".json").removesuffix(".trace")
    output = args.output or stem + ".timeline.svg"
    check_writable_file(output, "-o")
    write_timeline(document, output, title=os.path.basename(stem))
    print(f"wrote {output}")
    return 0


# -- bench and list -------------------------------------------------------------------


def cmd_bench(args: argparse.Namespace) -> int:
    from .bench import run_bench

    if args.repeat is not None and args.repeat < 1:
        raise UsageError(f"--repeat {args.repeat}: use a whole number >= 1")
    check_devices_here(args.device)  # before any world, one line
    if args.device:  # it measures only the device against the CPU: no sections, no bring-up curve
        for given, option in ((args.only, "--only"), (args.svg, "--svg")):
            if given:
                raise UsageError(f"{option} with --device: bench --device measures only the device against "
                                 f"the CPU (no sections, no bring-up curve); leave {option} out")
    svg = None if args.device else (args.svg or DEFAULT_BENCH_SVG)
    scenarios = scenarios_named(args.scenario or ["all"])
    for path, option in ((args.json, "--json"), (svg, "--svg")):
        if path:
            check_writable_file(path, option)
    return run_bench(quick=args.quick, json_path=args.json, repeat=args.repeat, scenarios=scenarios,
                     only=tuple(args.only or SECTIONS), svg_path=svg, devices=args.device or ())


def cmd_list(args: argparse.Namespace) -> int:
    for sc in scenarios_named(["all"]):
        fields = ", ".join(f"{f.name}={f.default!r}" for f in dataclasses.fields(sc.config_type))
        checks = fault_checks(sc, sc.default_world_size, sc.config_type())
        print(f"{sc.name}: {sc.summary}")
        print(f"    world sizes {sc.min_world_size}.. (default {sc.default_world_size}): "
              f"{', '.join(sc.names(sc.default_world_size))}")
        least = f" (at least {sc.min_steps}: its judge needs them)" if sc.min_steps > 1 else ""
        print(f"    --steps sets {sc.steps_field}{least}; metric: {sc.metric_name}")
        print(f"    failpoints: {', '.join(sc.failpoints)}")
        for package in getattr(sc, "needs", ()):  # a scenario of the Scenario protocol alone may not say
            extra = EXTRA_OF.get(package.split(".", 1)[0])
            where = f"the [{extra}] extra" if extra else "a package of its own"
            print(f"    needs {package} ({where}): " + (
                "installed" if installed(package) else f"not installed: pip install 'rpc-harness[{extra}]'"
                if extra else "not installed"))
        if checks:
            print(f"    fault checks: {'; '.join(f'{k}: {v}' for k, v in checks.items())}")
        print(f"    config: {fields}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
