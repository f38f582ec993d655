"""Each scenario's fault contract on hand-made worlds: the verdicts that say
a world did NOT behave as its plan allows. (The world tests show the
contracts holding; these show that each clause can fail.)"""

from __future__ import annotations

import rpc_harness
from rpc_harness.events import HITS, FaultFired
from rpc_harness.result import KILLED, OK, RAISED
from rpc_harness.scenarios import parameter_server as ps
from rpc_harness.scenarios import rl, rnn


def outcome(rank, name, status=OK, error=None, events=()):
    return rpc_harness.RankOutcome(rank, name, status=status, error=error, events=list(events))


def world(names, ranks, faults="", deadline=60.0):
    return rpc_harness.WorldResult(names=tuple(names), seed=0, faults=rpc_harness.FaultPlan.parse(faults),
                               deadline=deadline, ranks=ranks)


# -- rl: a dead observer is dropped, and only a dead one --------------------------------------


def rl_records(dropped):
    episode = rl.Episode(1, ("observer1",), {"observer1": 10.0}, 10.0, 10.0, 0.0, {})
    return rl.Records([episode], dict(dropped), 475.0)


def test_rl_a_killed_observer_that_the_agent_kept_breaks_the_contract():
    names = rl.names(3)
    killed = world(names, [outcome(0, "agent"), outcome(1, "observer1"), outcome(2, "observer2", KILLED)],
                   faults="kill:observer2@observer.step#5")
    verdict = rl.judge.contract(killed, rl_records({}), rl.Config())
    assert not verdict.ok and "killed observers ['observer2'] but the agent dropped []" in verdict.note
    assert rl.judge.contract(killed, rl_records({"observer2": 1}), rl.Config()).ok


def test_rl_a_live_observer_that_the_agent_dropped_breaks_the_contract():
    names = rl.names(3)
    alive = world(names, [outcome(0, "agent"), outcome(1, "observer1"), outcome(2, "observer2")])
    verdict = rl.judge.contract(alive, rl_records({"observer1": 2}), rl.Config())
    assert not verdict.ok and "killed observers [] but the agent dropped ['observer1']" in verdict.note


# -- rnn: a killed server is named, fast, by a trainer that raised -----------------------------


def rnn_server_killed(raise_after, error, deadline=60.0):
    names = rnn.names(3)  # ps0, ps1, trainer
    kill = FaultFired(100.0, 1, "kill:ps1@ps.forward#3", "kill", "ps.forward", 3).as_event()
    raised = {"t": 100.0 + raise_after, "rank": 2, "kind": "raised", "error": error}
    ranks = [outcome(0, "ps0"), outcome(1, "ps1", KILLED, events=[kill]),
             outcome(2, "trainer", RAISED, error=error, events=[raised])]
    return world(names, ranks, faults="kill:ps1@ps.forward#3", deadline=deadline)


def test_rnn_a_killed_server_named_at_once_meets_the_contract():
    verdict = rnn.judge.contract(rnn_server_killed(0.02, "RuntimeError: parameter server 'ps1' died: eof"), None,
                                 rnn.Config())
    assert verdict.ok and verdict.details["killed_servers"] == ["ps1"]


def test_rnn_a_killed_server_named_late_breaks_the_contract():
    late = 60.0 * rnn.config.FAIL_FAST_SHARE + 1
    verdict = rnn.judge.contract(rnn_server_killed(late, "RuntimeError: parameter server 'ps1' died: eof"), None,
                                 rnn.Config())
    assert not verdict.ok and "not fail-fast" in verdict.note


def test_rnn_a_trainer_that_fails_without_naming_the_killed_server_breaks_the_contract():
    verdict = rnn.judge.contract(rnn_server_killed(0.02, "RuntimeError: eof"), None, rnn.Config())
    assert not verdict.ok and "expected a trainer raising 'parameter server 'ps1' died'" in verdict.note


def test_rnn_a_killed_server_that_nobody_reported_breaks_the_contract():
    names = rnn.names(3)
    kill = FaultFired(100.0, 1, "kill:ps1@ps.forward#3", "kill", "ps.forward", 3).as_event()
    quiet = world(names, [outcome(0, "ps0"), outcome(1, "ps1", KILLED, events=[kill]), outcome(2, "trainer")],
                  faults="kill:ps1@ps.forward#3")
    verdict = rnn.judge.contract(quiet, None, rnn.Config())
    assert not verdict.ok and "was killed but no trainer reported it" in verdict.note


# -- ps: a serial, complete log, reaping only the killed -------------------------------------


