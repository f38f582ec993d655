"""Programs nobody here wrote, written the tutorials' way, run under spawn:
how their RPCs are named, lost messages, their own stores, options and
timeouts, shutdowns, replay lines and tokens, their own deaths, remote
errors, setup code. Each test runs a program of the shape that exposed a
defect (tests/programs/, none of which imports the harness; issue 22), and
failed before its fix, for the reason its name gives.

This module does import-time setup of its own, on purpose (see "a replay
token and the test module's import-time setup" below): the
RL tutorial as printed parses its command line when imported, so the
module hands it a clean ``sys.argv`` first, as a test of such a script must.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

import rpc_harness
from rpc_harness import WorldFailed, WorldSpecError
from rpc_harness.faults import FaultPlan

# The tutorial's module-level parse_args() must not see pytest's command line.
_argv, sys.argv = sys.argv, sys.argv[:1]
try:
    from programs import rl_argparse  # noqa: E402
finally:
    sys.argv = _argv

from programs import (  # noqa: E402
    autograd_cleanup,
    ddp_rpc,
    needs_setup,
    own_options,
    remote_raise,
    rl_proxy_kickoff,
    self_abort,
    stuck_handler,
    with_config,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def text(plan: str) -> str:
    """A fault's canonical text, as fault_counts() keys it."""
    return str(FaultPlan.parse(plan))


def served_and_issued(result):
    return {e["func"] for r in result for e in r.events if e["kind"] in ("rpc_begin", "serve_begin")}


# -- RPCs named so that a plan can aim at them ---------------------------------------------


def test_an_rref_proxy_method_sent_as_the_function_is_named_like_a_proxy_call(rpc_world):
    # The agent kicks off each episode with
    # rpc_async(ob_rref.owner(), ob_rref.rpc_sync().run_episode, ...): the
    # function sent is functools.partial(_invoke_rpc, rref, rpc_sync, 'run_episode', ...).
    kickoff = text("delay:agent@rpc.call:Observer.run_episode=0.01s")
    served = text("delay:observer1@rpc.serve:Observer.run_episode=0.01s")
    # The observer's call to itself inside _invoke_rpc is torch's plumbing: no rpc.call failpoint of its own.
    plumbing = text("delay:observer1@rpc.call:Observer.run_episode?=0.01s")
    result = rpc_world.spawn(rl_proxy_kickoff.run_worker, args=(3, 2, 5), nprocs=3,
                             faults=f"{kickoff},{served},{plumbing}", check=False)
    unaimable = sorted(n for n in served_and_issued(result) if "partial" in n or " at 0x" in n)
    assert not unaimable, f"RPCs named so that no plan can aim at them: {unaimable}"
    assert result.ok, result.report()
    # Two episodes, two observers: four kick-offs issued by the agent; each
    # observer runs one episode per kick-off (torch's own hop from the
    # observer to itself inside _invoke_rpc is not a second episode).
    assert result.fault_counts() == {kickoff: 4, served: 2, plumbing: 0}


# -- a lost message's verdict when the world ends first ------------------------------------


def test_a_msgfail_that_loses_a_message_ends_in_a_verdict_even_when_the_world_ends_first(rpc_world):
    # Leaving the dist_autograd context sends CLEANUP_AUTOGRAD_CONTEXT_REQ;
    # =6 fails all of torch's tries, which run ~1 s apart (with back-off),
    # and the program shuts down at once.
    plan = text("msgfail:worker0@CLEANUP_AUTOGRAD_CONTEXT_REQ=6")
    result = rpc_world.spawn(autograd_cleanup.run_worker, args=(2,), nprocs=2, faults=plan, check=False)
    assert result.values[0] == [2.0, 2.0, 2.0], "the program itself did its step"
    assert not result.timed_out, f"the world ended first, not at its deadline:\n{result.report()}"
    assert result.fault_counts()[plan] >= 1, "torch failed the message's first try at least"
    verdicts = [p for p in result.problems if plan in p]
    assert verdicts, (f"a plan that loses a message ended with no verdict about it (ok={result.ok}, "
                      f"counts={result.fault_counts()}, problems={result.problems})")
    assert re.search(r"lost|pending|still being retried|before torch", verdicts[0]), verdicts[0]
    assert not result.ok


# -- a program's own TCP store, two worlds at once -----------------------------------------


