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
go on unless ``rpc_harness``, its scenarios and its apps import from it.
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
WG = "tests/world/test_guards.py::"
UG = "tests/unit/test_guards.py::"
OPT = "tests/unit/test_options.py::"
PLUGIN = "tests/world/test_plugin.py::"
US = "tests/unit/test_schedule.py::"
WS = "tests/world/test_schedule.py::"
FP = "tests/world/test_foreign_programs.py::"
TC = "tests/unit/test_torch_check.py::"
UC = "tests/unit/test_cli.py::"
UF = "tests/unit/test_faults.py::"
SHAPE = "tests/unit/test_scenario_shape.py::"
WC = "tests/world/test_cli.py::"
I28 = "tests/world/test_issue28.py::"
INT = "tests/world/test_interrupts.py::"
SD = "tests/unit/test_scenario_devices.py::"
CF = "tests/world/test_cuda_fork.py::"
UD = "tests/unit/test_devices.py::"
WD = "tests/world/test_devices.py::"
CL = "tests/world/test_control_lost.py::"
UCL = "tests/unit/test_control_lost.py::"
RW = "tests/world/test_reuse.py::"
URV = "tests/unit/test_rendezvous.py::"
WRV = "tests/world/test_rendezvous.py::"


@dataclass(frozen=True)
class Bug:
    name: str
    file: str
    original: str
    replacement: str
    tests: tuple[str, ...]


