"""The distributed RNN (model parallel) of PyTorch's "Getting Started with
Distributed RPC Framework" tutorial, run in full and checked gradient for
gradient against the same model trained in one process.

The tutorial's shape, kept: ``EmbeddingTable`` and ``Decoder`` live on
parameter-server ranks, created by the trainer's ``RNNModel`` through
``rpc.remote``; the LSTM stays on the trainer; forward goes through
``_remote_method``; ``parameter_rrefs()`` collects RRefs of every parameter;
a ``DistributedOptimizer(optim.SGD, ...)`` steps them inside a
``dist_autograd.context()``.

What the tutorial gets wrong, fixed: its batches are uninitialised
``torch.LongTensor``s. Here the tokens are real: a seeded Faker corpus of
sentences, tokenised into a small vocabulary (the most frequent words plus
``<unk>`` and ``<eos>``) and batched for a word language model (inputs
``tokens[t]``, targets ``tokens[t+1]``). Dropout is kept but controlled: the
parameter servers draw their masks from per-module seeded generators and the
LSTM's inter-layer dropout runs under a per-call seed, so the baseline draws
the very same masks.

Layout by world size (``names(world_size)``):

- 2: ``ps``, ``trainer``: embedding and decoder on ``ps``.
- 3: ``ps0``, ``ps1``, ``trainer``: embedding on ``ps0``, decoder on ``ps1``.
- n >= 4: ``ps0``, ``ps1``, ``trainer0`` .. ``trainer{n-3}``: every trainer
  builds its own ``RNNModel`` (its own remote embedding on ``ps0`` and decoder
  on ``ps1``) and trains on its own contiguous shard of the corpus, with its
  own seeds. The models share the servers, never parameters, so each trainer
  has its own single-process baseline.

For every step the trainer fetches the gradients of the step's distributed
autograd context from every owner (``dist_autograd.get_gradients`` run on the
owner through RPC, keyed ``"<owner>/<module>.<param>"``, e.g.
``"ps0/encoder.weight"`` or ``"trainer/rnn.weight_ih_l0"``), then the
parameters after ``opt.step``. ``run`` compares both, and the loss, with the
baseline's.

Fault contract: a parameter server killed by the plan makes every trainer
fail fast with ``RuntimeError("parameter server 'ps' died: ...")`` (the
trainer probes the servers when a step fails, so the error names the dead
one, not whichever call happened to notice, and never blames a server that
merely raised). ``contract_ok`` holds only if the killed server is the one
named, the trainer raised within ``FAIL_FAST_SHARE`` of the deadline of the
kill, and nothing else failed. A killed trainer is excused; the others are
still checked. Retryable message failures and slow parameter servers change
nothing: the run completes with baseline-equal gradients.

Which retryable messages this scenario sends: the trainer sends
``RREF_USER_DELETE`` (for the remote modules', parameters' and optimizers'
RRefs it drops) and ``CLEANUP_AUTOGRAD_CONTEXT_REQ`` (every step, to every
server); the servers send ``RREF_CHILD_ACCEPT``. Nobody sends
``RREF_FORK_REQUEST`` (no RRef is passed on to a third worker) and the servers
hold no user RRefs, so ``msgfail:trainer@RREF_FORK_REQUEST`` and
``msgfail:ps@RREF_USER_DELETE`` are accepted but never fire.
"""

from __future__ import annotations

import contextlib
import functools
import re
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
from faker import Faker
from torch import nn, optim

with warnings.catch_warnings():
    # Importing it scripts torch's functional optimizers, each a deprecation
    # warning about TorchScript that no user of this module can act on.
    warnings.simplefilter("ignore", DeprecationWarning)
    from torch.distributed.optim import DistributedOptimizer
from torch.distributed.rpc import RRef

import harness
from harness import FaultPlan, WorldSpecError, derive_seed, failpoint
from harness.gradcheck import compare, raise_mismatches