# One of the suite's slowest (pytest --durations): a race that failed about one run in six needs
# many runs: ten in each of two streams at once.
@pytest.mark.long
def test_a_program_with_its_own_tcp_store_passes_its_graceful_shutdown_with_two_worlds_at_once():
    # pytorch/examples' DDP + RPC: rank 0 hosts the program's own tcp://
    # stores and exits as soon as its shutdown returns; a peer still in
    # TensorPipeAgent::join's store barrier then reads from a dead store
    # ("DistNetworkError: Connection reset by peer"). Ten runs in each of two
    # streams at once: today about one run in six fails.
    runs, streams = 10, 2

    def stream(first_seed):
        return [rpc_harness.spawn(ddp_rpc.run_worker, args=(4,), nprocs=4, seed=first_seed + i, deadline=60, check=False)
                for i in range(runs)]

    with ThreadPoolExecutor(streams) as pool:
        futures = [pool.submit(stream, 1000 * k) for k in range(streams)]
        results = [result for future in futures for result in future.result()]
    failed = ["\n".join(r.report(replay=False).splitlines()[:5]) for r in results if not r.ok]
    assert not failed, f"{len(failed)} of {len(results)} runs failed:\n" + "\n".join(failed)


# -- a program's own rpc_timeout -----------------------------------------------------------


# One of the suite's slowest (pytest --durations): a reply that takes 7 s against a 5 s rpc_timeout:
# the timeout must be seen to act.
def test_spawn_rpc_timeout_is_applied_or_refused_when_the_program_passes_its_own_options(rpc_world):
    # The program passes rpc.TensorPipeRpcBackendOptions() (torch's defaults,
    # rpc_timeout=60) and asks worker0 for a reply that takes 7 s.
    try:
        result = rpc_world.spawn(own_options.run_worker, args=(2, 7.0), nprocs=2, rpc_timeout=5)
    except WorldSpecError as refused:  # refused before any process starts
        assert "rpc_timeout" in str(refused) and "TensorPipeRpcBackendOptions" in str(refused)
        return
    except WorldFailed as refused:  # refused in the program's init_rpc
        assert re.search(r"rpc_timeout.*TensorPipeRpcBackendOptions|TensorPipeRpcBackendOptions.*rpc_timeout",
                         str(refused)), str(refused)
        return
    timeouts = [value["rpc_timeout"] for value in result.values]
    assert timeouts == [5.0, 5.0], f"spawn(rpc_timeout=5) silently dropped: the ranks ran with {timeouts}"
    assert result.values[1]["timed_out"] and result.values[1]["seconds"] < 7, result.values[1]


# -- a passive rank stuck inside its own shutdown ------------------------------------------


def test_a_passive_rank_stuck_serving_inside_its_own_shutdown_gets_its_stacks(rpc_world):
    with pytest.raises(WorldFailed) as caught:
        rpc_world.spawn(stuck_handler.run_worker, args=(2,), nprocs=2)
    result, report = caught.value.result, str(caught.value)
    assert result["worker1"].status == "raised" and "gave up waiting" in result["worker1"].error
    server = result["worker0"]
    assert server.status == "stopped"
    assert "_lease_released.wait()" in server.stacks, (
        f"worker0 was still running (inside its own rpc.shutdown(), serving wait_for_lease) but has no stacks: "
        f"{server.stacks!r}")
    assert "--- rank 0 (worker0) stacks when the world was stopped" in report
    assert "wait_for_lease" in report


# -- replay lines hold only literals -------------------------------------------------------

_UNPASTEABLE = re.compile(r"<[\w.]+ object at 0x[0-9a-f]+>")


def test_no_replay_line_holds_an_argument_that_has_no_literal(rpc_world):
    config = with_config.Config(steps=3)
    plan = "raise:worker1@rpc.serve:work#2=bad step"
    with pytest.raises(WorldFailed) as caught:
        rpc_world.spawn(with_config.run_worker, args=(2, config), nprocs=2, faults=plan)
    report = str(caught.value)
    replay = report[report.index("Replay: "):]
    assert not _UNPASTEABLE.search(replay), f"a replay line that cannot be pasted:\n{replay}"
    assert "Replay: pytest " in replay, "the pytest line is the way to replay it"
    assert "Config" in replay, "says which argument has no literal"
    # Outside pytest there is no pytest line and no token can hold it: say so.
    with pytest.raises(WorldFailed) as caught:
        rpc_harness.spawn(with_config.run_worker, args=(2, config), nprocs=2, faults=plan, seed=5)
    report = str(caught.value)
    replay = report[report.index("Replay: "):]
    assert not _UNPASTEABLE.search(replay), f"a replay line that cannot be pasted:\n{replay}"
    assert "Config" in replay and "seed=5" in replay, replay


# -- a replay token and the test module's import-time setup --------------------------------


