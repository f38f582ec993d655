"""The launcher as a library: bring-up, results, failures, deadlines, loopback."""

from __future__ import annotations

import pathlib
import resource
import shutil
import subprocess
import sys
import threading
import time

import pytest
import worlds

import rpc_harness
from rpc_harness import WorldFailed, WorldTimeout
from rpc_harness._parent import launcher as _launcher


def pids_of(result):
    return [next(e["pid"] for e in rank.events if e["kind"] == "start") for rank in result.ranks]


def test_every_rank_runs_the_entry_with_its_identity():
    result = rpc_harness.run_world(worlds.identity, world_size=3, seed=7)
    assert result.ok
    values = result.values
    assert [v["rank"] for v in values] == [0, 1, 2]
    assert [v["name"] for v in values] == ["worker0", "worker1", "worker2"]
    assert all(v["names"] == ("worker0", "worker1", "worker2") for v in values)
    assert all(v["world_size"] == 3 and v["world_seed"] == 7 for v in values)
    assert all(v["current_is_ctx"] for v in values)
    assert len({v["seed"] for v in values}) == 3, "each rank gets its own seed"
    assert len({v["same_everywhere"] for v in values}) == 1
    assert values[0]["same_everywhere"] == rpc_harness.derive_seed(7, "shared")
    assert len({tuple(v["rand"]) for v in values}) == 3


def test_rpc_between_ranks_works_in_a_ring():
    result = rpc_harness.run_world(worlds.ring, world_size=4)
    assert result.values == [[r + 1.0, r + 1.0] for r in range(4)]


def test_names_from_a_list_and_from_a_template():
    result = rpc_harness.run_world(worlds.identity, names=["agent", "observer1"])
    assert [v["name"] for v in result.values] == ["agent", "observer1"]
    result = rpc_harness.run_world(worlds.identity, world_size=2, names="node{rank}")
    assert [v["name"] for v in result.values] == ["node0", "node1"]


def test_same_seed_gives_the_same_world_and_another_seed_does_not():
    first = rpc_harness.run_world(worlds.identity, world_size=2, seed=123)
    again = rpc_harness.run_world(worlds.identity, world_size=2, seed=123)
    other = rpc_harness.run_world(worlds.identity, world_size=2, seed=124)
    rands = [[v["rand"] for v in r.values] for r in (first, again, other)]
    assert rands[0] == rands[1]
    assert rands[0] != rands[2]


def test_rank_output_is_captured_per_rank():
    result = rpc_harness.run_world(worlds.say_hello, world_size=2)
    assert "hello from worker0" in result[0].output
    assert "hello from worker1" in result["worker1"].output
    assert "hello from worker0" not in result[1].output


def test_a_sigkilled_rank_fails_the_world_naming_rank_and_signal(assert_gone):
    with pytest.raises(WorldFailed) as caught:
        rpc_harness.run_world(worlds.rank1_sigkills_itself, world_size=3, deadline=30)
    result = caught.value.result
    assert [r.rank for r in result.failures] == [1]
    assert result[1].status == "died" and result[1].signal == "SIGKILL"
    message = str(caught.value)
    assert "rank 1 (worker1)" in message and "SIGKILL" in message
    replay = next(line for line in message.splitlines() if line.startswith("Replay: "))
    # (after the import path the line sets up first, where the entry's folder is not on every sys.path)
    assert replay.rpartition("; ")[2].startswith("rpc_harness.run_world("), replay
    assert result.duration < 30, "a death must fail the world at once, not at the deadline"
    assert_gone(pids_of(result))


def test_an_exception_reaches_the_caller_with_traceback_and_rank_name(assert_gone):
    with pytest.raises(WorldFailed) as caught:
        rpc_harness.run_world(worlds.rank2_raises, world_size=3, deadline=30)
    result = caught.value.result
    assert [r.rank for r in result.failures] == [2]
    failed = result[2]
    assert failed.error == "ValueError: boom from worker2"
    assert 'raise ValueError(f"boom from {ctx.name}")' in failed.traceback
    assert isinstance(failed.value, ValueError), "the exception itself comes back when it pickles"
    assert "rank 2 (worker2): raised ValueError: boom from worker2" in str(caught.value)
    assert_gone(pids_of(result))