from ._common import ScenarioReport

NAME = "rnn"
# Every failpoint this module reaches: the trainer's step, the parameter
# servers' module construction and forward, and the trainer just before the
# DistributedOptimizer's step.
FAILPOINTS = ("trainer.step", "ps.init", "ps.forward", "optimizer.step")
MIN_WORLD_SIZE = 2
# Three ranks put the embedding and the decoder on different servers: the
# tutorial's model parallelism at its plainest.
DEFAULT_WORLD_SIZE = 3
STEPS_FIELD = "epochs"  # the training budget the CLI's --steps sets

PROBE_TIMEOUT = 5.0  # seconds a live parameter server has to answer a liveness probe
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
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"rnn Config: {name} must be a whole number >= 1, got {value!r}")
        if not isinstance(self.vocab_size, int) or self.vocab_size < 3:
            raise ValueError(
                f"rnn Config: vocab_size must be >= 3 (<unk>, <eos> and a word), got {self.vocab_size!r}"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"rnn Config: dropout must be in [0, 1), got {self.dropout!r}")


# -- layout -------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Who holds what in a world of this scenario."""

    embedding: str  # the parameter server holding every EmbeddingTable
    decoder: str  # the parameter server holding every Decoder
    servers: tuple[str, ...]
    trainers: tuple[str, ...]


def names(world_size: int) -> tuple[str, ...]:
    """Worker names for ``world_size`` ranks (see the module docstring)."""
    if (
        isinstance(world_size, bool)
        or not isinstance(world_size, int)
        or world_size < MIN_WORLD_SIZE
    ):
        raise WorldSpecError(
            f"rnn: invalid world_size {world_size!r}; the scenario needs >= {MIN_WORLD_SIZE} ranks "
            "(a parameter server and a trainer)"
        )
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


# -- data -----------------------------------------------------------------------


def corpus(config: Config, seed: int) -> tuple[list[str], list[int]]:
    """The vocabulary and the token ids of the seeded Faker corpus.

    Words are lower-cased; every sentence ends in ``<eos>``; words outside the
    ``vocab_size - 2`` most frequent become ``<unk>`` (ties broken by spelling,
    so the vocabulary is a pure function of the seed).
    """
    fake = Faker("en_US")
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
            f"rnn Config: {config.sentences} sentences give trainer {trainer} only {shard.numel()} tokens, "
            f"too few for batch_size {config.batch_size}; raise sentences"
        )
    source = shard[: rows * config.batch_size].view(config.batch_size, rows).t().contiguous()
    out = []
    for i in range(0, rows - 1, config.bptt):
        seq = min(config.bptt, rows - 1 - i)
        out.append((source[i : i + seq], source[i + 1 : i + 1 + seq].reshape(-1)))
    return out


