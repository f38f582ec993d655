"""The same training in one process: the observers play one after another."""

from __future__ import annotations

from collections.abc import Mapping

from .agent import Agent, Records
from .config import Config, names
from .observer import Observer


def baseline(
    config: Config, world_size: int, seed: int, dropped: Mapping[str, int] | None = None,
    *, device: str = "cpu",
) -> Records:
    """Train as the world does, in this process.

    ``dropped`` (observer name -> episode) replays a distributed run's drop
    schedule: from that episode on the observer is left out, as the agent left
    it out when it died. The perturbation hook of Config is never applied here.
    ``device`` is the policy's (the CPU for the baseline a run is judged
    against; the placement tests run it elsewhere).
    """
    observers = {rank: name for rank, name in enumerate(names(world_size)) if rank > 0}
    agent = Agent(config, seed, observers, device=device)
    local = {ob_id: Observer(ob_id, name, seed) for ob_id, name in observers.items()}
    drop_at = dict(dropped or {})

    def run_episode(agent: Agent, episode: int) -> None:
        for ob_id in list(agent.active):
            if drop_at.get(agent.names[ob_id], episode + 1) <= episode:
                agent.drop(ob_id)
                continue
            local[ob_id].run_episode(agent, episode, config.max_steps)

    return agent.train(run_episode)
