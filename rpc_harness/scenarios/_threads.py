"""Torch thread pinning, shared by the scenarios' ranks and baselines.

Above ~1000 rows torch splits matmuls and reductions across its intra-op
threads, and the split changes the last bits of a sum. A rank and its
baseline (another process, maybe another thread count) must add alike, and
the scenarios' models are small enough that one thread is also the fastest
on an oversubscribed machine (more ranks than cores).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def threads(count: int = 1) -> Iterator[None]:
    """Run a block with ``count`` intra-op threads, restoring the count after."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)
