"""The supervisor's rule for deaths in collective worlds (issue 39), on a
supervisor fed by hand: a survivor whose collective failed because a peer
was killed by the plan is stopped by that kill, not failed, even when its
failure reaches the supervisor before the killed rank's exit does (a race
the world tests cannot force)."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
from contextlib import ExitStack
from types import SimpleNamespace

import pytest

from rpc_harness import _messages as msg
from rpc_harness import result as R
from rpc_harness._parent import supervisor as supervisor_module
from rpc_harness._parent.supervisor import Supervisor
from rpc_harness._rank.boot import rank_file
from rpc_harness.events import FaultFired
from rpc_harness.spec import make_spec

CLOSED = "RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:14239"


def _supervisor(tmp_path, **options):
    spec = make_spec("programs.echo:echo", 3, **options)
    supervisor = Supervisor(spec, str(tmp_path), start_rank=lambda boot: None)
    supervisor.procs = [SimpleNamespace(pid=None) for _ in range(3)]  # nothing to signal
    supervisor.running = {0, 1, 2}
    return supervisor


def _killed_by_the_plan(tmp_path, rank):
    fired = FaultFired(t=0.0, rank=rank, fault=f"kill:worker{rank}@step#3", kind="kill", point="step", hit=3)
    with open(rank_file(str(tmp_path), rank, "events"), "w") as log:
        log.write(json.dumps(fired.as_event()) + "\n")


def test_a_survivor_failing_after_a_planned_kill_is_stopped_by_it(tmp_path):
    supervisor = _supervisor(tmp_path, process_group="gloo", rpc=False)
    _killed_by_the_plan(tmp_path, 2)
    supervisor.on_message(0, msg.Failed("entry", CLOSED, "traceback"))
    outcome = supervisor.outcomes[0]
    assert outcome.status == R.STOPPED and not outcome.failed
    assert outcome.stopped_because.startswith("rank 2 (worker2) was killed by the fault plan, and a collective")
    assert outcome.stopped_because.endswith(f"(it had raised: {CLOSED})")


def _ended_process(stack: ExitStack) -> SimpleNamespace:
    """A process that has exited: a zombie until waited for, as a rank until its forkserver reaps it."""
    dead = subprocess.Popen(["true"])
    stack.callback(dead.wait)
    while not open(f"/proc/{dead.pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z":
        time.sleep(0.01)
    return SimpleNamespace(pid=dead.pid)


def test_a_survivor_failing_after_a_peer_died_is_stopped_by_its_death(tmp_path):
    supervisor = _supervisor(tmp_path, process_group="gloo", rpc=False)
    with ExitStack() as stack:
        supervisor.procs[2] = _ended_process(stack)
        supervisor.on_message(0, msg.Failed("entry", CLOSED, "traceback"))
    outcome = supervisor.outcomes[0]
    assert outcome.status == R.STOPPED and outcome.stopped_because.startswith("rank 2 (worker2) died, and a collective")
    assert supervisor.outcomes[1].stopped_because == supervisor.ended_by, "the other survivor is stopped by it too"


def test_a_survivor_that_raised_and_exited_before_its_failure_was_read_is_not_taken_for_the_dead(tmp_path):
    # Rank 1 dies; rank 0's collective fails of it and rank 0 exits, its
    # Failed still unread, before rank 2's Failed is heard: rank 0 is a
    # survivor (it is read first), rank 1 the dead (a CI run named rank 0).
    supervisor = _supervisor(tmp_path, process_group="gloo", rpc=False)
    with ExitStack() as stack:
        pipes = [multiprocessing.Pipe(duplex=False) for _ in range(3)]
        for reader, writer in pipes:
            stack.callback(reader.close)
            stack.callback(writer.close)
        supervisor.conns = [reader for reader, _ in pipes]
        supervisor.open_conns = {0, 1, 2}
        pipes[0][1].send(msg.Failed("entry", CLOSED, "traceback"))
        supervisor.procs[0] = _ended_process(stack)
        supervisor.procs[1] = _ended_process(stack)
        supervisor.on_message(2, msg.Failed("entry", CLOSED, "traceback"))
    assert supervisor.ended_by.startswith("rank 1 (worker1) died, and a collective"), supervisor.ended_by
    for survivor in (0, 2):
        outcome = supervisor.outcomes[survivor]
        assert survivor in supervisor.stopped_by_death and not outcome.failed
        assert outcome.stopped_because.startswith("rank 1 (worker1) died") and CLOSED in outcome.stopped_because


def test_a_rank_its_own_plan_is_killing_is_left_to_that_kill_when_another_rank_ends_the_world(tmp_path):
    # Rank 2 wrote its planned kill's event, its SIGKILL on the way, when
    # rank 1's freeze ends the world: stopped by the harness first, the
    # planned kill read as one that never ended its rank (a race seen once).
    supervisor = _supervisor(tmp_path, process_group="gloo", rpc=False)
    _killed_by_the_plan(tmp_path, 2)
    supervisor.on_message(1, msg.Frozen())
    assert supervisor.ended_by.startswith("rank 1 (worker1) was frozen by the fault plan")
    assert 0 in supervisor.stopped_by_death and supervisor.outcomes[0].stopped_because == supervisor.ended_by
    assert 2 not in supervisor.stopped_by_death and supervisor.outcomes[2].stopped_because == ""


# What an RPC to a dead peer raises (TensorPipe, torch 2.13).
RPC_TO_THE_DEAD = "RuntimeError: ECONNREFUSED: connection refused"


@pytest.mark.parametrize(("options", "error"), [({"process_group": "gloo"}, CLOSED), ({}, RPC_TO_THE_DEAD)],
                         ids=["no kill", "not collective"])
def test_a_failure_is_a_failure_without_a_planned_kill_or_in_an_rpc_world(tmp_path, options, error):
    supervisor = _supervisor(tmp_path, **options)
    if not options:
        _killed_by_the_plan(tmp_path, 2)  # an RPC world's survivors may handle a dead peer: their failures count
    supervisor.on_message(0, msg.Failed("entry", error, "traceback"))
    assert supervisor.outcomes[0].status == R.RAISED


def test_a_collective_of_a_group_the_entry_made_itself_fails_of_a_planned_kill_as_the_worlds_would(tmp_path):
    # The supervisor is not told of an entry's own group (run_world, no
    # process_group): gloo's error says the rank was in a collective.
    supervisor = _supervisor(tmp_path)
    _killed_by_the_plan(tmp_path, 2)
    supervisor.on_message(0, msg.Failed("entry", CLOSED, "traceback"))
    assert supervisor.outcomes[0].status == R.STOPPED
    assert supervisor.outcomes[0].stopped_because.startswith("rank 2 (worker2) was killed by the fault plan")


def test_a_peer_cut_off_after_another_rank_raised_is_stopped_by_that_rank(tmp_path):
    supervisor = _supervisor(tmp_path, process_group="gloo", rpc=False)
    supervisor.on_message(1, msg.Failed("entry", "ValueError: rank 1's own mistake", "traceback"))
    supervisor.on_message(0, msg.Failed("entry", CLOSED, "traceback"))
    assert [o.status for o in supervisor.outcomes] == [R.STOPPED, R.RAISED, R.STOPPED]
    assert supervisor.ended_by == "rank 1 (worker1) raised, and a collective world cannot go on without one of its ranks"
    assert supervisor.outcomes[0].stopped_because == f"{supervisor.ended_by} (it had raised: {CLOSED})"


def test_a_peers_own_error_after_another_rank_raised_is_its_own_failure(tmp_path):
    # Every rank's assert failing at once: each failure is its own.
    supervisor = _supervisor(tmp_path, process_group="gloo", rpc=False)
    supervisor.on_message(1, msg.Failed("entry", "AssertionError: loss is nan", "traceback"))
    supervisor.on_message(0, msg.Failed("entry", "AssertionError: loss is nan", "traceback"))
    assert [o.status for o in supervisor.outcomes[:2]] == [R.RAISED, R.RAISED]


@pytest.mark.parametrize("killed_by_the_harness", [True, False])
def test_a_rank_the_harness_killed_as_the_world_ended_explains_no_failure(tmp_path, monkeypatch,
                                                                          killed_by_the_harness):
    # The harness SIGKILLs every rank as it ends a failed world: a peer's
    # collective cut off by that is no sign of a death (the report once
    # said "rank 0 died" of a rank it had killed itself).
    supervisor = _supervisor(tmp_path, process_group="gloo", rpc=False)
    supervisor.procs[2] = SimpleNamespace(pid=1002)
    monkeypatch.setattr(supervisor_module, "_process_ended", lambda pid: pid == 1002)  # rank 2's process is gone
    if killed_by_the_harness:
        supervisor.killed = {2}
    supervisor.on_message(0, msg.Failed("entry", CLOSED, "traceback"))
    if killed_by_the_harness:
        assert supervisor.ended_by == "" and supervisor.outcomes[0].status == R.RAISED
    else:
        assert supervisor.ended_by.startswith("rank 2 (worker2) died")


def test_a_rank_that_does_not_answer_for_its_stacks_has_its_completions_unwritten(tmp_path, monkeypatch):
    # A rank answers through its FIFO after writing its collectives'
    # completions; one stuck holding the GIL (DDP's process group freed as
    # the entry returned, torch 2.13) cannot: an op of its history not
    # written complete is not known to be unfinished.
    monkeypatch.setattr("rpc_harness._parent.supervisor._STACK_WAIT", 0.2)
    supervisor = _supervisor(tmp_path, process_group="gloo", rpc=False)
    fifo = rank_file(str(tmp_path), 1, "dump")
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDWR)  # armed: a request goes in, and nobody answers it
    stuck = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGUSR1, "
                              "signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"], stdout=subprocess.PIPE)
    try:
        assert stuck.stdout.readline() == b"ready\n"
        supervisor.procs[1] = SimpleNamespace(pid=stuck.pid, sentinel=stuck.stdout.fileno())
        supervisor.dump_stacks([1])
    finally:
        stuck.kill()
        stuck.wait()
        stuck.stdout.close()
        os.close(reader)
    assert supervisor.unwritten == {1}