def ps_world(statuses):
    names = ps.names(len(statuses))
    return world(names, [outcome(rank, name, status) for rank, (name, status) in enumerate(zip(names, statuses,
                                                                                                  strict=True))])


def ps_records(steps, dead=()):
    log = {"steps": [{"index": k, "version": version, "trainer": trainer, "batch": batch, "loss": 1.0, "grads": {}}
                     for k, (trainer, batch, version) in enumerate(steps)], "dead": list(dead), "dropped": []}
    return ps.judge.Records(log, {})


SERIAL = [("trainer1", 0, 0), ("trainer2", 0, 1), ("trainer1", 1, 2), ("trainer2", 1, 3)]


def test_ps_a_serial_complete_log_meets_the_contract():
    assert ps.judge.log_problems(ps_world([OK, OK, OK]), ps_records(SERIAL), ps.Config(batches=2)) == []


def test_ps_overlapping_steps_break_the_contract():
    overlapped = [*SERIAL[:2], ("trainer1", 1, 1), ("trainer2", 1, 3)]
    problems = ps.judge.log_problems(ps_world([OK, OK, OK]), ps_records(overlapped), ps.Config(batches=2))
    assert problems == ["step 2 (trainer1 batch 1) began at parameter version 1 but was applied at version 2: "
                        "steps overlapped"]


def test_ps_batches_applied_out_of_order_or_missing_break_the_contract():
    swapped = [("trainer1", 1, 0), ("trainer2", 0, 1), ("trainer1", 0, 2), ("trainer2", 1, 3)]
    problems = ps.judge.log_problems(ps_world([OK, OK, OK]), ps_records(swapped), ps.Config(batches=2))
    assert problems == ["trainer1's applied batches are out of order: [1, 0]"]
    short = ps.judge.log_problems(ps_world([OK, OK, OK]), ps_records(SERIAL[:3]), ps.Config(batches=2))
    assert short == ["trainer2 finished but only 1 of 2 batches were applied"]


def test_ps_a_trainer_reaped_that_the_plan_did_not_kill_breaks_the_contract():
    problems = ps.judge.log_problems(ps_world([OK, OK, OK]), ps_records(SERIAL, dead=["trainer2"]),
                                     ps.Config(batches=2))
    assert problems == ["the server reaped ['trainer2'], which the plan did not kill"]
    killed = [("trainer1", 0, 0), ("trainer1", 1, 1)]  # trainer2 killed before its first step was applied
    assert ps.judge.log_problems(ps_world([OK, OK, KILLED]), ps_records(killed, dead=["trainer2"]),
                                 ps.Config(batches=2)) == []


def test_a_cuda_worlds_unextractable_value_is_explained_in_the_ranks_line():
    # What every PS world on an H200 said before the server's lock was made
    # a plain one: torch's message names the RLock, not what to do about it.
    error = ("RuntimeError: RuntimeError(\"Cannot extract tensors from value: TypeError: cannot pickle "
             "'_thread.RLock' object (raised on parameter_server)")
    line = rpc_harness.RankOutcome(1, "trainer1", status="raised", error=error, phase="entry").describe()
    assert "TensorPipe pickles every value an RPC returns or an RRef owns to find its CUDA tensors" in line
    assert "threading.Condition(threading.Lock())" in line
    other = rpc_harness.RankOutcome(1, "trainer1", status="raised", error="ValueError: x", phase="entry").describe()
    assert "[" not in other


def test_an_entry_that_makes_the_default_group_its_world_made_is_told_to_use_that_one():
    error = "ValueError: trying to initialize the default process group twice!"
    line = rpc_harness.RankOutcome(0, "worker0", status="raised", error=error, phase="entry").describe()
    assert line.endswith("[a world with process_group= has made the default group before the entry runs: use it "
                         "(ctx.group, or torch.distributed's default group), or drop process_group= and let the "
                         "program make its own]"), line


# -- the collective scenarios: a planned failure ends the world, named -------------------------

from rpc_harness.result import DIED, HUNG, STOPPED  # noqa: E402
from rpc_harness.scenarios import _verdicts  # noqa: E402


def fired(rank, fault, kind, point, hit, t=100.0):
    return FaultFired(t, rank, fault, kind, point, hit).as_event()


KILL = "kill:worker1@ddp.step#3"


def killed_world(survivor=RAISED, victim=KILLED, events=True, timed_out=False):
    kill = [fired(1, KILL, "kill", "ddp.step", 3)] if events else []
    ranks = [outcome(0, "worker0", survivor, error="RuntimeError: Connection closed by peer"),
             outcome(1, "worker1", victim, events=kill),
             outcome(2, "worker2", STOPPED)]
    made = world(("worker0", "worker1", "worker2"), ranks, faults=KILL)
    made.timed_out = timed_out
    return made


