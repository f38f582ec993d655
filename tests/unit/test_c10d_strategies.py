"""Hypothesis strategies for collective worlds (rpc_harness.strategies):
their plans strike only at the collectives asked for, with the kinds asked
for, and every drawn world replays from its token."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rpc_harness import strategies as hs
from rpc_harness.repro import decode


@settings(max_examples=60, deadline=None)
@given(case=hs.collective_worlds(("all_reduce", "broadcast"), max_size=3, max_faults=2), data=st.data())
def test_drawn_plans_strike_only_at_the_collectives_asked_for_and_replay_from_their_token(case, data):
    assert 2 <= case.world_size <= 3
    for fault in case.faults:
        assert fault.point in ("c10d.all_reduce", "c10d.broadcast")
        assert fault.kind in hs.COLLECTIVE_KINDS and fault.target in case.names
    back = decode(case.repro(entry="c10d_entries:ddp_steps").token())
    assert (back.world_size, back.seed, back.plan) == (case.world_size, case.seed, case.faults)


@settings(max_examples=30, deadline=None)
@given(case=hs.collective_worlds(("reduce_scatter_tensor",), group="1", kinds=("raise", "hang")))
def test_a_group_and_other_kinds_are_drawn_when_asked(case):
    assert all(f.point == "c10d.reduce_scatter_tensor:1" and f.kind in ("raise", "hang") for f in case.faults)


def test_the_smallest_collective_world_is_two_ranks_and_no_fault():
    from hypothesis import find

    smallest = find(hs.collective_worlds(), lambda case: True)
    assert (smallest.world_size, len(smallest.faults)) == (2, 0)


@pytest.mark.parametrize("ops, says", [(("alreduce",), "no op 'alreduce'; the ops are all_reduce"),
                                       ((), "no op given")])
def test_an_unknown_op_is_refused_naming_the_ops(ops, says):
    with pytest.raises(ValueError, match=says):
        hs.collective_points(ops)


def test_a_bad_group_is_refused():
    with pytest.raises(Exception, match="a process group is named by"):
        hs.collective_points(("all_reduce",), group="a/b")
