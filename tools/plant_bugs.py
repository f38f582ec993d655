"""Plant bugs one at a time and check that the suite catches each.

Each bug is a file, an exact snippet of it and what replaces the snippet;
the script plants it, runs the tests named for it, and reverts the file
whatever happens. A bug is caught when those tests fail (pytest exit code 1).
Before any bug, the same tests run on the untouched tree and must pass: a
test that fails anyway catches nothing.

Run it on a scratch copy, never on a checkout someone is working in::

    git clone -q /work/main /tmp/plant        # plus any uncommitted files
    python tools/plant_bugs.py --repo /tmp/plant

The copy's own code is what runs: its root goes first on PYTHONPATH (an
editable install elsewhere would otherwise win), and the script refuses to
go on unless ``harness``, ``scenarios`` and ``rpc_harness`` import from it.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

FC = "tests/world/test_fault_controls.py::"


@dataclass(frozen=True)
class Bug:
    name: str
    file: str
    original: str
    replacement: str
    tests: tuple[str, ...]


BUGS = (
    Bug("delay sleeps 1/1000 of its time", "harness/context.py",
        "time.sleep(fault.seconds)", "time.sleep(fault.seconds / 1000)",
        (FC + "test_a_delay_makes_its_steps_take_at_least_its_time",)),
    Bug("kill fires at hit N+1", "harness/context.py",
        "firing = [fault for fault in armed or () if fault.fires_on(hit)]",
        "firing = [fault for fault in armed or () if fault.fires_on(hit - (fault.kind == 'kill'))]",
        (FC + "test_a_kill_strikes_in_exactly_the_hit_it_names",)),
    Bug("hit counter off by one (reported hit N, struck in call N-1)", "harness/context.py",
        "hit = self._hits[name] = self._hits.get(name, 0) + 1",
        "hit = self._hits[name] = self._hits.get(name, 1) + 1",
        (FC + "test_a_kill_strikes_in_exactly_the_hit_it_names",
         FC + "test_a_raise_fails_its_rank_in_exactly_the_hit_it_names")),
    Bug("raise fires at hit N-1", "harness/context.py",
        "firing = [fault for fault in armed or () if fault.fires_on(hit)]",
        "firing = [fault for fault in armed or () if fault.fires_on(hit + (fault.kind == 'raise'))]",
        (FC + "test_a_raise_fails_its_rank_in_exactly_the_hit_it_names",
         FC + "test_a_raise_fires_on_its_hit_only_and_with_a_plus_on_every_later_one")),
    Bug("a fault without '+' fires on every later hit too", "harness/faults.py",
        "return hit == self.hit or (self.repeat and hit > self.hit)",
        "return hit >= self.hit",
        (FC + "test_a_raise_fires_on_its_hit_only_and_with_a_plus_on_every_later_one",
         FC + "test_a_hang_blocks_exactly_the_hit_it_names")),
    Bug("hang fires at hit N+1", "harness/context.py",
        "firing = [fault for fault in armed or () if fault.fires_on(hit)]",
        "firing = [fault for fault in armed or () if fault.fires_on(hit - (fault.kind == 'hang'))]",
        (FC + "test_a_hang_blocks_exactly_the_hit_it_names",)),
    Bug("freeze fires at hit N+1", "harness/context.py",
        "firing = [fault for fault in armed or () if fault.fires_on(hit)]",
        "firing = [fault for fault in armed or () if fault.fires_on(hit - (fault.kind == 'freeze'))]",
        (FC + "test_a_freeze_stops_its_rank_in_exactly_the_hit_it_names_and_the_harness_ends_it",)),
    Bug("msgdelay delays 1/1000 of its time", "harness/rank_setup.py",
        "messages_to_delay=to_delay,", "messages_to_delay={k: v / 1000 for k, v in to_delay.items()},",
        (FC + "test_a_msgdelay_delays_every_send_of_the_type_it_names",)),
    Bug("msgfail count ignored (always 1)", "harness/rank_setup.py",
        'num_fail_sends=max([int(f.arg) for f in mine if f.kind == "msgfail"] or [0]),',
        "num_fail_sends=1 if to_fail else 0,",
        (FC + "test_a_msgfail_within_torchs_retries_fails_each_send_that_often_and_the_world_succeeds",
         FC + "test_a_msgfail_past_torchs_retries_loses_the_message_and_fails_the_world")),
    Bug("msgfail not armed", "harness/rank_setup.py",
        "messages_to_fail=to_fail,", "messages_to_fail=[],",
        (FC + "test_a_msgfail_within_torchs_retries_fails_each_send_that_often_and_the_world_succeeds",
         "tests/world/test_scenario_ps.py::test_retried_message_failures_still_give_matching_gradients")),
    Bug("one failed send left uncounted", "harness/_tally.py",
        "_msgfaults.failed_sends(outcome.output, near=near)",
        "_msgfaults.failed_sends(outcome.output, near=near)[1:]",
        (FC + "test_a_msgfail_within_torchs_retries_fails_each_send_that_often_and_the_world_succeeds",
         "tests/world/test_scenario_rnn.py::test_retried_message_failures_change_nothing")),
    Bug("lost messages not reported", "harness/_supervisor.py",
        "problems = list(self.problems) + _tally.lost_messages(plan, self.outcomes)",
        "problems = list(self.problems)",
        (FC + "test_a_msgfail_past_torchs_retries_loses_the_message_and_fails_the_world",)),
    Bug("torch's retry budget taken as 5 tries", "harness/faults.py",
        "TORCH_SEND_TRIES = 6", "TORCH_SEND_TRIES = 5",
        (FC + "test_a_msgfail_past_torchs_retries_loses_the_message_and_fails_the_world",)),
    Bug("fired check of faults skipped", "harness/_supervisor.py",
        "problems += _tally.unfired(plan, self.outcomes)", "pass",
        ("tests/world/test_spawn.py::test_a_plan_that_never_fires_fails_the_world_naming_it",)),
    Bug("pin_loopback a no-op", "harness/rank_setup.py",
        '    os.environ["TP_SOCKET_IFNAME"] = "lo"\n    os.environ["GLOO_SOCKET_IFNAME"] = "lo"\n', "    pass\n",
        ("tests/world/test_isolation.py::test_transports_are_pinned_to_loopback_inside_every_rank",)),
    Bug("world seeds ignore the session seed", "harness/pytest_plugin.py",
        "return derive_seed(self.session_seed, self._request.node.nodeid, index)",
        "return derive_seed(0, self._request.node.nodeid, index)",
        ("tests/world/test_plugin.py::"
         "test_the_session_seed_in_the_header_replays_every_world_of_an_xdist_session",)),
    Bug("xdist workers draw their own session seed", "harness/pytest_plugin.py",
        'return int(workerinput["rpc_harness_seed"])', "return fresh_seed()",
        ("tests/world/test_plugin.py::"
         "test_the_session_seed_in_the_header_replays_every_world_of_an_xdist_session",)),
    Bug("replay token's plan not validated", "harness/repro.py",
        "repro.plan  # noqa: B018 - validates the fault plan's text now, not mid-replay", "pass",
        ("tests/unit/test_replay.py::test_a_token_with_a_bad_plan_is_refused_before_running",)),
    Bug("fault events record the hit after the real one (properties)", "harness/context.py",
        'fault_kind=fault.kind, point=fault.point, hit=hit)', 'fault_kind=fault.kind, point=fault.point, hit=hit + 1)',
        ("tests/world/test_properties.py::test_ps_meets_its_contract",)),
    Bug("fault events record the hit after the real one (regressions)", "harness/context.py",
        'fault_kind=fault.kind, point=fault.point, hit=hit)', 'fault_kind=fault.kind, point=fault.point, hit=hit + 1)',
        ("tests/world/test_regressions.py::test_regression_world_replays_clean_with_its_faults_fired_where_planned"
         "[line5]",)),
    Bug("fault events record the hit after the real one (scenarios)", "harness/context.py",
        'fault_kind=fault.kind, point=fault.point, hit=hit)', 'fault_kind=fault.kind, point=fault.point, hit=hit + 1)',
        ("tests/world/test_scenario_rl.py::test_slow_observer_changes_nothing",
         "tests/world/test_scenario_rnn.py::test_slow_parameter_server_gives_the_same_gradients")),
    Bug("every rank counts every failpoint", "harness/context.py",
        "self._count_all = bool(mine)", "self._count_all = True",
        ("tests/world/test_launcher.py::test_a_rank_the_plan_kills_is_expected_and_the_others_finish",)),
    Bug("an unpicklable return value passes as None", "harness/_rank.py",
        'send(("raised", "result", f"TypeError: the entry\'s return value cannot be sent back: {error}", "", None))\n'
        "        _shutdown_quietly()\n        return 1\n",
        "pickled = pickle.dumps(None)\n",
        ("tests/world/test_launcher.py::test_an_unpicklable_return_value_is_a_clear_failure",)),
    Bug("progress() outside a world prints", "harness/context.py",
        "        check_progress(done, total, unit, metrics)\n    else:\n",
        "        check_progress(done, total, unit, metrics)\n        print(done, total)\n    else:\n",
        ("tests/unit/test_progress.py::test_progress_outside_a_world_is_a_no_op",)),
    Bug("progress() outside a world skips its checks", "harness/context.py",
        "    if ctx is None:\n        check_progress(done, total, unit, metrics)\n",
        "    if ctx is None:\n        pass\n",
        ("tests/unit/test_progress.py::test_bad_progress_calls_name_what_was_wrong",)),
    Bug("the CI Hypothesis profile runs 60 examples", "harness/strategies.py",
        "register_profile(CI_PROFILE, max_examples=6,", "register_profile(CI_PROFILE, max_examples=60,",
        ("tests/unit/test_replay.py::test_profiles_are_registered_and_bounded",)),
    Bug("rnn gradient check compares the run with itself", "scenarios/rnn/judge.py",
        'theirs = {k: v for k, v in base[kind].items() if k.startswith(owner + "/")}', "theirs = mine",
        ("tests/world/test_scenario_rnn.py::test_planted_gradient_bug_is_caught",)),
    Bug("ps gradient check compares the run with itself", "scenarios/parameter_server/judge.py",
        'diff, bad = compare_tensors(step["grads"], base.grads,',
        'diff, bad = compare_tensors(step["grads"], step["grads"],',
        ("tests/world/test_scenario_ps.py::test_planted_unrecorded_update_is_caught_with_a_readable_message",)),
)


def environment(repo: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(repo), *filter(None, [env.get("PYTHONPATH")])])
    return env


def check_imports(repo: Path, python: str) -> None:
    """Refuse to go on unless the copy's packages are the ones imported."""
    code = "import harness, scenarios, rpc_harness; print(harness.__file__, scenarios.__file__, rpc_harness.__file__)"
    out = subprocess.run([python, "-c", code], cwd=repo, env=environment(repo), capture_output=True, text=True,
                         check=True).stdout.split()
    outside = [path for path in out if not Path(path).resolve().is_relative_to(repo)]
    if outside:
        sys.exit(f"plant_bugs: these import from outside {repo}: {outside}; refusing to plant anything")
    print(f"imports from the copy: {', '.join(out)}")


