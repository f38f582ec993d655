"""The FSDP2 scenario's names, failpoints and knobs."""

from __future__ import annotations

from dataclasses import dataclass

from rpc_harness.scenario import require_world_size

NAME = "fsdp"
# Every failpoint this scenario reaches: each rank's step (before its
# forward) and its optimizer step (after the gradients were reduced).
FAILPOINTS = ("fsdp.step", "optimizer.step")
MIN_WORLD_SIZE = 1
DEFAULT_WORLD_SIZE = 2
STEPS_FIELD = "steps"  # the training budget the CLI's --steps sets
# The outcome compares the held-out loss before training with the last
# step's: measured on the baseline with the default config, it fell in all
# of 40 seeds at world sizes 1, 2 and 4 after 2 steps.
MIN_STEPS = 2
# Planted bugs (Config.plant), each a change a user could make by mistake:
PLANTS = {
    "": "none",
    "shifted_shard": "the last rank's sequences start one sequence late",
    "loss_scale": "each rank divides its loss by the world size",
    # The last rank's AdamW has twice the learning rate: only the shards it
    # owns go wrong, and the report names it.
    "rank_lr": "the last rank's optimizer has twice the learning rate",
}


@dataclass(frozen=True)
class Config:
    """One FSDP2 run of a small transformer; the defaults are sized for CI
    (about 40 thousand parameters, 160 kB)."""

    steps: int = 4
    batch_per_rank: int = 2  # sequences a rank trains on per step
    seq_len: int = 8
    vocab: int = 32
    d_model: int = 32
    heads: int = 2
    layers: int = 2
    d_ff: int = 64
    lr: float = 1e-2
    weight_decay: float = 0.01  # AdamW's default
    # fully_shard's reshard_after_forward: "true", "false", or a whole number
    # of ranks (a divisor of the world size other than 1 and itself) to
    # reshard to after the forward.
    reshard_after_forward: str = "true"
    # MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32); the
    # judge then holds the run to the mixed-precision tolerance (judge.py).
    mixed_precision: bool = False
    activation_checkpointing: bool = False  # each block recomputed in the backward
    plant: str = ""  # a planted bug, by name (PLANTS)
    # Slack on top of the derived rounding bound (rpc_harness/scenarios/_collective.py).
    rtol: float = 0.0
    atol: float = 0.0

    def __post_init__(self) -> None:
        for name in ("steps", "batch_per_rank", "seq_len", "vocab", "d_model", "heads", "layers", "d_ff"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
        if self.d_model % self.heads:
            raise ValueError(f"d_model ({self.d_model}) must be a multiple of heads ({self.heads})")
        if not self.lr > 0:  # NaN too
            raise ValueError(f"lr must be > 0, got {self.lr!r}")
        for name in ("weight_decay", "rtol", "atol"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        reshard = self.reshard_after_forward.lower()
        if reshard not in ("true", "false") and not (reshard.isdigit() and int(reshard) >= 2):
            raise ValueError(f"reshard_after_forward must be true, false or a whole number >= 2, "
                             f"got {self.reshard_after_forward!r}")
        if self.plant not in PLANTS:
            raise ValueError(f"plant must be one of {', '.join(map(repr, PLANTS))}, got {self.plant!r}")

    def reshard(self) -> bool | int:
        """reshard_after_forward as fully_shard takes it."""
        text = self.reshard_after_forward.lower()
        return {"true": True, "false": False}.get(text, int(text) if text.isdigit() else True)


def names(world_size: int) -> tuple[str, ...]:
    """Worker names: ``worker0`` .. ``worker{n-1}``, every one an FSDP rank."""
    require_world_size(NAME, world_size, MIN_WORLD_SIZE, "one FSDP rank")
    return tuple(f"worker{rank}" for rank in range(world_size))


def validate(config: Config, world_size: int, seed: int) -> None:
    """A whole-number reshard_after_forward must divide the world size, and
    be neither 1 nor the world size (fully_shard's rule)."""
    reshard = config.reshard()
    if isinstance(reshard, int) and not isinstance(reshard, bool):
        if not (1 < reshard < world_size and world_size % reshard == 0):
            raise ValueError(f"reshard_after_forward={reshard} must divide the world size {world_size} and "
                             f"lie strictly between 1 and it")
