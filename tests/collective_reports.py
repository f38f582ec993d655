"""Reading a collective world's report in tests: where its ranks were."""

from __future__ import annotations

import re


def ranks_inside(collectives: list[str], op: str) -> set[int]:
    """The ranks that the report's collectives lines place inside ``op``:
    entered and never completed. The lines read ``every rank at OP#K
    (collective #N, ...); not completed on rank 1, failed on ranks 0, 2``
    when every rank had entered it, ``rank 1 at OP#K (...)`` when some had not."""
    inside: set[int] = set()
    for line in collectives:
        if line.startswith(f"every rank at {op}#"):
            found = re.search(r"not completed on ranks? ([\d, -]+)", line)
        else:
            found = re.search(rf"(?:^|; )ranks? ([\d, -]+) at {op}#", line)
        if found:
            inside |= parse_ranks(found[1])
    return inside


def parse_ranks(text: str) -> set[int]:
    """``1``, ``0, 2``, ``0-2, 5``: the ranks a report's line names (three
    or more in a row as a range)."""
    ranks: set[int] = set()
    for part in text.replace(" ", "").split(","):
        if part:
            first, _, last = part.partition("-")
            ranks |= set(range(int(first), int(last or first) + 1))
    return ranks
