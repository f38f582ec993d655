"""Property tests of the collective scenarios: for any world size from the
least to 8, any seed and any small plan of delays, kills and raises, the
scenario meets its contract: no hang; with delays only, every gradient and
parameter within its bound; a kill or raise ends the world, named as the
origin, and nobody else dead. Few examples each: every one is a world."""

from __future__ import annotations

import pytest
from hypothesis import given

from rpc_harness import strategies as hs
from rpc_harness.scenarios import ddp, ddp_rpc, fsdp

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# Early enough that every fault fires in a run of STEPS steps, unless an
# earlier kill or raise ended the world first: so each is optional ('?'),
# and the test checks that a plan without one fired all of its faults.
STEPS = 3
FAULTS = dict(kinds=("delay", "kill", "raise"), max_hit=STEPS, delays=(0.001, 0.01), optional=True)


def check_contract(report):
    __tracebackhide__ = True
    world = report.world
    assert world is not None and not world.timed_out, "no hang is ever acceptable"
    assert report.contract_ok, report.contract_note
    assert not report.mismatches, "\n".join(report.problems())
    ending = [f for f in world.faults if f.kind in ("kill", "raise")]
    planned = {f.target for f in world.faults if f.kind == "kill"}
    assert {r.name for r in world.dead} <= planned, "dead ranks must be a subset of killed ranks"
    fired = {f.fault for f in world.fired_faults()}
    if not ending:  # nothing ended the world early: every delay fired, and the run was checked whole
        assert {str(f) for f in world.faults} <= fired
        assert report.ok and report.grads_checked == report.grads_expected > 0
    elif any(str(f) in fired for f in ending):
        assert report.details["origin"] in {f.target for f in ending}


@pytest.mark.long
@hs.world_settings(max_examples=3)
@given(case=hs.scenario_worlds("ddp", max_size=8, **FAULTS))
def test_ddp_meets_its_contract(case):
    check_contract(ddp.run(ddp.Config(steps=STEPS), world_size=case.world_size, seed=case.seed, faults=case.faults,
                           deadline=120))


@pytest.mark.long
@hs.world_settings(max_examples=3)
@given(case=hs.scenario_worlds("fsdp", max_size=8, **FAULTS))
def test_fsdp_meets_its_contract(case):
    check_contract(fsdp.run(fsdp.Config(steps=STEPS), world_size=case.world_size, seed=case.seed,
                            faults=case.faults, deadline=120))


@pytest.mark.long
@hs.world_settings(max_examples=3)
@given(case=hs.scenario_worlds("ddp_rpc", max_size=8, points=["trainer.step", "optimizer.step"],
                               targets=lambda name: name.startswith("trainer"), **FAULTS))
def test_ddp_rpc_meets_its_contract(case):
    check_contract(ddp_rpc.run(ddp_rpc.Config(steps=STEPS), world_size=case.world_size, seed=case.seed,
                               faults=case.faults, deadline=120))
