#!/usr/bin/env python3
"""Mutation testing, one module at a time, with that module's fast unit tests.

    .venv/bin/pip install -c constraints.txt -e '.[test,mutation]'
    .venv/bin/python tools/mutation.py                      # every module below, in order (but --world's)
    .venv/bin/python tools/mutation.py rpc_harness/faults.py
    .venv/bin/python tools/mutation.py --changed            # only the modules changed since main
    .venv/bin/python tools/mutation.py --list [--changed]   # what would run, with which tests

The tool is mutmut 3 (configured in pyproject's ``[tool.mutmut]``). Each
module runs in a scratch copy of the repository under
``build/mutation/<module>/`` (``build/`` is ignored by git), whose
pyproject names that one module (``only_mutate``) and its tests
(``pytest_add_cli_args_test_selection``); the repository itself is never
written to. mutmut's ``mutants/`` folder stays there, for ``mutmut show
NAME`` and ``mutmut browse`` run from that folder.

Two passes. mutmut's own is fast: it forks each mutant from a process that
has already imported everything and runs only the tests that called the
mutated function. But a function that runs at import time (a check
factory, a field declaration, a registry) has already run unmutated by
then, so its mutants look like survivors. So the functions that run while
the tests are collected are found (mutmut's trampolines record them), and
each of their mutants that the first pass did not kill is checked again in
a fresh interpreter (``MUTANT_UNDER_TEST`` set before anything is imported)
against all the module's tests, with a time limit; ``--fresh-all`` checks
every survivor so. The table counts a mutant killed when either pass
killed it.

It prints a table (module, mutants, killed, survived, timeout, score) and
writes it with every survivor's diff to ``build/mutation/report.md``.
Far too slow for ``.ci/run``; one worker, at low priority, so that it can
share a machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRATCH = ROOT / "build" / "mutation"

# Each module of the library (``rpc_harness/``, ``rpc_harness/_schedule/``)
# and the scenarios' judges, in the order they are run, with the tests that
# cover it. A unit test (tests/unit/test_mutation_table.py) fails when a
# library module is missing here, when a test named here does not exist, or
# when a module with a function has no tests. Mutation multiplies the tests'
# time: name the fast unit tests that reach the module. A module reached
# only in a rank (forked from the forkserver) or only through real worlds
# names its world tests: it runs only with ``--world`` (hours, not minutes).
# An empty list: nothing to mutate (no function: mutmut mutates functions
# only).
MODULES: dict[str, list[str]] = {
    "rpc_harness/options.py": [
        "tests/unit/test_option_checks.py",
        "tests/unit/test_options.py",
        "tests/unit/test_edges.py",
        "tests/unit/test_devices.py",
        "tests/unit/test_parsers.py",
        "tests/unit/test_cli.py",
    ],
    "rpc_harness/faults.py": [
        "tests/unit/test_fault_checks.py",
        "tests/unit/test_faults.py",
        "tests/unit/test_parsers.py",
        "tests/unit/test_timeline.py",
    ],
    "rpc_harness/repro.py": [
        "tests/unit/test_repro_lines.py",
        "tests/unit/test_replay.py",
        "tests/unit/test_parsers.py",
        "tests/unit/test_options.py",
        "tests/unit/test_edges.py",
        "tests/unit/test_control_lost.py",
        "tests/unit/test_cli.py",
    ],
    "rpc_harness/_rank/asserts.py": ["tests/unit/test_asserts_parts.py", "tests/unit/test_asserts.py"],
    "rpc_harness/_parent/torch_check.py": [
        "tests/unit/test_torch_check_pieces.py",
        "tests/unit/test_torch_check.py",
    ],
    "rpc_harness/schedule.py": [
        "tests/unit/test_schedule_text.py",
        "tests/unit/test_schedule.py",
        "tests/unit/test_timeline.py",
    ],
    "rpc_harness/_schedule/scheduler.py": ["tests/unit/test_schedule.py", "tests/unit/test_scheduler_model.py"],
    "rpc_harness/_schedule/recorder.py": [
        "tests/unit/test_schedule_core.py",
        "tests/unit/test_schedule.py",
        "tests/unit/test_scheduler_model.py",
    ],
    "rpc_harness/_schedule/virtual_time.py": [
        "tests/unit/test_schedule_core.py",
        "tests/unit/test_schedule.py",
        "tests/unit/test_scheduler_model.py",
    ],
    "rpc_harness/_parent/schedule_link.py": ["tests/unit/test_schedule_core.py"],
    "rpc_harness/rpc/rendezvous.py": ["tests/unit/test_rendezvous.py"],
    # Only cut_short is tested without a world; the rest of _tally is held by
    # tests/world/test_fault_controls.py, which this tool does not run.
    "rpc_harness/_parent/tally.py": ["tests/unit/test_tally.py"],
    "rpc_harness/_schedule/dpor.py": ["tests/unit/test_dpor.py"],
    "rpc_harness/_schedule/strategies.py": [
        "tests/unit/test_dpor.py",
        "tests/unit/test_schedule_strategies.py",
        "tests/unit/test_schedule.py",
        "tests/unit/test_scheduler_model.py",
    ],
    "rpc_harness/gradcheck.py": [
        "tests/unit/test_gradcheck.py",
        "tests/unit/test_gpu_tolerance.py",
        "tests/unit/test_ps_judge.py",
        "tests/unit/test_rl_judge.py",
        "tests/unit/test_rnn_judge.py",
    ],
    "rpc_harness/scenarios/_device.py": [
        "tests/unit/test_scenario_devices.py",
        "tests/unit/test_gpu_tolerance.py",
    ],
    "rpc_harness/scenarios/parameter_server/judge.py": [
        "tests/unit/test_ps_judge.py",
        "tests/unit/test_scenario_ps.py",
        "tests/unit/test_edges.py",
        "tests/unit/test_contracts.py",
    ],
    "rpc_harness/scenarios/rl/judge.py": [
        "tests/unit/test_rl_judge.py",
        "tests/unit/test_scenario_rl.py",
        "tests/unit/test_edges.py",
        "tests/unit/test_contracts.py",
    ],
    "rpc_harness/scenarios/rnn/judge.py": [
        "tests/unit/test_rnn_judge.py",
        "tests/unit/test_scenario_rnn.py",
        "tests/unit/test_edges.py",
        "tests/unit/test_contracts.py",
    ],
    # The collective scenarios' shared judge pieces and their three judges
    # (issue 40), each on hand-made records.
    "rpc_harness/scenarios/_verdicts.py": [
        "tests/unit/test_contracts.py",
        "tests/unit/test_fsdp_judge.py",
        "tests/unit/test_ddp_rpc_judge.py",
    ],
    # (The fsdp and ddp_rpc judges' tests reach _collective.py too, but its
    # own tests cover every function, and a survivor runs every test that
    # reached it: each of those builds a faithful run.) A GPU run's
    # comparison (compare_run on CUDA, the judges' GPU tolerances) is tested
    # on the CPU with records that say cuda: test_collective_devices.py.
    "rpc_harness/scenarios/_collective.py": [
        "tests/unit/test_collective_judges.py",
        "tests/unit/test_collective_devices.py",
    ],
    "rpc_harness/scenarios/ddp/judge.py": [
        "tests/unit/test_collective_judges.py",
        "tests/unit/test_collective_devices.py",
    ],
    "rpc_harness/scenarios/fsdp/judge.py": [
        "tests/unit/test_fsdp_judge.py",
        "tests/unit/test_collective_judges.py",
        "tests/unit/test_collective_devices.py",
    ],
    "rpc_harness/scenarios/ddp_rpc/judge.py": ["tests/unit/test_ddp_rpc_judge.py"],
    # -- the rest of the library (issue 38): pure modules with unit tests first.
    "rpc_harness/explore.py": ["tests/unit/test_explore.py", "tests/unit/test_control_lost.py"],
    "rpc_harness/spec.py": [
        "tests/unit/test_spec_checks.py",
        "tests/unit/test_edges.py",
        "tests/unit/test_repro_lines.py",
        "tests/unit/test_options.py",
        "tests/unit/test_option_checks.py",
    ],
    "rpc_harness/result.py": [
        "tests/unit/test_result_report.py",
        "tests/unit/test_control_lost.py",
        "tests/unit/test_contracts.py",
        "tests/unit/test_tally.py",
        "tests/unit/test_timeline.py",
        "tests/unit/test_one_line.py",
    ],
    "rpc_harness/trace.py": [
        "tests/unit/test_trace_events.py",
        "tests/unit/test_trace.py",
        "tests/unit/test_timeline.py",
    ],
    "rpc_harness/timeline.py": [
        "tests/unit/test_timeline_picture.py",
        "tests/unit/test_timeline.py",
    ],
    "rpc_harness/_rank/gate.py": ["tests/unit/test_gate.py", "tests/unit/test_gate_waits.py"],
    "rpc_harness/_messages.py": [
        "tests/unit/test_gate.py",
        "tests/unit/test_lifecycle_leave.py",
        "tests/unit/test_schedule_core.py",
        "tests/unit/test_schedule.py",
    ],
    "rpc_harness/_parent/limits.py": ["tests/unit/test_limits.py"],
    "rpc_harness/_parent/nvml.py": ["tests/unit/test_nvml.py"],
    "rpc_harness/_cuda_fork.py": ["tests/unit/test_devices.py", "tests/unit/test_scenario_devices.py"],
    "rpc_harness/_devices.py": ["tests/unit/test_devices.py", "tests/unit/test_options.py"],
    "rpc_harness/_rank/stackdump.py": ["tests/unit/test_stackdump.py"],
    "rpc_harness/_parent/stacks.py": ["tests/unit/test_report_stacks.py", "tests/unit/test_stackdump.py"],
    "rpc_harness/_svg.py": ["tests/unit/test_plots.py", "tests/unit/test_timeline.py"],
    "rpc_harness/_parent/workdirs.py": ["tests/unit/test_launcher.py"],
    "rpc_harness/_rank/callpoints.py": ["tests/unit/test_fault_checks.py", "tests/unit/test_faults.py"],
    "rpc_harness/context.py": ["tests/unit/test_trace.py", "tests/unit/test_progress.py", "tests/unit/test_timeline.py"],
    "rpc_harness/entry.py": [
        "tests/unit/test_option_checks.py",
        "tests/unit/test_options.py",
        "tests/unit/test_edges.py",
    ],
    "rpc_harness/errors.py": [
        "tests/unit/test_errors.py",
        "tests/unit/test_one_line.py",
        "tests/unit/test_edges.py",
        "tests/unit/test_options.py",
    ],
    "rpc_harness/events.py": [
        "tests/unit/test_result_report.py",
        "tests/unit/test_tally.py",
        "tests/unit/test_contracts.py",
    ],
    "rpc_harness/extras.py": ["tests/unit/test_cli.py", "tests/unit/test_docs.py"],
    "rpc_harness/plots.py": ["tests/unit/test_plots.py"],
    "rpc_harness/progress.py": ["tests/unit/test_progress.py"],
    "rpc_harness/rank_setup.py": [
        "tests/unit/test_devices.py",
        "tests/unit/test_math_kernels.py",
        "tests/unit/test_torchrun.py",
    ],
    "rpc_harness/scenario.py": [
        "tests/unit/test_scenario_shape.py",
        "tests/unit/test_edges.py",
        "tests/unit/test_cli.py",
        "tests/unit/test_parsers.py",
    ],
    "rpc_harness/durations.py": [
        "tests/unit/test_options.py",
        "tests/unit/test_fault_checks.py",
        "tests/unit/test_faults.py",
        "tests/unit/test_parsers.py",
    ],
    "rpc_harness/strict_json.py": [
        "tests/unit/test_strict_json.py",
        "tests/unit/test_edges.py",
        "tests/unit/test_torchrun.py",
    ],
    "rpc_harness/seeds.py": [
        "tests/unit/test_seeds.py",
        "tests/unit/test_schedule_core.py",
        "tests/unit/test_schedule_strategies.py",
        "tests/unit/test_options.py",
    ],
    "rpc_harness/strategies.py": [
        "tests/unit/test_faults.py",
        "tests/unit/test_replay.py",
        "tests/unit/test_schedule_strategies.py",
        "tests/unit/test_c10d_strategies.py",
    ],
    "rpc_harness/c10d/ops.py": ["tests/unit/test_c10d_points.py", "tests/unit/test_torch_check_pieces.py"],
    "rpc_harness/c10d/record.py": ["tests/unit/test_c10d_history.py"],
    "rpc_harness/c10d/history.py": ["tests/unit/test_c10d_history.py"],
    # Partly pure (their unit tests), mostly reached through real worlds.
    "rpc_harness/_parent/launcher.py": [
        "tests/unit/test_launcher.py",
        "tests/unit/test_options.py",
        "tests/world/test_launcher.py",
        "tests/world/test_spawn.py",
    ],
    "rpc_harness/_rank/lifecycle.py": ["tests/unit/test_lifecycle_leave.py", "tests/world/test_spawn.py"],
    "rpc_harness/_parent/supervisor.py": [
        "tests/unit/test_stackdump.py",
        "tests/world/test_launcher.py",
        "tests/world/test_fault_controls.py",
    ],
    "rpc_harness/rpc/hooks.py": ["tests/unit/test_trace.py", "tests/world/test_trace.py"],
    "rpc_harness/pytest_plugin.py": [
        "tests/unit/test_options.py",
        "tests/unit/test_control_lost.py",
        "tests/world/test_plugin.py",
    ],
    # Reached only in a rank, in the forkserver, or through real worlds.
    "rpc_harness/_rank/boot.py": ["tests/world/test_launcher.py"],
    "rpc_harness/_parent/preload.py": ["tests/unit/test_launcher.py", "tests/world/test_launcher.py"],
    "rpc_harness/_rank/rank.py": ["tests/world/test_launcher.py", "tests/world/test_spawn.py"],
    "rpc_harness/rpc/stores.py": ["tests/world/test_launcher.py"],
    "rpc_harness/_parent/live.py": ["tests/world/test_reuse.py"],
    "rpc_harness/_rank/clean.py": ["tests/world/test_reuse.py"],
    "rpc_harness/rpc/msgfaults.py": ["tests/world/test_fault_controls.py"],
    "rpc_harness/_parent/netns.py": ["tests/world/test_isolation.py"],
    "rpc_harness/interrupts.py": ["tests/world/test_interrupts.py"],
    "rpc_harness/c10d/hooks.py": ["tests/world/test_c10d_faults.py", "tests/world/test_c10d_reports.py"],
    "rpc_harness/c10d/group.py": ["tests/world/test_collectives.py"],
    "rpc_harness/c10d/clean.py": ["tests/unit/test_c10d_clean.py"],  # its pending-work scan: test_collective_reuse (worlds)
    "rpc_harness/c10d/sequence.py": ["tests/unit/test_c10d_clean.py"],
    # No function: nothing for mutmut to mutate.
    "rpc_harness/__init__.py": [],
    "rpc_harness/__main__.py": [],
    "rpc_harness/_schedule/__init__.py": [],
    "rpc_harness/c10d/__init__.py": [],
    "rpc_harness/_parent/__init__.py": [],
    "rpc_harness/_rank/__init__.py": [],
    "rpc_harness/rpc/__init__.py": [],
}
# The library: every module of these folders (not the scenarios nor the
# apps, which the library never imports) must be in MODULES.
LIBRARY = tuple(f"rpc_harness/{folder}*.py" for folder in ("", "_parent/", "_rank/", "rpc/", "c10d/", "_schedule/"))


def library_modules(root: Path = ROOT) -> list[str]:
    """Every module of the library, as a path from the repository's root."""
    return sorted(str(path.relative_to(root)) for pattern in LIBRARY for path in root.glob(pattern))