def _rpc_harness_command():
    script = os.path.join(os.path.dirname(sys.executable), "rpc-harness")
    return [script] if os.path.exists(script) else [shutil.which("rpc-harness") or "rpc-harness"]


# One of the suite's slowest (pytest --durations): torch's RL tutorial spawned as written (three
# processes) with a fault, then its token replayed by the CLI in fresh processes.
def test_a_replay_token_rebuilds_the_test_modules_import_time_setup_or_refuses_first(rpc_world):
    # This module set sys.argv before importing the tutorial (see its top);
    # the token must bring that along, or refuse before any process starts.
    plan = "raise:agent@call:programs.rl_argparse:Agent.finish_episode#2=no update"
    result = rpc_world.spawn(rl_argparse.run_worker, args=(3, 3, 5), nprocs=3, faults=plan, check=False)
    assert result["agent"].status == "raised" and "no update" in result["agent"].error
    token = re.search(r"rpc-harness replay (rpch1_[A-Za-z0-9_\-]+)", result.repro)
    assert token, f"a plain-argument world prints a token: {result.repro}"
    done = subprocess.run([*_rpc_harness_command(), "replay", token.group(1), "--deadline", "60"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert "usage: rpc-harness [-h] [--world_size" not in out, (
        f"the replay ran the program's argparse on its own command line (exit {done.returncode}):\n{out[-1500:]}")
    if done.returncode == 1:
        assert "the failure reproduced" in out and "no update" in out, out[-3000:]
    else:
        assert done.returncode == 2, out[-3000:]
        assert __name__.rpartition(".")[2] in out, f"a refusal names the module it cannot rebuild:\n{out[-1500:]}"
        assert "rpc world" not in out, "refused before any process started"


# -- a rank that aborts itself -------------------------------------------------------------


def test_a_rank_that_aborts_itself_is_not_labelled_stopped_by_the_harness(rpc_world):
    # worker1 is killed at its 5th stage; worker0 raises at once, and worker2
    # aborts its own process 20 ms later, while the harness is collecting
    # stacks before it stops the survivors.
    fault = "kill:worker1@rpc.serve:stage#5"
    result = rpc_world.spawn(self_abort.run_worker, args=(3,), nprocs=3, faults=fault, check=False)
    assert result["worker1"].status == "killed" and result["worker0"].status == "raised"
    aborted = result["worker2"]
    assert aborted.signal == "SIGABRT", f"precondition: worker2 aborted itself before being stopped ({aborted})"
    line = aborted.describe()
    assert "stopped by the harness" not in line, f"the harness did not send that SIGABRT: {line!r}"
    assert aborted.status == "died" and "aborted itself (SIGABRT" in line, line
    assert "stopped by the harness" not in result.report(), "no rank here was stopped by the harness"


# -- a remote error's summary line ---------------------------------------------------------


def test_a_remote_errors_summary_line_carries_the_innermost_message(rpc_world):
    with pytest.raises(WorldFailed) as caught:
        rpc_world.spawn(remote_raise.run_worker, args=(2,), nprocs=2, faults="raise:w1@rpc.serve:save_block#2=disk full")
    client = caught.value.result["w0"]
    assert client.status == "raised"
    assert "disk full" in client.error, f"the summary lost the remote message: {client.error!r}"
    assert "disk full" in client.describe()
    assert "disk full" in str(caught.value).splitlines()[1], "the report's line for w0 says what happened"


# -- setup code in every rank --------------------------------------------------------------


def shard_sizes(ctx):
    """A harness-style entry over the same data set (for run(..., setup=))."""
    return len(needs_setup.load_dataset()[ctx.rank::ctx.world_size])


def test_setup_code_runs_in_every_rank_before_the_program(rpc_world, monkeypatch):
    from programs import fake_dataset

    # A patch in the test process does not reach the ranks (forked from the
    # forkserver): the program still tries to download.
    monkeypatch.setattr(needs_setup, "load_dataset", fake_dataset.fake_load_dataset)
    with pytest.raises(WorldFailed, match="tests must not reach the network"):
        rpc_world.spawn(needs_setup.run_worker, args=(2,), nprocs=2)
    # The supported way: setup code the harness runs in every rank first.
    result = rpc_world.spawn(needs_setup.run_worker, args=(2,), nprocs=2,
                             setup="programs.fake_dataset:use_fake_dataset")
    assert [(v["mine"], v["peer's"]) for v in result.values] == [(5, 5), (5, 5)]
    result = rpc_world.run(shard_sizes, world_size=2, setup=fake_dataset.use_fake_dataset)
    assert result.values == [5, 5]
