"""Property tests: for any world size in range and any small plan of delays and
kills aimed where each scenario has a contract, the scenario meets it (no hang,
baseline-equal gradients, the right ranks dead), or Hypothesis shrinks a
counterexample and prints its replay line."""

from __future__ import annotations

import pytest
from hypothesis import given

import rpc_harness.scenarios.parameter_server as ps
import rpc_harness.scenarios.rl as rl
import rpc_harness.scenarios.rnn as rnn
from rpc_harness import strategies as hs

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# Delays and kills early enough that every drawn fault fires in the short
# runs below (a plan that fires nothing would test nothing: the world fails);
# at most one kill, aimed at a rank whose death has a contract.
FAULTS = dict(kinds=("delay", "kill"), max_kills=1, max_hit=4, delays=(0.001, 0.01))


def check_contract(report):
    __tracebackhide__ = True
    world = report.world
    assert world is not None and not world.timed_out, "no hang is ever acceptable"
    assert not report.mismatches, "\n".join(report.problems())
    assert report.contract_ok, report.contract_note
    planned = {f.target for f in world.faults if f.kind == "kill"}
    assert {r.name for r in world.dead} <= planned, "dead ranks must be a subset of killed ranks"
    check_fired(world)


def check_fired(world):
    """Every fault of the plan fired (unless optional), only on its target at
    its point, on the hits it names: once for a kill, on consecutive hits
    from its first for a delay. Unchanged gradients mean nothing otherwise."""
    __tracebackhide__ = True
    counts = world.fault_counts()
    for fault in world.faults:
        events = [e for e in world.fired_faults() if e.fault == str(fault)]
        assert fault.optional or counts[str(fault)] >= 1, f"{fault} never fired"
        assert len(events) == counts[str(fault)]
        assert {(e.rank, e.point) for e in events} <= {(world.names.index(fault.target), fault.point)}
        hits = sorted(e.hit for e in events)
        if fault.kind == "kill":
            assert hits in ([], [fault.hit]), (fault, hits)
        else:
            assert hits == list(range(fault.hit, fault.hit + len(hits))), (fault, hits)


@pytest.mark.long
@hs.world_settings()
@given(case=hs.scenario_worlds("rl", min_size=3, points=["observer.step"],
                               targets=lambda name: name.startswith("observer"), **FAULTS))
def test_rl_meets_its_contract(case):
    config = rl.Config(episodes=3, max_steps=20)
    check_contract(rl.run(config, world_size=case.world_size, seed=case.seed, faults=case.faults, deadline=60))


# One of the suite's slowest (pytest --durations): Hypothesis draws world sizes and fault plans;
# each example is a whole parameter-server world judged against its baseline.
@pytest.mark.long
@hs.world_settings()
@given(case=hs.scenario_worlds("ps", points=["trainer.step"], targets=lambda name: name.startswith("trainer"),
                               **FAULTS))
def test_ps_meets_its_contract(case):
    config = ps.Config(batches=6)
    check_contract(ps.run(config, world_size=case.world_size, seed=case.seed, faults=case.faults, deadline=60))


# One of the suite's slowest (pytest --durations): Hypothesis draws world sizes and delays; each
# example is a whole RNN world judged against its baseline.
@pytest.mark.long
@hs.world_settings()
@given(case=hs.scenario_worlds("rnn", max_size=3, points=["ps.forward", "trainer.step"],
                               kinds=("delay",), max_hit=4, delays=(0.001, 0.01), optional=True))
def test_rnn_meets_its_contract_under_delays(case):
    # Delays drawn at any point of any rank: a server never reaches
    # trainer.step, so these faults are optional.
    config = rnn.Config(epochs=1)
    check_contract(rnn.run(config, world_size=case.world_size, seed=case.seed, faults=case.faults, deadline=60))


@pytest.mark.parametrize("size", [2, 3])
def test_a_hung_trainer_fails_with_the_servers_message_and_its_failpoint_on_the_stack(size):
    # The server gives up on a trainer that neither finishes nor dies well
    # before the world's deadline, naming it; the hung trainer's stacks,
    # taken as the world stops, show where it hangs. Two batches: the hang is
    # at the second, and any other trainer finishes its two well within the
    # server's 6 s even on a loaded machine (with six, trainer2 was still
    # training when the server gave up, and was named too).
    report = ps.run(ps.Config(batches=2), world_size=size, seed=3, faults="hang:trainer1@trainer.step#2", deadline=8)
    world = report.world
    assert not world.timed_out and not report.ok
    server = world["parameter_server"]
    assert server.status == "raised" and "trainers ['trainer1'] neither finished nor died within 6s" in server.error
    hung = world["trainer1"]
    assert hung.status == "stopped"
    assert "hang_at_failpoint" in hung.stacks and "trainer.step" in hung.stacks
    assert f"--- {hung.label} stacks when the world was stopped" in world.report()
