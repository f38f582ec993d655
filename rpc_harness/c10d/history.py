"""Where each rank was in its collectives, read from the histories its
ranks left (parent side; no torch).

Each rank wrote its collectives as it entered and completed them
(``rpc_harness.c10d.record``, one ``rank{N}.c10d`` file in the world's
folder, whole up to a SIGKILL). When a world hangs, runs out of time or
loses a rank, :func:`where_ranks_are` turns them into lines a person can
act on, one process group at a time::

    rank 2 at broadcast#3 (collective #7, float32 [16]); ranks 0, 1, 3 at all_reduce#4 (collective #7, float32 [16])
    rank 3 never entered collective #12 (its last: all_reduce#5, collective #11, completed)
    ranks disagree on the shape of all_gather#2 (collective #4): [8] on rank 0, [16] on rank 1

``collective #N`` numbers a group's collectives as every member enters
them, in one order, every op counted (the default group's from 1, each
subgroup's from 1); point-to-point ops are numbered apart, per group.
``OP#K`` counts that op alone in the group, as a fault plan's failpoint
``c10d.OP:GROUP#K`` does (and ``c10d.OP#K``, where no other group ran
it): a report of a world killed at ``c10d.all_reduce#3`` names
``all_reduce#3`` (outside-user trial: "all_reduce #7" read as the seventh
all-reduce).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from .._rank.boot import rank_file
from ..context import read_event_lines
from .ops import OPS

# Ops whose members must all give the same shapes and dtypes.
_AGREE = {point for op in OPS if op.agree for point in op.points}
DEFAULT_GROUP_DESC = "default_pg"
HISTORY = "c10d"  # a rank's history is its rank file of this name (rpc_harness._rank.boot.rank_file)


@dataclass
class Entered:
    """One op a rank entered: its group, number there, op and tensors; whether it completed."""

    group: str
    seq: int
    op: str
    p2p: bool
    tensors: str
    peer: int | None = None
    done: bool = False
    error: str | None = None
    nth: int = 0  # which of the group's ops of its kind it is (from 1), as failpoints count

    def describe(self, *, tensors: bool = True) -> str:
        """``all_reduce#3 (collective #7, float32 [16])``."""
        where = f"{'point-to-point' if self.p2p else 'collective'} #{self.seq}"
        return f"{self.op}#{self.nth} ({where}" + (f", {self.tensors}" if tensors and self.tensors else "") + ")"


@dataclass
class RankHistory:
    """What one rank's file says: its groups (description, members) and
    every op it entered, by (group, point-to-point?, number)."""

    rank: int
    groups: dict[str, tuple[str, list[int] | None]] = field(default_factory=dict)
    ops: dict[tuple[str, bool, int], Entered] = field(default_factory=dict)
    unwritten: bool = False  # stopped before it could write its last ops' completions (where_ranks_are)

    def last(self, group: str, *, p2p: bool = False) -> Entered | None:
        mine = [e for (g, p, _), e in self.ops.items() if g == group and p == p2p]
        return max(mine, key=lambda e: e.seq) if mine else None


def history_path(workdir: str, rank: int) -> str:
    """Where a rank's history is written in its world's folder (and where a
    torchrun leader puts each rank's copy before reading them all)."""
    return rank_file(workdir, rank, HISTORY)


def read_history(workdir: str, rank: int) -> RankHistory:
    """One rank's history (empty where it entered no collective)."""
    history = RankHistory(rank)
    counts: dict[tuple[str, bool, str], int] = {}  # (group, point-to-point?, op) -> entered so far
    for line in read_event_lines(history_path(workdir, rank)):
        kind = line.get("k")
        if kind == "group":
            history.groups[line["g"]] = (line.get("desc") or "", line.get("ranks"))
        elif kind == "enter":
            key = (line["g"], bool(line["p2p"]), line["n"])
            same = (line["g"], bool(line["p2p"]), line["op"])
            counts[same] = counts.get(same, 0) + 1
            history.ops[key] = Entered(line["g"], line["n"], line["op"], bool(line["p2p"]), line.get("x", ""),
                                       line.get("peer"), nth=counts[same])
        elif kind == "done":
            entered = history.ops.get((line["g"], bool(line["p2p"]), line["n"]))
            if entered is not None:
                entered.done, entered.error = True, line.get("error")
    return history