def needs_worlds(tests: list[str]) -> bool:
    """Whether a module's tests bring real worlds up (``tests/world``)."""
    return any(test.startswith("tests/world/") for test in tests)


def changed_modules(base: str, root: Path = ROOT) -> list[str]:
    """The modules of MODULES that differ from where this branch left
    ``base`` (its merge base): committed since, staged, in the work tree or
    new and untracked; in MODULES' order."""

    def git(*args: str) -> list[str]:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"git {' '.join(args)}: {done.stderr.strip() or 'failed'}")
        return done.stdout.split()

    fork = git("merge-base", base, "HEAD")[0]
    touched = set(git("diff", "--name-only", fork)) | set(git("ls-files", "--others", "--exclude-standard"))
    return [module for module in MODULES if module in touched]


# Seconds mutmut adds to a mutant's estimated test time before multiplying
# it by 15 for the mutant's wall limit (30 for its CPU limit). mutmut's
# default, 1, gives tests of milliseconds a 15 s wall limit: on this shared
# 2-core machine at load 20 to 34 a mutant's tests took 20 to 30 s in the
# forked worker (the collective contract tests of test_contracts.py, which
# take 0.01 s alone), so most mutants of scenarios/_verdicts.py, killed or
# not, were called timeouts, which the score counts as killed. 5 gives 75 s.
TIMEOUT_CONSTANT = 5.0

