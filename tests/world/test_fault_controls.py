"""Positive controls: every fault kind does what its name says, where and
when the plan says, seen from inside the rank it strikes. The scenario tests
assert that faults change nothing; these make sure the faults did something.

Timings are lower bounds only (a delay took at least its time), so that a
loaded machine can make them slower but never make them fail. Which hit a
fault struck is counted by the entry itself, not taken from the harness's
own hit counter, so an off-by-one there shows."""

from __future__ import annotations

import worlds

import rpc_harness
from rpc_harness.faults import TORCH_SEND_TRIES

# torch retries RRef and autograd-cleanup messages: 1 send + 5 retries
# (RpcRetryOptions.maxRetries in torch/csrc/distributed/rpc/rpc_agent.h), at
# about 1, 1, 1.5, 2.25, 3.4 s after one another.
TORCH_TRIES = 6


def steps_logged(outcome):
    """(what, step) of each step event the entry wrote, in order."""
    return [(e["name"].removeprefix("step."), e["step"]) for e in outcome.events
            if e.get("kind") == "event" and e["name"].startswith("step.")]


def fired(result):
    """(rank, fault, hit) of every fault that fired, in time order."""
    return [(f.rank, f.fault, f.hit) for f in result.fired_faults()]


def test_a_delay_makes_its_steps_take_at_least_its_time():
    plan = "delay:worker0@test.step=0.1s,delay:worker1@test.step#2=0.3s"
    result = rpc_harness.run_world(worlds.timed_steps, world_size=2, args=(3,), faults=plan, deadline=30)
    every, second = result.values
    assert all(took >= 0.1 for took in every), every  # #1+ by default: every hit
    assert second[1] >= 0.3, second
    assert result.fault_counts() == {"delay:worker0@test.step#1+=0.1s": 3, "delay:worker1@test.step#2=0.3s": 1}
    assert sorted(fired(result)) == [(0, "delay:worker0@test.step#1+=0.1s", hit) for hit in (1, 2, 3)] + [
        (1, "delay:worker1@test.step#2=0.3s", 2)]


def test_a_kill_strikes_in_exactly_the_hit_it_names():
    result = rpc_harness.run_world(worlds.logged_steps, world_size=2, args=(4,), faults="kill:worker1@test.step#2",
                               deadline=30)
    assert result.ok
    victim = result[1]
    assert victim.status == "killed" and victim.signal == "SIGKILL"
    # In its second call, not its first (no "after 1") nor its third (no "after 2").
    assert steps_logged(victim) == [("before", 1), ("after", 1), ("before", 2)]
    assert fired(result) == [(1, "kill:worker1@test.step#2", 2)]
    assert result[0].status == "ok" and result[0].value == 4
    assert steps_logged(result[0])[-1] == ("after", 4)


def test_a_freeze_stops_its_rank_in_exactly_the_hit_it_names_and_the_harness_ends_it():
    result = rpc_harness.run_world(worlds.logged_steps, world_size=2, args=(4,), faults="freeze:worker1@test.step#3",
                               deadline=30)
    assert result.ok
    victim = result[1]
    assert victim.status == "killed" and "frozen (SIGSTOP)" in victim.describe()
    assert steps_logged(victim) == [("before", 1), ("after", 1), ("before", 2), ("after", 2), ("before", 3)]
    assert fired(result) == [(1, "freeze:worker1@test.step#3", 3)]
    assert result[0].status == "ok" and result[0].value == 4


def test_a_raise_fails_its_rank_in_exactly_the_hit_it_names():
    result = rpc_harness.run_world(worlds.logged_steps, world_size=2, args=(4,), faults="raise:worker1@test.step#3",
                               deadline=30, check=False)
    assert [r.rank for r in result.failures] == [1]
    failed = result[1]
    assert failed.status == "raised" and failed.error.startswith("InjectedFault: injected fault"), failed.error
    assert "fired on hit 3" in failed.error
    assert steps_logged(failed) == [("before", 1), ("after", 1), ("before", 2), ("after", 2), ("before", 3)]
    assert fired(result) == [(1, "raise:worker1@test.step#3", 3)]


def test_a_raise_fires_on_its_hit_only_and_with_a_plus_on_every_later_one():
    plan = "raise:worker0@test.step#2,raise:worker1@test.step#3+"
    result = rpc_harness.run_world(worlds.steps_catching_faults, world_size=2, args=(5,), faults=plan, deadline=30)
    assert result.values == [[2], [3, 4, 5]]
    assert result.fault_counts() == {"raise:worker0@test.step#2": 1, "raise:worker1@test.step#3+": 3}


def test_a_hang_blocks_exactly_the_hit_it_names():
    # Each call runs in its own thread: the hung one stays blocked, the
    # entry goes on, so the calls after it show they did not hang.
    result = rpc_harness.run_world(worlds.steps_watching_for_hangs, world_size=2, args=(4,),
                               faults="hang:worker1@test.step#2", deadline=30)
    assert result.values == [[], [2]]
    assert fired(result) == [(1, "hang:worker1@test.step#2", 2)]