UNWRITTEN = "completion not written (stopped first, or stuck before it could)"


def where_ranks_are(workdir: str, world_size: int, unwritten: Collection[int] = ()) -> list[str]:
    """Lines saying where each rank is in the collectives of each process
    group, and the first op whose ranks disagree on shapes or dtypes; none
    for a world whose ranks entered no collective. ``unwritten``: ranks
    stopped before they could write how far their last ops got (a rank
    writes an op's completion at its next op, or when asked): an op of
    theirs not written complete is not known to be unfinished."""
    histories = [read_history(workdir, rank) for rank in range(world_size)]
    for history in histories:
        history.unwritten = history.rank in unwritten
    groups: dict[str, tuple[str, list[int] | None]] = {}
    for history in histories:
        for name, (desc, members) in history.groups.items():
            if name not in groups or groups[name][1] is None:
                groups[name] = (desc, members)
    lines = []
    for name in sorted(groups, key=_group_order):
        desc, members = groups[name]
        ranks = members if members is not None else [h.rank for h in histories if name in h.groups]
        prefix = "" if desc == DEFAULT_GROUP_DESC else f"group {name}{f' ({desc})' if desc and desc != 'undefined' else ''}: "
        mine = [histories[r] for r in ranks if 0 <= r < world_size]
        lines += [prefix + line for line in _disagreement(mine, name) + _where(mine, name) + _pending_p2p(mine, name)]
    return lines


def _group_order(name: str) -> tuple[int, str]:
    return (int(name), "") if name.isdigit() else (1 << 30, name)


def _where(histories: list[RankHistory], group: str) -> list[str]:
    """Where each member is in the group's collectives: the last one each entered."""
    lasts = {h.rank: h.last(group) for h in histories}
    unwritten = {h.rank: h.unwritten for h in histories}
    if not any(lasts.values()):
        return []
    top = max(e.seq for e in lasts.values() if e is not None)
    at_top: dict[str, list[int]] = {}  # each way a member described the op at the top -> those members
    for rank, last in lasts.items():
        if last is not None and last.seq == top:
            at_top.setdefault(last.describe(), []).append(rank)
    behind = {rank: last for rank, last in lasts.items() if last is None or last.seq < top}
    lines = []
    if len(at_top) > 1 or behind:
        parts = [f"{ranks_named(ranks)} at {what}"
                 for what, ranks in sorted(at_top.items(), key=lambda item: (len(item[1]), item[1]))]
        lines.append("; ".join(parts))
    by_last: dict[tuple, list[int]] = {}
    for rank, last in behind.items():
        key = (last.describe(tensors=False)[:-1], _state(last, unwritten[rank])) if last is not None else ()
        by_last.setdefault(key, []).append(rank)
    for key, ranks in sorted(by_last.items(), key=lambda item: item[1]):
        their = "its" if len(ranks) == 1 else "their"
        last = f"{their} last: {key[0].replace(' (', ', ')}, {key[1]}" if key else (
            f"{'it' if len(ranks) == 1 else 'they'} entered none")
        lines.append(f"{ranks_named(ranks)} never entered collective #{top} ({last})")
    if len(at_top) == 1 and not behind:
        [(what, ranks)] = at_top.items()
        states: dict[str, list[int]] = {}
        for rank in ranks:
            states.setdefault(_state(lasts[rank], unwritten[rank]), []).append(rank)  # type: ignore[arg-type]
        if list(states) == ["completed"]:
            lines.append(f"every rank completed {what}, its last collective")
        else:
            order = ("not completed", "failed", UNWRITTEN, "completed")
            lines.append(f"every rank at {what}; " + ", ".join(
                f"{state} on {ranks_named(states[state])}" for state in order if state in states))
    return lines