BUGS = (
    Bug("delay sleeps 1/1000 of its time", "rpc_harness/context.py",
        "time.sleep(fault.seconds)", "time.sleep(fault.seconds / 1000)",
        (FC + "test_a_delay_makes_its_steps_take_at_least_its_time",)),
    Bug("kill fires at hit N+1", "rpc_harness/context.py",
        "firing = [fault for fault in armed or () if fault.fires_on(hit)]",
        "firing = [fault for fault in armed or () if fault.fires_on(hit - (fault.kind == 'kill'))]",
        (FC + "test_a_kill_strikes_in_exactly_the_hit_it_names",)),
    Bug("hit counter off by one (reported hit N, struck in call N-1)", "rpc_harness/context.py",
        "hit = self._hits[name] = self._hits.get(name, 0) + 1",
        "hit = self._hits[name] = self._hits.get(name, 1) + 1",
        (FC + "test_a_kill_strikes_in_exactly_the_hit_it_names",
         FC + "test_a_raise_fails_its_rank_in_exactly_the_hit_it_names")),
    Bug("raise fires at hit N-1", "rpc_harness/context.py",
        "firing = [fault for fault in armed or () if fault.fires_on(hit)]",
        "firing = [fault for fault in armed or () if fault.fires_on(hit + (fault.kind == 'raise'))]",
        (FC + "test_a_raise_fails_its_rank_in_exactly_the_hit_it_names",
         FC + "test_a_raise_fires_on_its_hit_only_and_with_a_plus_on_every_later_one")),
    Bug("a fault without '+' fires on every later hit too", "rpc_harness/faults.py",
        "return hit == self.hit or (self.repeat and hit > self.hit)",
        "return hit >= self.hit",
        (FC + "test_a_raise_fires_on_its_hit_only_and_with_a_plus_on_every_later_one",
         FC + "test_a_hang_blocks_exactly_the_hit_it_names")),
    Bug("hang fires at hit N+1", "rpc_harness/context.py",
        "firing = [fault for fault in armed or () if fault.fires_on(hit)]",
        "firing = [fault for fault in armed or () if fault.fires_on(hit - (fault.kind == 'hang'))]",
        (FC + "test_a_hang_blocks_exactly_the_hit_it_names",)),
    Bug("freeze fires at hit N+1", "rpc_harness/context.py",
        "firing = [fault for fault in armed or () if fault.fires_on(hit)]",
        "firing = [fault for fault in armed or () if fault.fires_on(hit - (fault.kind == 'freeze'))]",
        (FC + "test_a_freeze_stops_its_rank_in_exactly_the_hit_it_names_and_the_harness_ends_it",)),
    Bug("msgdelay delays 1/1000 of its time", "rpc_harness/rank_setup.py",
        "messages_to_delay=to_delay,", "messages_to_delay={k: v / 1000 for k, v in to_delay.items()},",
        (FC + "test_a_msgdelay_delays_every_send_of_the_type_it_names",)),
    Bug("msgfail count ignored (always 1)", "rpc_harness/rank_setup.py",
        'num_fail_sends=max([int(f.arg) for f in mine if f.kind == "msgfail"] or [0]),',
        "num_fail_sends=1 if to_fail else 0,",
        (FC + "test_a_msgfail_within_torchs_retries_fails_each_send_that_often_and_the_world_succeeds",
         FC + "test_a_msgfail_past_torchs_retries_loses_the_message_and_fails_the_world")),
    Bug("msgfail not armed", "rpc_harness/rank_setup.py",
        "messages_to_fail=to_fail,", "messages_to_fail=[],",
        (FC + "test_a_msgfail_within_torchs_retries_fails_each_send_that_often_and_the_world_succeeds",
         "tests/world/test_scenario_ps.py::test_retried_message_failures_still_give_matching_gradients")),
    Bug("one failed send left uncounted", "rpc_harness/_tally.py",
        "_msgfaults.failed_sends(outcome.output, near=near)",
        "_msgfaults.failed_sends(outcome.output, near=near)[1:]",
        (FC + "test_a_msgfail_within_torchs_retries_fails_each_send_that_often_and_the_world_succeeds",
         "tests/world/test_scenario_rnn.py::test_retried_message_failures_change_nothing")),
    Bug("lost messages not reported", "rpc_harness/_supervisor.py",
        "problems = list(self.problems) + _tally.lost_messages(plan, self.outcomes)",
        "problems = list(self.problems)",
        (FC + "test_a_msgfail_past_torchs_retries_loses_the_message_and_fails_the_world",)),
    Bug("torch's retry budget taken as 5 tries", "rpc_harness/faults.py",
        "TORCH_SEND_TRIES = 6", "TORCH_SEND_TRIES = 5",
        (FC + "test_a_msgfail_past_torchs_retries_loses_the_message_and_fails_the_world",)),
    Bug("fired check of faults skipped", "rpc_harness/_supervisor.py",
        "problems += _tally.unfired(plan, self.outcomes)", "pass",
        ("tests/world/test_spawn.py::test_a_plan_that_never_fires_fails_the_world_naming_it",)),
    Bug("pin_loopback a no-op", "rpc_harness/rank_setup.py",
        '    os.environ["TP_SOCKET_IFNAME"] = "lo"\n    os.environ["GLOO_SOCKET_IFNAME"] = "lo"\n', "    pass\n",
        ("tests/world/test_isolation.py::test_transports_are_pinned_to_loopback_inside_every_rank",)),
    Bug("world seeds ignore the session seed", "rpc_harness/pytest_plugin.py",
        "return derive_seed(self.session_seed, self._request.node.nodeid, index)",
        "return derive_seed(0, self._request.node.nodeid, index)",
        ("tests/world/test_plugin.py::"
         "test_the_session_seed_in_the_header_replays_every_world_of_an_xdist_session",)),
    Bug("xdist workers draw their own session seed", "rpc_harness/pytest_plugin.py",
        'return int(workerinput["rpc_harness_seed"])', "return fresh_seed()",
        ("tests/world/test_plugin.py::"
         "test_the_session_seed_in_the_header_replays_every_world_of_an_xdist_session",)),
    Bug("replay token's plan not validated", "rpc_harness/repro.py",
        'options[name] = DECLARED[name].check(data[key], f"repro token field {key!r}")',
        'options[name] = data[key] if name == "faults" else DECLARED[name].check(data[key], f"field {key!r}")',
        ("tests/unit/test_replay.py::test_a_token_with_a_bad_plan_is_refused_before_running",)),
    Bug("fault events record the hit after the real one (properties)", "rpc_harness/context.py",
        "str(fault), fault.kind, fault.point, hit))", "str(fault), fault.kind, fault.point, hit + 1))",
        ("tests/world/test_properties.py::test_ps_meets_its_contract",)),
    Bug("fault events record the hit after the real one (regressions)", "rpc_harness/context.py",
        "str(fault), fault.kind, fault.point, hit))", "str(fault), fault.kind, fault.point, hit + 1))",
        ("tests/world/test_regressions.py::test_regression_world_replays_clean_with_its_faults_fired_where_planned"
         "[line5]",)),
    Bug("fault events record the hit after the real one (scenarios)", "rpc_harness/context.py",
        "str(fault), fault.kind, fault.point, hit))", "str(fault), fault.kind, fault.point, hit + 1))",
        ("tests/world/test_scenario_rl.py::test_slow_observer_changes_nothing",
         "tests/world/test_scenario_rnn.py::test_slow_parameter_server_gives_the_same_gradients")),
    Bug("every rank counts every failpoint", "rpc_harness/context.py",
        "self._count_all = bool(mine)", "self._count_all = True",
        ("tests/world/test_launcher.py::test_a_rank_the_plan_kills_is_expected_and_the_others_finish",)),
    Bug("an unpicklable return value passes as None", "rpc_harness/_rank.py",
        'send(msg.Failed("result", f"TypeError: the entry\'s return value cannot be sent back: {error}", ""))\n'
        "        _shutdown_quietly()\n        return 1\n",
        "pickled = pickle.dumps(None)\n",
        ("tests/world/test_launcher.py::test_an_unpicklable_return_value_is_a_clear_failure",)),
    Bug("progress() outside a world prints", "rpc_harness/context.py",
        "        check_progress(done, total, unit, metrics)\n    else:\n",
        "        check_progress(done, total, unit, metrics)\n        print(done, total)\n    else:\n",
        ("tests/unit/test_progress.py::test_progress_outside_a_world_is_a_no_op",)),
    Bug("progress() outside a world skips its checks", "rpc_harness/context.py",
        "    if ctx is None:\n        check_progress(done, total, unit, metrics)\n",
        "    if ctx is None:\n        pass\n",
        ("tests/unit/test_progress.py::test_bad_progress_calls_name_what_was_wrong",)),
    Bug("the CI Hypothesis profile runs 60 examples", "rpc_harness/strategies.py",
        "register_profile(CI_PROFILE, max_examples=6,", "register_profile(CI_PROFILE, max_examples=60,",
        ("tests/unit/test_replay.py::test_profiles_are_registered_and_bounded",)),
    Bug("rnn gradient check compares the run with itself", "rpc_harness/scenarios/rnn/judge.py",
        'theirs = {k: v for k, v in base[kind].items() if k.startswith(owner + "/")}', "theirs = mine",
        ("tests/world/test_scenario_rnn.py::test_planted_gradient_bug_is_caught",)),
    Bug("ps gradient check compares the run with itself", "rpc_harness/scenarios/parameter_server/judge.py",
        'diff, bad = compare_tensors(step["grads"], base.grads,',
        'diff, bad = compare_tensors(step["grads"], step["grads"],',
        ("tests/world/test_scenario_ps.py::test_planted_unrecorded_update_is_caught_with_a_readable_message",)),
    # -- issue 24: the guards around the capabilities, one bug for each --------------------------
    Bug("1 spawn keeps the program's own env:// rendezvous", "rpc_harness/_lifecycle.py",
        "self.ctx, self.init_method if init_method == DEFAULT_INIT_METHOD else init_method, timeout,",
        "self.ctx, init_method, timeout,",
        (WG + "test_1_a_programs_hard_coded_port_is_harmless_without_a_network_namespace",)),
    Bug("2 unfired faults unreported when the plan killed a rank", "rpc_harness/_supervisor.py",
        "            o.failed or o.status == R.SKIPPED for o in self.outcomes)\n",
        "            o.failed or o.status in (R.SKIPPED, R.KILLED) for o in self.outcomes)\n",
        (WG + "test_2_a_fault_that_never_fired_fails_the_world_also_when_the_plan_ended_a_rank[kill]",)),
    Bug("2 unfired faults unreported when the plan froze a rank", "rpc_harness/_supervisor.py",
        "stopped_early = self.timed_out or bool(self.problems) or any(",
        "stopped_early = self.timed_out or bool(self.problems) or bool(self.frozen) or any(",
        (WG + "test_2_a_fault_that_never_fired_fails_the_world_also_when_the_plan_ended_a_rank[freeze]",)),
    Bug("3 the liveness rule waits for one more timed-out ping", "rpc_harness/scenarios/_rpc.py",
        "return self._misses[peer] >= self.attempts", "return self._misses[peer] > self.attempts",
        (UG + "test_3_a_watched_peer_is_dead_at_exactly_the_third_timed_out_ping_in_a_row",
         UG + "test_3_the_threshold_is_the_attempts_given_not_one_more")),
    Bug("3 is_dead pings once more than the rule says", "rpc_harness/scenarios/_rpc.py",
        "    for _ in range(attempts):\n", "    for _ in range(attempts + 1):\n",
        (UG + "test_3_is_dead_pings_exactly_three_times_before_calling_a_silent_peer_dead",)),
    Bug("3 the rule's default is four pings", "rpc_harness/scenarios/_rpc.py",
        "PING_ATTEMPTS = 3 ", "PING_ATTEMPTS = 4 ",
        (UG + "test_3_the_liveness_rule_is_three_timed_out_pings_of_five_seconds_as_documented",)),
    Bug("4 the forkserver preloads only the harness's own modules", "rpc_harness/_preload.py",
        'for _name in _settings.get("modules", []):', 'for _name in _settings.get("modules", [])[:4]:',
        (WG + "test_4_the_forkserver_imported_this_test_module_and_rpc_preload_before_forking_the_ranks",
         WG + "test_4_outside_pytest_preload_and_the_environment_variable_reach_the_forkserver")),
    Bug("4 the plugin preloads no test module and no rpc_preload", "rpc_harness/pytest_plugin.py",
        'preload("pytest", *sorted(modules), *listed)', 'preload("pytest")',
        (WG + "test_4_the_forkserver_imported_this_test_module_and_rpc_preload_before_forking_the_ranks",)),
    Bug("4 RPC_HARNESS_PRELOAD ignored", "rpc_harness/_launcher.py",
        'extra = [m.strip() for m in os.environ.get("RPC_HARNESS_PRELOAD", "").split(",") if m.strip()]',
        "extra = []",
        (WG + "test_4_outside_pytest_preload_and_the_environment_variable_reach_the_forkserver",)),
    Bug("5 the deadline counts from the fork", "rpc_harness/_supervisor.py",
        'limit, budget = self.joined_at + self.spec.options.deadline, "deadline"',
        'limit, budget = self.forked_at + self.spec.options.deadline, "deadline"',
        (WG + "test_5_the_deadline_counts_from_when_every_rank_has_joined",)),
    Bug("5 a bring-up budget under 60 s is not kept", "rpc_harness/_supervisor.py",
        'limit, budget = self.forked_at + self.spec.bringup, "bring-up"',
        'limit, budget = self.forked_at + max(self.spec.bringup, 60.0), "bring-up"',
        (WG + "test_5_a_bring_up_longer_than_its_budget_fails_as_a_bring_up_naming_the_ranks_not_joined",)),
    Bug("5 the default bring-up budget is 0.25 s a rank", "rpc_harness/options.py",
        "return max(60.0, 0.5 * world_size)", "return max(60.0, 0.25 * world_size)",
        (UG + "test_5_the_default_bring_up_budget_is_60_s_or_half_a_second_a_rank",)),
    Bug("6 run --repeat 0 runs nothing and exits 0", "rpc_harness/apps/cli.py",
        "    if args.repeat < 1:\n", "    if args.repeat < 0:\n",
        (UG + "test_6_run_repeat_below_one_is_bad_input_before_any_world",)),
    Bug("6 budgets have no upper bound (inf passes)", "rpc_harness/options.py",
        "            0 < value <= MAX_SECONDS\n", "            0 < value\n",
        (OPT + "test_every_numeric_option_is_refused_or_accepted_at_its_edges_as_the_rule_says",
         PLUGIN + "test_a_budget_or_fuzz_out_of_range_at_the_flag_or_the_ini_is_a_usage_error_at_start_up",
         UG + "test_6_a_deadline_out_of_range_is_bad_input_naming_the_flag")),
    Bug("6 a budget of 0 s passes", "rpc_harness/options.py",
        "            0 < value <= MAX_SECONDS\n", "            0 <= value <= MAX_SECONDS\n",
        (OPT + "test_every_numeric_option_is_refused_or_accepted_at_its_edges_as_the_rule_says",)),
    Bug("6 fuzz has no upper bound (inf passes)", "rpc_harness/options.py",
        "not 0 <= value <= MAX_FUZZ:", "not 0 <= value:",
        (OPT + "test_every_numeric_option_is_refused_or_accepted_at_its_edges_as_the_rule_says",)),
    Bug("6 seeds past 2**63-1 pass", "rpc_harness/options.py",
        "not 0 <= value <= MAX_SEED:", "not 0 <= value:",
        (OPT + "test_every_numeric_option_is_refused_or_accepted_at_its_edges_as_the_rule_says",)),
    Bug("6 the plugin does not check flag and ini values at start-up", "rpc_harness/pytest_plugin.py",
        "values[name] = (option.read(raw, where) if isinstance(raw, str) else option.check(raw, where), where)",
        "values[name] = (option.parse(raw) if isinstance(raw, str) else raw, where)",
        (PLUGIN + "test_a_budget_or_fuzz_out_of_range_at_the_flag_or_the_ini_is_a_usage_error_at_start_up",)),
    Bug("6 rpc-harness flags are not checked", "rpc_harness/options.py",
        "            return option.read(text, flag)\n", "            return option.parse(text)\n",
        (UG + "test_6_a_deadline_out_of_range_is_bad_input_naming_the_flag",)),
    Bug("6 a token's option fields are not checked as they are read", "rpc_harness/repro.py",
        'options[name] = DECLARED[name].check(data[key], f"repro token field {key!r}")',
        "options[name] = data[key]",
        (UG + "test_6_a_crafted_token_with_a_budget_or_fuzz_out_of_range_is_refused_naming_its_field",)),
    Bug("7 ScenarioReport.ok ignores the outcome", "rpc_harness/scenario.py",
        "return self.contract_ok and self.outcome_ok and not self.mismatches and self.grads_covered",
        "return self.contract_ok and not self.mismatches and self.grads_covered",
        (UG + "test_7_a_report_is_ok_only_when_contract_outcome_coverage_and_every_tensor_are",
         UG + "test_7_a_run_that_did_not_learn_fails_check_and_rpc_harness_run")),
    Bug("7 the judge drops the outcome's verdict", "rpc_harness/scenario.py",
        "report.outcome_ok, report.outcome_note = outcome.ok, outcome.note",
        "report.outcome_ok, report.outcome_note = True, outcome.note",
        (UG + "test_7_the_judge_carries_the_outcome_verdict_into_the_report",)),
    Bug("8 rnn takes the owners to compare from the run alone", "rpc_harness/scenarios/rnn/judge.py",
        'for owner in sorted({k.split("/", 1)[0] for k in (*step[kind], *base[kind])}):',
        'for owner in sorted({k.split("/", 1)[0] for k in step[kind]}):',
        (UG + "test_8_rnn_a_rank_whose_tensors_are_all_missing_from_the_run_is_still_compared",)),
    Bug("8 a report ignores tensors left uncompared", "rpc_harness/scenario.py",
        "return self.grads_checked >= self.grads_expected", "return True",
        (UG + "test_8_a_judge_that_compares_fewer_tensors_than_the_baseline_has_fails_the_report",)),
    Bug("8 ps counts the baseline's tensors as compared", "rpc_harness/scenarios/parameter_server/judge.py",
        'result.checked += len(set(step["grads"]) & set(base.grads))', "result.checked += len(base.grads)",
        (UG + "test_8_ps_a_gradient_missing_from_the_servers_log_is_compared_and_counted",)),
    Bug("8 rl expects the run's tensors, not the baseline's", "rpc_harness/scenarios/rl/judge.py",
        "result.expected += len(e)", "result.expected += len(a)",
        (UG + "test_8_rl_a_gradient_missing_from_an_episode_is_compared_and_counted",)),
    Bug("9 a reaped trainer's queued request stays queued", "rpc_harness/scenarios/parameter_server/server.py",
        "            self._queue = deque(lease for lease in self._queue if lease.trainer != trainer)\n", "",
        (UG + "test_9_a_trainer_reaped_while_its_request_is_queued_is_never_granted_the_lease",
         WG + "test_9_a_trainer_killed_while_its_lease_request_is_queued_is_skipped_and_the_next_in_line_trains")),
    Bug("9 the step lease is granted last come first served", "rpc_harness/scenarios/parameter_server/server.py",
        "lease = self._queue.popleft()", "lease = self._queue.pop()",
        (UG + "test_9_the_step_lease_is_granted_first_come_first_served",)),
    Bug("10 a program's names are given to ranks in name order", "rpc_harness/_lifecycle.py",
        "key=lambda info: info.id)", "key=lambda info: info.name)",
        (WG + "test_10_a_programs_names_belong_to_the_ranks_that_took_them_whatever_their_sort_order",)),
    Bug("11 a call: failpoint strikes after the function ran", "rpc_harness/_callpoints.py",
        "    hit(point)\n    return original(*args, **kwargs)\n",
        "    result = original(*args, **kwargs)\n    hit(point)\n    return result\n",
        (WG + "test_11_a_call_failpoint_strikes_before_the_call_has_any_effect[function]",)),
    Bug("11 a call: failpoint on a callable object strikes after it ran", "rpc_harness/_callpoints.py",
        "        hit(point)\n        return func(*args, **kwargs)\n",
        "        result = func(*args, **kwargs)\n        hit(point)\n        return result\n",
        (WG + "test_11_a_call_failpoint_strikes_before_the_call_has_any_effect[callable-object]",)),
    Bug("11 an rpc.serve: failpoint strikes after the function ran", "rpc_harness/_rpc_hooks.py",
        '            for name in names:\n                self.ctx.failpoint(f"rpc.serve:{name}")\n'
        "            return func(*args, **kwargs)\n",
        "            result = func(*args, **kwargs)\n            for name in names:\n"
        '                self.ctx.failpoint(f"rpc.serve:{name}")\n            return result\n',
        (WG + "test_11_an_rpc_failpoint_strikes_before_the_function_runs[rpc.serve]",)),
    Bug("11 an rpc.call: failpoint strikes after the call was sent", "rpc_harness/_rpc_hooks.py",
        '        if not getattr(_serving_proxy_method, "active", False):\n            for name in names:\n'
        '                self.ctx.failpoint(f"rpc.call:{name}")\n',
        '        if not getattr(_serving_proxy_method, "active", False) and api == "rpc_async":\n'
        "            for name in names:\n"
        '                self.ctx.failpoint(f"rpc.call:{name}")\n'
        '        if api == "rpc_sync":\n            value = original(to, func, args, kwargs, timeout)\n'
        "            for name in names:\n"
        '                self.ctx.failpoint(f"rpc.call:{name}")\n            return value\n',
        (WG + "test_11_an_rpc_failpoint_strikes_before_the_function_runs[rpc.call]",)),
    Bug("12 the registry refuses one distribution seen twice", "rpc_harness/scenario.py",
        "if point.name in found and found[point.name].value != point.value:", "if point.name in found:",
        (UG + "test_12_one_distribution_seen_twice_registers_each_scenario_once",
         UG + "test_12_two_folders_holding_one_distribution_on_sys_path")),
    # -- issue 24's flakes, fixed at their cause -------------------------------------------------
    Bug("a msgfail counts a retry that failed for real", "rpc_harness/_tally.py",
        "\n                 if attempt <= failed]", "]",
        (FC + "test_a_msgfail_counts_the_tries_it_failed_not_a_later_try_that_failed_for_real",)),
    Bug("TensorPipe's listeners keep their backlog of 128", "rpc_harness/rank_setup.py",
        "        original(agent)\n        widen_listen_backlogs()\n", "        original(agent)\n",
        ("tests/world/test_launcher.py::test_every_listener_of_a_rank_takes_the_full_backlog_its_namespace_allows",)),
    # -- the README's other guarantees ------------------------------------------------------------
    Bug("a death the plan did not ask for is taken as planned", "rpc_harness/_supervisor.py",
        "return any(fired.kind in ENDING_KINDS for fired in faults_fired(self.events_of(rank)))",
        "return True",
        ("tests/world/test_launcher.py::test_a_sigkilled_rank_fails_the_world_naming_rank_and_signal",)),
    Bug("the harness never ends a frozen rank", "rpc_harness/_supervisor.py",
        "            _signal(self.procs[rank].pid, signal.SIGKILL)  # its exit is then seen as planned\n",
        "            pass\n",
        (FC + "test_a_freeze_stops_its_rank_in_exactly_the_hit_it_names_and_the_harness_ends_it",)),
    Bug("a graceful shutdown is asked for after a planned kill", "rpc_harness/_supervisor.py",
        "graceful = not self.frozen and not any(o.status == R.KILLED for o in self.outcomes)",
        "graceful = not self.frozen",
        ("tests/world/test_spawn.py::test_the_programs_own_graceful_shutdown_returns_after_a_planned_kill",)),
    Bug("no stacks at the deadline", "rpc_harness/_supervisor.py",
        "        alive = sorted(self.running)\n        self._dump_stacks(alive)\n",
        "        alive = sorted(self.running)\n",
        ("tests/world/test_launcher.py::test_a_hang_fails_at_the_deadline_with_every_ranks_stacks",)),
    Bug("a world's folder is left behind after a normal end", "rpc_harness/_launcher.py",
        "    else:\n        shutil.rmtree(workdir, ignore_errors=True)\n    _cuda_fork.warn_about_culprits(cuda_report())\n",
        "    _cuda_fork.warn_about_culprits(cuda_report())\n",
        ("tests/world/test_launcher.py::test_a_worlds_folder_is_removed_whatever_way_the_world_ends",)),
    Bug("worlds share the host's network namespace", "rpc_harness/_launcher.py",
        'mode = isolation_mode() if isolate is None else ("require" if isolate else "off")', 'mode = "off"',
        ("tests/world/test_isolation.py::test_nobody_outside_the_world_can_connect_to_its_ranks[tcp]",)),
    Bug("the sweep keeps a folder whose owner's pid was reused", "rpc_harness/_workdirs.py",
        "        if _start_time(pid) != start:\n", "        if not _start_time(pid):\n",
        ("tests/unit/test_launcher.py::test_the_sweep_removes_stamped_folders_of_dead_owners_and_nothing_else",)),
    Bug("the judge takes a scenario's word over a plan that did not do what it says", "rpc_harness/scenario.py",
        "    if world.problems:\n", "    if False:\n",
        ("tests/unit/test_scenario_shape.py::"
         "test_a_world_whose_plan_did_not_do_what_it_says_fails_the_contract_whatever_the_scenario_says",)),
    Bug("rl's contract lets the agent drop a live observer", "rpc_harness/scenarios/rl/judge.py",
        "    if killed != dropped:\n", "    if killed - dropped:\n",
        ("tests/unit/test_contracts.py::test_rl_a_live_observer_that_the_agent_dropped_breaks_the_contract",)),
    Bug("rnn's contract takes a late verdict for fail-fast", "rpc_harness/scenarios/rnn/judge.py",
        "if latency > world.deadline * FAIL_FAST_SHARE:", "if latency > world.deadline:",
        ("tests/unit/test_contracts.py::test_rnn_a_killed_server_named_late_breaks_the_contract",)),
    Bug("ps's contract lets the server reap a live trainer", "rpc_harness/scenarios/parameter_server/judge.py",
        '    if set(records.log["dead"]) - killed:\n', "    if False:\n",
        ("tests/unit/test_contracts.py::test_ps_a_trainer_reaped_that_the_plan_did_not_kill_breaks_the_contract",)),
    Bug("the ini wins over the command line", "rpc_harness/pytest_plugin.py",
        "    raw = config.getoption(_dest(flag))\n    if raw is not None:\n        return raw, flag\n",
        '    if config.getini(_dest(flag)):\n        return config.getini(_dest(flag)), f"ini {_dest(flag)}"\n'
        "    raw = config.getoption(_dest(flag))\n    if raw is not None:\n        return raw, flag\n",
        (PLUGIN + "test_a_worlds_options_come_from_the_call_then_the_marker_then_the_flags_then_the_ini",)),
    Bug("ranks do not die with their supervisor", "rpc_harness/rank_setup.py",
        "    try:\n        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)\n",
        "    return\n    try:\n        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)\n",
        (PLUGIN + "test_no_rank_outlives_a_sigkilled_pytest_and_the_next_session_sweeps_its_folder",)),
    Bug("every rank takes every core", "rpc_harness/rank_setup.py",
        "return max(len(os.sched_getaffinity(0)) // world_size, 1)", "return max(len(os.sched_getaffinity(0)), 1)",
        ("tests/world/test_launcher.py::test_ranks_share_the_cores_out_unless_the_env_says_otherwise",)),
    Bug("message faults refused from 33 ranks, not 34", "rpc_harness/spec.py",
        "len(resolved_names) > MAX_FAULTY_WORLD_SIZE", "len(resolved_names) >= MAX_FAULTY_WORLD_SIZE",
        ("tests/unit/test_launcher.py::test_message_faults_are_refused_past_33_ranks_before_any_process_starts",)),
    Bug("3 a broken connection counts as a timed-out ping", "rpc_harness/scenarios/_rpc.py",
        "            if outcome == FAILED:\n                return True\n",
        "            if outcome == FAILED:\n                outcome = TIMED_OUT\n",
        (UG + "test_3_a_broken_connection_is_death_at_once",)),
    Bug("3 a call from the peer does not reset its missed pings", "rpc_harness/scenarios/_rpc.py",
        "            self._misses[peer] = 0\n", "            pass\n",
        (UG + "test_3_an_answer_or_a_call_from_the_peer_starts_the_count_again",)),
    # -- issue 20: controlled schedules ------------------------------------------------------
    Bug("20 a choice is made while an issued call is on its way", "rpc_harness/_schedule/scheduler.py",
        "return (self.running is None and not self.mains_pending and not self.arrivals and not self.answers",
        "return (self.running is None and not self.mains_pending and not self.answers",
        (US + "test_no_choice_while_an_issued_call_has_not_arrived_or_been_answered",)),
    Bug("20 a call torch answers in C++ lets its caller's step end before the answer", "rpc_harness/_schedule/scheduler.py",
        "            if running is not None:\n                self.acks[call_id] = running\n                return\n",
        "",
        (US + "test_a_call_torch_answers_in_cpp_holds_its_caller_until_the_answer_is_in",)),
    Bug("20 a failing entry does not end the schedule", "rpc_harness/_schedule/scheduler.py",
        "                if failed:\n                    self.halt()",
        "                if failed:\n                    pass",
        (US + "test_a_failing_entry_ends_the_schedule_there",)),
    Bug("20 a replayed step that differs goes unnoticed", "rpc_harness/_schedule/recorder.py",
        "if (task.id, point) != (expected_task, expected_point):", "if False:",
        (US + "test_a_replay_that_takes_another_step_says_where_it_diverged",
         WS + "test_a_replay_that_no_longer_takes_the_same_steps_fails_saying_where")),
    Bug("20 every due timer ends at once, not the earliest first", "rpc_harness/_schedule/virtual_time.py",
        "            if first is not None and at != first:\n                break\n", "",
        (US + "test_timers_end_only_when_no_task_can_run_earliest_first",)),
    Bug("20 the random walk ignores the seed", "rpc_harness/_schedule/recorder.py",
        'self.rng = random.Random(derive_seed(seed, "schedule"))', "self.rng = random.Random(0)",
        (US + "test_the_same_seed_makes_the_same_choices_and_another_seed_others",)),
    Bug("20 a stalled world is never released", "rpc_harness/_schedule_link.py",
        "        if now - self.heard < STALL_SECONDS:\n            return None",
        "        if True:\n            return None",
        (WS + "test_a_lock_the_scheduler_cannot_see_gives_up_control_with_stacks_not_a_hang",)),
    Bug("20 a controlled world's replay line regenerates its schedule instead of taking its steps",
        "rpc_harness/repro.py",
        "return dataclasses.replace(spec, options=dataclasses.replace(spec.options, schedule=replay_schedule(steps)))",
        "return spec",
        (WS + "test_a_controlled_worlds_replay_line_takes_its_steps_and_fails_again",)),
    # -- issue 21: world options declared once ----------------------------------------------------
    Bug("21 the fixture drops a declared option given as an argument", "rpc_harness/pytest_plugin.py",
        "            if call.get(option) is not None:", '            if call.get(option) is not None and option != "setup":',
        (OPT + "test_every_option_given_to_the_fixture_reaches_the_world",)),
    Bug("21 a budget of more than a week passes", "rpc_harness/options.py",
        "            0 < value <= MAX_SECONDS", "            0 < value <= MAX_SECONDS * 2",
        (OPT + "test_seconds_are_accepted_exactly_when_finite_positive_and_at_most_a_week",
         OPT + "test_every_numeric_option_is_refused_or_accepted_at_its_edges_as_the_rule_says")),
    # -- issue 22: programs nobody here wrote ------------------------------------------------------
    Bug("22 a proxy method sent as the function fires its caller's failpoint again", "rpc_harness/_rpc_hooks.py",
        'if not getattr(_serving_proxy_method, "active", False):', "if True:",
        (FP + "test_1_an_rref_proxy_method_sent_as_the_function_is_named_like_a_proxy_call",)),
    Bug("22 messages still in torch's retries at the end are not reported lost", "rpc_harness/_tally.py",
        "touched, spent = tries.count(1), tries.count(TORCH_SEND_TRIES)",
        "touched = spent = tries.count(TORCH_SEND_TRIES)",
        (FP + "test_2_a_msgfail_that_loses_a_message_ends_in_a_verdict_even_when_the_world_ends_first",)),
    Bug("22 the Python replay line prints an argument without a literal form", "rpc_harness/repro.py",
        "    if unliteral is not None:\n        where, value = unliteral",
        "    if False:\n        where, value = unliteral",
        (FP + "test_6_no_replay_line_holds_an_argument_that_has_no_literal",)),
    Bug("22 a rank that aborts itself is labelled as killed", "rpc_harness/result.py",
        'if name == "SIGABRT":', 'if name == "SIGABRT-never":',
        (FP + "test_8_a_rank_that_aborts_itself_is_not_labelled_stopped_by_the_harness",)),
    Bug("22 a remote error's summary is its first line, not its innermost message", "rpc_harness/errors.py",
        "        inner = origin(error)\n", "        inner = str(error).strip().splitlines()[0]\n",
        (FP + "test_9_a_remote_errors_summary_line_carries_the_innermost_message",)),
    Bug("22 setup code never runs in the ranks", "rpc_harness/_rank.py",
        'options.setup.load(where=f"rank {boot.rank}: setup")()', "None",
        (FP + "test_10_setup_code_runs_in_every_rank_before_the_program",)),
    # -- issue 23: asserts in ranks, the torch check, device maps -----------------------------------
    Bug("23 ranks install no assert-rewriting hook", "rpc_harness/_asserts.py",
        "    sys.meta_path.insert(0, hook)\n    _hook = hook", "    _hook = None",
        ("tests/unit/test_asserts.py::test_matching_and_registered_modules_are_rewritten_and_explained_others_are_not",
         "tests/world/test_asserts.py::test_a_failing_assert_in_a_run_entry_reads_as_in_the_test_process")),
    Bug("23 a missing private torch name passes the check", "rpc_harness/_torch_check.py",
        "    required = found.required()\n    if required:", "    required = found.required()\n    if False:",
        (TC + "test_a_removed_name_fails_the_first_world_naming_torch_and_the_piece_before_any_process_starts",)),
    Bug("23 device maps without CUDA reach TensorPipe", "rpc_harness/_devices.py",
        "    if not _cuda_fork.cuda_available():\n        raise Unsupported(\n", "    if False:\n        raise Unsupported(\n",
        ("tests/unit/test_devices.py::test_device_maps_are_refused_in_init_rpc_without_cuda",
         "tests/world/test_devices.py::test_device_maps_are_refused_before_init_rpc_with_the_harness_reason")),
    # -- found this round: several ranks failing at once, replay lines, exit codes, axes, bench ----------
    Bug("a rank reporting its own failure is not waited for", "rpc_harness/_supervisor.py",
        "self._await_reports([r for r in busy if self._raised(r)])", "self._await_reports([])",
        ("tests/world/test_launcher.py::"
         "test_ranks_that_fail_while_the_world_is_being_stopped_are_reported_with_their_own_errors",)),
    Bug("a rank's exit status is read by two threads at once", "rpc_harness/_launcher.py",
        "        with self._poll_lock:\n            return super().poll(flag)", "        return super().poll(flag)",
        ("tests/world/test_launcher.py::test_a_rank_polled_from_two_threads_at_once_gives_both_its_exit_code",)),
    Bug("the pytest replay line drops the command line's world options", "rpc_harness/repro.py",
        "given = \"\".join(f\" {shlex.quote(flag if text is None else f'{flag}={text}')}\" for flag, text in flags)",
        'given = ""',
        (PLUGIN + "test_the_pytest_replay_line_keeps_the_world_options_of_the_command_line",)),
    Bug("an empty pct step count is read as none", "rpc_harness/schedule.py",
        "        if colon and not (length_text.isdigit()", "        if length_text and not (length_text.isdigit()",
        (US + "test_schedules_that_do_not_parse_are_refused_naming_where",)),
    Bug("an unwritable trace folder goes unmentioned", "rpc_harness/pytest_plugin.py",
        "            report.sections.append((f\"{prefix}trace\", written))", "            pass",
        (PLUGIN + "test_a_trace_folder_that_cannot_be_written_is_named_in_the_report",)),
    Bug("a trace shorter than a microsecond divides by a zero tick step", "rpc_harness/timeline.py",
        "    if hi - lo < 1.0:", "    if hi - lo <= 0:",
        ("tests/unit/test_timeline.py::test_a_trace_shorter_than_a_microsecond_gets_the_axis_of_a_world_of_no_length",)),
    Bug("the bench's death-to-report section reads events as records", "rpc_harness/apps/bench.py",
        'dying = next(e["t"] for e', "dying = next(e.t for e",
        ("tests/world/test_bench.py::test_the_time_from_a_death_to_its_report_is_measured",)),
    Bug("survivors are asked for stacks by faulthandler's signal, which can crash them", "rpc_harness/_supervisor.py",
        'unarmed = {r for r in ranks if not _stackdump.request(rank_file(self.workdir, r, "dump"))}',
        "unarmed = set(ranks)",
        ("tests/world/test_stacks.py::test_survivors_whose_threads_come_and_go_give_their_stacks_and_are_not_crashed",)),
    Bug("a rank that cannot answer for its stacks is never signalled", "rpc_harness/_supervisor.py",
        "        for rank in sorted(silent):\n            _signal(", "        for rank in sorted(silent)[:0]:\n            _signal(",
        ("tests/world/test_stacks.py::test_a_rank_holding_the_gil_in_c_still_gets_its_stacks",)),
    Bug("the thread answering for stacks dumps itself", "rpc_harness/_stackdump.py",
        "        if names.get(ident) == _THREAD_NAME:\n            continue\n", "",
        ("tests/world/test_stacks.py::test_asking_200_times_never_crashes_a_process_whose_threads_come_and_go",)),
    Bug("a stack answer cut short by a write still being copied in reads as whole", "rpc_harness/_stackdump.py",
        '    return f"\\n{END}\\n" in text', "    return bool(text)",
        ("tests/unit/test_stackdump.py::test_an_answer_is_whole_only_with_its_end_line_which_the_report_leaves_out",)),
    Bug("faulthandler's dump shows the thread that answers stack requests", "rpc_harness/_stacks.py",
        'line.endswith(" in _answer")', 'line.endswith(" in _answer_")',
        ("tests/world/test_stacks.py::test_a_rank_holding_the_gil_in_c_still_gets_its_stacks",)),
    Bug("a stack answer's end line shows in the report", "rpc_harness/_stacks.py",
        "if line != _stackdump.END]", "]",
        ("tests/unit/test_stackdump.py::test_an_answer_is_whole_only_with_its_end_line_which_the_report_leaves_out",)),
    Bug("a stack request to a rank that is not there raises", "rpc_harness/_stackdump.py",
        "if error.errno in (errno.ENOENT, errno.ENXIO):", "if False:",
        ("tests/unit/test_stackdump.py::test_a_request_with_no_one_to_answer_says_so",)),
    Bug("no grace before the survivors are stopped: a rank torch aborts is labelled stopped", "rpc_harness/_supervisor.py",
        "        time.sleep(0.05)\n", "",
        ("tests/world/test_stacks.py::test_a_survivor_dying_by_its_own_hand_as_the_world_is_stopped_is_not_labelled_stopped",)),
    Bug("the failure headline leaves out the schedule", "rpc_harness/result.py",
        'if self.schedule_label != "free":', "if False:",
        (WS + "test_a_failed_worlds_headline_names_its_schedule_and_fuzz",)),
    Bug("the failure headline leaves out the fuzz", "rpc_harness/result.py",
        "        if self.fuzz:\n", "        if False:\n",
        (WS + "test_a_failed_worlds_headline_names_its_schedule_and_fuzz",)),
    Bug("a pct schedule's step count is left out of its label", "rpc_harness/schedule.py",
        '(f":{self.length}" if self.length else "")', '""',
        (US + "test_a_schedule_is_labelled_as_it_was_given",)),
    Bug("an rpc_preload entry that cannot be found passes unseen", "rpc_harness/pytest_plugin.py",
        "if (problem := _unimportable(name)) is not None:", "if (problem := _unimportable(name)) is not None and False:",
        (PLUGIN + "test_an_rpc_preload_entry_that_cannot_be_found_is_warned_about_and_the_session_goes_on",)),
    Bug("a refused option's report shows the harness's check frames", "rpc_harness/spec.py",
        "            raise error.with_traceback(None)", "            raise",
        (PLUGIN + "test_a_refused_option_shows_the_users_line_and_the_message_not_the_harnesss_frames",)),
    Bug("a bad marker's report shows the fixture's frames", "rpc_harness/pytest_plugin.py",
        "        __tracebackhide__ = True  # a bad marker: its message says what and where\n", "",
        (PLUGIN + "test_a_refused_option_shows_the_users_line_and_the_message_not_the_harnesss_frames",)),
    Bug("--rpc-seed=abc leaves out the seed's range", "rpc_harness/pytest_plugin.py",
        "        value = raw  # not a number at all: the check names it, with the range, as for any seed",
        '        raise pytest.UsageError(f"{where}: invalid seed {raw!r}; use a whole number") from None',
        (PLUGIN + "test_bad_command_line_values_are_usage_errors",)),
    Bug("--version fails in a source tree never installed", "rpc_harness/apps/cli.py",
        "    except metadata.PackageNotFoundError:", "    except KeyError:",
        ("tests/unit/test_cli.py::test_the_cli_runs_from_a_source_tree_never_installed",)),
    Bug("--version names only the harness", "rpc_harness/apps/cli.py",
        'version=_versions())', 'version="rpc-harness")',
        ("tests/unit/test_cli.py::test_version_names_the_harness_torch_and_python",)),
    Bug("a dump right under faulthandler's is read as one thread", "rpc_harness/_stacks.py",
        "    for block in _THREADS_RE.split(text.strip()):", '    for block in text.strip().split("\\n\\n"):',
        ("tests/unit/test_stackdump.py::test_a_dump_right_under_faulthandlers_is_read_thread_by_thread",)),
    # Issue 28: bad input refused early and clearly.
    Bug("a --steps below the judge's minimum runs the whole world", "rpc_harness/scenario.py",
        "if budget_from and isinstance(budget, int) and budget < scenario.min_steps:",
        "if budget_from and isinstance(budget, int) and budget < 1:",
        (SHAPE + "test_a_budget_below_what_the_judge_needs_is_refused_before_any_world",)),
    Bug("the summary's column says steps, not what it counts", "rpc_harness/apps/cli.py",
        'header = ("scenario", "world", "faults", "optimizer steps", "outcome metric",',
        'header = ("scenario", "world", "faults", "steps", "outcome metric",',
        (UC + "test_the_summary_counts_optimizer_steps_not_the_steps_budget",)),
    Bug("a duplicate fault is accepted", "rpc_harness/faults.py",
        "earlier = first.setdefault((fault.kind, fault.target, fault.point, fault.hit), index)",
        "earlier = first.setdefault((fault.kind, fault.target, fault.point, fault.hit, index), index)",
        (UF + "test_a_duplicate_fault_is_refused_naming_both",)),
    Bug("an empty --faults drops the fault checks", "rpc_harness/apps/cli.py",
        "    if args.faults is not None and not args.faults:", "    if args.faults is None and not args.faults:",
        (UC + "test_bad_input_exits_2_naming_the_problem",)),
    Bug("a nan row of an ok world is not explained", "rpc_harness/apps/cli.py",
        "        if math.isnan(r.metric):", "        if math.isnan(r.metric) and not r.ok:",
        (UC + "test_a_nan_row_says_why_and_what_its_ok_rests_on",)),
    Bug("messages echo input in full", "rpc_harness/errors.py",
        "ECHO_LIMIT = 80", "ECHO_LIMIT = 1_000_000",
        (UF + "test_a_long_plan_is_cut_in_its_error", UC + "test_long_input_is_cut_in_the_message",
         "tests/unit/test_launcher.py::test_a_long_isolation_setting_is_cut_in_its_error")),
    Bug("5,000 digits called 'not a valid int'", "rpc_harness/options.py",
        "if digits.isascii() and digits.isdigit() and limit and len(digits) > limit:",
        "if digits.isascii() and digits.isdigit() and limit and len(digits) > 2 * limit:",
        (UC + "test_long_input_is_cut_in_the_message",)),
    Bug("an int too long to repr breaks the message naming the door", "rpc_harness/errors.py",
        "        except ValueError:  # more digits than Python converts",
        "        except OverflowError:  # more digits than Python converts",
        (OPT + "test_an_option_too_long_to_show_is_cut_and_named",)),
    Bug("run -n 0 is refused only after torch is imported", "rpc_harness/apps/cli.py",
        "    check_run_input(args)  # what needs no scenario", "    # check_run_input(args)  # what needs no scenario",
        (WC + "test_run_refuses_bad_input_before_importing_torch",)),
    Bug("a proxy's first call is named by the RRef's cached type fetch only", "rpc_harness/_rpc_hooks.py",
        "        torch._C._distributed_rpc.PyRRef._get_type = _type_wrapper(get_type)",
        "        pass",
        ("tests/world/test_spawn.py::"
         "test_rref_proxies_first_called_from_many_threads_at_once_are_named_by_their_type_every_time",)),
    Bug("a script's function is named __main__:fn in replay lines", "rpc_harness/entry.py",
        'return f"{self.main_file or self.module}:{self.qualname}"', 'return f"{self.module}:{self.qualname}"',
        ("tests/world/test_scripts.py::test_the_replay_lines_of_a_function_defined_in_a_script_work_from_anywhere",)),
    Bug("the README's explore example uses a program that is not installed", "README.md",
        "found = rpc_harness.explore(races.run_worker, 4, spawn=True, args=(4,), schedules=20)",
        "found = rpc_harness.explore(tutorial_ps.main, 3, spawn=True, args=(3, 2), schedules=20)",
        ("tests/world/test_docs.py::test_every_example_of_the_readme_and_the_docs_runs_as_printed",)),
    # Issue 28: what the reports did not say.
    Bug("a survivor that only served counts as past a planned kill", "rpc_harness/_supervisor.py",
        "any(o.status == R.OK and _called_from_its_code(o) for o in outcomes)",
        "any(o.status == R.OK for o in outcomes)",
        (I28 + "test_1_a_planned_kill_that_no_survivor_ran_past_fails_the_world_naming_it",)),
    Bug("a stale file:// store goes to torch unchecked", "rpc_harness/_lifecycle.py",
        '        _stores.check(getattr(options, "init_method", DEFAULT_INIT_METHOD), ctx.workdir)\n', "",
        (I28 + "test_2_a_store_an_earlier_run_left_behind_is_named_in_the_error",)),
    Bug("a world's own file:// store is left behind", "rpc_harness/_launcher.py",
        "            _stores.remove_made(workdir)\n", "",
        (I28 + "test_2_a_programs_own_store_goes_with_its_world_so_the_next_run_comes_up",)),
    Bug("a hang's headline leaves out the last injected error", "rpc_harness/result.py",
        '"(counted from when every rank had joined)") + self._lost_error()',
        '"(counted from when every rank had joined)")',
        (I28 + "test_3_a_hang_after_an_injected_error_names_that_error_in_its_headline",)),
    Bug("a rank's stacks alike an earlier rank's are shown again", "rpc_harness/result.py",
        "same = next((label for label, earlier in self.shown if same_stacks(text, earlier)), None)",
        "same = None",
        (I28 + "test_4_each_stack_is_shown_once_in_a_kills_report",)),
    Bug("a failed test's sections repeat the stacks its message shows", "rpc_harness/pytest_plugin.py",
        "if rank.stacks and result is not raised:", "if rank.stacks:",
        (I28 + "test_4_a_failed_tests_sections_do_not_repeat_the_stacks_its_message_shows",)),
    Bug("reports show the harness's own frames unasked", "rpc_harness/result.py",
        "show_harness_frames() if harness_frames is None else harness_frames", "True",
        (I28 + "test_4_the_harnesss_own_frames_are_left_out_unless_asked_for",)),
    # -- issue 28: the plugin under pytest-timeout, Ctrl-C, TOML configs, traces ---------------------
    Bug("28 a world a test timeout stops loses its ranks' stacks", "rpc_harness/_supervisor.py",
        "        self.ended = time.monotonic()\n        self._dump_stacks(sorted(self.running))\n",
        "        self.ended = time.monotonic()\n",
        (INT + "test_a_test_timeout_inside_a_world_reports_every_ranks_stacks_and_the_replay_line",)),
    Bug("28 pytest-timeout's thread method ends pytest without the ranks' stacks", "rpc_harness/pytest_plugin.py",
        'if settings.method != "thread" or not _runs_worlds(item):', "if True:",
        (INT + "test_a_thread_method_timeout_prints_every_ranks_stacks_and_the_replay_line_before_it_ends_pytest",)),
    Bug("28 a forkserver still importing outlives its parent", "rpc_harness/_preload.py",
        "            os._exit(0)  # the import under way may never return: no clean exit to wait for",
        "            return",
        (INT + "test_a_test_timeout_during_bring_up_gives_the_replay_line_and_leaves_no_forkserver",)),
    Bug("28 an orphaned forkserver leaves its parent's folders", "rpc_harness/_preload.py",
        "    if _parent_gone():\n        sweep()\n", "    if _parent_gone():\n        pass\n",
        (INT + "test_ctrl_c_to_an_xdist_controller_during_bring_up_leaves_no_folder_and_no_forkserver",)),
    Bug("28 every ini key typed string", "rpc_harness/options.py",
        'INI_TYPES: dict[Callable[[str], Any], str] = {parse_number: "float", parse_whole: "int"}',
        "INI_TYPES: dict[Callable[[str], Any], str] = {}",
        (PLUGIN + "test_ini_keys_are_typed_so_a_toml_config_gives_numbers_as_numbers",)),
    Bug("28 traces land in the user's tree", "rpc_harness/pytest_plugin.py",
        "        return str(cache.mkdir(TRACE_FOLDER))",
        '        return os.path.join(str(config.rootpath), ".rpc-harness", "traces")',
        (PLUGIN + "test_traces_go_to_pytests_cache_folder_by_default_not_into_the_users_tree",)),
    # Issue 29, item 4 (the scenarios on a device): what the CPU can check.
    Bug("run --device cuda is refused only once a world is launched", "rpc_harness/apps/cli.py",
        "    check_devices_here(args.device, fuzz=args.fuzz, jobs=jobs)\n", "",
        (SD + "test_run_device_cuda_is_refused_with_exit_2_in_one_line_before_any_world",
         SD + "test_run_device_cuda_with_fuzz_is_refused_where_cuda_is")),
    Bug("a CUDA token is replayed without the check for CUDA", "rpc_harness/apps/cli.py",
        '    check_devices_here(repro.options.get("devices"), fuzz=repro.fuzz, jobs=[Job(sc, repro, "replay")])\n', "",
        (SD + "test_a_cuda_token_replays_on_the_gpu_and_is_refused_here_before_any_world",)),
    Bug("bench --device cuda is not refused", "rpc_harness/apps/cli.py",
        "    check_devices_here(args.device)  # before any world, one line\n", "",
        ("tests/unit/test_bench.py::test_bench_device_cuda_is_refused_with_exit_2_in_one_line_before_any_world",)),
    Bug("a run's token drops its device", "rpc_harness/apps/cli.py",
        '        options["devices"] = args.device\n', "        pass\n",
        (SD + "test_run_device_cuda_reaches_every_world_and_its_token",)),
    Bug("run_scenario does not put the device in its token", "rpc_harness/scenario.py",
        '        options["devices"] = placed\n', "        pass\n",
        (SD + "test_run_scenario_gives_the_world_its_devices_and_puts_them_in_the_replay_lines",)),
    Bug("a CUDA run is judged with the CPU's tolerances", "rpc_harness/scenarios/_device.py",
        'if str(device).startswith("cuda"):', 'if str(device) == "cuda":',
        (SD + "test_a_cpu_run_keeps_its_configs_tolerances_and_a_cuda_run_gets_the_gpu_bounds",
         SD + "test_the_rl_judge_widens_its_tolerances_only_for_a_run_on_cuda",
         SD + "test_the_ps_and_rnn_judges_read_the_device_from_the_records")),
    Bug("the ps judge ignores the records' device", "rpc_harness/scenarios/parameter_server/judge.py",
        'device = str(actual.log.get("device", "cpu"))', 'device = "cpu"',
        (SD + "test_the_ps_and_rnn_judges_read_the_device_from_the_records",)),
    Bug("the RL policy stays on the CPU", "rpc_harness/scenarios/rl/agent.py",
        "self.policy = Policy(config.hidden, config.dropout).to(self.device)",
        "self.policy = Policy(config.hidden, config.dropout)",
        (SD + "test_each_scenarios_model_goes_to_its_ranks_device",)),
    Bug("the parameter server's model stays on the CPU", "rpc_harness/scenarios/parameter_server/server.py",
        "self.model = build_net(config, world_seed).to(self.device)", "self.model = build_net(config, world_seed)",
        (SD + "test_each_scenarios_model_goes_to_its_ranks_device",)),
    Bug("the RNN's embedding table stays on the CPU", "rpc_harness/scenarios/rnn/model.py",
        "        # owner's device (None: the device of the rank that builds it).\n"
        "        self.device = torch.device(device) if device is not None else here()\n"
        "        self.to(self.device)",
        "        # owner's device (None: the device of the rank that builds it).\n"
        "        self.device = torch.device(device) if device is not None else here()",
        (SD + "test_each_scenarios_model_goes_to_its_ranks_device",)),
    Bug("the RNN's dropout mask drawn from the global generator", "rpc_harness/scenarios/rnn/model.py",
        "mask = torch.empty(x.shape, dtype=x.dtype).bernoulli_(1.0 - p, generator=generator).to(x.device)",
        "mask = torch.empty(x.shape, dtype=x.dtype).bernoulli_(1.0 - p).to(x.device)",
        (SD + "test_the_rnn_dropout_draws_the_masks_it_drew_before_devices",)),
    Bug("the layered LSTM (CUDA's) draws its inter-layer masks unlike nn.LSTM", "rpc_harness/scenarios/rnn/model.py",
        "noise = torch.empty(x.shape, dtype=x.dtype).bernoulli_(1 - p).div_(1 - p)",
        "noise = torch.empty(x.shape, dtype=x.dtype).bernoulli_(p).div_(1 - p)",
        (SD + "test_the_layered_lstm_equals_nn_lstm_with_its_dropout_masks",)),
    # Issue 29 on the CPU: CUDA kept out of the forkserver, devices, channels, GPU memory; issue 28's extras.
    Bug("the pytest process asks for CUDA through the driver", "rpc_harness/pytest_plugin.py",
        "    ask_through_nvml()\n    warn_as(", "    warn_as(",
        (CF + "test_the_idiomatic_gpu_skipif_initializes_cuda_nowhere",)),
    Bug("a module that asked for CUDA in the forkserver stays preloaded", "rpc_harness/_preload.py",
        "        sys.modules.pop(_name, None)  # each rank imports it itself, where CUDA is allowed", "        pass",
        (CF + "test_a_module_that_asks_for_cuda_at_import_is_named_and_imported_by_each_rank",)),
    Bug("a rank forked after CUDA was initialized goes on", "rpc_harness/_rank.py",
        "            raise fork_error", "            pass",
        (CF + "test_a_rank_forked_after_cuda_was_initialized_says_who_and_what_to_do",)),
    Bug("a spawned rank without maps of its own offers no CUDA channels", "rpc_harness/_lifecycle.py",
        "merged = tensorpipe_options(merged.init_method, timeout, threads or 16, cuda_world=True,",
        "merged = tensorpipe_options(merged.init_method, timeout, threads or 16, cuda_world=False,",
        (WD + "test_every_rank_of_a_spawned_world_asks_for_the_cuda_channels_the_world_may_need",)),
    Bug("CUDA channels only for a rank whose own options name devices", "rpc_harness/_devices.py",
        "if (world or names_devices(device_maps, devices))", "if (names_devices(device_maps, devices))",
        (UD + "test_every_rank_of_a_world_that_may_move_cuda_tensors_offers_the_cuda_channels",)),
    Bug("devices='cuda' on a machine without CUDA starts the world", "rpc_harness/_devices.py",
        "    if not _cuda_fork.cuda_available():\n        raise Unsupported(f\"{where}: devices=",
        "    if False:\n        raise Unsupported(f\"{where}: devices=",
        (UD + "test_a_world_that_asks_for_cuda_is_refused_before_any_process_starts",)),
    Bug("ranks do not share GPUs round-robin", "rpc_harness/_devices.py",
        'return f"cuda:{rank % max(device_count, 1)}"', 'return "cuda:0"',
        (UD + "test_each_rank_gets_its_device_round_robin",)),
    Bug("a failed world's report leaves out the ranks' GPU memory", "rpc_harness/_supervisor.py",
        "        self._note_gpu_memory()\n        # Survivors", "        # Survivors",
        (WD + "test_a_failed_worlds_report_says_how_much_gpu_memory_each_rank_held",)),
    Bug("a missing extra is a traceback, not one line naming it", "rpc_harness/extras.py",
        'if error.name is None or error.name.split(".", 1)[0] != top:', "if True:",
        ("tests/world/test_install.py::test_a_missing_extra_is_one_line_naming_it_at_the_point_of_use",)),
    Bug("a 100,000-character failpoint name is echoed in every report", "rpc_harness/faults.py",
        "        if len(fault.point) > MAX_POINT:", "        if False:",
        (UF + "test_a_failpoint_name_longer_than_any_program_uses_is_refused_cut",)),
    Bug("--rpc-devices=cuda without CUDA fails every world test instead of the session", "rpc_harness/pytest_plugin.py",
        'if values.get("devices", ((), ""))[0]:', "if False:",
        (PLUGIN + "test_session_devices_this_machine_lacks_are_one_usage_error",)),
    Bug("a world that lost control passes its test without a warning", "rpc_harness/pytest_plugin.py",
        "if lost and (not strict or not result.ok):", "if False:",
        (CL + "test_a_world_that_lost_control_warns_with_the_step_and_the_stacks",)),
    Bug("the scheduler forgets the step it lost control at", "rpc_harness/_schedule/scheduler.py",
        "self.lost_at = len(self.steps)", "self.lost_at = None",
        (CL + "test_a_world_that_lost_control_warns_with_the_step_and_the_stacks",)),
    Bug("--rpc-schedule-strict only warns", "rpc_harness/pytest_plugin.py",
        "        if lost and strict:", "        if False:",
        (CL + "test_under_the_strict_flag_or_ini_key_a_world_that_lost_control_fails_its_test",)),
    Bug("the ini key rpc_schedule_strict is ignored", "rpc_harness/pytest_plugin.py",
        "bool(_session_setting(config, STRICT_OPTION)[0])", "bool(config.getoption(_dest(STRICT_OPTION)))",
        (CL + "test_under_the_strict_flag_or_ini_key_a_world_that_lost_control_fails_its_test[ini]",
         CL + "test_the_strict_ini_key_is_a_bool")),
    Bug("a strict session both warns and fails", "rpc_harness/pytest_plugin.py",
        "if lost and (not strict or not result.ok):", "if lost:",
        (CL + "test_under_the_strict_flag_or_ini_key_a_world_that_lost_control_fails_its_test",)),
    Bug("an exploration forgets which worlds lost control", "rpc_harness/explore.py",
        "self.lost_at = self.world.control_lost_at", "self.lost_at = None",
        (UCL + "test_an_exploration_whose_worlds_lost_control_says_how_many_and_where",
         CL + "test_explore_counts_the_worlds_that_lost_control_and_where")),
    Bug("an exploration of worlds that lost control says 'no schedule failed' alone", "rpc_harness/explore.py",
        "            if self.lost:\n                return", "            if False:\n                return",
        (UCL + "test_an_exploration_whose_worlds_lost_control_says_how_many_and_where",)),
    Bug("'rpc-harness run --repeat' does not say that worlds lost control", "rpc_harness/apps/cli.py",
        '            print("\\n".join(found.summary()[1:]))\n            continue', "            continue",
        (UCL + "test_run_repeat_under_a_schedule_counts_the_worlds_that_lost_control",)),
    Bug("the pytest replay line drops --rpc-schedule-strict", "rpc_harness/pytest_plugin.py",
        "    if config.getoption(_dest(STRICT_OPTION)):  # a lost control", "    if False:  # a lost control",
        (PLUGIN + "test_the_pytest_replay_line_keeps_the_world_options_of_the_command_line",)),
    Bug("controlled read from the note's text", "rpc_harness/result.py",
        'return self.schedule_label != "free" and self.control_lost_at is None',
        'return bool(self.schedule_note) and not self.schedule_note.startswith("no longer")',
        ("tests/unit/test_control_lost.py::"
         "test_whether_a_world_stayed_controlled_is_one_predicate_on_the_step_it_was_lost_at",)),
    Bug("the parameter server's condition holds an RLock (no tensors extracted on CUDA)",
        "rpc_harness/scenarios/parameter_server/server.py",
        "self._cv = threading.Condition(threading.Lock())", "self._cv = threading.Condition()",
        (SD + "test_the_parameter_server_gives_up_its_tensors_to_a_cuda_aware_owner_rref",)),
    Bug("the forkserver never asks the driver after a preloaded module", "rpc_harness/_preload.py",
        "    if _rewriting:\n        _watch.imported(_name)\n", "",
        (CF + "test_a_module_that_initialized_the_driver_is_named_and_cuda_worlds_say_so",)),
    Bug("a driver culprit stops no rank", "rpc_harness/_cuda_fork.py",
        "if wants_cuda and driver_culprits and not", "if False and driver_culprits and not",
        (CF + "test_a_driver_culprit_stops_only_ranks_of_worlds_that_ask_for_cuda",
         CF + "test_a_module_that_initialized_the_driver_is_named_and_cuda_worlds_say_so")),
    Bug("a driver culprit stops CPU worlds too", "rpc_harness/_cuda_fork.py",
        "if wants_cuda and driver_culprits and not", "if driver_culprits and not",
        (CF + "test_a_driver_culprit_stops_only_ranks_of_worlds_that_ask_for_cuda",
         CF + "test_a_module_that_initialized_the_driver_is_named_and_cuda_worlds_say_so")),
    Bug("PCT's bound uses the depth, not the depth less one", "rpc_harness/apps/bench.py",
        "return 1.0 / (tasks * steps ** (depth - 1))", "return 1.0 / (tasks * steps ** depth)",
        ("tests/unit/test_bench.py::test_pcts_bound_is_one_over_n_k_to_the_depth_less_one",)),
    Bug("a seed that never failed counts as failing at its cap", "rpc_harness/apps/bench.py",
        'ordered = sorted(float("inf") if c is None else c for c in counts)',
        "ordered = sorted(cap if c is None else c for c in counts)",
        ("tests/unit/test_bench.py::"
         "test_worlds_until_failure_count_a_capped_seed_as_worse_than_any_and_all_its_worlds",)),
    Bug("a stack request to a rank that just died raises", "rpc_harness/_stackdump.py",
        "    except BrokenPipeError:  # the rank died between the open and the write (seen in a bench)\n        return False\n",
        "",
        ("tests/unit/test_stackdump.py::test_a_rank_that_dies_between_the_open_and_the_write_is_gone_not_an_error",)),
    Bug("a CUDA world's unextractable value goes unexplained", "rpc_harness/result.py",
        'how = f"raised {self.error} ({when}){_torch_note(self.error)}"', 'how = f"raised {self.error} ({when})"',
        ("tests/unit/test_contracts.py::test_a_cuda_worlds_unextractable_value_is_explained_in_the_ranks_line",)),
    Bug("a wait on an RRef's type fetch is part of the caller's step", "rpc_harness/_gate.py",
        '        _gate.block(("rref", fetched), "wait rref type")\n', "",
        ("tests/world/test_schedule.py::"
         "test_proxy_calls_on_an_rref_whose_constructor_makes_an_rpc_stay_controlled_on_every_seed",)),
    Bug("the scheduler chooses before the world is quiet", "rpc_harness/_schedule/scheduler.py",
        "if not self.controlled or self.halted or not self.quiet():", "if not self.controlled or self.halted:",
        ("tests/unit/test_scheduler_model.py::test_the_scheduler_keeps_its_guarantees_against_the_model",)),
    Bug("a task waiting for a call runs before the call is answered", "rpc_harness/_schedule/scheduler.py",
        "return call is None or call.settled  # a call the scheduler never saw", "return True  # a call the scheduler never saw",
        ("tests/unit/test_scheduler_model.py::test_the_scheduler_keeps_its_guarantees_against_the_model",)),
    Bug("the sleeps that end first are not the earliest", "rpc_harness/_schedule/virtual_time.py",
        "            if first is not None and at != first:\n                break\n", "",
        ("tests/unit/test_scheduler_model.py::test_the_scheduler_keeps_its_guarantees_against_the_model",)),
    Bug("a Go after a plain point carries a timed-out wait's notified=False", "rpc_harness/_schedule/scheduler.py",
        "        if state == READY:  # a scheduling point, not a wait: its Go says nothing timed out\n            task.notified = True\n",
        "        if state == READY:\n",
        ("tests/unit/test_scheduler_model.py::test_the_scheduler_keeps_its_guarantees_against_the_model",)),
    Bug("a wait for an RRef whose owner died never ends under control", "rpc_harness/_schedule/scheduler.py",
        "            if call.to == rank and call.rref is not None and self.pending_rrefs.pop(call.rref, None) is not None:",
        "            if False:",
        ("tests/unit/test_scheduler_model.py::test_the_scheduler_keeps_its_guarantees_against_the_model",)),
    Bug("PCT never lowers the task that ran at a change point", "rpc_harness/_schedule/strategies.py",
        "                self.lowered[history.last.id] = len(self.lowered) + 1", "                pass",
        ("tests/unit/test_schedule_strategies.py::test_pct_drops_the_task_that_ran_below_every_other_at_each_change_point",)),
    Bug("PCT's priorities follow the order tasks arrive in", "rpc_harness/_schedule/strategies.py",
        'return float(derive_seed(self.seed, "pct", task.id))', "return 0.0",
        ("tests/unit/test_schedule_strategies.py::test_pcts_priorities_come_from_the_seed_and_the_task_not_the_order_tasks_arrive_in",)),
    Bug("the random walk draws from the global random stream", "rpc_harness/_schedule/strategies.py",
        "ready[history.rng.randrange(len(ready))]", "ready[random.randrange(len(ready))]",
        ("tests/unit/test_schedule_strategies.py::test_the_random_walk_draws_from_the_schedules_stream_alone",)),
    Bug("a replay whose task cannot run goes on silently", "rpc_harness/_schedule/strategies.py",
        '                history.diverged(f"step {step}: expected', '                (f"step {step}: expected',
        ("tests/unit/test_schedule_strategies.py::test_a_replay_takes_its_steps_and_says_where_it_can_no_longer",)),
    Bug("a guide ignores its recorded choices", "rpc_harness/_schedule/strategies.py",
        "wanted = self.prefer.get(key)", "wanted = None",
        ("tests/unit/test_schedule_strategies.py::test_a_guide_follows_its_choices_where_the_same_moment_comes_and_else_goes_on",)),
    Bug("the schedule option's check forgets what it parsed", "rpc_harness/options.py",
        "    _remember(text, parsed)\n    return text", "    return text",
        ("tests/unit/test_options.py::"
         "test_the_schedule_option_is_parsed_once_into_the_value_every_part_of_the_world_reads",)),
    Bug("the reused world's RRef search prints deprecated objects' warnings", "rpc_harness/_clean.py",
        '        warnings.simplefilter("ignore")\n', "",
        ("tests/world/test_reuse.py::"
         "test_an_entry_that_breaks_a_rule_fails_its_own_test_and_the_next_gets_a_fresh_world[rrefs]",)),
    Bug("the driver is read as initialized on any answer", "rpc_harness/_cuda_fork.py",
        "cuDeviceGetCount(ctypes.byref(count)) == _CUDA_SUCCESS)", "cuDeviceGetCount(ctypes.byref(count)) is not None)",
        (CF + "test_the_driver_is_asked_whether_it_was_initialized_without_initializing_it",)),
    # Reused worlds (rpc_world_module, rpc_world_session): each rule's check, and what ends a world.
    Bug("a reused world's RRef rule not checked on the owner", "rpc_harness/_clean.py",
        "    if owners or forks:\n", "    if False:\n",
        (RW + "test_an_entry_that_breaks_a_rule_fails_its_own_test_and_the_next_gets_a_fresh_world[rrefs]",)),
    Bug("a reused world's RRefs left not named", "rpc_harness/_clean.py",
        "        lines += [f\"rrefs: {label} {text}\" for text in held_rrefs()]", "        pass",
        (RW + "test_an_entry_that_breaks_a_rule_fails_its_own_test_and_the_next_gets_a_fresh_world[rrefs]",)),
    Bug("a reused world's dist_autograd rule not checked", "rpc_harness/_clean.py",
        "    if contexts or passes:\n", "    if False:\n",
        (RW + "test_an_entry_that_breaks_a_rule_fails_its_own_test_and_the_next_gets_a_fresh_world"
              "[dist_autograd]",)),
    Bug("a reused world's futures rule not checked", "rpc_harness/_clean.py",
        "    if issued or fetches:\n", "    if False:\n",
        (RW + "test_an_entry_that_breaks_a_rule_fails_its_own_test_and_the_next_gets_a_fresh_world[futures]",)),
    Bug("a reused world's idle rule misses calls being served", "rpc_harness/_clean.py",
        "    if serving:\n", "    if False:\n",
        (RW + "test_an_entry_that_breaks_a_rule_fails_its_own_test_and_the_next_gets_a_fresh_world[futures]",)),
    Bug("a reused world's idle rule misses threads the entry left running", "rpc_harness/_clean.py",
        "    if started:\n", "    if False:\n",
        (RW + "test_an_entry_that_breaks_a_rule_fails_its_own_test_and_the_next_gets_a_fresh_world[idle]",)),
    Bug("a dirty reused world runs the next entry", "rpc_harness/_live.py",
        "        if dirt or broken:\n", "        if broken:\n",
        (RW + "test_an_entry_that_breaks_a_rule_fails_its_own_test_and_the_next_gets_a_fresh_world[idle]",)),
    Bug("a reused world whose rank died during the check is taken as clean", "rpc_harness/_live.py",
        "broken = not self.running or bool(self.problems) or any(o.failed for o in self.outcomes)",
        "broken = False",
        (RW + "test_a_rank_that_dies_during_the_check_ends_the_world_there",)),
    Bug("a reused world that lost a rank runs the next entry", "rpc_harness/_live.py",
        "        if gone:\n            self.kill_all()", "        if False:\n            self.kill_all()",
        (RW + "test_a_kill_a_hang_and_a_failure_each_end_the_world",)),
    Bug("a reused world's entry counts the hits of the entries before it", "rpc_harness/_live.py",
        'read_event_lines(rank_file(self.workdir, rank, "events"), self.events_read.get(rank, 0))',
        'read_event_lines(rank_file(self.workdir, rank, "events"))',
        (RW + "test_fault_plans_count_hits_per_entry",)),
    Bug("a reused world's entry runs with the RNGs the last one left", "rpc_harness/_rank.py",
        "    seed_everything(ctx.seed)\n    _rpc_hooks.start(ctx, events)", "    _rpc_hooks.start(ctx, events)",
        (RW + "test_entries_of_one_shape_share_a_world_and_each_gets_its_own_seed",)),
    Bug("reused worlds run what they cannot (schedules, fuzz, message faults, spawn)", "rpc_harness/pytest_plugin.py",
        "        reason = refusal(spec)", "        reason = None",
        (RW + "test_worlds_a_reused_world_cannot_run_are_refused_by_name",)),
    Bug("a reused worlds' scope keeps every shape live", "rpc_harness/_live.py",
        "            while len(self._worlds) >= self.limit:", "            while False:",
        (RW + "test_a_scope_keeps_two_shapes_live_and_closes_the_least_recently_used",)),
    Bug("a reused worlds' scope closes the most recently used", "rpc_harness/_live.py",
        "self._worlds.popitem(last=False)[1].close()", "self._worlds.popitem(last=True)[1].close()",
        (RW + "test_a_scope_keeps_two_shapes_live_and_closes_the_least_recently_used",)),
    Bug("live worlds outlive their module", "rpc_harness/pytest_plugin.py",
        "    finally:\n        pool.close()", "    finally:\n        pass",
        (RW + "test_live_worlds_leave_no_process_or_folder_behind",)),
    Bug("the store's barrier lets a rank through before the last has arrived", "rpc_harness/_rendezvous.py",
        "if arrived == self._size:", "if arrived >= 1:",
        (URV + "test_nobody_leaves_the_barrier_before_the_last_rank_arrives",)),
    Bug("the store's device-map exchange skips torch's checks", "rpc_harness/_rendezvous.py",
        "    backend_registry._validate_device_maps(all_names, all_device_counts, all_device_maps, all_devices)\n",
        "",
        (URV + "test_the_exchange_through_the_store_gives_what_torchs_own_gives",)),
    Bug("ranks build torch's Gloo group whatever the world's rendezvous", "rpc_harness/_rank.py",
        "_rendezvous.choose(options.rendezvous)", "_rendezvous.choose('gloo')",
        (WRV + "test_a_run_world_builds_a_gloo_group_only_when_asked_and_its_rpcs_are_the_same",
         WRV + "test_a_spawned_programs_init_rpc_builds_a_gloo_group_only_when_asked")),
    Bug("stopping a world waits for the stacks of a rank that exited", "rpc_harness/_supervisor.py",
        "if not self._dumped(r, whole=r not in signalled) and not self._exited(r)}",
        "if not self._dumped(r, whole=r not in signalled)}",
        ("tests/unit/test_stackdump.py::"
         "test_stopping_a_world_waits_for_a_live_ranks_stacks_but_not_for_a_rank_that_exited",)),
    Bug("a lost rank's late reports are acted on", "rpc_harness/_schedule/scheduler.py",
        "if not self.controlled or rank in self.gone or rank in self.frozen:", "if not self.controlled:",
        (US + "test_reports_a_frozen_rank_sent_before_its_freeze_read_after_it_are_ignored",)),
    Bug("ranks keep the soft limit on open files they were started with", "rpc_harness/_preload.py",
        "raise_open_files()  # every rank inherits it", "pass  # every rank inherits it",
        ("tests/world/test_launcher.py::test_a_256_rank_world_comes_up_and_every_rank_answers_its_neighbour",)),
    Bug("after a death an entry that returned runs torch's non-graceful teardown", "rpc_harness/_lifecycle.py",
        "        if graceful or not after_entry:", "        if True:",
        ("tests/unit/test_lifecycle_leave.py::"
         "test_after_a_death_an_entry_that_returned_skips_torchs_non_graceful_teardown",)),
    Bug("the soft limit on open files is raised to one short of the hard one", "rpc_harness/_limits.py",
        "min(hard, _CEILING)", "min(hard - 1, _CEILING)",
        ("tests/unit/test_limits.py::test_the_soft_limit_is_raised_to_the_hard_one_and_the_hard_one_kept",)),
    Bug("the test process keeps its soft limit on open files before a big world", "rpc_harness/_launcher.py",
        "        _limits.raise_open_files()  # the supervisor's pipes", "        pass  # the supervisor's pipes",
        ("tests/world/test_launcher.py::test_a_256_rank_world_comes_up_and_every_rank_answers_its_neighbour",)),
    Bug("ranks start with oneMKL's math kernels unchosen (their RPC threads may race to choose them)",
        "rpc_harness/_rank.py", "warm_math_kernels()  # before", "pass  # before",
        ("tests/world/test_launcher.py::test_every_rank_starts_with_onemkls_math_kernels_chosen_on_one_thread",)),
    Bug("the math kernels' warm-up leaves tanh out", "rpc_harness/rank_setup.py",
        '"sqrt", "tan", "tanh", "trunc")', '"sqrt", "tan", "trunc")',
        ("tests/unit/test_math_kernels.py::test_the_warm_up_covers_every_op_this_torch_hands_to_onemkl",)),
    Bug("rpc_harness.preload takes a module that cannot be found without a word", "rpc_harness/_launcher.py",
        '            _warn_once("rpc_harness.preload", problem)\n        elif', "            pass\n        elif",
        ("tests/unit/test_launcher.py::test_a_preloaded_module_that_cannot_be_found_is_named_once_and_left_out",)),
    Bug("the ps judge compares only the steps both sides have", "rpc_harness/scenarios/parameter_server/judge.py",
        "    for index in range(max(len(steps), len(expected.steps))):", "    for index in range(min(len(steps), len(expected.steps))):",
        ("tests/unit/test_ps_judge.py::test_a_step_only_one_side_has_is_a_mismatch_not_a_crash",)),
    Bug("prepare sets the cuDNN flags by assignment (refused where torch's test utilities froze them)",
        "rpc_harness/scenarios/_device.py",
        "    torch.backends.cudnn.set_flags(_benchmark=False, _deterministic=True, _allow_tf32=False)\n",
        "    torch.backends.cudnn.allow_tf32 = False\n    torch.backends.cudnn.deterministic = True\n"
        "    torch.backends.cudnn.benchmark = False\n",
        ("tests/unit/test_scenario_devices.py::"
         "test_prepare_for_cuda_works_where_torchs_test_utilities_froze_the_cudnn_flags",)),
    Bug("the rl scenario preloads gymnasium where the core install lacks it (a warning at every listing)",
        "rpc_harness/scenarios/rl/roles.py", 'if installed("gymnasium"):', "if True:",
        ("tests/world/test_install.py::test_a_missing_extra_is_one_line_naming_it_at_the_point_of_use",)),
    Bug("argparse's refusals print the whole usage before the error", "rpc_harness/apps/cli.py",
        '        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\\n")',
        "        super().error(message)",
        ("tests/unit/test_cli.py::test_what_argparse_refuses_is_one_line_naming_it",)),
    Bug("a msgfail=N whose retries the world's end cut short passes as done", "rpc_harness/_tally.py",
        "        if touched > failed_enough:", "        if False:",
        ("tests/unit/test_tally.py::test_messages_failed_fewer_times_than_asked_are_counted",
         "tests/world/test_fault_controls.py::"
         "test_a_msgfail_whose_retries_the_worlds_end_cut_short_fails_the_world_saying_so")),
    Bug("the supervisor never asks which msgfail faults were cut short", "rpc_harness/_supervisor.py",
        " + _tally.cut_short(plan, self.outcomes)", "",
        ("tests/world/test_fault_controls.py::"
         "test_a_msgfail_whose_retries_the_worlds_end_cut_short_fails_the_world_saying_so",)),
    Bug("a Hypothesis test's replay section claims its line replays the examples anywhere",
        "rpc_harness/pytest_plugin.py", "_pytest_line_of(item) + _hypothesis_note(item)))", "_pytest_line_of(item)))",
        ("tests/world/test_plugin.py::"
         "test_a_hypothesis_tests_replay_section_says_where_its_failing_example_comes_back_from",)),
    Bug("the pytest replay line names tests relative to the rootdir, not where pytest was started",
        "rpc_harness/pytest_plugin.py", "pytest_line([_from_invocation(config, nodeid) for nodeid in nodeids],",
        "pytest_line(list(nodeids),",
        ("tests/world/test_plugin.py::test_the_pytest_replay_line_runs_from_the_folder_pytest_was_started_in",)),
    Bug("a summary keeps a missing metric as NaN (not JSON)", "rpc_harness/scenario.py",
        "    out = _finite(out)\n", "",
        ("tests/unit/test_guards.py::test_a_summary_with_no_metric_is_strict_json_with_null_in_its_place",)),
    Bug("the math kernels' warm-up runs float32 only", "rpc_harness/rank_setup.py",
        "for dtype in (torch.float32, torch.float64):\n        one", "for dtype in (torch.float32,):\n        one",
        ("tests/unit/test_math_kernels.py::"
         "test_the_warm_up_calls_each_op_for_float32_and_float64_on_the_calling_thread",)),
)


