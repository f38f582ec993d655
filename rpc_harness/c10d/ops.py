"""The collective and point-to-point ops of ``torch.distributed``, as fault
plans name them (``c10d.all_reduce``), and torch's dispatcher ops behind
them. Plain data, no torch: the fault plan's parser reads it before any
process starts.

A failpoint ``c10d.OP`` counts the rank's OPs in every process group;
``c10d.OP:GROUP`` only those in one group, named as torch names it (``0``
is the default group, then ``1``, ``2`` ... in the order groups were made)
or by the description the program gave it (``new_group(group_desc="tp")``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import FaultPlanError, clip

PREFIX = "c10d."


@dataclass(frozen=True)
class Op:
    """One dispatcher op of torch's c10d (``torch.ops.c10d.NAME``) and how
    the harness sees it.

    ``points``: the failpoint names it hits (the second, where there is one,
    is the non-blocking form of the Python API: ``isend`` for ``send``);
    ``tensors``: the index of the argument whose tensors describe what the
    rank contributes (None: nothing to describe); ``agree``: whether every
    rank of the group must give the same shapes and dtypes there;
    ``p2p``: a point-to-point op (numbered apart from the group's
    collectives, which every member must enter in the same order);
    ``peer``: the index of the peer's group rank, for point-to-point ops."""

    name: str
    points: tuple[str, ...]
    tensors: int | None
    agree: bool = True
    p2p: bool = False
    peer: int | None = None

    @property
    def point(self) -> str:
        return self.points[0]


OPS: tuple[Op, ...] = (
    Op("allreduce_", ("all_reduce",), 0),
    Op("allreduce_coalesced_", ("all_reduce_coalesced",), 0),
    Op("allgather_", ("all_gather",), 1),
    Op("_allgather_base_", ("all_gather_into_tensor",), 1),
    Op("allgather_coalesced_", ("all_gather_coalesced",), 1),
    Op("allgather_into_tensor_coalesced_", ("all_gather_into_tensor_coalesced",), 1),
    Op("reduce_scatter_", ("reduce_scatter",), 0),
    Op("_reduce_scatter_base_", ("reduce_scatter_tensor",), 1),
    Op("reduce_scatter_tensor_coalesced_", ("reduce_scatter_tensor_coalesced",), 1),
    Op("broadcast_", ("broadcast",), 0),
    Op("reduce_", ("reduce",), 0),
    Op("gather_", ("gather",), 1),
    Op("scatter_", ("scatter",), 0),
    Op("alltoall_", ("all_to_all",), 1, agree=False),
    Op("alltoall_base_", ("all_to_all_single",), 1, agree=False),
    Op("barrier", ("barrier",), None),
    Op("monitored_barrier_", ("monitored_barrier",), None),
    Op("send", ("send", "isend"), 0, agree=False, p2p=True, peer=2),
    Op("recv_", ("recv", "irecv"), 0, agree=False, p2p=True, peer=2),
    Op("recv_any_source_", ("recv", "irecv"), 0, agree=False, p2p=True),
)
BY_NAME = {op.name: op for op in OPS}
POINTS: tuple[str, ...] = tuple(dict.fromkeys(point for op in OPS for point in op.points))

_GROUP_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")


def is_c10d_point(point: str) -> bool:
    """Whether ``point`` names a collective (``c10d.OP`` or ``c10d.OP:GROUP``)."""
    return point.startswith(PREFIX)


def check_point(point: str, *, where: str) -> None:
    """Refuse a ``c10d.`` failpoint that names no op of the table, or a bad group."""
    op, _, group = point[len(PREFIX):].partition(":")
    if op not in POINTS:
        raise FaultPlanError(
            f"{where}: {clip(point)} names no collective; the c10d failpoints are "
            f"{', '.join(PREFIX + name for name in POINTS)} (add :GROUP for one process group)"
        )
    if ":" in point and not _GROUP_RE.match(group):
        raise FaultPlanError(
            f"{where}: {clip(point)}: a process group is named by torch's name for it (0, 1, ...) or its "
            "description, in letters, digits, _ . -"
        )
