"""The c10d failpoints in fault plans: every op of the table parses and
round-trips, with or without a group; a name that is no op, or a bad group,
is refused before any process starts, saying what is allowed; and they are
points the harness makes, never checked against a scenario's failpoints."""

from __future__ import annotations

import pytest

from rpc_harness.c10d.ops import BY_NAME, OPS, POINTS
from rpc_harness.errors import FaultPlanError
from rpc_harness.faults import FaultPlan, is_code_point

# Every collective and point-to-point op the issue names, in its own words.
NAMED = ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor", "broadcast",
         "reduce", "gather", "scatter", "all_to_all", "all_to_all_single", "barrier", "send", "recv", "isend", "irecv")


def test_every_op_of_torch_distributed_has_a_point():
    assert set(NAMED) <= set(POINTS)


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("kind", ["kill", "delay", "raise", "hang", "freeze"])
def test_each_point_and_kind_round_trips_with_and_without_a_group(point, kind):
    arg = "=0.5s" if kind == "delay" else ""
    for where in (f"c10d.{point}", f"c10d.{point}:1", f"c10d.{point}:mesh_dp-0"):
        plan = FaultPlan.parse(f"{kind}:worker2@{where}#3{arg}")
        assert FaultPlan.parse(str(plan)) == plan
        assert plan.faults[0].point == where


@pytest.mark.parametrize("text, says", [
    ("kill:w@c10d.alreduce", "'c10d.alreduce' names no collective; the c10d failpoints are c10d.all_reduce, "),
    ("kill:w@c10d.all_reduce:a/b", "a process group is named by torch's name for it (0, 1, ...) or its description"),
    ("kill:w@c10d.all_reduce:", "a process group is named by"),
    ("kill:w@c10d.", "names no collective"),
])
def test_a_bad_c10d_point_is_refused_saying_what_is_allowed(text, says):
    with pytest.raises(FaultPlanError, match="^fault plan: ") as refused:
        FaultPlan.parse(text)
    assert says in str(refused.value)


def test_c10d_points_are_the_harnesss_not_a_scenarios_failpoints():
    assert not is_code_point("c10d.all_reduce") and not is_code_point("c10d.send:1")
    FaultPlan.parse("kill:a@c10d.all_reduce#3").validate(["a", "b"], failpoints=["trainer.step"])


def test_the_table_names_each_dispatcher_op_once_and_p2p_ops_have_both_forms():
    assert len(BY_NAME) == len(OPS)
    assert BY_NAME["send"].points == ("send", "isend") and BY_NAME["recv_"].points == ("recv", "irecv")
