"""What a reused collective world's check does with the entry's own
collectives (rpc_harness.c10d.clean): where every rank's entry ran
collectives over the default group that all completed, the group has shown
itself usable and the check runs no collective of its own; otherwise, every
rank alike tries the group."""

from __future__ import annotations

import pytest
import torch.distributed.distributed_c10d as c10d

from rpc_harness.c10d import clean, hooks


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


@pytest.fixture
def check(monkeypatch, tallies):
    """``check(peers_shown)``: this rank's findings (rank 0 of as many as
    given), its own collectives shown usable or not as the first says, its
    peers' as the rest say; returns (findings, whether the group was tried)."""
    group = Group()
    monkeypatch.setattr(c10d._world, "_default_pg", group)  # what GroupMember.WORLD reads
    tried = []
    monkeypatch.setattr(clean, "_try", lambda g, size: tried.append(g) or [])

    def run(shown):
        tallies["0"] = (11, 11, 0) if shown[0] else (10, 10, 0)
        words = {rank: (group.sequence, False, said, 11) for rank, said in enumerate(shown)}
        monkeypatch.setattr(clean, "_exchange", lambda path, rank, size, mine, wait: {**words, 0: mine})
        found = clean.findings("store", 0, len(shown), before(group, (10, 10, 0)), thorough=False, wait=1.0)
        return found, bool(tried)

    return run


def test_a_group_every_rank_showed_usable_is_not_tried_again(check):
    assert check([True, True, True]) == ([], False)


@pytest.mark.parametrize("shown", [[False, True, True], [True, True, False]])
def test_where_any_rank_did_not_show_the_group_usable_every_rank_tries_it(check, shown):
    assert check(shown) == ([], True)


def test_the_checks_own_collective_reaches_no_failpoint_and_no_history(monkeypatch):
    # The harness's all_reduce is not the entry's: a plan's c10d.all_reduce
    # must not fire in it, nor a history count it.
    seen = []
    monkeypatch.setattr(clean.dist, "all_reduce", lambda tensor, group: seen.append(hooks._unobserved.active)
                        or tensor.mul_(2))
    assert clean._try(Group(), 2) == []
    assert seen == [True]


def test_a_rank_behind_is_named_in_the_reports_numbers_or_torchs_where_those_agree():
    # The report's collectives lines number a group's collectives as the
    # ranks' histories do (the entries', not the checks' own all_reduces):
    # the finding says the same numbers, not torch's (outside-user trial: a
    # report said "#4, but rank 1 at #3" beside "rank 0 at all_reduce #3").
    assert clean._behind(3, 4, {1: (3, False, True, 2), 2: (3, False, True, 2)}) == (
        "is at collective #3 of the default group, but rank 1 at #2, rank 2 at #2")
    assert clean._behind(3, 5, {1: (4, False, True, 3), 2: (6, False, True, 3)}) == (
        "is at sequence number 5 of the default group (torch's), but rank 1 at 4, rank 2 at 6")