def test_collective_a_planned_kill_that_ended_the_world_meets_the_contract_naming_the_victim():
    verdict = _verdicts.collective_contract(killed_world())
    assert verdict.ok and verdict.details["origin"] == "worker1"
    assert verdict.note.startswith("worker1 killed as planned at ddp.step #3; after it, worker0 raised RuntimeError")
    assert verdict.note.endswith("worker2 stopped by the harness")


def test_collective_a_kill_inside_a_collective_is_named_with_the_step_it_struck_in():
    kill = "kill:worker1@c10d.all_reduce#2"
    events = [{"kind": HITS, "hits": {"ddp.step": 2, "c10d.all_reduce": 2}},
              fired(1, kill, "kill", "c10d.all_reduce", 2)]
    ranks = [outcome(0, "worker0", STOPPED), outcome(1, "worker1", KILLED, events=events)]
    made = world(("worker0", "worker1"), ranks, faults=kill)
    verdict = _verdicts.collective_contract(made, step="ddp.step")
    assert verdict.ok and verdict.details["during"] == "ddp.step #2"
    assert verdict.note.startswith("worker1 killed as planned at c10d.all_reduce #2, during ddp.step #2")
    # At the step's own failpoint the step is already named, once.
    made = killed_world()
    made.ranks[1].events.insert(0, {"kind": HITS, "hits": {"ddp.step": 3}})
    at_step = _verdicts.collective_contract(made, step="ddp.step")
    assert at_step.note.startswith("worker1 killed as planned at ddp.step #3;") and "during" not in at_step.details


def test_collective_a_survivor_that_hung_or_died_breaks_the_contract():
    for survivor in (HUNG, DIED):
        verdict = _verdicts.collective_contract(killed_world(survivor=survivor))
        assert not verdict.ok and verdict.note.startswith("rank 0 (worker0): ")
    verdict = _verdicts.collective_contract(killed_world(timed_out=True))
    assert not verdict.ok and verdict.note.startswith("the world hung until its deadline of 60s")


def test_collective_a_kill_that_never_ended_a_rank_or_struck_the_wrong_one_breaks_the_contract():
    nobody = _verdicts.collective_contract(killed_world(victim=OK, events=False))
    assert not nobody.ok and nobody.note.startswith(f"the planned kill never ended a rank: {KILL}")
    unplanned = _verdicts.collective_contract(killed_world(events=False))
    assert not unplanned.ok and "rank 1 (worker1) was killed but no kill of the plan fired in it" in unplanned.note


RAISE = "raise:worker2@ddp.step#2"
INJECTED = f"InjectedFault: injected fault {RAISE} fired on hit 2 (rank 2, worker2)"


def raised_world(origin_status=RAISED, origin_error=INJECTED, caller_error=None):
    ranks = [outcome(0, "worker0", RAISED if caller_error else STOPPED, error=caller_error),
             outcome(1, "worker1", RAISED, error="RuntimeError: Connection reset by peer"),
             outcome(2, "worker2", origin_status, error=origin_error,
                     events=[fired(2, RAISE, "raise", "ddp.step", 2)])]
    return world(("worker0", "worker1", "worker2"), ranks, faults=RAISE)


def test_collective_a_planned_raise_is_reported_from_its_rank_and_the_others_follow_it():
    verdict = _verdicts.collective_contract(raised_world())
    assert verdict.ok and verdict.details["origin"] == "worker2"
    assert verdict.note == ("worker2 raised as planned at ddp.step #2; after it, worker1 raised RuntimeError: "
                            "Connection reset by peer; worker0 stopped by the harness")


def test_collective_a_raise_reported_through_the_rpc_that_called_it_names_the_caller():
    via = _verdicts.collective_contract(raised_world(origin_status=STOPPED, origin_error=None,
                                                     caller_error=f"RuntimeError: {INJECTED} (raised on worker2)"))
    assert via.ok and via.note.startswith("worker2 raised as planned at ddp.step #2 (reported by worker0, which "
                                          "called it)")


def test_collective_a_raise_nobody_reported_breaks_the_contract():
    lost = _verdicts.collective_contract(raised_world(origin_status=STOPPED, origin_error=None))
    assert not lost.ok and lost.note.startswith("rank 2 (worker2): its planned raise fired but no rank reported it")
    # An InjectedFault from another rank's fault is not this one's report.
    other = INJECTED.replace("(rank 2, worker2)", "(rank 1, worker1)")
    assert not _verdicts.collective_contract(raised_world(origin_error=other)).ok


