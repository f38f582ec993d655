"""What the ranks run: the agent creates the observers with ``rpc.remote``,
starts each episode on all of them with ``rpc_async`` and drops those that
died; observers only serve the agent's RPCs."""

from __future__ import annotations

from typing import Any

import torch.distributed.rpc as rpc
from torch.distributed.rpc import RRef

from rpc_harness import preload
from rpc_harness.extras import installed

from .._device import here
from .._rpc import call_method, is_dead, is_remote_exception, origin
from .agent import Agent, Records
from .config import Config
from .observer import Observer

# The agent's first optimizer imports torch._dynamo (about 1 s here); in the
# forkserver that is paid once per process instead of once per world. Only a
# forkserver not yet started takes it (the first world of a process starts it).
preload("torch._dynamo", __name__)
if installed("gymnasium"):  # the [scenarios] extra; without it the scenario says so where it is run, not here
    preload("gymnasium")


class Distributed:
    """Runs an episode on every observer by RPC; drops the ones that died."""

    def __init__(self, agent: Agent, ob_rrefs: dict[int, RRef], n_steps: int) -> None:
        self.agent_rref = RRef(agent)
        self.ob_rrefs = ob_rrefs
        self.n_steps = n_steps
        self.dead_rrefs: list[RRef] = []  # kept: deleting them would message a dead owner

    def __call__(self, agent: Agent, episode: int) -> None:
        futures = {
            ob_id: rpc.rpc_async(
                self.ob_rrefs[ob_id].owner(),
                call_method,
                args=(Observer.run_episode, self.ob_rrefs[ob_id], self.agent_rref, episode, self.n_steps),
            )
            for ob_id in agent.active
        }
        for ob_id, future in futures.items():
            try:
                future.wait()
            except Exception as error:
                # An exception raised in the observer is a failure, not a death;
                # a transport error is a death only if it no longer answers.
                if is_remote_exception(error) or not is_dead(self.ob_rrefs[ob_id].owner().name):
                    name = agent.names[ob_id]
                    raise RuntimeError(f"{name} failed in episode {episode}: {origin(error)}") from error
                agent.drop(ob_id)
                self.dead_rrefs.append(self.ob_rrefs.pop(ob_id))


def entry(ctx: Any, config: Config) -> Records | None:
    """The rank entry: the agent trains and returns its Records; observers
    return at once and serve the agent's RPCs until the world shuts down."""
    if ctx.rank != 0:
        return None
    observers = {ctx.rank_of(name): name for name in ctx.names[1:]}
    agent = Agent(config, ctx.world_seed, observers, perturb_episode=config.perturb_episode, device=here())
    ob_rrefs = {
        ob_id: rpc.remote(name, Observer, args=(ob_id, name, ctx.world_seed))
        for ob_id, name in observers.items()
    }
    records = agent.train(Distributed(agent, ob_rrefs, config.max_steps))
    for name, episode in records.dropped.items():
        ctx.event("observer_dropped", observer=name, episode=episode)
    return records
