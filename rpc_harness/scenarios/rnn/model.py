"""The tutorial's model: ``EmbeddingTable`` and ``Decoder`` on parameter
servers, the LSTM on the trainer, dropout masks from seeded generators."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
from torch import nn
from torch.distributed.rpc import RRef

from rpc_harness import derive_seed, failpoint

from .._device import here
from .._rpc import remote_method
from .config import NAME, Config


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
    # The generator is a CPU one, on every device: the mask is drawn on the
    # CPU (the baseline's draws) and moved to x's device.
    if not training or p == 0.0:
        return x
    mask = torch.empty(x.shape, dtype=x.dtype).bernoulli_(1.0 - p, generator=generator).to(x.device)
    return x * mask / (1.0 - p)


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


class EmbeddingTable(nn.Module):
    """The encoder, on a parameter server: token ids -> dropped-out embeddings."""

    def __init__(self, ntoken: int, ninp: int, dropout: float, seed: int,
                 device: torch.device | str | None = None) -> None:
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
        # Initialised on the CPU (the baseline's numbers), then moved to its
        # owner's device (None: the device of the rank that builds it).
        self.device = torch.device(device) if device is not None else here()
        self.to(self.device)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        failpoint("ps.forward")
        # The trainer sends the token ids on the CPU, as they come from its data.
        return _dropout(self.encoder(input.to(self.device)), self.dropout, self.generator, self.training)


class Decoder(nn.Module):
    """The decoder, on a parameter server: LSTM output -> token logits."""

    def __init__(
        self, ntoken: int, nhid: int, dropout: float, seed: int, perturb: float = 0.0,
        device: torch.device | str | None = None,
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
        self.device = torch.device(device) if device is not None else here()  # as in EmbeddingTable
        self.to(self.device)

    def forward(self, output: torch.Tensor) -> torch.Tensor:
        failpoint("ps.forward")
        # A CUDA output arrives on this rank's device along the world's device
        # maps already; .to is then a no-op.
        output = output.to(self.device)
        decoded = self.decoder(_dropout(output, self.dropout, self.generator, self.training))
        if self.perturb:
            decoded = decoded + self.perturb * self.decoder.bias
        return decoded


def make_lstm(config: Config, seed: int) -> nn.LSTM:
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


def run_lstm(rnn: nn.LSTM, emb: torch.Tensor, hidden: tuple, seed: int, *, layered: bool | None = None) -> tuple:
    """The LSTM over ``emb``. nn.LSTM's inter-layer dropout takes no
    generator: seed the global one for this call only, the same way in the
    trainer (whose main thread is the only one drawing from it) and in the
    baseline. On the CPU that is nn.LSTM itself. On CUDA (``layered``, by
    default where ``emb`` is not on the CPU) nn.LSTM would draw its masks
    from the CUDA generator (cuDNN's dropout), which no CPU baseline can
    redraw: :func:`layered_lstm` runs it a layer at a time, drawing each
    mask on the CPU exactly as the CPU kernel does."""
    if layered is None:
        layered = emb.device.type != "cpu"
    with _seeded(seed):
        return layered_lstm(rnn, emb, hidden) if layered else rnn(emb, hidden)


def layered_lstm(rnn: nn.LSTM, emb: torch.Tensor, hidden: tuple) -> tuple:
    """``rnn(emb, hidden)`` a layer at a time, with the inter-layer dropout
    masks drawn from the global CPU generator in the CPU kernel's order and
    form (``empty_like(x).bernoulli_(1 - p)``, divided by ``1 - p``, one per
    layer but the last), then moved to the LSTM's device. On the CPU it
    equals nn.LSTM's own forward (tests/unit/test_scenario_devices.py)."""
    h0, c0 = hidden
    x, hs, cs = emb, [], []
    p = rnn.dropout if rnn.training else 0.0
    for layer in range(rnn.num_layers):
        weights = [getattr(rnn, f"{kind}_l{layer}") for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
        x, h, c = torch._VF.lstm(x, (h0[layer:layer + 1], c0[layer:layer + 1]), weights, True, 1, 0.0,
                                 rnn.training, False, rnn.batch_first)
        hs.append(h)
        cs.append(c)
        if p > 0 and layer < rnn.num_layers - 1:
            noise = torch.empty(x.shape, dtype=x.dtype).bernoulli_(1 - p).div_(1 - p)
            x = x * noise.to(x.device)
    return x, (torch.cat(hs), torch.cat(cs))


def _parameter_rrefs(module: nn.Module) -> list[RRef]:
    """RRefs of a module's parameters (run on their owner)."""
    return [RRef(param) for param in module.parameters()]


def _module_gradients(module: nn.Module, context_id: int) -> dict[str, torch.Tensor]:
    """The gradients that distributed autograd context ``context_id`` holds on
    this rank for ``module``'s parameters, by parameter name (run on the owner)."""
    grads = dist_autograd.get_gradients(context_id)
    # Copied to the CPU on the owner: they go back to the trainer and into its records.
    return {name: grads[p].to("cpu", copy=True) for name, p in module.named_parameters() if p in grads}


def module_parameters(module: nn.Module) -> dict[str, torch.Tensor]:
    """A copy of ``module``'s parameters by name, on the CPU (run on the owner)."""
    return {name: p.detach().to("cpu", copy=True) for name, p in module.named_parameters()}


def prefixed(
    owner: str, named: dict[str, torch.Tensor], module: str = ""
) -> dict[str, torch.Tensor]:
    return {f"{owner}/{module}{name}": value for name, value in named.items()}


class RNNModel(nn.Module):
    """The tutorial's model: remote embedding, local LSTM, remote decoder."""

    def __init__(
        self, config: Config, emb_ps: str, dec_ps: str, seed: int, *, perturb: float = 0.0,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__()
        ntoken = config.vocab_size
        self.emb_table_rref = rpc.remote(
            emb_ps,
            EmbeddingTable,
            args=(ntoken, config.ninp, config.dropout, derive_seed(seed, "embedding")),
        )
        # The LSTM on the trainer's device; the servers' modules on theirs.
        self.rnn = make_lstm(config, derive_seed(seed, "lstm")).to(device)
        self.decoder_rref = rpc.remote(
            dec_ps,
            Decoder,
            args=(ntoken, config.nhid, config.dropout, derive_seed(seed, "decoder"), perturb),
        )
        self._lstm_seed = derive_seed(seed, "lstm-dropout")
        self._calls = 0

    def forward(self, input: torch.Tensor, hidden: tuple) -> tuple[torch.Tensor, tuple]:
        emb = remote_method(EmbeddingTable.forward, self.emb_table_rref, input)
        output, hidden = run_lstm(self.rnn, emb, hidden, derive_seed(self._lstm_seed, self._calls))
        self._calls += 1
        decoded = remote_method(Decoder.forward, self.decoder_rref, output)
        return decoded, hidden

    def parameter_rrefs(self) -> list[RRef]:
        """RRefs of every parameter: the remote ones through RPC, the LSTM's local."""
        remote_params = []
        remote_params.extend(remote_method(_parameter_rrefs, self.emb_table_rref))
        remote_params.extend(_parameter_rrefs(self.rnn))
        remote_params.extend(remote_method(_parameter_rrefs, self.decoder_rref))
        return remote_params

    def gradients(self, context_id: int) -> dict[str, torch.Tensor]:
        """Every parameter's gradient in ``context_id``, read on its owner."""
        me = rpc.get_worker_info().name
        grads = prefixed(
            self.emb_table_rref.owner().name,
            remote_method(_module_gradients, self.emb_table_rref, context_id),
        )
        grads.update(prefixed(me, _module_gradients(self.rnn, context_id), "rnn."))
        grads.update(
            prefixed(
                self.decoder_rref.owner().name,
                remote_method(_module_gradients, self.decoder_rref, context_id),
            )
        )
        return grads

    def parameters_by_owner(self) -> dict[str, torch.Tensor]:
        """A copy of every parameter, read on its owner."""
        me = rpc.get_worker_info().name
        params = prefixed(
            self.emb_table_rref.owner().name,
            remote_method(module_parameters, self.emb_table_rref),
        )
        params.update(prefixed(me, module_parameters(self.rnn), "rnn."))
        params.update(
            prefixed(
                self.decoder_rref.owner().name,
                remote_method(module_parameters, self.decoder_rref),
            )
        )
        return params


def init_hidden(config: Config, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    shape = (config.nlayers, config.batch_size, config.nhid)
    return torch.zeros(shape, device=device), torch.zeros(shape, device=device)


def model_seed(seed: int, trainer: str) -> int:
    return derive_seed(seed, NAME, "model", trainer)

