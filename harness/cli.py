"""The ``rpc-harness`` command: run scenarios, replay failures, benchmark.

    rpc-harness run [rl|rnn|ps|all ...] [--world-size N] [--seed S] [--faults PLAN] ...
    rpc-harness replay TOKEN
    rpc-harness timeline TRACE.json [-o PICTURE.svg]
    rpc-harness bench [--quick] [--json PATH]

Exit codes: 0 all good, 1 a scenario failed (or a replay reproduced its
failure), 2 bad usage.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from .errors import FaultPlanError, HarnessError, ReplayError, WorldSpecError
from .progress import ProgressBar
from .repro import Repro, decode
from .seeds import fresh_seed

SCENARIO_ORDER = ("rl", "rnn", "ps")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (WorldSpecError, FaultPlanError, ReplayError, UsageError) as error:
        print(f"rpc-harness: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rpc-harness: interrupted; every rank was stopped", file=sys.stderr)
        return 130


class UsageError(HarnessError, ValueError):
    """Bad command-line input that argparse cannot catch by itself."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rpc-harness", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run scenarios against their single-process baselines")
    run.add_argument("scenarios", nargs="*", default=["all"], help="rl, rnn, ps or all (default: all)")
    run.add_argument("--world-size", "-n", type=int, action="append", help="world size; repeat for several (default: each scenario's)")
    run.add_argument("--seed", type=int, default=None, help="root seed (default: random, printed)")
    run.add_argument("--faults", default="", help="fault plan, e.g. kill:trainer2@trainer.step#3")
    run.add_argument("--steps", type=int, default=None, help="training budget: episodes (rl), epochs (rnn), batches per trainer (ps)")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a scenario config field")
    run.add_argument("--deadline", type=float, default=300.0, help="deadline of each world in seconds (default: 300)")
    run.add_argument("--fuzz", type=float, default=0.0, help="schedule fuzzing: largest seeded delay in seconds (default: off)")
    run.add_argument("--out", default=None, help="folder for traces, timelines, curves and a JSON summary of every world")
    run.add_argument("--progress", choices=("auto", "live", "lines", "off"), default="auto",
                     help="progress bars: redrawn in place (live), a line per quarter (lines), none (off); "
                          "auto: live on a terminal, lines otherwise")
    run.set_defaults(func=cmd_run)

    replay = sub.add_parser("replay", help="run a failing world again from its repro token")
    replay.add_argument("token", help="the token printed after 'rpc-harness replay'")
    replay.add_argument("--deadline", type=float, default=300.0, help="deadline of the world in seconds")
    replay.add_argument("--out", default=None, help="folder for the trace, timeline and curves")
    replay.add_argument("--progress", choices=("auto", "live", "lines", "off"), default="auto",
                        help="progress bar style, as for run")
    replay.set_defaults(func=cmd_replay)

    timeline = sub.add_parser("timeline", help="draw a world's Chrome trace as an SVG timeline")
    timeline.add_argument("trace", help="a .trace.json written by rpc-harness or its pytest plugin")
    timeline.add_argument("-o", "--output", default=None,
                          help="the SVG to write (default: the trace's name, ending .timeline.svg)")
    timeline.set_defaults(func=cmd_timeline)

    bench = sub.add_parser("bench", help="measure world bring-up, failure latency, failpoint overhead, scenarios")
    bench.add_argument("--quick", action="store_true", help="fewer repetitions and sizes (a smoke run)")
    bench.add_argument("--json", default="rpc-harness-out/bench.json", help="where to write the figures as JSON")
    bench.add_argument("--repeat", type=int, default=None, help="repetitions per harness measurement")
    bench.set_defaults(func=cmd_bench)
    return parser


# -- run --------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    names = _scenario_names(args.scenarios)
    seed = args.seed if args.seed is not None else fresh_seed()
    print(f"rpc-harness run: scenarios {', '.join(names)}, seed {seed}")
    rows = []
    failed = False
    for name in names:
        module = _load(name)
        overrides = _overrides(module, args.set, args.steps)
        sizes = args.world_size or [getattr(module, "DEFAULT_WORLD_SIZE", 3)]
        for size in sizes:
            repro = Repro(world_size=size, seed=seed, scenario=name, names=tuple(module.names(size)),
                          faults=args.faults, fuzz=args.fuzz, config=overrides)
            report = run_scenario(module, repro, deadline=args.deadline, progress=args.progress)
            rows.append(report)
            failed |= not report.ok
            _print_outcome(report, repro)
            if args.out:
                _write_outputs(args.out, report, repro)
    print()
    print(summary_table(rows))
    if args.out:
        _write_summary(args.out, rows, seed)
        print(f"\nwrote traces, timelines, curves and summary.json to {args.out}")
    return 1 if failed else 0