# -- the model: the tutorial's classes ---------------------------------------------


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """Run a block on the global CPU generator seeded with ``seed``, restoring
    it afterwards. Not thread-safe: only for code one thread runs."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def _dropout(x: torch.Tensor, p: float, generator: torch.Generator, training: bool) -> torch.Tensor:
    # nn.Dropout draws from the process's global generator, which a parameter
    # server shares among every trainer's calls; a module-owned generator
    # gives the same masks in the baseline, whatever else runs.
    if not training or p == 0.0:
        return x
    mask = torch.empty_like(x).bernoulli_(1.0 - p, generator=generator)
    return x * mask / (1.0 - p)


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


class EmbeddingTable(nn.Module):
    """The encoder, on a parameter server: token ids -> dropped-out embeddings."""

    def __init__(self, ntoken: int, ninp: int, dropout: float, seed: int) -> None:
        super().__init__()
        failpoint("ps.init")
        self.encoder = nn.Embedding(ntoken, ninp)
        # The tutorial's init, drawn from this module's own generator: a server
        # builds several modules at once, one per RPC thread, and seeding the
        # process's global generator would let them race for it.
        with torch.no_grad():
            self.encoder.weight.uniform_(-0.1, 0.1, generator=_generator(seed))
        self.dropout = dropout
        self.generator = _generator(derive_seed(seed, "dropout"))

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        failpoint("ps.forward")
        return _dropout(self.encoder(input), self.dropout, self.generator, self.training)


class Decoder(nn.Module):
    """The decoder, on a parameter server: LSTM output -> token logits."""

    def __init__(
        self, ntoken: int, nhid: int, dropout: float, seed: int, perturb: float = 0.0
    ) -> None:
        super().__init__()
        failpoint("ps.init")
        self.decoder = nn.Linear(nhid, ntoken)
        with torch.no_grad():  # own generator, as in EmbeddingTable
            self.decoder.weight.uniform_(-0.1, 0.1, generator=_generator(seed))
            self.decoder.bias.zero_()
        self.dropout = dropout
        self.perturb = perturb
        self.generator = _generator(derive_seed(seed, "dropout"))

    def forward(self, output: torch.Tensor) -> torch.Tensor:
        failpoint("ps.forward")
        decoded = self.decoder(_dropout(output, self.dropout, self.generator, self.training))
        if self.perturb:
            decoded = decoded + self.perturb * self.decoder.bias
        return decoded


def _make_lstm(config: Config, seed: int) -> nn.LSTM:
    rnn = nn.LSTM(
        config.ninp,
        config.nhid,
        config.nlayers,
        dropout=config.dropout if config.nlayers > 1 else 0.0,
    )
    # nn.LSTM's own init (every weight and bias uniform in +-1/sqrt(nhid)),
    # drawn from a generator of its own like the servers' modules.
    bound = config.nhid**-0.5
    generator = _generator(seed)
    with torch.no_grad():
        for param in rnn.parameters():
            param.uniform_(-bound, bound, generator=generator)
    return rnn


def _run_lstm(rnn: nn.LSTM, emb: torch.Tensor, hidden: tuple, seed: int) -> tuple:
    # nn.LSTM's inter-layer dropout takes no generator: seed the global one
    # for this call only, the same way in the trainer (whose main thread is
    # the only one drawing from it) and in the baseline.
    with _seeded(seed):
        return rnn(emb, hidden)


def _call_method(method, rref, *args, **kwargs):
    """Run ``method`` on the object an RRef owns (on the owner)."""
    return method(rref.local_value(), *args, **kwargs)


def _remote_method(method, rref, *args, **kwargs):
    """Run ``method`` on the owner of ``rref`` and wait for the result."""
    args = [method, rref] + list(args)
    return rpc.rpc_sync(rref.owner(), _call_method, args=args, kwargs=kwargs)


def _parameter_rrefs(module: nn.Module) -> list[RRef]:
    """RRefs of a module's parameters (run on their owner)."""
    return [RRef(param) for param in module.parameters()]


def _module_gradients(module: nn.Module, context_id: int) -> dict[str, torch.Tensor]:
    """The gradients that distributed autograd context ``context_id`` holds on
    this rank for ``module``'s parameters, by parameter name (run on the owner)."""
    grads = dist_autograd.get_gradients(context_id)
    return {name: grads[p].clone() for name, p in module.named_parameters() if p in grads}


def _module_parameters(module: nn.Module) -> dict[str, torch.Tensor]:
    """A copy of ``module``'s parameters by name (run on the owner)."""
    return {name: p.detach().clone() for name, p in module.named_parameters()}


def _ping() -> bool:
    return True


def _prefixed(
    owner: str, named: dict[str, torch.Tensor], module: str = ""
) -> dict[str, torch.Tensor]:
    return {f"{owner}/{module}{name}": value for name, value in named.items()}


