"""The DDP + RPC scenario's names, failpoints and knobs."""

from __future__ import annotations

from dataclasses import dataclass

from rpc_harness.scenario import require_world_size

NAME = "ddp_rpc"
MASTER, PS = "master", "ps"
# Every failpoint this scenario reaches: a trainer's step (before its
# forward), the parameter server's embedding forward, a trainer's
# optimizer step.
FAILPOINTS = ("trainer.step", "ps.forward", "optimizer.step")
# The trainers' DDP group, by its description: a plan reaches DDP's own
# collectives alone with c10d.all_reduce:trainers, and reports name it.
TRAINER_GROUP = "trainers"
MIN_WORLD_SIZE = 3  # a master, a parameter server, a trainer
DEFAULT_WORLD_SIZE = 4  # the tutorial's: two trainers
STEPS_FIELD = "steps"
# The outcome compares the held-out loss before training with the last
# step's: measured on the baseline with the default config, it fell in all
# of 40 seeds at 1, 2 and 4 trainers after 2 steps.
MIN_STEPS = 2
PLANTS = {
    "": "none",
    "shifted_shard": "the last trainer's bags start one bag late",
    "loss_scale": "each trainer divides its loss by the number of trainers",
    "rank_lr": "the last trainer's DistributedOptimizer has twice the learning rate",
}


@dataclass(frozen=True)
class Config:
    """One run of the DDP + RPC tutorial; the defaults are the tutorial's
    sizes (100 embeddings of 16, a Linear 16 -> 8), fewer steps."""

    steps: int = 4
    bags_per_trainer: int = 8
    bag_size: int = 6  # indices per bag (the tutorial draws 1..10 per bag; fixed here, offsets kept)
    num_embeddings: int = 100
    embedding_dim: int = 16
    classes: int = 8
    lr: float = 0.05  # the tutorial's
    plant: str = ""
    # Slack on top of the derived rounding bound (rpc_harness/scenarios/_collective.py).
    rtol: float = 0.0
    atol: float = 0.0

    def __post_init__(self) -> None:
        for name in ("steps", "bags_per_trainer", "bag_size", "embedding_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
        for name in ("num_embeddings", "classes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 2:
                raise ValueError(f"{name} must be a whole number >= 2, got {value!r}")
        if self.num_embeddings < self.classes:
            raise ValueError(f"num_embeddings ({self.num_embeddings}) must be >= classes ({self.classes}): "
                             "each class draws its bags from its own embeddings")
        if not self.lr > 0:  # NaN too
            raise ValueError(f"lr must be > 0, got {self.lr!r}")
        for name in ("rtol", "atol"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        if self.plant not in PLANTS:
            raise ValueError(f"plant must be one of {', '.join(map(repr, PLANTS))}, got {self.plant!r}")


def names(world_size: int) -> tuple[str, ...]:
    """Worker names: ``master``, ``ps``, then ``trainer0`` .. ``trainer{n-3}``."""
    require_world_size(NAME, world_size, MIN_WORLD_SIZE, "a master, a parameter server and a trainer")
    return (MASTER, PS, *trainer_names(world_size))


def trainer_names(world_size: int) -> tuple[str, ...]:
    """The trainers of a world of ``world_size`` ranks (the DDP group)."""
    return tuple(f"trainer{k}" for k in range(world_size - 2))