def test_ranks_that_fail_while_the_world_is_being_stopped_are_reported_with_their_own_errors(tmp_path, assert_gone):
    # Ranks 1 and 2 have raised and are still sending their failure when rank
    # 0's failure stops the world: they are not "stopped by the harness".
    with pytest.raises(WorldFailed) as caught:
        rpc_harness.run_world(worlds.everyone_fails_rank0_last, world_size=3, args=(str(tmp_path),), deadline=60)
    result = caught.value.result
    assert [(r.rank, r.status) for r in result] == [(0, "raised"), (1, "raised"), (2, "raised")], result.report()
    assert result[1].error.startswith("SlowToReport") and result[0].error == "ValueError: rank 0 fails last"
    assert str(caught.value).startswith("rpc world failed: 3 of 3 ranks failed")
    assert_gone(pids_of(result))


def test_a_rank_polled_from_two_threads_at_once_gives_both_its_exit_code(monkeypatch):
    # Two worlds in two threads: one's Process.start() polls every finished
    # child while the other's supervisor reads its rank's exit status.
    from multiprocessing import forkserver
    from multiprocessing.connection import wait

    rpc_harness.run_world(worlds.identity, world_size=1)  # the harness's forkserver is up
    proc = _launcher._RankProcess(target=time.sleep, args=(0.01,), daemon=True)
    proc.start()
    wait([proc.sentinel], timeout=60)
    original, inside = forkserver.read_signed, threading.Event()

    def slow_read(fd):
        value = original(fd)
        inside.set()
        time.sleep(0.3)  # the other thread has read the status and not yet kept it
        return value

    monkeypatch.setattr(forkserver, "read_signed", slow_read)
    other = threading.Thread(target=proc._popen.poll)
    other.start()
    assert inside.wait(60)
    assert proc.exitcode == 0
    other.join(60)


def test_a_hang_fails_at_the_deadline_with_every_ranks_stacks(assert_gone):
    started = time.monotonic()
    with pytest.raises(WorldTimeout) as caught:
        rpc_harness.run_world(worlds.hang_at_step, world_size=2, deadline=1, faults="hang:worker1@test.step")
    result = caught.value.result
    assert result.timed_out
    assert time.monotonic() - started >= 1, "the world ran for its whole deadline"
    assert result[1].status == "hung"
    assert "hang_at_failpoint" in result[1].stacks
    assert 'rpc_harness.failpoint("test.step")' in result[1].stacks, "the stack shows the failpoint"
    assert result[0].stacks, "the rank that was only waiting is dumped too"
    report = str(caught.value)
    assert "deadline of 1s passed" in report
    assert "rank 0 (worker0) stacks" in report and "rank 1 (worker1) stacks" in report
    assert_gone(pids_of(result))


def test_a_rank_the_plan_kills_is_expected_and_the_others_finish(assert_gone):
    result = rpc_harness.run_world(
        worlds.step_three_times, world_size=3, faults="kill:worker1@test.step#2", deadline=30
    )
    assert result.ok
    assert [r.name for r in result.killed] == ["worker1"]
    assert result[1].signal == "SIGKILL"
    # The others ran all three steps; only a rank a fault is aimed at counts
    # its failpoints, so theirs report none.
    assert result[0].value == result[2].value == {}
    assert [r.status for r in result] == ["ok", "killed", "ok"]
    fired = result.fired_faults()
    assert [(f.rank, f.fault, f.hit) for f in fired] == [(1, "kill:worker1@test.step#2", 2)]
    assert_gone(pids_of(result))


def test_a_raise_fault_fails_the_world_attributed_to_its_rank():
    result = rpc_harness.run_world(
        worlds.step_three_times, world_size=2, faults="raise:worker0@test.step#3", check=False
    )
    assert not result.ok
    assert [r.name for r in result.failures] == ["worker0"]
    assert "InjectedFault" in result[0].error and "test.step" in result[0].error


def test_an_unpicklable_return_value_is_a_clear_failure():
    result = rpc_harness.run_world(worlds.returns_unpicklable, world_size=2, check=False)
    # Both ranks fail alike; the first report stops the world, so the other
    # either failed the same way or was stopped before it could report.
    assert result.failures
    for outcome in result:
        assert outcome.status in ("raised", "stopped"), outcome.describe()
        if outcome.status == "raised":
            assert outcome.error.startswith("TypeError: the entry's return value cannot be sent back"), outcome.error


def test_a_return_value_that_cannot_be_unpickled_here_fails_its_rank_by_name():
    result = rpc_harness.run_world(worlds.returns_what_only_ranks_can_load, world_size=2, check=False)
    assert [r.rank for r in result.failures] == [1] and result.values[0] == 0
    assert result[1].error == (
        "the entry's return value cannot be unpickled here: ImportError: this class only exists in the ranks"
    )
    assert "rank 1 (worker1): raised the entry's return value cannot be unpickled" in result.report()