class RNNModel(nn.Module):
    """The tutorial's model: remote embedding, local LSTM, remote decoder."""

    def __init__(
        self, config: Config, emb_ps: str, dec_ps: str, seed: int, *, perturb: float = 0.0
    ) -> None:
        super().__init__()
        ntoken = config.vocab_size
        self.emb_table_rref = rpc.remote(
            emb_ps,
            EmbeddingTable,
            args=(ntoken, config.ninp, config.dropout, derive_seed(seed, "embedding")),
        )
        self.rnn = _make_lstm(config, derive_seed(seed, "lstm"))
        self.decoder_rref = rpc.remote(
            dec_ps,
            Decoder,
            args=(ntoken, config.nhid, config.dropout, derive_seed(seed, "decoder"), perturb),
        )
        self._lstm_seed = derive_seed(seed, "lstm-dropout")
        self._calls = 0

    def forward(self, input: torch.Tensor, hidden: tuple) -> tuple[torch.Tensor, tuple]:
        emb = _remote_method(EmbeddingTable.forward, self.emb_table_rref, input)
        output, hidden = _run_lstm(self.rnn, emb, hidden, derive_seed(self._lstm_seed, self._calls))
        self._calls += 1
        decoded = _remote_method(Decoder.forward, self.decoder_rref, output)
        return decoded, hidden

    def parameter_rrefs(self) -> list[RRef]:
        """RRefs of every parameter: the remote ones through RPC, the LSTM's local."""
        remote_params = []
        remote_params.extend(_remote_method(_parameter_rrefs, self.emb_table_rref))
        remote_params.extend(_parameter_rrefs(self.rnn))
        remote_params.extend(_remote_method(_parameter_rrefs, self.decoder_rref))
        return remote_params

    def gradients(self, context_id: int) -> dict[str, torch.Tensor]:
        """Every parameter's gradient in ``context_id``, read on its owner."""
        me = rpc.get_worker_info().name
        grads = _prefixed(
            self.emb_table_rref.owner().name,
            _remote_method(_module_gradients, self.emb_table_rref, context_id),
        )
        grads.update(_prefixed(me, _module_gradients(self.rnn, context_id), "rnn."))
        grads.update(
            _prefixed(
                self.decoder_rref.owner().name,
                _remote_method(_module_gradients, self.decoder_rref, context_id),
            )
        )
        return grads

    def parameters_by_owner(self) -> dict[str, torch.Tensor]:
        """A copy of every parameter, read on its owner."""
        me = rpc.get_worker_info().name
        params = _prefixed(
            self.emb_table_rref.owner().name,
            _remote_method(_module_parameters, self.emb_table_rref),
        )
        params.update(_prefixed(me, _module_parameters(self.rnn), "rnn."))
        params.update(
            _prefixed(
                self.decoder_rref.owner().name,
                _remote_method(_module_parameters, self.decoder_rref),
            )
        )
        return params


def _init_hidden(config: Config) -> tuple[torch.Tensor, torch.Tensor]:
    shape = (config.nlayers, config.batch_size, config.nhid)
    return torch.zeros(shape), torch.zeros(shape)


def _model_seed(seed: int, trainer: str) -> int:
    return derive_seed(seed, NAME, "model", trainer)


# -- the ranks ------------------------------------------------------------------------


def entry(ctx: Any, config: Config) -> dict[str, Any] | None:
    """Rank entry: trainers train and return their records; parameter servers
    return at once and serve RPCs until every rank's entry has returned."""
    # One intra-op thread: this model is tiny, and OpenMP/MKL teams on an
    # oversubscribed machine (more ranks than cores, parallel tests) make
    # each small op wait on spinning peers: 10-50x slower, never faster.
    torch.set_num_threads(1)
    plan = layout(ctx.world_size)
    if ctx.name not in plan.trainers:
        return None
    try:
        return _train(ctx, config, plan)
    except Exception as error:
        dead = _dead_server(plan.servers)
        if dead is None:
            raise
        ctx.event("ps_lost", server=dead, error=_one_line(error))
        raise RuntimeError(f"parameter server {dead!r} died: {_one_line(error)}") from error


