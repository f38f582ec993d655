"""The RNN scenario's names, layout, failpoints and knobs."""

from __future__ import annotations

from dataclasses import dataclass

from rpc_harness.scenario import require_world_size

NAME = "rnn"
# Every failpoint this scenario reaches: the trainer's step, the parameter
# servers' module construction and forward, and the trainer just before the
# DistributedOptimizer's step.
FAILPOINTS = ("trainer.step", "ps.init", "ps.forward", "optimizer.step")
MIN_WORLD_SIZE = 2
# Three ranks put the embedding and the decoder on different servers: the
# tutorial's model parallelism at its plainest.
DEFAULT_WORLD_SIZE = 3
STEPS_FIELD = "epochs"  # the training budget the CLI's --steps sets
# The smallest budget its judge can pass: the outcome compares the first
# epoch's mean loss with the last's, so one epoch fails after the whole run.
MIN_STEPS = 2
# A trainer must report a dead server within this share of the world's
# deadline (it takes ~0.02 s: TensorPipe sees the closed connection at once;
# the RPC timeout, which is the deadline, is what a trainer that does not
# fail fast would wait for).
FAIL_FAST_SHARE = 0.25
UNK, EOS = "<unk>", "<eos>"


@dataclass(frozen=True)
class Config:
    """One run's sizes and hyper-parameters; the defaults are sized for CI."""

    sentences: int = 160  # Faker sentences in the corpus (shared by all trainers)
    vocab_size: int = 32  # including <unk> and <eos>
    ninp: int = 8  # embedding size
    nhid: int = 16  # LSTM hidden size
    nlayers: int = 2
    dropout: float = 0.2  # on the embedding, between LSTM layers, before the decoder
    batch_size: int = 8
    bptt: int = 12  # tokens per step (truncated backpropagation through time)
    epochs: int = 3
    lr: float = 1.0
    # Planted bug: the parameter server's Decoder adds ``perturb * bias`` to its
    # output, which (the bias starting at zero) scales the bias gradient by
    # 1 + perturb and leaves everything else of step 0 alone. The baseline never
    # perturbs, so any non-zero value must be caught by the gradient check.
    perturb: float = 0.0
    rtol: float = 1e-5
    atol: float = 1e-6

    def __post_init__(self) -> None:
        for name in ("sentences", "ninp", "nhid", "nlayers", "batch_size", "bptt", "epochs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
        if isinstance(self.vocab_size, bool) or not isinstance(self.vocab_size, int) or self.vocab_size < 3:
            raise ValueError(f"vocab_size must be >= 3 (<unk>, <eos> and a word), got {self.vocab_size!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if not self.lr > 0:  # NaN too
            raise ValueError(f"lr must be > 0, got {self.lr!r}")
        for name in ("rtol", "atol"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class Layout:
    """Who holds what in a world of this scenario."""

    embedding: str  # the parameter server holding every EmbeddingTable
    decoder: str  # the parameter server holding every Decoder
    servers: tuple[str, ...]
    trainers: tuple[str, ...]


def names(world_size: int) -> tuple[str, ...]:
    """Worker names for ``world_size`` ranks (see the package docstring)."""
    require_world_size(NAME, world_size, MIN_WORLD_SIZE, "a parameter server and a trainer")
    if world_size == 2:
        return ("ps", "trainer")
    if world_size == 3:
        return ("ps0", "ps1", "trainer")
    return ("ps0", "ps1", *(f"trainer{i}" for i in range(world_size - 2)))


def layout(world_size: int) -> Layout:
    """The layout of a world of ``world_size`` ranks."""
    all_names = names(world_size)
    servers = tuple(n for n in all_names if n.startswith("ps"))
    trainers = tuple(n for n in all_names if n.startswith("trainer"))
    return Layout(servers[0], servers[-1], servers, trainers)