def _state(entered: Entered, unwritten: bool = False) -> str:
    """How far a rank got in an op it entered (``unwritten``: as far as its
    history was written when it was stopped)."""
    if not entered.done:
        return UNWRITTEN if unwritten else "not completed"
    return "failed" if entered.error else "completed"


def _disagreement(histories: list[RankHistory], group: str) -> list[str]:
    """The first collective of the group whose members gave different
    shapes or dtypes (where they must agree)."""
    numbers = sorted({key for h in histories for key in h.ops if key[0] == group and not key[1]},
                     key=lambda key: key[2])
    for key in numbers:
        entered = {h.rank: h.ops[key] for h in histories if key in h.ops}
        if len(entered) < 2:
            continue
        ops = {e.op for e in entered.values()}
        if len(ops) > 1:
            return []  # different ops at one number: _where says so, where they stopped
        op = next(iter(ops))
        if op not in _AGREE:
            continue
        for what, pick in (("shape", _shapes), ("dtype", _dtypes)):
            values = {rank: pick(e.tensors) for rank, e in entered.items()}
            if len(set(values.values())) > 1:
                by_value: dict[str, list[int]] = {}
                for rank, value in values.items():
                    by_value.setdefault(value, []).append(rank)
                joint = "; " if any("," in value for value in by_value) else ", "  # multi-tensor values hold commas
                parts = joint.join(f"{value} on {ranks_named(ranks)}" for value, ranks in by_value.items())
                return [f"ranks disagree on the {what} of {next(iter(entered.values())).describe(tensors=False)}: "
                        f"{parts}"]
    return []


def _pending_p2p(histories: list[RankHistory], group: str) -> list[str]:
    """Each member's last point-to-point op where it never completed."""
    lines = []
    for history in histories:
        last = history.last(group, p2p=True)
        if last is not None and not last.done:
            state = UNWRITTEN if history.unwritten else "not completed"
            way = "to" if last.op in ("send", "isend") else "from"
            peer = f" {way} rank {last.peer}" if last.peer is not None else ""
            lines.append(f"rank {history.rank} in {last.op}#{last.nth}{peer} (point-to-point #{last.seq}"
                         + (f", {last.tensors}" if last.tensors else "") + f"), {state}")
    return lines


def _shapes(tensors: str) -> str:
    return ", ".join(part.split(" ", 1)[1] for part in _parts(tensors)) or "none"


def _dtypes(tensors: str) -> str:
    return ", ".join(part.split(" ", 1)[0] for part in _parts(tensors)) or "none"


def _parts(tensors: str) -> list[str]:
    """``float32 [2, 8], float32 [8]`` as its tensors (shapes hold commas too)."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(tensors):
        depth += char == "["
        depth -= char == "]"
        if char == "," and depth == 0:
            parts.append(tensors[start:index].strip())
            start = index + 1
    if tensors[start:].strip():
        parts.append(tensors[start:].strip())
    return [part for part in parts if " [" in part]


def ranks_named(ranks: Iterable[int]) -> str:
    """``rank 2``, ``ranks 0, 1, 3``, ``ranks 0-31``."""
    ordered = sorted(ranks)
    if len(ordered) == 1:
        return f"rank {ordered[0]}"
    runs: list[list[int]] = []
    for rank in ordered:
        if runs and rank == runs[-1][-1] + 1:
            runs[-1].append(rank)
        else:
            runs.append([rank])
    parts = []
    for run in runs:
        parts += [f"{run[0]}-{run[-1]}"] if len(run) > 2 else [str(rank) for rank in run]
    return "ranks " + ", ".join(parts)
