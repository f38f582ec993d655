"""A trainer: its model runs on the server through an RRef; it trains with
distributed autograd and a DistributedOptimizer, holding the server's step
lease from before each forward until after each optimizer step."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
import torch.nn as nn
import torch.nn.functional as F
from torch import optim
from torch.distributed.optim import DistributedOptimizer

import rpc_harness

from .._rpc import is_dead, remote_method, remote_method_async
from .config import PS_NAME, Config, trainer_names
from .data import eval_batches, get_accuracy, trainer_batches
from .model import dropout_seed
from .server import ParameterServer, get_parameter_server


class TrainerNet(nn.Module):
    """A trainer's model: no parameters of its own, forward runs on the server."""

    def __init__(self, config: Config, world_seed: int, trainers: tuple[str, ...]) -> None:
        super().__init__()
        self.param_server_rref = rpc.remote(
            PS_NAME, get_parameter_server, args=(config, world_seed, trainers)
        )

    def get_global_param_rrefs(self) -> list[rpc.RRef]:
        """RRefs of the server's parameters (for DistributedOptimizer)."""
        return remote_method(ParameterServer.get_param_rrefs, self.param_server_rref)

    def forward(self, x: torch.Tensor, dropout_seed: int | None = None) -> torch.Tensor:
        """The server's forward of ``x``, through its RRef."""
        return remote_method(ParameterServer.forward, self.param_server_rref, x, dropout_seed)


def _train_steps(ctx: rpc_harness.RankContext, config: Config, where: dict[str, Any]) -> dict[str, Any]:
    trainers = trainer_names(ctx.world_size)
    net = TrainerNet(config, ctx.world_seed, trainers)
    where["phase"] = "building the DistributedOptimizer"
    param_rrefs = net.get_global_param_rrefs()
    opt = DistributedOptimizer(optim.SGD, param_rrefs, lr=config.lr)
    rref = net.param_server_rref
    ctx.event("ps.optimizer_ready")
    losses = []
    ctx.progress(0, config.batches, "batches")
    for i, (data, target) in enumerate(trainer_batches(config, ctx.world_seed, ctx.name)):
        where.update(batch=i, phase="starting the step")
        ctx.failpoint("trainer.step")
        with dist_autograd.context() as cid:
            where["phase"] = "waiting for the step lease"
            remote_method_async(ParameterServer.begin_step, rref, ctx.name, i, cid)
            try:
                where["phase"] = "forward"
                model_output = net(data, dropout_seed(ctx.world_seed, ctx.name, i))
                loss = F.nll_loss(model_output, target)
                where["phase"] = "backward"
                dist_autograd.backward(cid, [loss])
                grads = remote_method(ParameterServer.get_dist_gradients, rref, cid)
                if len(grads) != len(param_rrefs):
                    raise RuntimeError(
                        f"{ctx.name}: batch {i} got gradients for only {sorted(grads)}"
                    )
                where["phase"] = "optimizer step"
                ctx.failpoint("optimizer.step")
                opt.step(cid)
            except BaseException:
                # Give the lease back (dropping or committing, as the server
                # sees the parameters) so the others are not held up; a dead
                # server is not worth a second error.
                try:
                    remote_method(ParameterServer.end_step, rref, ctx.name, i, cid, None)
                except Exception:  # noqa: BLE001
                    pass
                raise
            where["phase"] = "releasing the step lease"
            remote_method(ParameterServer.end_step, rref, ctx.name, i, cid, loss.item())
            losses.append(loss.item())
            ctx.progress(len(losses), config.batches, "batches", loss=losses[-1])
    ctx.event("ps.training_done", batches=len(losses))
    where.update(batch=None, phase="waiting for the other trainers")
    remote_method_async(ParameterServer.trainer_done, rref, ctx.name)
    where["phase"] = "measuring accuracy"
    acc = get_accuracy(eval_batches(config, ctx.world_seed), net)
    return {"trainer": ctx.name, "losses": losses, "accuracy": acc}


def train(ctx: rpc_harness.RankContext, config: Config) -> dict[str, Any]:
    """Train this trainer's shard; return its losses and held-out accuracy.
    A dead server is named in the error, with where the trainer was."""
    where: dict[str, Any] = {"batch": None, "phase": "connecting to the server"}
    try:
        return _train_steps(ctx, config, where)
    except Exception as error:
        # Name the culprit when it is the server: a dead server surfaces as
        # "eof" or "connection refused" from deep inside tensorpipe.
        if not is_dead(PS_NAME):
            raise
        at = f"batch {where['batch']}, " if where["batch"] is not None else ""
        raise RuntimeError(
            f"{ctx.name}: the parameter server '{PS_NAME}' (rank {ctx.rank_of(PS_NAME)}) is gone "
            f"({at}{where['phase']}): {type(error).__name__}: {str(error).strip()[:200]}"
        ) from error

