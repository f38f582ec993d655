"""The tutorial's MNIST network, with dropout masks from seeded generators."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

import rpc_harness

from .config import NAME, Config


class Net(nn.Module):
    """The tutorial's MNIST network (from pytorch/examples), widths from Config.

    conv1 -> relu -> conv2 -> max_pool2d(2) -> dropout1 (channel-wise, as the
    tutorial's Dropout2d) -> flatten -> fc1 -> relu -> dropout2 -> fc2 ->
    log_softmax. Dropout draws its masks from a generator seeded by
    ``dropout_seed`` instead of the global RNG: the server runs several
    trainers' forwards on its RPC threads, and the baseline must redraw the
    same masks. ``dropout_seed=None`` means evaluation: no dropout.
    """

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.p1 = config.dropout1
        self.p2 = config.dropout2
        self.conv1 = nn.Conv2d(1, config.conv1, 3, 1)
        self.conv2 = nn.Conv2d(config.conv1, config.conv2, 3, 1)
        self.fc1 = nn.Linear(config.conv2 * 12 * 12, config.hidden)
        self.fc2 = nn.Linear(config.hidden, 10)

    def forward(self, x: torch.Tensor, dropout_seed: int | None = None) -> torch.Tensor:
        gen = None
        if dropout_seed is not None:
            gen = torch.Generator().manual_seed(dropout_seed)
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.max_pool2d(x, 2)
        x = _dropout(x, self.p1, gen, channel_wise=True)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = _dropout(x, self.p2, gen, channel_wise=False)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def _dropout(
    x: torch.Tensor, p: float, gen: torch.Generator | None, *, channel_wise: bool
) -> torch.Tensor:
    if gen is None or p <= 0.0:
        return x
    shape = (x.shape[0], x.shape[1], 1, 1) if channel_wise else x.shape
    # Drawn on the CPU from the seeded CPU generator (the baseline's draws), moved to x's device.
    keep = (torch.rand(shape, generator=gen) >= p).to(device=x.device, dtype=x.dtype)
    return x * keep / (1.0 - p)


def build_net(config: Config, world_seed: int) -> Net:
    """The initial model, seeded from the world seed (same on server and baseline)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(rpc_harness.derive_seed(world_seed, NAME, "init"))
        return Net(config)


def dropout_seed(world_seed: int, trainer: str, batch: int) -> int:
    """The seed of the dropout masks of ``trainer``'s batch ``batch``."""
    return rpc_harness.derive_seed(world_seed, NAME, "dropout", trainer, batch) % 2**62

