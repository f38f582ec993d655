"""Property tests: for any world size in range and any small plan of delays and
kills aimed where each scenario has a contract, the scenario meets it (no hang,
baseline-equal gradients, the right ranks dead), or Hypothesis shrinks a
counterexample and prints its replay line."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import scenarios.parameter_server as ps
import scenarios.rl as rl
import scenarios.rnn as rnn
from harness import Fault, FaultPlan
from harness import strategies as hs

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@st.composite
def plans(draw, module, size, targets, points, kinds=("delay", "kill")):
    """Up to two faults on ``targets`` at ``points``; kills hit at most one rank."""
    names = module.names(size)
    chosen = [n for n in names if targets(n)]
    faults = []
    for _ in range(draw(st.integers(0, 2))):
        kind = draw(st.sampled_from(kinds))
        target = draw(st.sampled_from(chosen))
        point = draw(st.sampled_from(points))
        hit = draw(st.integers(1, 4))
        if kind == "delay":
            faults.append(Fault("delay", target, point, hit, True, draw(st.sampled_from([0.001, 0.01]))))
        elif not any(f.kind == "kill" for f in faults):
            faults.append(Fault("kill", target, point, hit))
    unique = {(f.target, f.point): f for f in faults}
    return FaultPlan(tuple(unique.values()))


def check_contract(report):
    __tracebackhide__ = True
    world = report.world
    assert world is not None and not world.timed_out, "no hang is ever acceptable"
    assert not report.mismatches, "\n".join(report.problems())
    assert report.contract_ok, report.contract_note
    planned = {f.target for f in world.faults if f.kind == "kill"}
    assert {r.name for r in world.dead} <= planned, "dead ranks must be a subset of killed ranks"


@hs.world_settings()
@given(data=st.data(), size=st.integers(3, 4), seed=hs.seeds())
def test_rl_meets_its_contract(data, size, seed):
    plan = data.draw(plans(rl, size, lambda n: n.startswith("observer"), ["observer.step"]))
    config = rl.Config(episodes=3, max_steps=20)
    check_contract(rl.run(config, world_size=size, seed=seed, faults=str(plan) or None, deadline=60))


@hs.world_settings()
@given(data=st.data(), size=st.integers(2, 4), seed=hs.seeds())
def test_ps_meets_its_contract(data, size, seed):
    plan = data.draw(plans(ps, size, lambda n: n.startswith("trainer"), ["trainer.step"]))
    config = ps.Config(batches=6)
    check_contract(ps.run(config, world_size=size, seed=seed, faults=str(plan) or None, deadline=60))


@hs.world_settings()
@given(data=st.data(), size=st.integers(2, 3), seed=hs.seeds())
def test_rnn_meets_its_contract_under_delays(data, size, seed):
    plan = data.draw(plans(rnn, size, lambda n: True, ["ps.forward", "trainer.step"], kinds=("delay",)))
    config = rnn.Config(epochs=1)
    check_contract(rnn.run(config, world_size=size, seed=seed, faults=str(plan) or None, deadline=60))


@pytest.mark.parametrize("size", [2, 3])
def test_a_hung_trainer_fails_at_the_deadline_with_its_failpoint_on_the_stack(size):
    report = ps.run(ps.Config(batches=6), world_size=size, seed=3, faults="hang:trainer1@trainer.step#2", deadline=8)
    world = report.world
    assert world.timed_out and not report.ok
    hung = world["trainer1"]
    assert hung.status == "hung"
    assert "hang_at_failpoint" in hung.stacks and "trainer.step" in hung.stacks
    assert all(r.stacks for r in world.ranks if r.status in ("hung", "stopped")), "every rank's stacks"
