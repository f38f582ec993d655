"""The same training in one process, per trainer."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn, optim

from rpc_harness import derive_seed

from .._threads import threads
from .config import Config, Layout, layout
from .data import batches
from .model import (
    Decoder,
    EmbeddingTable,
    init_hidden,
    make_lstm,
    model_seed,
    module_parameters,
    prefixed,
    run_lstm,
)


def baseline(config: Config, world_size: int, seed: int) -> dict[str, dict[str, Any]]:
    """The same training in this process: per trainer, the records its rank
    would return (loss, gradients and parameters after each step, named by
    the rank that owns them in the distributed run). Never perturbed."""
    plan = layout(world_size)
    out = {}
    with threads(1):  # as in the ranks, and as fast
        for index, trainer in enumerate(plan.trainers):
            with torch.random.fork_rng(devices=[]):
                out[trainer] = _baseline_trainer(config, plan, seed, index, trainer)
    return out


def _baseline_trainer(
    config: Config, plan: Layout, seed: int, index: int, trainer: str
) -> dict[str, Any]:
    data = batches(config, seed, index, len(plan.trainers))
    seed_of_model = model_seed(seed, trainer)
    ntoken = config.vocab_size
    table = EmbeddingTable(
        ntoken, config.ninp, config.dropout, derive_seed(seed_of_model, "embedding")
    )
    rnn = make_lstm(config, derive_seed(seed_of_model, "lstm"))
    decoder = Decoder(ntoken, config.nhid, config.dropout, derive_seed(seed_of_model, "decoder"))
    lstm_seed = derive_seed(seed_of_model, "lstm-dropout")
    modules = ((plan.embedding, "", table), (trainer, "rnn.", rnn), (plan.decoder, "", decoder))
    opt = optim.SGD([p for _, _, m in modules for p in m.parameters()], lr=config.lr)
    criterion = nn.CrossEntropyLoss()
    steps = []
    calls = 0
    for epoch in range(config.epochs):
        hidden = init_hidden(config)
        for data_batch, target in data:
            opt.zero_grad(set_to_none=True)
            hidden = (hidden[0].detach(), hidden[1].detach())
            emb = table(data_batch)
            output, hidden = run_lstm(rnn, emb, hidden, derive_seed(lstm_seed, calls))
            calls += 1
            loss = criterion(decoder(output).view(-1, ntoken), target)
            loss.backward()
            grads: dict[str, torch.Tensor] = {}
            for owner, prefix, module in modules:
                grads.update(
                    prefixed(
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
                params.update(prefixed(owner, module_parameters(module), prefix))
            steps.append(
                {"epoch": epoch, "loss": loss.detach().clone(), "grads": grads, "params": params}
            )
    return {"trainer": trainer, "steps": steps}

