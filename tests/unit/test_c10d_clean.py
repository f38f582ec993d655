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
    assert word is None and [rule for rule, _ in found] == ["group"]


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
