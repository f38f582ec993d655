"""Seed derivation: every random stream of a world comes from one root seed.

``derive_seed(root, *labels)`` is a pure function of its arguments (a keyed
hash, not Python's salted ``hash``), so a rank, a baseline in another process
and a replay a month later all get the same numbers.
"""

from __future__ import annotations

import hashlib
import random

MAX_SEED = 2**63 - 1


def derive_seed(root: int, *labels: object) -> int:
    """A 63-bit seed derived from ``root`` and ``labels`` (ints or strings)."""
    text = ":".join([str(int(root)), *(str(label) for label in labels)])
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & MAX_SEED


def fresh_seed() -> int:
    """A new random root seed, short enough to type on a command line."""
    return random.SystemRandom().randrange(1, 2**32)


def rank_seed(world_seed: int, rank: int) -> int:
    """The seed a rank's global RNGs (torch, numpy, random) are seeded with."""
    return derive_seed(world_seed, "rank", rank)


def seed_everything(seed: int) -> None:
    """Seed python ``random``, torch and (if importable) numpy with ``seed``."""
    import torch

    random.seed(seed)
    accelerator = getattr(torch, "accelerator", None)  # torch >= 2.6; before it, CUDA is the device
    if accelerator.is_available() if accelerator is not None else torch.cuda.is_available():
        torch.manual_seed(seed)  # seeds every device's generators as well
    else:
        # No device but the CPU: its generator is all torch.manual_seed seeds
        # here, and it would also queue a lazy CUDA seeding that formats the
        # caller's stack, ~10 ms of the ~35 ms of CPU a small world's rank
        # uses from fork to exit.
        torch.default_generator.manual_seed(seed)
    try:
        import numpy
    except ImportError:  # numpy is optional for torch
        return
    numpy.random.seed(seed % 2**32)
