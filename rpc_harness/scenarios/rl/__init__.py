"""Distributed reinforcement learning: the agent/observer scenario of PyTorch's
"Getting Started with Distributed RPC Framework" tutorial, run in full and
checked gradient for gradient against a single-process baseline.

Rank 0 is ``agent``; ranks 1.. are ``observer1``, ``observer2``, ... Each
observer owns a gymnasium ``CartPole-v1``; per step it sends its state to the
agent by RPC through the agent's RRef (``Agent.select_action``) and reports the
reward by a second RPC (``Agent.report_reward``). The agent creates the
observers with ``rpc.remote``, starts an episode on all of them with
``rpc_async`` and, after each episode, trains its ``Policy`` with REINFORCE.

What differs from the tutorial, on purpose:

- Every observer's environment is seeded from the world seed, the observer's
  name and the episode (the tutorial seeds every observer alike), with the
  gymnasium API (``reset(seed=) -> (obs, info)``, ``step`` -> 5 values).
- The tutorial chains the discounted return across the concatenation of all
  observers' rewards, so one observer's return leaks into another's; here each
  observer's returns are discounted over its own trajectory, then normalised
  over the whole batch. A one-step batch is not divided by a NaN std.
- Determinism by design: an episode's trajectories, loss and gradients are a
  function of the seed alone, whatever order the observers' RPCs interleave
  in. Each observer has its own ``torch.Generator`` on the agent, for action
  sampling and for the dropout mask (functional dropout, not ``nn.Dropout``'s
  global RNG). Actions are sampled without building a graph; ``finish_episode``
  replays each observer's recorded steps (state, dropout mask, action) through
  the policy in a fixed observer order and backpropagates that. Backpropagating
  through the graphs the RPC threads built, as the tutorial does, sums each
  weight's gradient in the order those threads happened to create the graph
  nodes, which changes the gradient's last bits from run to run.
- A dead observer (its ``rpc_async`` future fails and it no longer answers)
  is dropped: its partial trajectory of that episode is discarded and the
  agent trains on with the survivors. The records say who was dropped when.

Running reward, as the tutorial: ``0.05 * ep_reward + 0.95 * running`` from 0,
where ``ep_reward`` is the smallest episode reward among the observers.

The package, split by concern: ``config`` (names, failpoints, knobs),
``model`` (the policy), ``agent`` and ``observer`` (the roles, shared by the
ranks and the baseline), ``ranks`` (the rank entry), ``baseline`` and
``judge`` (contract, comparison, outcome).
"""

from __future__ import annotations

import functools

from rpc_harness.scenario import PackageScenario, check_report, run_scenario

from . import config, judge
from .agent import Agent, Episode, Records, Trajectory
from .baseline import baseline
from .config import (
    AGENT_NAME,
    DEFAULT_WORLD_SIZE,
    FAILPOINTS,
    JUDGE_MIN_EPISODES,
    JUDGE_MIN_OBSERVERS,
    MIN_STEPS,
    MIN_WORLD_SIZE,
    NAME,
    STEPS_FIELD,
    Config,
    gymnasium,
    names,
)
from .judge import judge_outcome
from .model import Policy
from .observer import Observer
from .roles import entry

__all__ = [
    "AGENT_NAME", "DEFAULT_WORLD_SIZE", "FAILPOINTS", "JUDGE_MIN_EPISODES", "JUDGE_MIN_OBSERVERS",
    "MIN_WORLD_SIZE", "NAME", "SCENARIO", "MIN_STEPS", "STEPS_FIELD", "Agent", "Config", "Episode", "Observer",
    "Policy", "Records", "Trajectory", "baseline", "check", "entry", "judge_outcome", "names", "run",
]



def _validate(config: Config, world_size: int, seed: int) -> None:
    """Every config that constructs runs at every size from two ranks;
    gymnasium must be installed (raises :class:`rpc_harness.MissingExtra`)."""
    gymnasium()


def _fault_checks(world_size: int, config: Config) -> dict[str, str]:
    """The contracts ``rpc-harness run`` checks besides the clean world:
    a slow observer changes nothing; a killed one is dropped (from three
    ranks up: with one observer there is nobody left to train with)."""
    checks = {"slow": "delay:observer1@observer.run_episode=0.05s"}
    if world_size >= 3:
        checks["kill"] = f"kill:observer{world_size - 1}@observer.step#{min(5, config.max_steps)}"
    return checks


def _replay_drops(config: Config, world_size: int, seed: int, records: Records) -> Records:
    """The baseline, replaying the world's drop schedule."""
    return baseline(config, world_size, seed, dropped=records.dropped)


SCENARIO = PackageScenario(
    config, judge, entry=entry, needs=("gymnasium",), baseline=_replay_drops, fault_checks=_fault_checks, validate=_validate,
    summary="distributed RL on CartPole: an agent trains with REINFORCE on its observers' episodes",
    metric_name="running reward",
)


# ``run(config=None, *, world_size=..., seed=..., faults=...)``: this scenario
# against its baseline, as rpc_harness.run_scenario runs any scenario.
run = functools.partial(run_scenario, SCENARIO)
check = check_report
