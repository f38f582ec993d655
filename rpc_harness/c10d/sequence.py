"""The rules of a reused collective world that no rank can judge alone,
judged in the parent from every rank's word (``rpc_harness._parent.live``).

After an entry, each rank says what it knows of its default group
(:class:`GroupWord`, looked at by ``rpc_harness.c10d.clean``, sent with its
``msg.Checked``). The supervisor, which waits for every rank's answer
anyway, compares them: ranks at different sequence numbers break the
``sequence`` rule (one finding for the world, which places every rank);
and only where every rank is clean and some rank's own collectives did
not show the group usable are the ranks told to try the group together
(``msg.TryGroup``). The ranks once compared their words
through the world's store themselves: a FileStore round of four ranks took
about 1 ms of a reused entry's ~7.5 ms, on the entry's critical path.

Torch-free: the parent reads it. Ranks are named as the collectives lines
name them (``history.ranks_named``).
"""

from __future__ import annotations

from dataclasses import dataclass

from .history import ranks_named


@dataclass(frozen=True)
class GroupWord:
    """A rank's default group as an entry ends: torch's sequence number
    (``_get_sequence_number_for_group``), the collectives the rank's history
    entered on it (the numbers the report's collectives lines use), and
    whether the entry's own collectives showed it usable
    (``rpc_harness.c10d.clean.proven``)."""

    sequence: int
    entered: int
    shown_usable: bool


def sequence_finding(words: dict[int, GroupWord]) -> str | None:
    """What the ``sequence`` rule's finding says where the ranks' sequence
    numbers differ (None where they agree): one line for the world, each
    number with the ranks at it, as the report's collectives lines number
    a group's collectives (the ranks' histories: the entries' collectives,
    not the checks' own); in torch's sequence numbers where the histories
    agree and torch's do not (an op the histories do not see)."""
    if len({word.sequence for word in words.values()}) <= 1:
        return None
    if len({word.entered for word in words.values()}) > 1:
        at = _grouped({rank: f"#{word.entered}" for rank, word in words.items()})
        return f"the ranks are at different collectives of the default group: {at}"
    at = _grouped({rank: str(word.sequence) for rank, word in words.items()})
    return f"the ranks are at different sequence numbers of the default group (torch's): {at}"


def _grouped(where: dict[int, str]) -> str:
    """``rank 0 at #2; ranks 1, 2 at #1``: the fewest ranks first."""
    by_place: dict[str, list[int]] = {}
    for rank, place in sorted(where.items()):
        by_place.setdefault(place, []).append(rank)
    parts = sorted(by_place.items(), key=lambda item: (len(item[1]), item[1]))
    return "; ".join(f"{ranks_named(ranks)} at {place}" for place, ranks in parts)


def must_try(words: dict[int, GroupWord]) -> bool:
    """Whether the group must be tried with a collective of the check's
    own: some rank's entry did not show it usable (a clean world's ranks
    only: the caller asks where no rule is broken, so that no rank waits
    in the try alone)."""
    return not all(word.shown_usable for word in words.values())
