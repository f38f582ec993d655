"""The report lines that say where each rank was in its collectives
(rpc_harness.c10d.history), from histories written as ranks write them
(rpc_harness.c10d.record), one line form per test."""

from __future__ import annotations

import pytest

from rpc_harness.c10d.history import read_history, where_ranks_are
from rpc_harness.c10d.record import History


@pytest.fixture
def world(tmp_path):
    """``world(size)``: a History per rank, writing into tmp_path."""
    def make(size, members=None):
        histories = [History(str(tmp_path / f"rank{rank}.c10d"), rank) for rank in range(size)]
        for history in histories:
            history.group("0", "default_pg", list(range(size)) if members is None else members)
        return histories

    return make


def run(history, ops, group="0", *, complete=True):
    """Enter (and complete) each (op, tensors) of ``ops`` in ``group``."""
    for op, tensors in ops:
        seq = history.enter(group, op, False, tensors, None)
        if complete:
            history.done(group, seq, False)


def test_ranks_at_different_ops_of_one_number_are_named_with_each_op(world, tmp_path):
    ranks = world(4)
    for rank, history in enumerate(ranks):
        run(history, [("all_reduce", "float32 [16]")] * 6)
        run(history, [("all_reduce" if rank == 2 else "broadcast", "float32 [16]")], complete=False)
    assert where_ranks_are(str(tmp_path), 4) == [
        "rank 2 at all_reduce#7 (collective #7, float32 [16]); ranks 0, 1, 3 at broadcast#1 (collective #7, float32 [16])"]


def test_a_rank_behind_the_others_never_entered_their_collective(world, tmp_path):
    ranks = world(4)
    for rank, history in enumerate(ranks):
        run(history, [("all_reduce", "float32 [4]")] * 11)
        if rank != 3:
            run(history, [("all_reduce", "float32 [4]")], complete=False)
    assert where_ranks_are(str(tmp_path), 4) == [
        "ranks 0-2 at all_reduce#12 (collective #12, float32 [4])",
        "rank 3 never entered collective #12 (its last: all_reduce#11, collective #11, completed)"]


def test_each_op_is_counted_apart_in_its_group_as_a_fault_plan_counts_it(world, tmp_path):
    # A plan's c10d.all_reduce#3 is the third all_reduce: the report names
    # it so beside the group's own number (outside-user trial: "#7" read as
    # the seventh all_reduce).
    ranks = world(2)
    for rank, history in enumerate(ranks):
        run(history, [("broadcast", "float32 [4]"), ("all_reduce", "float32 [4]")] * 2)
        run(history, [("broadcast", "float32 [4]")])
        run(history, [("all_reduce", "float32 [4]")], complete=rank == 0)
    assert where_ranks_are(str(tmp_path), 2) == [
        "every rank at all_reduce#3 (collective #6, float32 [4]); not completed on rank 1, completed on rank 0"]


def test_a_rank_that_entered_no_collective_says_so(world, tmp_path):
    ranks = world(2)
    run(ranks[0], [("barrier", "")], complete=False)
    assert where_ranks_are(str(tmp_path), 2) == [
        "rank 0 at barrier#1 (collective #1)", "rank 1 never entered collective #1 (it entered none)"]


def test_ranks_that_disagree_on_a_shape_are_named_with_theirs(world, tmp_path):
    ranks = world(2)
    for rank, history in enumerate(ranks):
        run(history, [("all_reduce", "float32 [4]")] * 3)
        run(history, [("all_gather", f"float32 [{8 * (rank + 1)}]")], complete=False)
    assert where_ranks_are(str(tmp_path), 2) == [
        "ranks disagree on the shape of all_gather#1 (collective #4): [8] on rank 0, [16] on rank 1",
        "rank 0 at all_gather#1 (collective #4, float32 [8]); rank 1 at all_gather#1 (collective #4, float32 [16])"]