def test_ranks_share_the_cores_out_unless_the_env_says_otherwise():
    import os

    cores = len(os.sched_getaffinity(0))
    assert rpc_harness.run_world(worlds.thread_count, world_size=2).values == [max(cores // 2, 1)] * 2
    assert rpc_harness.run_world(worlds.thread_count, world_size=2 * cores + 1).values[0] == 1
    told = rpc_harness.run_world(worlds.thread_count, world_size=2, env={"OMP_NUM_THREADS": "3"})
    assert told.values == [3, 3]


def test_every_rank_starts_with_onemkls_math_kernels_chosen_on_one_thread():
    # Chosen in the forkserver before any fork (rank_setup.warm_math_kernels):
    # a rank's RPC threads can no longer race to choose them.
    assert rpc_harness.run_world(worlds.math_kernels_warm, world_size=2).values == [True, True]


def test_ranks_listen_on_loopback_only():
    result = rpc_harness.run_world(worlds.listening_addresses, world_size=2)
    addresses = [a for value in result.values for a in value]
    assert addresses, "TensorPipe should be listening somewhere"
    loopback = {"0100007F", "00000000000000000000000001000000"}  # 127.0.0.1, ::1 in /proc form
    assert set(addresses) <= loopback, addresses


def test_an_entry_given_by_name_runs():
    result = rpc_harness.run_world("worlds:say_hello", world_size=2)
    assert result.values == [0, 1]


def test_a_worlds_folder_is_removed_whatever_way_the_world_ends(monkeypatch, short_tmp):
    import tempfile
    from multiprocessing import util

    util.get_temp_dir()  # multiprocessing's own folder (the forkserver's socket) stays where it is
    monkeypatch.setattr(tempfile, "tempdir", str(short_tmp))  # where world folders are made

    def left():
        return sorted(p.name for p in short_tmp.glob("rpc-world-*"))

    def interrupting(update):
        raise KeyboardInterrupt

    assert rpc_harness.run_world(worlds.identity, world_size=2).ok and left() == []
    with pytest.raises(WorldFailed):
        rpc_harness.run_world(worlds.rank2_raises, world_size=3)
    assert left() == []
    with pytest.raises(WorldTimeout):
        rpc_harness.run_world(worlds.hang_at_step, world_size=2, faults="hang:worker1@test.step", deadline=1)
    assert left() == []
    with pytest.raises(KeyboardInterrupt):
        rpc_harness.run_world(worlds.identity, world_size=2, on_progress=interrupting)
    assert left() == []


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs iproute2's ss to read a listener's backlog")
def test_every_listener_of_a_rank_takes_the_full_backlog_its_namespace_allows():
    # TensorPipe's listener asks for 128 (a 256-rank world's init_rpc opens
    # 510 connections to the leader at once); the rank raises it.
    result = rpc_harness.run_world(worlds.listen_backlogs, world_size=3)
    for listeners in result.values:
        assert listeners and all(backlog == somaxconn for backlog, somaxconn in listeners), listeners


# One of the suite's slowest (pytest --durations): only a world this big shows that big worlds still
# come up (512, the limit, would take 10 GB and half a minute more), in a process of its own.
BIG_WORLD = """
import resource, sys
sys.path.insert(0, {tests!r})
import rpc_harness, worlds

if __name__ == "__main__":
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == 1024, "started with the usual soft limit"
    # A small world first starts the forkserver under that limit: the big
    # world's ranks then get only what the forkserver raised for itself.
    assert rpc_harness.run_world(worlds.ring, world_size=2).ok
    result = rpc_harness.run_world(worlds.ring, world_size=256, deadline=300)
    assert result.values == [[rank + 1.0, rank + 1.0] for rank in range(256)]
    assert [r.status for r in result] == ["ok"] * 256
    print("OK", resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


@pytest.mark.long
@pytest.mark.skipif(resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 4096,
                    reason="the hard limit on open files is below what a 256-rank world's leader holds")
def test_a_256_rank_world_comes_up_and_every_rank_answers_its_neighbour(tmp_path):
    # TensorPipe over TCP: its shared-memory transport's connection backlog
    # made worlds of 34 ranks and more fail in init_rpc (see rank_setup).
    # In a fresh process (so a forkserver of its own) with the soft limit on
    # open files that most hosts and CI runners give, 1,024: the leader holds
    # about six files a rank, and aborted while starting until the harness
    # raised that limit to the hard one (rpc_harness._parent.limits).
    script = tmp_path / "big_world.py"
    script.write_text(BIG_WORLD.format(tests=str(pathlib.Path(__file__).parents[1])))
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=400, cwd=tmp_path,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard)))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.split() == ["OK", str(min(hard, 1 << 20))], "the test process raised its own limit too"