def run_tests(repo: Path, python: str, tests: tuple[str, ...], timeout: float) -> tuple[str, float]:
    """(outcome, seconds): 'passed', 'failed', 'timeout' or 'error (exit N)'."""
    command = [python, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", *tests]
    started = time.monotonic()
    # A session of its own, so that a timeout ends pytest and every rank it started.
    proc = subprocess.Popen(command, cwd=repo, env=environment(repo), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return "timeout", time.monotonic() - started
    took = time.monotonic() - started
    if proc.returncode == 0:
        return "passed", took
    if proc.returncode == 1:
        return "failed", took
    print(out[-3000:])
    return f"error (exit {proc.returncode})", took


def plant(repo: Path, bug: Bug, python: str, timeout: float) -> tuple[str, float]:
    path = repo / bug.file
    text = path.read_text()
    count = text.count(bug.original)
    if count != 1:
        raise SystemExit(f"plant_bugs: {bug.file} holds the snippet of {bug.name!r} {count} times, not once: "
                         "refusing to plant it (update the snippet)")
    try:
        path.write_text(text.replace(bug.original, bug.replacement))
        return run_tests(repo, python, bug.tests, timeout)
    finally:
        path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1],
                        help="the checkout to plant bugs in (use a scratch copy)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds for one bug's tests")
    parser.add_argument("--only", action="append", default=[], help="plant only bugs whose name contains this")
    parser.add_argument("--skip-baseline", action="store_true", help="do not first run the tests unplanted")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs pytest")
    args = parser.parse_args(argv)
    repo = args.repo.resolve()
    bugs = [b for b in BUGS if not args.only or any(part in b.name for part in args.only)]
    if not bugs:
        parser.error(f"no bug matches {args.only}")
    check_imports(repo, args.python)
    for bug in bugs:  # every snippet is there before anything runs
        if (repo / bug.file).read_text().count(bug.original) != 1:
            sys.exit(f"plant_bugs: the snippet of {bug.name!r} is not in {bug.file} exactly once; refusing to run")
    if not args.skip_baseline:
        tests = tuple(dict.fromkeys(t for b in bugs for t in b.tests))
        outcome, took = run_tests(repo, args.python, tests, args.timeout * 2)
        print(f"baseline: {len(tests)} tests unplanted: {outcome} ({took:.0f}s)")
        if outcome != "passed":
            print("plant_bugs: the tests fail without any bug planted; a failure would prove nothing")
            return 2
    rows = []
    for bug in bugs:
        outcome, took = plant(repo, bug, args.python, args.timeout)
        rows.append((bug.name, ", ".join(t.rsplit("::", 1)[-1] for t in bug.tests),
                     "yes" if outcome == "failed" else f"NO ({outcome})", f"{took:.0f}s"))
        print(f"  {bug.name}: {rows[-1][2]} ({took:.0f}s)", flush=True)
    header = ("bug", "tests", "caught", "time")
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    print()
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print("  ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    missed = [r for r in rows if r[2] != "yes"]
    print(f"\n{len(rows) - len(missed)} of {len(rows)} planted bugs caught")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