# mutmut's exit codes, as its own `results` command names them.
KILLED = {1, 3, 37}
TIMEOUT = {-24, 24, 152, 255, 36}


@dataclass
class Score:
    module: str
    mutants: int = 0
    killed_fast: int = 0
    killed_fresh: int = 0
    timeout: int = 0
    survivors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def killed(self) -> int:
        return self.killed_fast + self.killed_fresh

    @property
    def score(self) -> float:
        return 100.0 * (self.killed + self.timeout) / self.mutants if self.mutants else 100.0


def slug(module: str) -> str:
    return module.removesuffix(".py").replace("/", ".")


def scratch_copy(module: str, tests: list[str]) -> Path:
    """A copy of the repository's package, tests and pyproject, configured for one module."""
    where = SCRATCH / slug(module)
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("rpc_harness", "tests", "fixtures"):  # fixtures: golden files tests compare with
        shutil.copytree(ROOT / folder, where / folder, ignore=ignore)
    text = (ROOT / "pyproject.toml").read_text()
    header = "[tool.mutmut]\n"
    if header not in text:
        sys.exit("pyproject.toml has no [tool.mutmut] table")
    per_module = (
        f"only_mutate = {json.dumps([module])}\n"
        f"pytest_add_cli_args_test_selection = {json.dumps(tests)}\n"
        f"timeout_constant = {TIMEOUT_CONSTANT}\n"
    )
    (where / "pyproject.toml").write_text(text.replace(header, header + per_module, 1))
    return where