def test_ranks_that_disagree_on_a_dtype_are_named_with_theirs(world, tmp_path):
    ranks = world(3)
    for rank, history in enumerate(ranks):
        run(history, [("broadcast", f"{'float64' if rank == 1 else 'float32'} [2, 8], float32 [8]")])
    assert where_ranks_are(str(tmp_path), 3)[0] == (
        "ranks disagree on the dtype of broadcast#1 (collective #1): float32, float32 on ranks 0, 2; float64, float32 "
        "on rank 1")


def test_an_all_to_all_may_differ_in_shape(world, tmp_path):
    ranks = world(2)
    for rank, history in enumerate(ranks):
        run(history, [("all_to_all_single", f"float32 [{rank + 1}]")])
    assert not any("disagree" in line for line in where_ranks_are(str(tmp_path), 2))


def test_ranks_that_all_completed_their_last_collective_say_so(world, tmp_path):
    for history in world(2):
        run(history, [("all_reduce", "float32 [4]")] * 2)
    assert where_ranks_are(str(tmp_path), 2) == [
        "every rank completed all_reduce#2 (collective #2, float32 [4]), its last collective"]


def test_ranks_inside_one_collective_say_which_completed_it(world, tmp_path):
    ranks = world(3)
    for rank, history in enumerate(ranks):
        run(history, [("all_reduce", "float32 [4]")], complete=rank == 0)
    assert where_ranks_are(str(tmp_path), 3) == [
        "every rank at all_reduce#1 (collective #1, float32 [4]); not completed on ranks 1, 2, completed on rank 0"]


def test_a_rank_stopped_before_it_wrote_its_completions_is_not_said_to_be_inside_its_op(world, tmp_path):
    # A rank writes an op's completion at its next op or when asked; one the
    # harness stopped at once (a planned kill's survivors) may have completed
    # its last op unwritten: "not completed" would be a guess.
    ranks = world(3)
    for rank, history in enumerate(ranks):
        run(history, [("all_reduce", "float32 [4]")], complete=rank == 2)
    assert where_ranks_are(str(tmp_path), 3, unwritten={0}) == [
        "every rank at all_reduce#1 (collective #1, float32 [4]); not completed on rank 1, "
        "completion not written (stopped first, or stuck before it could) on rank 0, completed on rank 2"]
    assert where_ranks_are(str(tmp_path), 3, unwritten={2}) == [
        "every rank at all_reduce#1 (collective #1, float32 [4]); not completed on ranks 0, 1, completed on rank 2"]


def test_a_subgroup_is_numbered_and_named_apart(world, tmp_path):
    ranks = world(2)
    for rank, history in enumerate(ranks):
        run(history, [("all_reduce", "float32 [4]")] * 3)
        history.group("1", "tp", [0, 1])
        run(history, [("all_reduce", "float32 [2]")] * (1 if rank else 2), group="1")
    assert where_ranks_are(str(tmp_path), 2) == [
        "every rank completed all_reduce#3 (collective #3, float32 [4]), its last collective",
        "group 1 (tp): rank 0 at all_reduce#2 (collective #2, float32 [2])",
        "group 1 (tp): rank 1 never entered collective #2 (its last: all_reduce#1, collective #1, completed)"]


def test_a_point_to_point_op_never_completed_is_named_with_its_peer(world, tmp_path):
    ranks = world(2)
    run(ranks[0], [("barrier", "")])
    run(ranks[1], [("barrier", "")])
    ranks[1].enter("0", "recv", True, "float32 [4]", 0)
    assert where_ranks_are(str(tmp_path), 2)[-1] == (
        "rank 1 in recv#1 from rank 0 (point-to-point #1, float32 [4]), not completed")


def test_a_history_cut_by_a_kill_reads_up_to_its_last_whole_line(world, tmp_path):
    [history] = world(1)
    run(history, [("all_reduce", "float32 [4]")], complete=False)
    with open(tmp_path / "rank0.c10d", "r+b") as file:  # a line the kill cut short, after the last whole one
        data = file.read()
        end = data.index(b"\x00")
        file.seek(end)
        file.write(b'{"t": 1.0, "k": "done", "g": "0", "n"')
    assert [e.describe() for e in read_history(str(tmp_path), 0).ops.values()] == [
        "all_reduce#1 (collective #1, float32 [4])"]
    assert not read_history(str(tmp_path), 0).ops[("0", False, 1)].done


