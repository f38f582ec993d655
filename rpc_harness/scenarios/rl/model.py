"""The tutorial's policy network, with dropout drawn from a caller's generator."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Policy(nn.Module):
    """The tutorial's policy: Linear(4, 128), dropout(0.6), ReLU, Linear(128, 2),
    softmax. Dropout is functional with a mask the caller draws from its own
    generator, so that no global RNG is involved."""

    def __init__(self, hidden: int = 128, dropout: float = 0.6) -> None:
        super().__init__()
        self.affine1 = nn.Linear(4, hidden)
        self.affine2 = nn.Linear(hidden, 2)
        self.hidden = hidden
        self.p = dropout

    def dropout_mask(self, generator: torch.Generator, rows: int = 1) -> torch.Tensor:
        """An inverted-dropout mask (kept units scaled by 1/(1-p), as nn.Dropout)."""
        keep = torch.rand(rows, self.hidden, generator=generator) >= self.p
        return keep.float() / (1.0 - self.p)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.affine1(x)
        x = x * mask
        x = F.relu(x)
        action_scores = self.affine2(x)
        return F.softmax(action_scores, dim=1)
