"""The small transformer, its loss, and the seeded token data."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from rpc_harness import derive_seed

from .config import NAME, Config


class Block(nn.Module):
    """Pre-norm self-attention (causal) and an MLP, each with a residual."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.heads = config.heads
        self.norm1 = nn.LayerNorm(config.d_model)
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.proj = nn.Linear(config.d_model, config.d_model)
        self.norm2 = nn.LayerNorm(config.d_model)
        self.up = nn.Linear(config.d_model, config.d_ff)
        self.down = nn.Linear(config.d_ff, config.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(width, dim=-1)
        q, k, v = (t.view(batch, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, width))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class Transformer(nn.Module):
    """Token and position embeddings, ``layers`` blocks, a norm and a head."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.embed = nn.Embedding(config.vocab, config.d_model)
        self.position = nn.Parameter(0.02 * torch.randn(config.seq_len, config.d_model))
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.norm = nn.LayerNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab)
        self.checkpointing = False  # set in the ranks by activation_checkpointing

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position[: tokens.shape[1]]
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointing else block(x)
        return self.head(self.norm(x))


def fan_in(config: Config) -> int:
    """The dot products one sequence's gradient term goes through, forward
    and backward (the bound's F): per block the attention's projections and
    its scores and values over the sequence, the MLP, the norms; then the
    head and the softmax over the vocabulary."""
    d, per_head = config.d_model, config.d_model // config.heads
    block = 2 * (d + per_head + config.seq_len + d + d + config.d_ff + 2 * d)
    return config.layers * block + 2 * (d + config.vocab) + 2 * d


def build_model(config: Config, world_seed: int) -> Transformer:
    """The initial model, the same in every rank and in the baseline."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(world_seed, NAME, "init"))
        return Transformer(config)


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy, the mean over every token of the batch."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def _successors(config: Config, world_seed: int) -> torch.Tensor:
    """The language: each token has two likely successors (seeded)."""
    gen = torch.Generator().manual_seed(derive_seed(world_seed, NAME, "language") % 2**62)
    return torch.randint(config.vocab, (config.vocab, 2), generator=gen)


def _sequences(config: Config, world_seed: int, count: int, *labels: object) -> tuple[torch.Tensor, torch.Tensor]:
    successors = _successors(config, world_seed)
    gen = torch.Generator().manual_seed(derive_seed(world_seed, NAME, *labels) % 2**62)
    tokens = torch.empty(count, config.seq_len + 1, dtype=torch.long)
    tokens[:, 0] = torch.randint(config.vocab, (count,), generator=gen)
    for t in range(config.seq_len):
        pick = torch.randint(2, (count,), generator=gen)
        tokens[:, t + 1] = successors[tokens[:, t], pick]
    return tokens[:, :-1], tokens[:, 1:]


def global_batch(config: Config, world_seed: int, world_size: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step ``step``'s sequences, every rank's together: inputs and next-token targets."""
    return _sequences(config, world_seed, world_size * config.batch_per_rank, "batch", step)


HELD_OUT_SEQUENCES = 64


def held_out_batch(config: Config, world_seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences no step trains on, for the outcome check."""
    return _sequences(config, world_seed, HELD_OUT_SEQUENCES, "held-out")


def rank_rows(config: Config, rank: int) -> slice:
    """The sequences of the global batch that ``rank`` trains on."""
    return slice(rank * config.batch_per_rank, (rank + 1) * config.batch_per_rank)