def test_a_world_without_collectives_has_nothing_to_say(tmp_path):
    assert where_ranks_are(str(tmp_path), 3) == []


def test_an_op_that_failed_on_a_rank_is_not_said_to_have_completed_there(world, tmp_path):
    ranks = world(3)
    for rank, history in enumerate(ranks):
        seq = history.enter("0", "all_reduce", False, "float32 [4]", None)
        if rank == 1:
            history.done("0", seq, False, RuntimeError("Connection closed by peer"))
        elif rank == 2:
            history.done("0", seq, False)
    assert where_ranks_are(str(tmp_path), 3) == [
        "every rank at all_reduce#1 (collective #1, float32 [4]); not completed on rank 0, failed on rank 1, "
        "completed on rank 2"]


def test_a_history_tallies_each_groups_collectives_entered_completed_and_failed_point_to_point_apart(tmp_path):
    history = History(str(tmp_path / "rank0.c10d"), 0)
    run(history, [("all_reduce", "float32 [4]")] * 3)
    run(history, [("broadcast", "float32 [4]")], complete=False)
    failed = history.enter("0", "all_gather", False, "float32 [4]", None)
    history.done("0", failed, False, RuntimeError("peer gone"))
    history.done("1", history.enter("1", "all_reduce", False, "", None), False)  # another group
    history.done("0", history.enter("0", "send", True, "float32 [4]", 1), True)  # point to point: not a collective
    assert history.tally("0") == (5, 3, 1)
    assert history.tally("1") == (1, 1, 0)
    assert history.tally("2") == (0, 0, 0)


def test_different_ops_at_one_number_are_not_called_a_shape_disagreement(world, tmp_path):
    # Their shapes differ because they are different ops: the line saying
    # where each rank stopped tells it, not a "disagree on the shape" line.
    ranks = world(2)
    run(ranks[0], [("broadcast", "float32 [4]")], complete=False)
    run(ranks[1], [("all_reduce", "float32 [8]")], complete=False)
    assert where_ranks_are(str(tmp_path), 2) == [
        "rank 0 at broadcast#1 (collective #1, float32 [4]); rank 1 at all_reduce#1 (collective #1, float32 [8])"]


def test_an_op_whose_shapes_may_differ_does_not_hide_a_later_disagreement(world, tmp_path):
    ranks = world(2)
    for rank, history in enumerate(ranks):
        run(history, [("all_to_all_single", f"float32 [{rank + 1}]")])
        run(history, [("all_gather", f"float32 [{rank + 1}]")])
    assert where_ranks_are(str(tmp_path), 2)[0] == (
        "ranks disagree on the shape of all_gather#1 (collective #2): [1] on rank 0, [2] on rank 1")


def test_a_subgroups_disagreement_is_said_of_that_group_alone(world, tmp_path):
    ranks = world(2)
    for rank, history in enumerate(ranks):
        run(history, [("all_reduce", "float32 [4]")])
        history.group("1", "tp", [0, 1])
        run(history, [("all_reduce", f"float32 [{rank + 1}]")], group="1")
    assert where_ranks_are(str(tmp_path), 2) == [
        "every rank completed all_reduce#1 (collective #1, float32 [4]), its last collective",
        "group 1 (tp): ranks disagree on the shape of all_reduce#1 (collective #1): [1] on rank 0, [2] on rank 1",
        "group 1 (tp): rank 0 at all_reduce#1 (collective #1, float32 [1]); "
        "rank 1 at all_reduce#1 (collective #1, float32 [2])"]


def test_a_disagreement_on_many_dimensional_shapes_names_each_tensors_whole_shape(world, tmp_path):
    ranks = world(2)
    for rank, history in enumerate(ranks):
        run(history, [("all_gather", f"float32 [2, {4 * (rank + 1)}], float32 [3, 8, 1]")])
    assert where_ranks_are(str(tmp_path), 2)[0] == (
        "ranks disagree on the shape of all_gather#1 (collective #1): [2, 4], [3, 8, 1] on rank 0; "
        "[2, 8], [3, 8, 1] on rank 1")


