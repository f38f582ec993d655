"""What a reused collective world's check does with the entry's own
collectives (rpc_harness.c10d.clean, each rank's look, and
rpc_harness.c10d.sequence, the supervisor's judgement of every rank's
word): where every rank's entry ran collectives over the default group
that all completed, the group has shown itself usable and the check runs
no collective of its own; otherwise, every rank alike tries the group."""

from __future__ import annotations

import pytest
import torch.distributed.distributed_c10d as c10d

from rpc_harness.c10d import clean, hooks, sequence
from rpc_harness.c10d.sequence import GroupWord


class Group:
    """The default group as the check reads it: its name and sequence number."""

    group_name = "0"

    def __init__(self, sequence=7):
        self.sequence = sequence

    def _get_sequence_number_for_group(self):
        return self.sequence


@pytest.fixture
def tallies(monkeypatch):
    """``tallies[name] = (entered, completed, failed)``: what the rank's history counts."""
    counts = {}
    monkeypatch.setattr(hooks, "tally", lambda name: counts.get(name, (0, 0, 0)))
    return counts


def before(group, tally):
    return clean.Before(frozenset(), id(group), tally)


@pytest.mark.parametrize(("after", "shown"), [
    ((12, 12, 0), True),   # two collectives, both completed
    ((11, 11, 0), True),   # one collective, completed
    ((10, 10, 0), False),  # none: the group was not used
    ((12, 11, 0), False),  # one still not completed
    ((12, 12, 1), False),  # one failed
    ((11, 12, 0), False),  # an older op completed meanwhile: nothing shown
])
def test_the_entrys_own_collectives_show_the_group_usable_only_when_each_completed(after, shown):
    group = Group()
    assert clean.proven(before(group, (10, 10, 0)), group, after) is shown


def test_an_older_op_that_completed_during_the_entry_shows_nothing():
    # One op of an earlier entry still pending as this one began (11 entered,
    # 10 completed): its completion now is no proof of the entry's own two.
    group = Group()
    assert not clean.proven(before(group, (11, 10, 0)), group, (13, 13, 0))
    assert clean.proven(before(group, (11, 10, 0)), group, (13, 12, 0))


def test_a_default_group_the_entry_made_anew_shows_nothing():
    group, old = Group(), Group()
    assert not clean.proven(before(old, (10, 10, 0)), group, (12, 12, 0))


def test_a_ranks_word_says_its_sequence_its_historys_count_and_whether_its_entry_showed_the_group(
        monkeypatch, tallies):
    group = Group(sequence=9)
    monkeypatch.setattr(c10d._world, "_default_pg", group)  # what GroupMember.WORLD reads
    tallies["0"] = (12, 12, 0)
    assert clean.look(before(group, (10, 10, 0)), thorough=False) == ([], GroupWord(9, 12, True))
    tallies["0"] = (12, 11, 0)
    assert clean.look(before(group, (10, 10, 0)), thorough=False) == ([], GroupWord(9, 12, False))


def test_a_rank_without_a_default_group_says_so_and_gives_no_word(monkeypatch):
    monkeypatch.setattr(c10d._world, "_default_pg", None)
    found, word = clean.look(before(Group(), (0, 0, 0)), thorough=False)
    assert word is None
    assert found == [("group", "has no default group any more: the entry destroyed it (dist.destroy_process_group())")]
    assert clean.try_default_group(3) == ["has no default group any more"]  # (no rank is told to try then)


def test_a_group_every_rank_showed_usable_is_not_tried_again():
    assert not sequence.must_try({rank: GroupWord(7, 11, True) for rank in range(3)})


@pytest.mark.parametrize("shown", [[False, True, True], [True, True, False]])
def test_where_any_rank_did_not_show_the_group_usable_every_rank_tries_it(shown):
    assert sequence.must_try({rank: GroupWord(7, 11, said) for rank, said in enumerate(shown)})


def test_ranks_at_one_sequence_number_break_no_rule_and_ranks_apart_are_placed_in_one_finding():
    assert sequence.sequence_finding({rank: GroupWord(7, 3, True) for rank in range(3)}) is None
    words = {0: GroupWord(7, 3, True), 1: GroupWord(7, 3, True), 2: GroupWord(6, 2, True)}
    assert sequence.sequence_finding(words) == (
        "the ranks are at different collectives of the default group: rank 2 at #2; ranks 0, 1 at #3")
    # Named as the collectives lines name ranks: three in a row as a range.
    words = {0: GroupWord(7, 3, True), 1: GroupWord(7, 3, True), 2: GroupWord(7, 3, True), 3: GroupWord(6, 2, True)}
    assert sequence.sequence_finding(words) == (
        "the ranks are at different collectives of the default group: rank 3 at #2; ranks 0-2 at #3")


def test_try_default_group_runs_the_checks_collective_over_the_default_group(monkeypatch):
    group = Group()
    monkeypatch.setattr(c10d._world, "_default_pg", group)
    seen = []
    monkeypatch.setattr(clean.dist, "all_reduce", lambda tensor, group: seen.append(group) or tensor.mul_(3))
    assert clean.try_default_group(3) == []
    assert seen == [group]
    assert clean.try_default_group(2) == ["an all_reduce of ones over the default group gave 3, not 2"]


