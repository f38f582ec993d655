"""The scenario's data: a seeded Faker corpus, tokenised into a small
vocabulary and batched for a word language model."""

from __future__ import annotations

import re
from collections import Counter

import torch

from rpc_harness import derive_seed
from rpc_harness.extras import require

from .config import EOS, NAME, UNK, Config


def corpus(config: Config, seed: int) -> tuple[list[str], list[int]]:
    """The vocabulary and the token ids of the seeded Faker corpus.

    Words are lower-cased; every sentence ends in ``<eos>``; words outside the
    ``vocab_size - 2`` most frequent become ``<unk>`` (ties broken by spelling,
    so the vocabulary is a pure function of the seed).
    """
    fake = require("faker", "the rnn scenario's corpus").Faker("en_US")
    fake.seed_instance(derive_seed(seed, NAME, "corpus"))
    tokens: list[str] = []
    for _ in range(config.sentences):
        tokens += re.findall(r"[a-z]+", fake.sentence().lower())
        tokens.append(EOS)
    counts = Counter(t for t in tokens if t != EOS)
    ranked = sorted(counts, key=lambda w: (-counts[w], w))
    vocab = [UNK, EOS, *ranked[: config.vocab_size - 2]]
    index = {word: i for i, word in enumerate(vocab)}
    return vocab, [index.get(t, 0) for t in tokens]


def batches(
    config: Config, seed: int, trainer: int, trainers: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Trainer ``trainer``'s (input, target) pairs for one epoch.

    Each trainer takes an equal contiguous shard of the token stream, laid out
    as ``batch_size`` columns (the word language model's ``batchify``) and cut
    into ``bptt``-long chunks: input ``(seq, batch)``, target the next tokens,
    flattened.
    """
    _, ids = corpus(config, seed)
    shard_len = len(ids) // trainers
    shard = torch.tensor(ids[trainer * shard_len : (trainer + 1) * shard_len], dtype=torch.long)
    rows = shard.numel() // config.batch_size
    if rows < 2:
        raise ValueError(
            f"{config.sentences} sentences give trainer {trainer} only {shard.numel()} tokens, "
            f"too few for batch_size {config.batch_size}; raise sentences"
        )
    source = shard[: rows * config.batch_size].view(config.batch_size, rows).t().contiguous()
    out = []
    for i in range(0, rows - 1, config.bptt):
        seq = min(config.bptt, rows - 1 - i)
        out.append((source[i : i + seq], source[i + 1 : i + 1 + seq].reshape(-1)))
    return out