def test_a_rank_that_gave_no_tensor_is_said_to_have_none(world, tmp_path):
    ranks = world(2)
    run(ranks[0], [("broadcast", "float32 [4]")])
    run(ranks[1], [("broadcast", "")])
    assert where_ranks_are(str(tmp_path), 2)[0] == (
        "ranks disagree on the shape of broadcast#1 (collective #1): [4] on rank 0, none on rank 1")


def test_groups_are_reported_by_number_then_named_ones(world, tmp_path):
    ranks = world(2)
    for name in ("10", "tp_group", "2", "1"):
        for history in ranks:
            history.group(name, f"desc{name}", [0, 1])
        run(ranks[0], [("all_reduce", "float32 [4]")], group=name, complete=False)
    run(ranks[0], [("all_reduce", "float32 [4]")], complete=False)
    lines = where_ranks_are(str(tmp_path), 2)
    assert [line.split(":")[0] for line in lines[::2]] == [
        "rank 0 at all_reduce#1 (collective #1, float32 [4])",
        "group 1 (desc1)", "group 2 (desc2)", "group 10 (desc10)", "group tp_group (desctp_group)"]


def test_a_group_without_a_description_is_named_by_its_name_alone(world, tmp_path):
    ranks = world(2)
    for name, desc in (("1", ""), ("2", "undefined")):  # torch's word for a group given none
        for history in ranks:
            history.group(name, desc, [0, 1])
            run(history, [("all_reduce", "float32 [4]")], group=name)
    assert where_ranks_are(str(tmp_path), 2) == [
        "group 1: every rank completed all_reduce#1 (collective #1, float32 [4]), its last collective",
        "group 2: every rank completed all_reduce#1 (collective #1, float32 [4]), its last collective"]


def test_a_member_that_never_used_its_group_is_named_as_entering_none(world, tmp_path):
    ranks = world(3)
    ranks[0].group("1", "dp", [0, 2])  # rank 2 never reached the group's first collective
    run(ranks[0], [("all_reduce", "float32 [4]")], group="1", complete=False)
    assert where_ranks_are(str(tmp_path), 3) == [
        "group 1 (dp): rank 0 at all_reduce#1 (collective #1, float32 [4])",
        "group 1 (dp): rank 2 never entered collective #1 (it entered none)"]


def test_a_group_whose_members_torch_did_not_know_is_the_ranks_that_used_it(world, tmp_path):
    ranks = world(3)
    for history in ranks[:2]:
        history.group("1", "dp", None)
        run(history, [("all_reduce", "float32 [4]")], group="1")
    assert where_ranks_are(str(tmp_path), 3) == [
        "group 1 (dp): every rank completed all_reduce#1 (collective #1, float32 [4]), its last collective"]


def test_a_groups_members_known_to_one_rank_are_used_for_all(world, tmp_path):
    ranks = world(3)
    ranks[0].group("1", "dp", None)
    ranks[1].group("1", "dp", [0, 1, 2])
    for history in ranks[:2]:
        run(history, [("all_reduce", "float32 [4]")], group="1")
    assert where_ranks_are(str(tmp_path), 3) == [
        "group 1 (dp): ranks 0, 1 at all_reduce#1 (collective #1, float32 [4])",
        "group 1 (dp): rank 2 never entered collective #1 (it entered none)"]


def test_members_beyond_the_worlds_size_are_left_out(world, tmp_path):
    ranks = world(2, members=[0, 1, 2])
    for history in ranks:
        run(history, [("all_reduce", "float32 [4]")])
    assert where_ranks_are(str(tmp_path), 2) == [
        "every rank completed all_reduce#1 (collective #1, float32 [4]), its last collective"]


def test_ranks_behind_at_one_op_are_named_together(world, tmp_path):
    ranks = world(4)
    for rank, history in enumerate(ranks):
        run(history, [("all_reduce", "float32 [4]")] * (3 if rank < 2 else 2))
    assert where_ranks_are(str(tmp_path), 4)[1] == (
        "ranks 2, 3 never entered collective #3 (their last: all_reduce#2, collective #2, completed)")