def run_scenario(module: Any, repro: Repro, *, deadline: float, progress: str = "auto") -> Any:
    """Run one scenario world described by ``repro``, with a progress bar."""
    config = _config(module, repro.config)
    label = f"{module.NAME} (world {repro.world_size}, seed {repro.seed}{', faults ' + repro.faults if repro.faults else ''})"
    print(f"  running {label} ...", flush=True)
    bar = None
    if progress != "off":
        live = {"live": True, "lines": False}.get(progress)
        bar = ProgressBar(f"{module.NAME} w{repro.world_size}", live=live,
                          after_world="comparing with the single-process baseline")
    started = time.monotonic()
    try:
        report = module.run(
            config,
            world_size=repro.world_size,
            seed=repro.seed,
            faults=repro.faults or None,
            deadline=deadline,
            fuzz=repro.fuzz,
            repro=repro.command(),
            on_progress=bar,
        )
    except BaseException:
        if bar is not None:
            bar.finish("interrupted")
        raise
    if not report.duration:
        report.duration = time.monotonic() - started
    if bar is not None:
        bar.finish("ok" if report.ok else "FAILED")
    return report


def _print_outcome(report: Any, repro: Repro) -> None:
    mark = "ok" if report.ok else "FAILED"
    print(f"  {mark}: {report.scenario} world {report.world_size}: {report.metric_name} {report.metric:.4g} "
          f"after {report.steps} steps, max grad diff {report.max_grad_diff:.2g} over {report.grads_checked} tensors, "
          f"{report.duration:.1f}s")
    if report.contract_note:
        print(f"    {report.contract_note}")
    if not report.ok:
        for problem in report.problems():
            print(f"    {problem}")
        if report.world is not None and not report.world.ok:
            print("\n".join("    " + line for line in report.world.report().splitlines()))
        print(f"  Replay: {repro.command()}")


