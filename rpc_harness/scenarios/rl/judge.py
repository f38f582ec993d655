"""Judging an RL world: the fault contract, the comparison with the
baseline, and whether the policy learned."""

from __future__ import annotations

import torch

from rpc_harness import WorldResult
from rpc_harness.gradcheck import compare as compare_tensors
from rpc_harness.result import KILLED
from rpc_harness.scenario import Comparison, Outcome, Verdict

from .._device import tolerances
from .agent import Records
from .config import AGENT_NAME, JUDGE_MIN_EPISODES, JUDGE_MIN_OBSERVERS, NAME, Config


def records(world: WorldResult) -> Records | None:
    """The agent's training records, if it returned them."""
    value = world[AGENT_NAME].value
    return value if isinstance(value, Records) else None


def contract(world: WorldResult, records: Records | None, config: Config) -> Verdict:
    """Every rank finished, except observers the plan killed, and the agent
    dropped exactly the observers that died."""
    if not world.ok:
        failed = world.failures or [r for r in world.ranks if r.status != KILLED]
        lines = "; ".join(r.describe() for r in failed[:4])
        return Verdict(False, f"the world failed: {lines}" if failed else "the world failed (timed out)")
    if records is None:
        agent = world[AGENT_NAME]
        return Verdict(False, "the agent returned no training records"
                       + (f" ({agent.describe()})" if agent.status == KILLED else ""))
    killed = {r.name for r in world.killed}
    dropped = set(records.dropped)
    if killed != dropped:
        return Verdict(False, (
            f"killed observers {sorted(killed)} but the agent dropped {sorted(dropped)}: "
            "a dead observer must be dropped, and only a dead one"
        ))
    if not records.dropped:
        return Verdict(True, f"all {world.world_size} ranks finished; {len(records.episodes)} episodes trained")
    survivors = [n for n in world.names[1:] if n not in dropped]
    drops = ", ".join(f"{n} died and was dropped at episode {e}" for n, e in sorted(records.dropped.items()))
    return Verdict(True, f"{drops}; the agent finished {len(records.episodes)} episodes with {', '.join(survivors)}",
                   {"dropped": dict(records.dropped)})


def compare(actual: Records, expected: Records, config: Config, seed: int) -> Comparison:
    """Every episode's gradients; episodes only one side has are mismatches
    too. The details say whether they were equal bit for bit."""
    result = Comparison()
    tolerance = tolerances(config.rtol, config.atol, actual.device)
    exact = True
    for index in range(max(len(actual.episodes), len(expected.episodes))):
        a = actual.episodes[index].grads if index < len(actual.episodes) else {}
        e = expected.episodes[index].grads if index < len(expected.episodes) else {}
        diff, found = compare_tensors(a, e, scenario=NAME, step=f"episode {index + 1}", rank=AGENT_NAME,
                                      seed=seed, **tolerance)
        result.max_diff = max(result.max_diff, diff)
        result.checked += len(set(a) & set(e))
        result.expected += len(e)
        result.mismatches += found
        exact = exact and set(a) == set(e) and all(torch.equal(a[k], e[k]) for k in a)
    schedule = ", ".join(f"{n} from episode {e}" for n, e in sorted(actual.dropped.items()))
    result.details = {
        "bit_exact": exact,
        "tolerance": {**tolerance, "device": actual.device},
        "grad_check": (
            f"every episode's gradients against a baseline that replays the drop schedule ({schedule}): "
            "the survivors' environments and RNG streams do not depend on the dead observer, "
            "so episodes after the death are checked too, not only those before it"
            if actual.dropped
            else "every episode's gradients against the single-process baseline"
        ),
    }
    return result


def judge_outcome(records: Records) -> tuple[bool, str]:
    """Did the policy learn? Solved (running reward past the threshold), or,
    on a budget big enough to tell learning from noise (JUDGE_MIN_EPISODES
    episodes, each trained on JUDGE_MIN_OBSERVERS observers or more), the mean
    episode reward of the last quarter of the episodes beats the first
    quarter's. Smaller budgets pass, with a note saying they were not judged."""
    episodes = records.episodes
    final = episodes[-1].running_reward if episodes else 0.0
    if records.solved_at is not None:
        return True, f"solved at episode {records.solved_at}: running reward {final:.1f} > {records.threshold:g}"
    observers = min((len(ep.observers) for ep in episodes), default=0)
    if len(episodes) < JUDGE_MIN_EPISODES or observers < JUDGE_MIN_OBSERVERS:
        return True, (
            f"not judged: {len(episodes)} episodes with {observers} observer(s) is below the budget "
            f"where a rise is reliable ({JUDGE_MIN_EPISODES} episodes, {JUDGE_MIN_OBSERVERS} observers); "
            f"running reward {final:.2f}"
        )
    rewards = [sum(ep.rewards.values()) / len(ep.rewards) for ep in episodes]
    k = len(rewards) // 4
    first, last = sum(rewards[:k]) / k, sum(rewards[-k:]) / k
    verdict = "rises" if last > first else "does not rise"
    return last > first, (
        f"mean episode reward {verdict}: first {k} episodes {first:.1f}, last {k} {last:.1f}; "
        f"running reward {final:.2f} (threshold {records.threshold:g})"
    )


def outcome(actual: Records, expected: Records, config: Config) -> Outcome:
    """The running reward, its history against the baseline's, and the verdict."""
    ok, note = judge_outcome(actual)
    return Outcome(
        ok=ok,
        note=note,
        metric=actual.episodes[-1].running_reward if actual.episodes else 0.0,
        steps=len(actual.episodes),
        history=[ep.running_reward for ep in actual.episodes],
        baseline_history=[ep.running_reward for ep in expected.episodes],
        details={
            "episodes": len(actual.episodes),
            "env_steps": actual.steps,
            "episode_rewards": [ep.rewards for ep in actual.episodes],
            "solved_at": actual.solved_at,
            "threshold": actual.threshold,
            "dropped": dict(actual.dropped),
        },
    )