def test_a_msgdelay_delays_every_send_of_the_type_it_names():
    result = rpc_harness.run_world(worlds.timed_calls, world_size=2, args=(2,),
                               faults="msgdelay:worker0@PYTHON_CALL=0.3s", deadline=30)
    took = result[0].value
    assert len(took) == 2 and all(t >= 0.3 for t in took), took
    # Its two rpc_sync calls, not the remote() and its fetch, which are other types.
    assert result.fault_counts() == {"msgdelay:worker0@PYTHON_CALL=0.3s": 2}
    assert {(f.rank, f.point) for f in result.fired_faults()} == {(0, "PYTHON_CALL")}


def test_a_msgfail_within_torchs_retries_fails_each_send_that_often_and_the_world_succeeds():
    # Two dropped RRefs, two RREF_USER_DELETE messages; each fails twice and
    # torch's third try delivers it.
    result = rpc_harness.run_world(worlds.drops_remote_values, world_size=2, args=(2,),
                               faults="msgfail:worker0@RREF_USER_DELETE=2", deadline=30)
    assert result.ok and result[0].value == [1, 2]
    assert result.fault_counts() == {"msgfail:worker0@RREF_USER_DELETE=2": 4}
    events = result.fired_faults()
    assert {(f.rank, f.point) for f in events} == {(0, "RREF_USER_DELETE")}
    assert sorted(f.attempt for f in events) == [1, 1, 2, 2], "two tries of each message failed, none more"


# One of the suite's slowest (pytest --durations): torch retries a failed message on its own clock
# (about 9 s for its last try); the test must outlast every try.
def test_a_msgfail_past_torchs_retries_loses_the_message_and_fails_the_world():
    assert TORCH_SEND_TRIES == TORCH_TRIES, "the harness's idea of torch's retry budget"
    plan = f"msgfail:worker0@RREF_USER_DELETE={TORCH_TRIES}"
    # A lost delete leaves the owner's graceful shutdown waiting ~100 s for
    # it; the deadline ends the world after the last try (~9 s) has failed.
    result = rpc_harness.run_world(worlds.drops_remote_values, world_size=2, args=(1,), faults=plan, deadline=12,
                               check=False)
    assert not result.ok
    assert result.fault_counts() == {plan: TORCH_TRIES}
    assert sorted(f.attempt for f in result.fired_faults()) == list(range(1, TORCH_TRIES + 1))
    assert result.problems == [
        f"{plan} fails all {TORCH_TRIES} of torch's tries of a message: 1 message(s) lost (torch reports a lost "
        "RRef message only as a shutdown that waits ~100 s, a lost fork request by aborting its sender)"
    ]
    assert "fails all 6 of torch's tries of a message: 1 message(s) lost" in result.report()
    assert "rpc world hung" in result.report().splitlines()[0]



def test_a_msgfail_whose_retries_the_worlds_end_cut_short_fails_the_world_saying_so():
    # msgfail=3 fails the first three tries of each message; torch makes the
    # second about a second after the first, the third ~2.5 s after it. This
    # world ends well before: the cleanups were failed once each and never
    # delivered. It reported ok before (found by an outside-user trial).
    plan = "msgfail:worker0@CLEANUP_AUTOGRAD_CONTEXT_REQ=3"
    result = rpc_harness.run_world(worlds.autograd_contexts_then_return, world_size=2, args=(2,), faults=plan,
                                   deadline=30, check=False)
    assert [r.status for r in result] == ["ok", "ok"]
    tries = sorted(f.attempt for f in result.fired_faults())
    assert tries and tries.count(3) < tries.count(1), f"precondition: the world ended before the third tries ({tries})"
    assert not result.ok
    assert result.problems == [
        f"{plan} failed {tries.count(1) - tries.count(3)} of its {tries.count(1)} message(s) fewer than 3 times, cut "
        "short by the world's end: torch was still retrying them (about a second apart, then longer), so they were "
        "never delivered; keep the world running until the retries are done, or ask for fewer failed tries"]
    assert result.report().startswith("rpc world failed: its fault plan did not do what it says")


def test_a_msgfail_counts_the_tries_it_failed_not_a_later_try_that_failed_for_real():
    # msgfail=1 fails the first try of each message. When the peer is dead,
    # torch's retries fail too, logged the same way; they are the death's
    # doing, not the plan's (the RNN scenario's last cleanup retry, still
    # pending when a server had shut down, was counted as a 25th send).
    plan = "msgfail:worker0@CLEANUP_AUTOGRAD_CONTEXT_REQ=1,kill:worker1@peer.die#1"
    result = rpc_harness.run_world(worlds.cleanup_retried_after_its_peer_died, world_size=2, faults=plan,
                               deadline=60)
    assert [r.status for r in result] == ["ok", "killed"]
    logged = result[0].value
    assert logged[:2] == [1, 2], "torch logged its first try (the plan's) and a retry (the dead peer's) as failed"
    assert result.fault_counts() == {"msgfail:worker0@CLEANUP_AUTOGRAD_CONTEXT_REQ=1": 1,
                                     "kill:worker1@peer.die#1": 1}
    assert [(f.point, f.hit, f.attempt) for f in result.fired_faults() if f.kind == "msgfail"] == [
        ("CLEANUP_AUTOGRAD_CONTEXT_REQ", 1, 1)]