def test_collective_a_clean_world_with_a_failure_breaks_the_contract():
    names = ("worker0", "worker1")
    assert _verdicts.collective_contract(world(names, [outcome(0, "worker0"), outcome(1, "worker1")])).ok
    failed = world(names, [outcome(0, "worker0"), outcome(1, "worker1", RAISED, error="ValueError: x")])
    verdict = _verdicts.collective_contract(failed)
    assert not verdict.ok and verdict.note.startswith("rank 1 (worker1): raised ValueError: x")


def test_collective_a_clean_world_says_every_rank_finished_and_a_failing_one_carries_its_report():
    names = ("worker0", "worker1")
    clean = _verdicts.collective_contract(world(names, [outcome(0, "worker0"), outcome(1, "worker1")]))
    assert clean.note == "all 2 ranks finished" and clean.details == {}
    # Eleven lines of output: the report shows the last ten, and the verdict carries that report.
    lines = "\n".join(f"line {k}" for k in range(11))
    failed = world(names, [outcome(0, "worker0"), rpc_harness.RankOutcome(1, "worker1", status=RAISED,
                                                                        error="ValueError: x", output=lines)])
    verdict = _verdicts.collective_contract(failed)
    assert verdict.note == failed.ranks[1].describe() + "\n" + failed.report(output_lines=10)
    assert "line 1\n" in verdict.note and "line 0\n" not in verdict.note
    killed = killed_world(survivor=HUNG)
    killed.ranks[0].output = lines
    assert _verdicts.collective_contract(killed).note.endswith("\n" + killed.report(output_lines=10))
    hung = killed_world(timed_out=True)
    hung.ranks[0].output = lines
    assert _verdicts.collective_contract(hung).note == ("the world hung until its deadline of 60s\n"
                                                       + hung.report(output_lines=10))


def test_collective_a_raise_that_never_fired_is_named_as_the_planned_raise():
    ranks = [outcome(0, "worker0"), outcome(1, "worker1"), outcome(2, "worker2")]
    verdict = _verdicts.collective_contract(world(("worker0", "worker1", "worker2"), ranks, faults=RAISE))
    assert not verdict.ok and verdict.note.startswith(f"the planned raise never ended a rank: {RAISE}\n")
    both = f"{KILL},{RAISE}"
    verdict = _verdicts.collective_contract(world(("worker0", "worker1", "worker2"), ranks, faults=both))
    assert verdict.note.startswith(f"the planned kill never ended a rank: {KILL}, {RAISE}\n")


def test_collective_the_first_fault_to_fire_is_the_origin_and_only_kills_and_raises_say_where():
    kill = fired(1, KILL, "kill", "ddp.step", 3, t=105.0)
    slow = fired(2, "delay:worker2@ddp.step=0.1s", "delay", "ddp.step", 1, t=101.0)
    early_raise = fired(2, RAISE, "raise", "ddp.step", 2, t=102.0)
    ranks = [outcome(0, "worker0", STOPPED), outcome(1, "worker1", KILLED, events=[kill]),
             outcome(2, "worker2", RAISED, error=INJECTED, events=[slow, early_raise])]
    faults = f"{KILL},{RAISE},delay:worker2@ddp.step=0.1s"
    verdict = _verdicts.collective_contract(world(("worker0", "worker1", "worker2"), ranks, faults=faults))
    assert verdict.ok, verdict.note
    assert verdict.details == {"origin": "worker2", "origin_status": RAISED}
    assert verdict.note == "worker2 raised as planned at ddp.step #2; worker0 stopped by the harness"
    # Fired later, the kill is the origin, and the raise's rank follows it.
    ranks[2].events = [slow, fired(2, RAISE, "raise", "ddp.step", 2, t=106.0)]
    verdict = _verdicts.collective_contract(world(("worker0", "worker1", "worker2"), ranks, faults=faults))
    assert verdict.details == {"origin": "worker1", "origin_status": KILLED}
    assert verdict.note.startswith("worker1 killed as planned at ddp.step #3; after it, worker2 raised InjectedFault")