def environment(repo: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(repo), *filter(None, [env.get("PYTHONPATH")])])
    return env


def check_imports(repo: Path, python: str) -> None:
    """Refuse to go on unless the copy's packages are the ones imported."""
    code = ("import rpc_harness, rpc_harness.scenarios, rpc_harness.apps.cli; "
            "print(rpc_harness.__file__, rpc_harness.scenarios.__file__, rpc_harness.apps.cli.__file__)")
    out = subprocess.run([python, "-c", code], cwd=repo, env=environment(repo), capture_output=True, text=True,
                         check=True).stdout.split()
    outside = [path for path in out if not Path(path).resolve().is_relative_to(repo)]
    if outside:
        sys.exit(f"plant_bugs: these import from outside {repo}: {outside}; refusing to plant anything")
    print(f"imports from the copy: {', '.join(out)}")


def run_tests(repo: Path, python: str, tests: tuple[str, ...], timeout: float,
              show: bool = False) -> tuple[str, float]:
    """(outcome, seconds): 'passed', 'failed', 'timeout' or 'error (exit N)';
    with ``show``, the failures' summary lines are printed (how a bug was caught)."""
    command = [python, "-m", "pytest", "-q", "-rf", "-p", "no:randomly", "-p", "no:cacheprovider", *tests]
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
        if show:
            for line in out.splitlines():
                if line.startswith("FAILED "):
                    print(f"      {line[:400]}")
        return "failed", took
    print(out[-3000:])
    return f"error (exit {proc.returncode})", took


def plant(repo: Path, bug: Bug, python: str, timeout: float, show: bool = False) -> tuple[str, float]:
    path = repo / bug.file
    text = path.read_text()
    count = text.count(bug.original)
    if count != 1:
        raise SystemExit(f"plant_bugs: {bug.file} holds the snippet of {bug.name!r} {count} times, not once: "
                         "refusing to plant it (update the snippet)")
    try:
        path.write_text(text.replace(bug.original, bug.replacement))
        return run_tests(repo, python, bug.tests, timeout, show)
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
    parser.add_argument("--show", action="store_true", help="print how each caught bug failed its tests")
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
        outcome, took = plant(repo, bug, args.python, args.timeout, args.show)
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