def summary_table(reports: Sequence[Any]) -> str:
    """The run's table: scenario, world size, steps, outcome, grad diff, time."""
    header = ("scenario", "world", "steps", "outcome metric", "max grad diff", "grads", "time", "result")
    rows = [header]
    for r in reports:
        rows.append((
            r.scenario,
            str(r.world_size),
            str(r.steps),
            f"{r.metric_name} {r.metric:.4g}",
            f"{r.max_grad_diff:.2g}",
            str(r.grads_checked),
            f"{r.duration:.1f}s",
            "ok" if r.ok else "FAILED",
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _write_outputs(folder: str, report: Any, repro: Repro) -> None:
    from .plots import write_curves
    from .timeline import write_timeline
    from .trace import write_trace

    os.makedirs(folder, exist_ok=True)
    stem = os.path.join(folder, f"{report.scenario}-w{report.world_size}")
    if report.world is not None:
        trace = write_trace(report.world, stem + ".trace.json")
        write_timeline(trace, stem + ".timeline.svg",
                       title=f"{report.scenario}, world {report.world_size}, seed {repro.seed}")
    series = {"distributed": list(report.history)}
    if report.baseline_history:
        series["baseline"] = list(report.baseline_history)
    write_curves(stem + ".curves.svg", f"{report.scenario}, world {report.world_size}, seed {repro.seed}",
                 report.metric_name, series)


def _write_summary(folder: str, reports: Sequence[Any], seed: int) -> None:
    summary = {
        "seed": seed,
        "worlds": [
            {
                "scenario": r.scenario, "world_size": r.world_size, "steps": r.steps,
                "metric_name": r.metric_name, "metric": r.metric, "max_grad_diff": r.max_grad_diff,
                "grads_checked": r.grads_checked, "duration": r.duration, "ok": r.ok,
                "problems": r.problems(), "history": list(r.history),
                "baseline_history": list(r.baseline_history),
            }
            for r in reports
        ],
    }
    with open(os.path.join(folder, "summary.json"), "w") as file:
        json.dump(summary, file, indent=2, default=float)


# -- replay -----------------------------------------------------------------------


def cmd_replay(args: argparse.Namespace) -> int:
    if args.token.isdigit():
        raise UsageError(
            f"{args.token} is a seed, not a repro token: run it with `rpc-harness run SCENARIO --seed "
            f"{args.token}` (and the same -n, --faults, --steps), or in pytest with --rpc-seed={args.token}"
        )
    repro = decode(args.token)
    if repro.entry is not None:
        return _replay_entry(repro, args.deadline)
    module = _load(repro.scenario or "")
    print(f"rpc-harness replay: {repro.scenario}, world {repro.world_size}, seed {repro.seed}"
          + (f", faults {repro.faults}" if repro.faults else "") + (f", fuzz {repro.fuzz}" if repro.fuzz else ""))
    report = run_scenario(module, repro, deadline=args.deadline, progress=args.progress)
    _print_outcome(report, repro)
    if args.out:
        _write_outputs(args.out, report, repro)
    if report.ok:
        print("replay: the world did NOT fail this time: the failure does not reproduce from this token "
              "(fixed, or it depended on timing outside the seed)")
        return 0
    print("replay: the failure reproduced")
    return 1


def _replay_entry(repro: Repro, deadline: float) -> int:
    from ._launcher import run_world

    # The entry's module is imported the way the test run that printed the
    # token imported it: from its folder, or from here.
    for folder in (repro.path, os.getcwd()):
        if folder and folder not in sys.path:
            sys.path.insert(0, folder)
    result = run_world(repro.entry or "", names=repro.names or None, world_size=repro.world_size,
                       seed=repro.seed, faults=repro.faults or None, fuzz=repro.fuzz,
                       deadline=deadline, repro=repro.command(), check=False)
    print(result.report())
    if result.ok:
        print("replay: the world did NOT fail this time: the failure does not reproduce from this token")
        return 0
    print("replay: the failure reproduced")
    return 1


# -- timeline ---------------------------------------------------------------------


def cmd_timeline(args: argparse.Namespace) -> int:
    from .timeline import write_timeline

    try:
        with open(args.trace, encoding="utf-8") as file:
            document = json.load(file)
    except OSError as error:
        raise UsageError(f"cannot read the trace {args.trace!r}: {error.strerror or error}") from None
    except ValueError as error:
        raise UsageError(f"{args.trace!r} is not JSON: {error}") from None
    if not isinstance(document, (dict, list)) or (isinstance(document, dict) and "traceEvents" not in document):
        raise UsageError(f"{args.trace!r} is not a Chrome trace: no traceEvents")
    stem = args.trace.removesuffix(".json").removesuffix(".trace")
    output = args.output or stem + ".timeline.svg"
    write_timeline(document, output, title=os.path.basename(stem))
    print(f"wrote {output}")
    return 0


# -- bench ------------------------------------------------------------------------


def cmd_bench(args: argparse.Namespace) -> int:
    from .bench import run_bench

    return run_bench(quick=args.quick, json_path=args.json, repeat=args.repeat)


# -- helpers ----------------------------------------------------------------------


def _scenario_names(requested: Sequence[str]) -> list[str]:
    names: list[str] = []
    for name in requested:
        for one in SCENARIO_ORDER if name == "all" else [name]:
            if one not in SCENARIO_ORDER:
                raise UsageError(f"unknown scenario {one!r}; choose from {', '.join(SCENARIO_ORDER)} or all")
            if one not in names:
                names.append(one)
    return names


def _load(name: str) -> Any:
    import scenarios

    try:
        return scenarios.load(name)
    except ValueError as error:
        raise UsageError(str(error)) from None


def _overrides(module: Any, pairs: Sequence[str], steps: int | None) -> dict[str, Any]:
    """Config overrides from ``--set key=value`` (typed by the field's default)
    and ``--steps`` (mapped to the scenario's budget field)."""
    fields = {f.name: f for f in dataclasses.fields(module.Config)}
    defaults = module.Config()
    out: dict[str, Any] = {}
    if steps is not None:
        out[module.STEPS_FIELD] = steps
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep:
            raise UsageError(f"--set {pair!r}: use KEY=VALUE")
        if key not in fields:
            raise UsageError(f"--set {pair!r}: {module.NAME} config has no field {key!r}; fields: {', '.join(fields)}")
        out[key] = _typed(text, getattr(defaults, key), f"--set {pair!r}")
    _config(module, out)  # validate now
    return out


def _typed(text: str, default: Any, where: str) -> Any:
    try:
        if isinstance(default, bool):
            if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(text)
            return text.lower() in ("true", "1", "yes")
        if isinstance(default, int):
            return int(text)
        if isinstance(default, float):
            return float(text)
        if default is None or isinstance(default, str):
            return None if text.lower() == "none" else text
    except ValueError:
        raise UsageError(f"{where}: {text!r} is not a valid {type(default).__name__}") from None
    raise UsageError(f"{where}: fields of type {type(default).__name__} cannot be set from the command line")


def _config(module: Any, overrides: dict[str, Any]) -> Any:
    try:
        return dataclasses.replace(module.Config(), **overrides)
    except (TypeError, ValueError) as error:
        raise UsageError(f"{module.NAME} config: {error}") from None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
