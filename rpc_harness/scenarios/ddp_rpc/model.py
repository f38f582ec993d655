"""The tutorial's HybridModel pieces (a remote EmbeddingBag, a local
Linear under DDP), its loss, and the seeded bags."""

from __future__ import annotations

import torch
from torch import nn

from rpc_harness import derive_seed

from .config import NAME, Config


class SeededEmbeddingBag(nn.EmbeddingBag):
    """The tutorial's ``EmbeddingBag(mode="sum")``, its weights from a seed
    (it is built on the parameter server, whose random state is its own)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, seed: int) -> None:
        super().__init__(num_embeddings, embedding_dim, mode="sum")
        with torch.no_grad():
            self.weight.copy_(torch.randn(self.weight.shape, generator=torch.Generator().manual_seed(seed)))


def embedding_seed(world_seed: int) -> int:
    return derive_seed(world_seed, NAME, "embedding") % 2**62


def build_embedding(config: Config, world_seed: int) -> SeededEmbeddingBag:
    return SeededEmbeddingBag(config.num_embeddings, config.embedding_dim, embedding_seed(world_seed))


def build_fc(config: Config, world_seed: int) -> nn.Linear:
    """The trainers' Linear, the same in every trainer (DDP broadcasts it anyway)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(world_seed, NAME, "fc"))
        return nn.Linear(config.embedding_dim, config.classes)


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The tutorial's ``CrossEntropyLoss`` (the mean over bags)."""
    return nn.functional.cross_entropy(output, target)


def bags(config: Config, world_seed: int, count: int, *labels: object) -> tuple[torch.Tensor, torch.Tensor,
                                                                                 torch.Tensor]:
    """``count`` bags: indices, offsets, targets. A bag of class ``c`` draws
    its indices from the embeddings ``i`` with ``i % classes == c``
    (learnable, unlike the tutorial's random targets)."""
    gen = torch.Generator().manual_seed(derive_seed(world_seed, NAME, *labels) % 2**62)
    targets = torch.randint(config.classes, (count,), generator=gen)
    per_class = config.num_embeddings // config.classes
    picks = torch.randint(per_class, (count, config.bag_size), generator=gen)
    indices = (picks * config.classes + targets.unsqueeze(1)).reshape(-1)
    offsets = torch.arange(count) * config.bag_size
    return indices, offsets, targets


def step_bags(config: Config, world_seed: int, trainers: int, step: int) -> tuple[torch.Tensor, torch.Tensor,
                                                                                  torch.Tensor]:
    """Step ``step``'s bags, every trainer's together."""
    return bags(config, world_seed, trainers * config.bags_per_trainer, "bags", step)


def trainer_bags(config: Config, all_bags: tuple[torch.Tensor, torch.Tensor, torch.Tensor], index: int,
                 shift: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Trainer ``index``'s bags of a step (``shift`` bags late, wrapping: a planted bug)."""
    indices, _, targets = all_bags
    count = targets.shape[0]
    rows = (torch.arange(index * config.bags_per_trainer, (index + 1) * config.bags_per_trainer) + shift) % count
    mine = indices.view(count, config.bag_size)[rows].reshape(-1)
    return mine, torch.arange(rows.shape[0]) * config.bag_size, targets[rows]


HELD_OUT_BAGS = 128


def held_out(config: Config, world_seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return bags(config, world_seed, HELD_OUT_BAGS, "held-out")