def environment() -> dict[str, str]:
    env = dict(os.environ)
    # One core's worth of threads: the machine is shared, and torch's thread
    # pools do not survive the fork of each mutant well.
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    # Tests that run many examples may take fewer under mutation (each runs
    # once per mutant): tests/unit/test_scheduler_model.py does.
    env["RPC_HARNESS_MUTATION"] = "1"
    env.pop("MUTANT_UNDER_TEST", None)
    return env


def mutmut(where: Path, *args: str, log: Path | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "mutmut", *args]
    if log is None:
        return subprocess.run(command, cwd=where, env=environment(), capture_output=True, text=True)
    with log.open("w") as out:
        return subprocess.run(
            command, cwd=where, env=environment(), stdout=out, stderr=subprocess.STDOUT, text=True
        )


def fresh_check(where: Path, mutant: str, tests: list[str], limit: float) -> str:
    """Run one mutant's module tests in a new interpreter: 'killed', 'survived' or 'timeout'."""
    env = environment()
    env["MUTANT_UNDER_TEST"] = mutant
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-x",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        "--rootdir=.",
        *tests,
    ]
    try:
        done = subprocess.run(
            command, cwd=where / "mutants", env=env, capture_output=True, timeout=limit
        )
    except subprocess.TimeoutExpired:
        return "timeout"
    return "survived" if done.returncode == 0 else "killed"