def test_collective_a_follower_is_named_by_its_errors_first_line_cut_at_160_characters():
    long = "RuntimeError: " + "x" * 200 + "\nTraceback line"
    ranks = [outcome(0, "worker0", RAISED, error=long), outcome(1, "worker1", KILLED,
                                                               events=[fired(1, KILL, "kill", "ddp.step", 3)]),
             outcome(2, "worker2", STOPPED), outcome(3, "worker3", STOPPED)]
    verdict = _verdicts.collective_contract(world(("worker0", "worker1", "worker2", "worker3"), ranks, faults=KILL))
    assert verdict.note == (f"worker1 killed as planned at ddp.step #3; after it, worker0 raised {long[:160]}; "
                            "worker2, worker3 stopped by the harness")


def test_collective_a_raise_is_reported_by_its_own_rank_first_and_found_in_a_traceback_too():
    assert _verdicts.planned(raised_world(), "raise")[0].kind == "raise"
    assert _verdicts.planned(raised_world(), "kill") == []
    # worker0's RPC to worker2 raised the same error, but worker2 reported its own.
    both = raised_world(caller_error=f"RuntimeError: {INJECTED}")
    origin = both.ranks[2]
    assert _verdicts.reporter(both, origin) is origin
    # The mark may be in the traceback only (the error's first line holds no rank).
    via = raised_world(origin_status=STOPPED, origin_error=None)
    via.ranks[1].error = "InjectedFault: injected fault fired on hit 2"
    via.ranks[1].traceback = f"... {INJECTED} ..."
    assert _verdicts.reporter(via, via.ranks[2]) is via.ranks[1]
    # An error naming the rank that is no InjectedFault is no report of it.
    via.ranks[1].error = "RuntimeError: peer (rank 2, worker2) closed"
    via.ranks[1].traceback = "RuntimeError: peer (rank 2, worker2) closed"
    assert _verdicts.reporter(via, via.ranks[2]) is None
    # A rank that did not raise reports nothing, whatever its error says.
    via.ranks[1].status = STOPPED
    via.ranks[1].error = INJECTED
    assert _verdicts.reporter(via, via.ranks[2]) is None


def test_collective_a_broken_contract_is_false_not_merely_falsy_and_names_every_failure():
    names = ("worker0", "worker1", "worker2")
    failed = world(names, [outcome(0, "worker0", RAISED, error="ValueError: x"), outcome(1, "worker1"),
                           outcome(2, "worker2", DIED)])
    verdict = _verdicts.collective_contract(failed)
    assert verdict.ok is False  # a report written as JSON says false
    assert verdict.note.startswith(f"{failed.ranks[0].describe()}; {failed.ranks[2].describe()}\n")
    assert _verdicts.collective_contract(killed_world(timed_out=True)).ok is False
    assert _verdicts.collective_contract(killed_world(survivor=HUNG)).ok is False


def test_collective_every_problem_is_named_and_a_killed_origin_is_its_own_report():
    both = killed_world(survivor=HUNG)
    both.ranks[2].status = DIED
    verdict = _verdicts.collective_contract(both)
    assert verdict.note.startswith(f"{both.ranks[0].describe()}; {both.ranks[2].describe()}\n")
    # worker1's raise fired (worker0's call to it raised the error), then its kill: it was killed, and
    # says where both fired; the caller that raised is a follower, not its reporter.
    plan = f"raise:worker1@ddp.step#2,{KILL}"
    injected = "InjectedFault: injected fault raise:worker1@ddp.step#2 fired on hit 2 (rank 1, worker1)"
    ranks = [outcome(0, "worker0", RAISED, error=f"RuntimeError: {injected}"),
             outcome(1, "worker1", KILLED, events=[fired(1, "raise:worker1@ddp.step#2", "raise", "ddp.step", 2),
                                                   fired(1, KILL, "kill", "ddp.step", 3, t=101.0)]),
             outcome(2, "worker2", STOPPED)]
    verdict = _verdicts.collective_contract(world(("worker0", "worker1", "worker2"), ranks, faults=plan))
    assert verdict.ok and verdict.note == (f"worker1 killed as planned at ddp.step #2, ddp.step #3; after it, "
                                           f"worker0 raised RuntimeError: {injected}; worker2 stopped by the harness")


def test_collective_every_follower_is_named_even_one_that_raised_with_no_error_text():
    ranks = [outcome(0, "worker0", RAISED, error=None), outcome(1, "worker1", KILLED,
                                                              events=[fired(1, KILL, "kill", "ddp.step", 3)]),
             outcome(2, "worker2", RAISED, error="RuntimeError: closed\nmore")]
    verdict = _verdicts.collective_contract(world(("worker0", "worker1", "worker2"), ranks, faults=KILL))
    assert verdict.ok and verdict.note == ("worker1 killed as planned at ddp.step #3; after it, worker0 raised (no error text); "
                                           "worker2 raised RuntimeError: closed")
