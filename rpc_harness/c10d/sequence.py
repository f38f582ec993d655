"""The rules of a reused collective world that no rank can judge alone,
judged in the parent from every rank's word (``rpc_harness._parent.live``).

After an entry, each rank says what it knows of its default group
(:class:`GroupWord`, looked at by ``rpc_harness.c10d.clean``, sent with its
``msg.Checked``). The supervisor, which waits for every rank's answer
anyway, compares them: ranks at different sequence numbers break the
``sequence`` rule; and only where every rank is clean and some rank's own
collectives did not show the group usable are the ranks told to try the
group together (``msg.TryGroup``). The ranks once compared their words
through the world's store themselves: a FileStore round of four ranks took
about 1 ms of a reused entry's ~7.5 ms, on the entry's critical path.

Torch-free: the parent reads it.
"""

from __future__ import annotations

from dataclasses import dataclass


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


def sequence_findings(words: dict[int, GroupWord]) -> dict[int, str]:
    """For each rank whose sequence number differs from some other rank's,
    what the ``sequence`` rule's finding says of it."""
    found = {}
    for rank, word in words.items():
        others = {peer: other for peer, other in words.items() if other.sequence != word.sequence}
        if others:
            found[rank] = behind(word, others)
    return found


def must_try(words: dict[int, GroupWord]) -> bool:
    """Whether the group must be tried with a collective of the check's
    own: some rank's entry did not show it usable (a clean world's ranks
    only: the caller asks where no rule is broken, so that no rank waits
    in the try alone)."""
    return not all(word.shown_usable for word in words.values())


def behind(word: GroupWord, others: dict[int, GroupWord]) -> str:
    """The sequence rule's finding, numbered as the report's collectives
    lines number them (the ranks' histories: the entries' collectives, not
    the checks' own); in torch's sequence numbers where the histories agree
    and torch's do not (an op the histories do not see)."""
    if any(other.entered != word.entered for other in others.values()):
        return (f"is at collective #{word.entered} of the default group, but "
                + ", ".join(f"rank {peer} at #{other.entered}" for peer, other in sorted(others.items())))
    return (f"is at sequence number {word.sequence} of the default group (torch's), but "
            + ", ".join(f"rank {peer} at {other.sequence}" for peer, other in sorted(others.items())))