IMPORT_TIME = """
import json, os, sys
os.environ["MUTANT_UNDER_TEST"] = "stats"
import pytest
from mutmut.state import state
pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "--rootdir=.", *sys.argv[2:]])
with open(sys.argv[1], "w") as out:
    json.dump(sorted(state()._stats), out)
"""


def import_time_functions(where: Path, tests: list[str]) -> set[str]:
    """The mutated functions that run while the tests are imported and collected."""
    out = where / "import-time.json"
    command = [sys.executable, "-c", IMPORT_TIME, str(out), *tests]
    subprocess.run(
        command, cwd=where / "mutants", env=environment(), capture_output=True, check=True
    )
    return set(json.loads(out.read_text()))


def diffs_of(where: Path, module: str, names: list[str]) -> list[str]:
    """Each mutant's diff, as ``mutmut show`` prints it (in this process: one
    ``mutmut show`` a survivor takes a second each)."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    here = os.getcwd()
    os.chdir(where)
    try:
        return [f"# {name}\n{get_diff_for_mutant(name, path=module).strip()}" for name in names]
    finally:
        os.chdir(here)


def run_module(
    module: str, tests: list[str], *, fresh_limit: float, fresh_all: bool, only: list[str] | None = None
) -> tuple[Score, str]:
    started = time.monotonic()
    where = scratch_copy(module, tests)
    log = where / "mutmut.log"
    # ``only``: mutmut's own filter of mutant names (``*`` matches), e.g.
    # ``rpc_harness.explore.x__shrink*``; the score then counts those alone.
    done = mutmut(where, "run", "--max-children", "1", *(only or []), log=log)
    if done.returncode != 0 and "failed to collect stats" in log.read_text(errors="replace"):
        # mutmut's first run in a new scratch copy sometimes fails its stats
        # phase though the tests pass there; a second run in the same copy
        # (its mutants already generated) goes through. A new copy would fail
        # again: seen on 2026-11-28, on dpor.py and repro.py.
        done = mutmut(where, "run", "--max-children", "1", *(only or []), log=log)
    if done.returncode != 0:
        sys.exit(f"mutmut failed on {module} (exit {done.returncode}); see {log}")
    meta = json.loads((where / "mutants" / (module + ".meta")).read_text())
    codes: dict[str, int | None] = meta["exit_code_by_key"]
    if only:
        codes = {name: code for name, code in codes.items() if code is not None}
    score = Score(module, mutants=len(codes))
    # The clean tests' time, measured once, bounds each fresh check.
    clean = time.monotonic()
    if fresh_check(where, "", tests, limit=600) != "survived":
        sys.exit(f"the tests of {module} fail without any mutant: {' '.join(tests)}")
    limit = max(fresh_limit, 5 * (time.monotonic() - clean))
    at_import = import_time_functions(where, tests)
    for name, code in sorted(codes.items()):
        if code in KILLED:
            score.killed_fast += 1
            continue
        if code in TIMEOUT:
            score.timeout += 1
            continue
        function = name.rpartition("__mutmut_")[0]
        verdict = "survived"
        # 0: survived, 33: no test called it; anything else mutmut calls
        # suspicious (a crash of its worker), which a fresh run settles.
        if fresh_all or function in at_import or code not in (0, 33):
            verdict = fresh_check(where, name, tests, limit)
        if verdict == "killed":
            score.killed_fresh += 1
        elif verdict == "timeout":
            score.timeout += 1
        else:
            score.survivors.append(name)
    score.seconds = time.monotonic() - started
    return score, "\n\n".join(diffs_of(where, module, score.survivors))


def table(scores: list[Score]) -> str:
    version = metadata.version("mutmut")
    today = datetime.date.today().isoformat()
    lines = [
        "| module | mutants | killed | survived | timeout | score | date | tool |",
        "|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for s in scores:
        lines.append(
            f"| `{s.module}` | {s.mutants} | {s.killed} | {len(s.survivors)} | {s.timeout} | "
            f"{s.score:.1f} % | {today} | mutmut {version} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "modules", nargs="*", help="modules to mutate (paths); default: all, in order"
    )
    parser.add_argument(
        "--list", action="store_true", help="print the modules and their tests, and stop"
    )
    parser.add_argument(
        "--fresh-limit",
        type=float,
        default=60.0,
        help="seconds a fresh-interpreter check may take at least (default 60)",
    )
    parser.add_argument(
        "--fresh-all",
        action="store_true",
        help="check every survivor again in a fresh interpreter, not only those of import-time code",
    )
    parser.add_argument(
        "--report", type=Path, default=SCRATCH / "report.md", help="where the report goes"
    )
    parser.add_argument(
        "--changed",
        metavar="BASE",
        nargs="?",
        const="main",
        help="only the modules this branch changed since it left BASE (default main), work tree included",
    )
    parser.add_argument(
        "--only",
        metavar="MUTANTS",
        action="append",
        help="only the mutants whose names match (mutmut's names, * matches; repeatable): a part of one module",
    )
    parser.add_argument(
        "--world",
        action="store_true",
        help="also the modules whose tests bring real worlds up (tests/world): hours, not minutes",
    )
    args = parser.parse_args(argv)
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        parser.error(
            f"no test selection for {', '.join(unknown)}; add it to MODULES in {Path(__file__).name}"
        )
    if args.changed is not None and args.modules:
        parser.error("give modules or --changed, not both")
    chosen = changed_modules(args.changed) if args.changed is not None else args.modules or list(MODULES)
    if args.list:  # what would run, and with which tests
        for module in chosen:
            tests = MODULES[module]
            kind = " (world tests: --world)" if needs_worlds(tests) else "" if tests else " (nothing to mutate)"
            print(module + kind, *tests, sep="\n    ")
        return 0
    todo = []
    for module in chosen:
        if not MODULES[module]:
            print(f"{module}: nothing to mutate (no function)")
        elif needs_worlds(MODULES[module]) and not args.world:
            print(f"{module}: skipped: its tests bring real worlds up (--world runs them)")
        else:
            todo.append(module)
    if not todo:
        print("no module to mutate" + (f" (changed since {args.changed})" if args.changed is not None else ""))
        return 0
    try:
        os.nice(10)
    except OSError:
        pass
    scores, sections = [], []
    for module in todo:
        print(f"{module}: mutating with {' '.join(MODULES[module])}", flush=True)
        score, diffs = run_module(
            module, MODULES[module], fresh_limit=args.fresh_limit, fresh_all=args.fresh_all, only=args.only
        )
        scores.append(score)
        print(
            f"    {score.mutants} mutants, {score.killed_fast} killed by mutmut, {score.killed_fresh} more "
            f"in a fresh interpreter, {score.timeout} timeout, {len(score.survivors)} survived "
            f"({score.score:.1f} %, {score.seconds:.0f} s)",
            flush=True,
        )
        for name in score.survivors:
            print(f"    survived: {name}")
        (SCRATCH / slug(module) / "survivors.md").write_text(diffs + "\n")
        sections.append(
            f"## {module}\n\n```diff\n{diffs}\n```\n"
            if diffs
            else f"## {module}\n\nNo survivors.\n"
        )
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(
            "# Mutation scores\n\n" + table(scores) + "\n\n" + "\n".join(sections)
        )
    print()
    print(table(scores))
    print(f"\nsurvivors' diffs: {args.report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
