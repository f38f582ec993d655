"""The DDP tutorial's ToyModel, its loss, and the seeded data."""

from __future__ import annotations

import torch
from torch import nn

from rpc_harness import derive_seed

from .config import NAME, Config

IN, HIDDEN, OUT = 10, 10, 5  # the tutorial's widths
# The dot products one sample's gradient term goes through (the bound's F):
# net1's forward and backward over IN, net2's over HIDDEN, and back over OUT.
FAN_IN = IN + HIDDEN + OUT


class ToyModel(nn.Module):
    """The tutorial's model: ``net2(relu(net1(x)))``; with ``unused`` a third
    Linear that forward never calls (what find_unused_parameters is for)."""

    def __init__(self, unused: bool = False) -> None:
        super().__init__()
        self.net1 = nn.Linear(IN, HIDDEN)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(HIDDEN, OUT)
        if unused:
            self.unused = nn.Linear(HIDDEN, OUT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net2(self.relu(self.net1(x)))


def build_model(config: Config, world_seed: int) -> ToyModel:
    """The initial model, the same in every rank and in the baseline."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(world_seed, NAME, "init"))
        return ToyModel(unused=config.find_unused_parameters)


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The tutorial's loss (nn.MSELoss: the mean over rows and outputs)."""
    return nn.functional.mse_loss(output, target)


def global_batch(config: Config, world_seed: int, world_size: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step ``step``'s whole batch (every rank's micro-batches): inputs,
    and targets from a seeded linear teacher plus noise (learnable, unlike
    the tutorial's random labels, so that the outcome check means something)."""
    rows = world_size * config.accumulate * config.batch_per_rank
    return _batch(config, world_seed, rows, "batch", step)


HELD_OUT_ROWS = 256


def held_out_batch(config: Config, world_seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch no step trains on, for the outcome check."""
    return _batch(config, world_seed, HELD_OUT_ROWS, "held-out")


def _batch(config: Config, world_seed: int, rows: int, *labels: object) -> tuple[torch.Tensor, torch.Tensor]:
    teacher = torch.Generator().manual_seed(derive_seed(world_seed, NAME, "teacher") % 2**62)
    weight = torch.randn(OUT, IN, generator=teacher) / IN**0.5
    gen = torch.Generator().manual_seed(derive_seed(world_seed, NAME, *labels) % 2**62)
    x = torch.randn(rows, IN, generator=gen)
    y = x @ weight.T + config.noise * torch.randn(rows, OUT, generator=gen)
    return x, y


def rank_rows(config: Config, world_size: int, rank: int, micro: int) -> slice:
    """The rows of the global batch that ``rank`` trains on in micro-batch ``micro``."""
    start = (rank * config.accumulate + micro) * config.batch_per_rank
    return slice(start, start + config.batch_per_rank)