def _dead_server(servers: Sequence[str]) -> str | None:
    """The first parameter server that does not answer a ping, if any.

    A failed RPC does not say reliably which peer is gone (a distributed
    backward or optimizer step talks to all of them), so ask each.
    """
    for server in servers:
        try:
            rpc.rpc_sync(server, _ping, timeout=PROBE_TIMEOUT)
        except Exception:  # noqa: BLE001 - any failure to answer means lost
            return server
    return None


def _one_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def _train(ctx: Any, config: Config, plan: Layout) -> dict[str, Any]:
    index = plan.trainers.index(ctx.name)
    data = batches(config, ctx.world_seed, index, len(plan.trainers))
    model = RNNModel(
        config,
        plan.embedding,
        plan.decoder,
        _model_seed(ctx.world_seed, ctx.name),
        perturb=config.perturb,
    )
    opt = DistributedOptimizer(optim.SGD, model.parameter_rrefs(), lr=config.lr)
    ctx.event("model_ready")
    criterion = nn.CrossEntropyLoss()
    steps = []
    total = config.epochs * len(data)
    ctx.progress(0, total, "steps")
    for epoch in range(config.epochs):
        hidden = _init_hidden(config)
        for data_batch, target in data:
            ctx.failpoint("trainer.step")
            with dist_autograd.context() as context_id:
                # Truncated BPTT: carry the state, not its history.
                hidden = (hidden[0].detach(), hidden[1].detach())
                output, hidden = model(data_batch, hidden)
                loss = criterion(output.view(-1, config.vocab_size), target)
                dist_autograd.backward(context_id, [loss])
                grads = model.gradients(context_id)
                ctx.failpoint("optimizer.step")
                opt.step(context_id)
            steps.append(
                {
                    "epoch": epoch,
                    "loss": loss.detach().clone(),
                    "grads": grads,
                    "params": model.parameters_by_owner(),
                }
            )
            ctx.progress(len(steps), total, "steps", loss=float(loss))
        ctx.event(
            "epoch",
            epoch=epoch,
            loss=sum(float(s["loss"]) for s in steps[-len(data) :]) / len(data),
        )
    # Records: each step {"epoch", "loss", "grads", "params"}.
    return {"trainer": ctx.name, "steps": steps}


# -- the baseline -----------------------------------------------------------------------


def baseline(config: Config, world_size: int, seed: int) -> dict[str, dict[str, Any]]:
    """The same training in this process: per trainer, the records its rank
    would return (loss, gradients and parameters after each step, named by
    the rank that owns them in the distributed run). Never perturbed."""
    plan = layout(world_size)
    out = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in the ranks (see entry), and as fast
    try:
        for index, trainer in enumerate(plan.trainers):
            with torch.random.fork_rng(devices=[]):
                out[trainer] = _baseline_trainer(config, plan, seed, index, trainer)
    finally:
        torch.set_num_threads(threads)
    return out


