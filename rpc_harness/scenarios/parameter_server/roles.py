"""The rank entry: rank 0 serves, every other rank trains."""

from __future__ import annotations

from typing import Any

import rpc_harness

from .._device import here, prepare
from .._threads import threads
from .config import PS_NAME, WAIT_SHARE, Config, trainer_names
from .server import get_parameter_server
from .trainer import train

# torch.distributed.optim costs ~1.5 s of imports; in the forkserver it is
# paid once, not once per rank (only if no world has started it yet).
rpc_harness.preload(__name__)

FALLBACK_WAIT = 120.0  # seconds, when neither the config nor the world gives a bound


def wait_bound(config: Config, ctx: rpc_harness.RankContext) -> float:
    """How long the server waits for trainers that neither finish nor die."""
    if config.wait_timeout is not None:
        return config.wait_timeout
    return WAIT_SHARE * ctx.deadline if ctx.deadline else FALLBACK_WAIT


def entry(ctx: rpc_harness.RankContext, config: Config) -> dict[str, Any]:
    """Rank 0 serves and returns the applied-step log; trainers train, then
    return their losses and held-out accuracy. One intra-op thread each:
    the ops are small, several ranks share a few cores, and the baseline
    must add alike."""
    prepare(here())
    with threads(1):
        if ctx.name == PS_NAME:
            server = get_parameter_server(config, ctx.world_seed, trainer_names(ctx.world_size))
            server.supervise(wait_bound(config, ctx))
            return server.report()
        return train(ctx, config)
