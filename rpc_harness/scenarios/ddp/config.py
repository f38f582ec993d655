"""The DDP scenario's names, failpoints and knobs."""

from __future__ import annotations

from dataclasses import dataclass

from rpc_harness.scenario import require_world_size

NAME = "ddp"
# Every failpoint this scenario reaches: each rank's step (before its
# forward) and its optimizer step (after the gradients were reduced).
FAILPOINTS = ("ddp.step", "optimizer.step")
MIN_WORLD_SIZE = 1
DEFAULT_WORLD_SIZE = 2
STEPS_FIELD = "steps"  # the training budget the CLI's --steps sets
# The outcome compares the held-out loss before training with the last
# step's: measured on the baseline with the default config, it fell in all
# of 40 seeds at world sizes 1, 2 and 4, after 2 steps as after 3.
MIN_STEPS = 2
# Planted bugs (Config.plant), each a change a user could make by mistake:
PLANTS = {
    "": "none",
    # The last rank reads the global batch one sample further on: its shard
    # overlaps its neighbour's and misses a sample.
    "shifted_shard": "the last rank's shard starts one sample late",
    # The loss divided by the world size by hand, as if DDP summed gradients
    # (it averages them): every gradient 1/world_size of the baseline's.
    "loss_scale": "each rank divides its loss by the world size",
    # A communication hook that returns the last bucket unreduced: those
    # parameters keep each rank's own gradient.
    "skip_bucket": "the last gradient bucket is not all-reduced",
    # The optimizer of the last rank steps with twice the learning rate.
    "rank_lr": "the last rank's optimizer has twice the learning rate",
}


@dataclass(frozen=True)
class Config:
    """One run of the DDP tutorial's program; the defaults are sized for CI."""

    steps: int = 6
    batch_per_rank: int = 8  # rows of one micro-batch on one rank (the tutorial: 20)
    # no_sync gradient accumulation: micro-batches per step, every one but
    # the last under ddp_model.no_sync() (1: no accumulation).
    accumulate: int = 1
    lr: float = 0.05  # the tutorial's is 0.001; larger, so that the loss visibly falls in a few steps
    noise: float = 0.1  # of the targets around the seeded teacher
    bucket_cap_mb: float = 25.0  # DDP's default; a small value (1e-4) gives a bucket per parameter
    gradient_as_bucket_view: bool = False
    static_graph: bool = False
    # With it, the model grows an unused branch (a Linear its forward skips),
    # which DDP can only train with find_unused_parameters.
    find_unused_parameters: bool = False
    plant: str = ""  # a planted bug, by name (PLANTS)
    # Slack on top of the derived rounding bound (rpc_harness/scenarios/_collective.py).
    rtol: float = 0.0
    atol: float = 0.0

    def __post_init__(self) -> None:
        for name in ("steps", "batch_per_rank", "accumulate"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
        if not self.lr > 0:  # NaN too
            raise ValueError(f"lr must be > 0, got {self.lr!r}")
        if not self.bucket_cap_mb > 0:
            raise ValueError(f"bucket_cap_mb must be > 0, got {self.bucket_cap_mb!r}")
        for name in ("noise", "rtol", "atol"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        if self.plant not in PLANTS:
            raise ValueError(f"plant must be one of {', '.join(map(repr, PLANTS))}, got {self.plant!r}")


def names(world_size: int) -> tuple[str, ...]:
    """Worker names: ``worker0`` .. ``worker{n-1}``, every one a DDP rank."""
    require_world_size(NAME, world_size, MIN_WORLD_SIZE, "one DDP rank")
    return tuple(f"worker{rank}" for rank in range(world_size))