def _baseline_trainer(
    config: Config, plan: Layout, seed: int, index: int, trainer: str
) -> dict[str, Any]:
    data = batches(config, seed, index, len(plan.trainers))
    model_seed = _model_seed(seed, trainer)
    ntoken = config.vocab_size
    table = EmbeddingTable(
        ntoken, config.ninp, config.dropout, derive_seed(model_seed, "embedding")
    )
    rnn = _make_lstm(config, derive_seed(model_seed, "lstm"))
    decoder = Decoder(ntoken, config.nhid, config.dropout, derive_seed(model_seed, "decoder"))
    lstm_seed = derive_seed(model_seed, "lstm-dropout")
    modules = ((plan.embedding, "", table), (trainer, "rnn.", rnn), (plan.decoder, "", decoder))
    opt = optim.SGD([p for _, _, m in modules for p in m.parameters()], lr=config.lr)
    criterion = nn.CrossEntropyLoss()
    steps = []
    calls = 0
    for epoch in range(config.epochs):
        hidden = _init_hidden(config)
        for data_batch, target in data:
            opt.zero_grad(set_to_none=True)
            hidden = (hidden[0].detach(), hidden[1].detach())
            emb = table(data_batch)
            output, hidden = _run_lstm(rnn, emb, hidden, derive_seed(lstm_seed, calls))
            calls += 1
            loss = criterion(decoder(output).view(-1, ntoken), target)
            loss.backward()
            grads: dict[str, torch.Tensor] = {}
            for owner, prefix, module in modules:
                grads.update(
                    _prefixed(
                        owner,
                        {
                            n: p.grad.clone()
                            for n, p in module.named_parameters()
                            if p.grad is not None
                        },
                        prefix,
                    )
                )
            opt.step()
            params: dict[str, torch.Tensor] = {}
            for owner, prefix, module in modules:
                params.update(_prefixed(owner, _module_parameters(module), prefix))
            steps.append(
                {"epoch": epoch, "loss": loss.detach().clone(), "grads": grads, "params": params}
            )
    return {"trainer": trainer, "steps": steps}


# -- run and check ------------------------------------------------------------------------


def run(
    config: Config = Config(),
    world_size: int = 2,
    seed: int = 0,
    faults: FaultPlan | str | None = None,
    deadline: float = 60.0,
    fuzz: float = 0.0,
    repro: str = "",
    on_progress: Callable[[harness.Progress], None] | None = None,
) -> ScenarioReport:
    """Run the scenario in a real world, run the baseline, compare every
    gradient, parameter and loss, check the outcome (the loss falls) and the
    fault contract. A failed world is reported, never raised; bad arguments
    (world size, fault plan) raise before anything starts. ``on_progress``
    gets every trainer's steps as they are taken."""
    all_names = names(world_size)
    plan = layout(world_size)
    if not repro:
        repro = f"scenarios.rnn.run(scenarios.rnn.{config!r}, world_size={world_size}, seed={seed}"
        if faults:
            repro += f", faults={str(FaultPlan.coerce(faults, where='rnn.run(faults=...)'))!r}"
        if fuzz:
            repro += f", fuzz={fuzz!r}"
        repro += ")"
    plan_faults = FaultPlan.coerce(faults, where="rnn.run(faults=...)")
    harness.preload(__name__)
    started = time.monotonic()
    world = harness.run_world(
        entry,
        names=all_names,
        seed=seed,
        deadline=deadline,
        faults=plan_faults,
        failpoints=FAILPOINTS,
        args=(config,),
        fuzz=fuzz,
        repro=repro,
        check=False,
        on_progress=on_progress,
    )
    report = ScenarioReport(
        scenario=NAME,
        world_size=world_size,
        seed=seed,
        steps=0,
        metric_name="loss",
        metric=float("nan"),
        world=world,
    )
    report.details.update(config=asdict(config), layout=asdict(plan), world_seconds=world.duration)
    _check_contract(report, world, plan)

    records = {
        r.name: r.value
        for r in world.ranks
        if r.name in plan.trainers and r.status == "ok" and isinstance(r.value, dict)
    }
    if records:
        expected = baseline(config, world_size, seed)
        _compare_records(report, config, records, expected, seed)
        _check_outcome(report, records, expected)
    else:
        # Only a failed world (the contract says why) or a plan that killed
        # every trainer leaves no records.
        report.outcome_note = "not checked: no trainer finished"
    report.duration = time.monotonic() - started
    return report