def test_ranks_that_entered_nothing_are_named_together(world, tmp_path):
    ranks = world(3)
    run(ranks[0], [("barrier", "")], complete=False)
    assert where_ranks_are(str(tmp_path), 3)[1] == "ranks 1, 2 never entered collective #1 (they entered none)"


def test_ranks_behind_are_listed_by_rank_whatever_their_last_op(world, tmp_path):
    ranks = world(4)
    for rank, history in enumerate(ranks[:3]):
        run(history, [("all_reduce", "float32 [4]")] * (3 - rank))
    assert where_ranks_are(str(tmp_path), 4) == [
        "rank 0 at all_reduce#3 (collective #3, float32 [4])",
        "rank 1 never entered collective #3 (its last: all_reduce#2, collective #2, completed)",
        "rank 2 never entered collective #3 (its last: all_reduce#1, collective #1, completed)",
        "rank 3 never entered collective #3 (it entered none)"]


def test_a_stopped_rank_behind_the_others_is_not_said_to_be_inside_its_last_op(world, tmp_path):
    # Rank 1 may have completed all_reduce#1 and been stopped before writing so.
    ranks = world(2)
    run(ranks[0], [("all_reduce", "float32 [4]")] * 2)
    run(ranks[1], [("all_reduce", "float32 [4]")], complete=False)
    assert where_ranks_are(str(tmp_path), 2, unwritten={1})[1] == (
        "rank 1 never entered collective #2 (its last: all_reduce#1, collective #1, "
        "completion not written (stopped first, or stuck before it could))")


def test_a_send_never_completed_is_named_with_the_rank_it_sends_to(world, tmp_path):
    ranks = world(2)
    ranks[0].enter("0", "send", True, "float32 [4]", 1)
    ranks[1].enter("0", "isend", True, "float32 [4]", 0)
    assert where_ranks_are(str(tmp_path), 2) == [
        "rank 0 in send#1 to rank 1 (point-to-point #1, float32 [4]), not completed",
        "rank 1 in isend#1 to rank 0 (point-to-point #1, float32 [4]), not completed"]


def test_a_receive_from_any_rank_names_no_peer(world, tmp_path):
    ranks = world(2)
    ranks[1].enter("0", "irecv", True, "float32 [4]", None)
    assert where_ranks_are(str(tmp_path), 2) == ["rank 1 in irecv#1 (point-to-point #1, float32 [4]), not completed"]


def test_a_point_to_point_op_without_tensors_names_none(world, tmp_path):
    ranks = world(2)
    ranks[1].enter("0", "recv", True, "", 0)
    assert where_ranks_are(str(tmp_path), 2) == ["rank 1 in recv#1 from rank 0 (point-to-point #1), not completed"]


def test_a_stopped_rank_is_not_said_to_be_inside_its_point_to_point_op(world, tmp_path):
    ranks = world(2)
    ranks[0].enter("0", "send", True, "float32 [4]", 1)
    assert where_ranks_are(str(tmp_path), 2, unwritten={0}) == [
        "rank 0 in send#1 to rank 1 (point-to-point #1, float32 [4]), "
        "completion not written (stopped first, or stuck before it could)"]


def test_a_completed_point_to_point_op_is_not_pending(world, tmp_path):
    ranks = world(2)
    ranks[0].done("0", ranks[0].enter("0", "send", True, "float32 [4]", 1), True)
    ranks[1].done("0", ranks[1].enter("0", "recv", True, "float32 [4]", 0), True)
    assert where_ranks_are(str(tmp_path), 2) == []


def test_a_history_reads_point_to_point_ops_apart_from_collectives(world, tmp_path):
    [history] = world(1)
    run(history, [("all_reduce", "float32 [4]")])
    history.enter("0", "send", True, "float32 [2]", 0)
    ops = read_history(str(tmp_path), 0).ops
    assert [ops[key].describe() for key in (("0", False, 1), ("0", True, 1))] == [
        "all_reduce#1 (collective #1, float32 [4])", "send#1 (point-to-point #1, float32 [2])"]