def test_the_checks_own_collective_reaches_no_failpoint_and_no_history(monkeypatch):
    # The harness's all_reduce is not the entry's: a plan's c10d.all_reduce
    # must not fire in it, nor a history count it.
    seen = []
    monkeypatch.setattr(clean.dist, "all_reduce", lambda tensor, group: seen.append(hooks._unobserved.active)
                        or tensor.mul_(2))
    assert clean._try(Group(), 2) == []
    assert seen == [True]


def test_ranks_apart_are_numbered_as_the_reports_collectives_lines_or_as_torch_where_those_agree():
    # The report's collectives lines number a group's collectives as the
    # ranks' histories do (the entries', not the checks' own all_reduces):
    # the finding says the same numbers, not torch's (outside-user trial: a
    # report said "#4, but rank 1 at #3" beside "rank 0 at all_reduce #3").
    assert sequence.sequence_finding({0: GroupWord(4, 3, True), 1: GroupWord(3, 2, True),
                                      2: GroupWord(3, 2, True)}) == (
        "the ranks are at different collectives of the default group: rank 0 at #3; ranks 1, 2 at #2")
    assert sequence.sequence_finding({0: GroupWord(5, 3, True), 1: GroupWord(4, 3, True),
                                      2: GroupWord(6, 3, True)}) == (
        "the ranks are at different sequence numbers of the default group (torch's): rank 0 at 5; rank 1 at 4; "
        "rank 2 at 6")


@pytest.fixture
def one_rank_group(tmp_path):
    """A real gloo default group of one rank, in this process, for the
    look's own reads of torch (destroyed after the test)."""
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        yield c10d.GroupMember.WORLD
    finally:
        dist.destroy_process_group()


def test_before_an_entry_a_rank_notes_its_groups_its_default_group_and_that_groups_tally(one_rank_group, tallies):
    tallies[one_rank_group.group_name] = (4, 3, 1)
    noted = clean.before_entry()
    assert noted == clean.Before(frozenset({id(one_rank_group)}), id(one_rank_group), (4, 3, 1))


def test_before_an_entry_without_a_default_group_a_rank_notes_none(monkeypatch):
    monkeypatch.setattr(c10d._world, "_default_pg", None)
    assert clean.before_entry() == clean.Before(frozenset(id(g) for g in c10d._world.pg_map), None, (0, 0, 0))


def test_a_subgroup_the_entry_made_is_named_with_its_ranks_and_one_made_before_is_not(one_rank_group, tallies):
    import torch.distributed as dist

    older = dist.new_group([0])
    noted = clean.before_entry()
    made = dist.new_group([0])
    found, _ = clean.look(noted, thorough=False)
    name = c10d._world.pg_names[made]
    assert found == [("subgroups", f"still has 1 subgroup(s) the entry made: group {name!r} of ranks [0]")]
    dist.destroy_process_group(made)
    assert clean.look(noted, thorough=False)[0] == []
    dist.destroy_process_group(older)


def test_the_checks_collective_over_a_real_group_gives_its_size_or_says_what_it_gave(one_rank_group):
    assert clean.try_default_group(1) == []
    assert clean.try_default_group(2) == ["an all_reduce of ones over the default group gave 1, not 2"]


def test_a_group_that_cannot_run_a_collective_is_said_so_with_the_error(monkeypatch):
    def broken(tensor, group):
        raise RuntimeError("Connection closed by peer")

    monkeypatch.setattr(clean.dist, "all_reduce", broken)
    assert clean._try(Group(), 2) == [
        "cannot run a collective over the default group: RuntimeError: Connection closed by peer"]


def test_no_pending_handle_is_found_where_every_collective_completed(one_rank_group):
    import torch
    import torch.distributed as dist

    work = dist.all_reduce(torch.ones(2), async_op=True)
    work.wait()
    assert clean.pending_work() == []
    del work


def test_a_handle_whose_collective_never_completed_is_found_among_live_objects():
    import torch.distributed as dist

    class NeverCompleted(dist.Work):
        def is_completed(self):
            return False

    held = [NeverCompleted(), NeverCompleted()]
    assert clean.pending_work() == [
        "holds 2 work handle(s) of async_op collectives that have not completed: an async_op=True collective never "
        "waited for, or one its peers never issued"]
    held.clear()
    assert clean.pending_work() == []


def test_only_a_thorough_look_scans_for_pending_handles(monkeypatch, tallies):
    group = Group()
    monkeypatch.setattr(c10d._world, "_default_pg", group)
    monkeypatch.setattr(clean, "pending_work", lambda: ["holds 1 work handle(s)"])
    assert clean.look(before(group, (0, 0, 0)), thorough=False)[0] == []
    assert clean.look(before(group, (0, 0, 0)), thorough=True)[0] == [("work", "holds 1 work handle(s)")]


def test_a_handle_held_twice_is_counted_once():
    import torch.distributed as dist

    class NeverCompleted(dist.Work):
        def is_completed(self):
            return False

    work = NeverCompleted()
    held = [work], [work]
    assert clean.pending_work()[0].startswith("holds 1 work handle(s)")
    del held, work


def test_subgroups_left_are_listed_five_at_most(one_rank_group, tallies):
    import torch.distributed as dist

    noted = clean.before_entry()
    made = [dist.new_group([0]) for _ in range(6)]
    [(rule, text)] = clean.look(noted, thorough=False)[0]
    names = [c10d._world.pg_names[group] for group in made]
    assert text == ("still has 6 subgroup(s) the entry made: "
                    + ", ".join(f"group {name!r} of ranks [0]" for name in names[:5]))
    for group in made:
        dist.destroy_process_group(group)