def _killed_servers(world: Any, plan: Layout) -> list[str]:
    """The parameter servers the fault plan killed.

    Besides those marked ``killed``: a server whose own log says its kill
    fault fired but which the supervisor marked ``stopped``. That is a harness
    race: when the trainer's report of the death reaches the supervisor before
    the server's exit does, the supervisor stops the world at once and never
    looks at the exit. The server writes the fault event before it kills
    itself, so the event is proof enough.
    """
    out = []
    for outcome in world.ranks:
        if outcome.name not in plan.servers:
            continue
        kill_fired = any(e.get("fault_kind") == "kill" for e in outcome.fired_faults())
        if outcome.status == "killed" or (outcome.status == "stopped" and kill_fired):
            out.append(outcome.name)
    return out


def _check_contract(report: ScenarioReport, world: Any, plan: Layout) -> None:
    killed_ps = _killed_servers(world, plan)
    if world.timed_out:
        report.contract_ok = False
        report.contract_note = f"the world ran past its deadline of {world.deadline:g}s: {world.report().splitlines()[0]}"
        return
    if not killed_ps:
        # No parameter server died as planned: every rank must finish (a trainer
        # the plan killed is excused; the others' gradients are still checked).
        report.contract_ok = world.ok
        if not world.ok:
            report.contract_note = (
                "; ".join(o.describe() for o in world.failures) or world.report().splitlines()[0]
            )
        elif world.killed:
            report.contract_note = f"killed as planned: {', '.join(o.name for o in world.killed)}; every other rank finished"
        return
    # A parameter server was killed: every trainer that failed must have failed
    # fast with an error that names it, and nothing else may have failed.
    kill_times = {e["rank"]: e["t"] for e in world.fired_faults() if e.get("fault_kind") == "kill"}
    problems = []
    attributed = []
    for outcome in world.failures:
        named = [ps for ps in killed_ps if f"parameter server {ps!r} died" in (outcome.error or "")]
        if outcome.name not in plan.trainers or outcome.status != "raised" or not named:
            problems.append(
                f"{outcome.describe()} (expected a trainer raising 'parameter server {killed_ps[0]!r} died')"
            )
            continue
        raised_at = next((e["t"] for e in outcome.events if e.get("kind") == "raised"), None)
        killed_at = kill_times.get(world.names.index(named[0]))
        latency = None if raised_at is None or killed_at is None else raised_at - killed_at
        if latency is None:
            problems.append(
                f"{outcome.label} named the dead server, but the kill or the failure left no event"
            )
            continue
        if latency > world.deadline * FAIL_FAST_SHARE:
            problems.append(
                f"{outcome.label} named the dead server only {latency:.2f}s after the kill, past "
                f"{FAIL_FAST_SHARE:g} of the {world.deadline:g}s deadline: not fail-fast"
            )
            continue
        attributed.append((outcome.name, named[0], latency))
    if not attributed and not problems:
        problems.append(
            f"{', '.join(killed_ps)} was killed but no trainer reported it (every trainer finished)"
        )
    report.contract_ok = not problems
    report.contract_note = "; ".join(problems) or "; ".join(
        f"{t} failed {lat:.2f}s after {ps!r} was killed, naming it" for t, ps, lat in attributed
    )
    report.details["killed_servers"] = killed_ps
    report.details["ps_lost"] = [
        {"trainer": t, "server": ps, "seconds": lat} for t, ps, lat in attributed
    ]


def _step_label(trainer: str, step: int, trainers: int) -> Any:
    return step if trainers == 1 else f"{step} of {trainer}"


def _compare_records(
    report: ScenarioReport,
    config: Config,
    records: dict[str, dict],
    expected: dict[str, dict],
    seed: int,
) -> None:
    counts = {"grads": 0, "params": 0}
    worst = {"grads": 0.0, "params": 0.0}
    what_of = {"grads": "gradient", "params": "parameter after the optimizer step"}
    # Every comparison of this run shares scenario, seed and tolerances.
    check = functools.partial(compare, scenario=NAME, seed=seed, rtol=config.rtol, atol=config.atol)
    for trainer, got in records.items():
        want = expected[trainer]["steps"]
        steps = got["steps"]
        if len(steps) != len(want):
            report.contract_ok = False
            report.contract_note = f"{trainer} ran {len(steps)} steps, the baseline {len(want)}"
        # strict=False: a run of the wrong length is reported just above.
        for i, (step, base) in enumerate(zip(steps, want, strict=False)):
            label = _step_label(trainer, i, len(records))
            for what in ("grads", "params"):
                # One comparison per owning rank, so that a mismatch names it.
                for owner in sorted({k.split("/", 1)[0] for k in (*step[what], *base[what])}):
                    diff, mismatches = check(
                        {k: v for k, v in step[what].items() if k.startswith(owner + "/")},
                        {k: v for k, v in base[what].items() if k.startswith(owner + "/")},
                        step=label,
                        rank=owner,
                        what=what_of[what],
                    )
                    worst[what] = max(worst[what], diff)
                    report.mismatches += mismatches
                counts[what] += len(step[what])
            _, mismatches = check(
                {"loss": step["loss"]},
                {"loss": base["loss"]},
                step=label,
                rank=trainer,
                what="loss",
            )
            report.mismatches += mismatches
    report.max_grad_diff = worst["grads"]
    report.grads_checked = counts["grads"]
    report.details.update(
        max_param_diff=worst["params"],
        params_checked=counts["params"],
        tensors=sorted({name for r in records.values() for s in r["steps"] for name in s["grads"]}),
    )


def _epoch_means(steps: list[dict]) -> list[float]:
    by_epoch: dict[int, list[float]] = {}
    for step in steps:
        by_epoch.setdefault(step["epoch"], []).append(float(step["loss"]))
    return [sum(v) / len(v) for _, v in sorted(by_epoch.items())]


def _mean_per_step(records: dict[str, dict]) -> list[float]:
    losses = [[float(s["loss"]) for s in r["steps"]] for r in records.values()]
    return [sum(col) / len(col) for col in zip(*losses, strict=False)]  # trainers may stop early


def _check_outcome(
    report: ScenarioReport, records: dict[str, dict], expected: dict[str, dict]
) -> None:
    report.steps = max(len(r["steps"]) for r in records.values())
    report.history = _mean_per_step(records)
    report.baseline_history = _mean_per_step({t: expected[t] for t in records})
    notes = []
    epoch_losses = {}
    for trainer, got in sorted(records.items()):
        means = _epoch_means(got["steps"])
        epoch_losses[trainer] = means
        if len(means) < 2:
            notes.append(f"{trainer}: only {len(means)} epoch, cannot tell whether the loss falls")
        elif not means[-1] < means[0]:
            notes.append(
                f"{trainer}: mean loss did not fall: first epoch {means[0]:.4f}, last {means[-1]:.4f}"
            )
    report.details["epoch_losses"] = epoch_losses
    lasts = [m[-1] for m in epoch_losses.values() if m]
    report.metric = sum(lasts) / len(lasts)
    report.outcome_ok = not notes
    report.outcome_note = "; ".join(notes) or "; ".join(
        f"{t}: mean loss {m[0]:.3f} -> {m[-1]:.3f} over {len(m)} epochs"
        for t, m in epoch_losses.items()
    )


def check(report: ScenarioReport) -> None:
    """Raise if the run is not ok: GradientMismatch when only gradients (or
    parameters, or losses) differ, else AssertionError listing every problem."""
    __tracebackhide__ = True
    if report.ok:
        return
    replay = report.world.repro if report.world is not None else ""
    if report.contract_ok and report.outcome_ok:
        raise_mismatches(report.mismatches, replay=replay)
    lines = [f"rnn scenario failed (world_size={report.world_size}, seed={report.seed}):"]
    lines += [f"  {p}" for p in report.problems()]
    if report.world is not None and not report.contract_ok:
        lines.append(report.world.report())
    elif replay:
        lines.append(f"Replay: {replay}")
    raise AssertionError("\n".join(lines))
