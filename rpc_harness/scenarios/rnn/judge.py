"""Judging an RNN world: the fault contract (a killed parameter server is
named fast), every gradient, parameter and loss against the baseline, and
whether the loss falls."""

from __future__ import annotations

from typing import Any

import torch

from rpc_harness import WorldResult
from rpc_harness.gradcheck import Mismatch
from rpc_harness.gradcheck import compare as compare_tensors
from rpc_harness.result import KILLED, OK, RAISED
from rpc_harness.scenario import Comparison, Outcome, Verdict

from .._device import tolerances
from .config import FAIL_FAST_SHARE, NAME, Config, layout

Records = dict[str, dict[str, Any]]  # trainer name -> {"trainer", "steps": [{"epoch", "loss", "grads", "params"}]}


def records(world: WorldResult) -> Records | None:
    """The records of every trainer that finished; None if none did."""
    plan = layout(world.world_size)
    found = {r.name: r.value for r in world.ranks
             if r.name in plan.trainers and r.status == OK and isinstance(r.value, dict)}
    return found or None


def contract(world: WorldResult, records: Records | None, config: Config) -> Verdict:
    """With no server killed, every rank finishes (a trainer the plan killed
    is excused). With a server killed, every failed rank is a trainer that
    raised fast, naming that server, and nothing else failed."""
    plan = layout(world.world_size)
    killed_servers = [r.name for r in world.ranks if r.name in plan.servers and r.status == KILLED]
    if world.timed_out:
        return Verdict(False, f"the world ran past its deadline of {world.deadline:g}s: "
                              f"{world.report().splitlines()[0]}")
    if not killed_servers:
        if not world.ok:
            return Verdict(False, "; ".join(o.describe() for o in world.failures) or world.report().splitlines()[0])
        if world.killed:
            return Verdict(True, f"killed as planned: {', '.join(o.name for o in world.killed)}; "
                                 "every other rank finished")
        return Verdict(True, "every rank finished")
    kill_times = {fired.rank: fired.t for fired in world.fired_faults() if fired.kind == "kill"}
    problems, attributed = [], []
    for outcome in world.failures:
        named = [ps for ps in killed_servers if f"parameter server {ps!r} died" in (outcome.error or "")]
        if outcome.name not in plan.trainers or outcome.status != RAISED or not named:
            problems.append(f"{outcome.describe()} (expected a trainer raising "
                            f"'parameter server {killed_servers[0]!r} died')")
            continue
        raised_at = next((e["t"] for e in outcome.events if e.get("kind") == "raised"), None)
        killed_at = kill_times.get(world.names.index(named[0]))
        if raised_at is None or killed_at is None:
            problems.append(f"{outcome.label} named the dead server, but the kill or the failure left no event")
            continue
        latency = raised_at - killed_at
        if latency > world.deadline * FAIL_FAST_SHARE:
            problems.append(f"{outcome.label} named the dead server only {latency:.2f}s after the kill, past "
                            f"{FAIL_FAST_SHARE:g} of the {world.deadline:g}s deadline: not fail-fast")
            continue
        attributed.append((outcome.name, named[0], latency))
    if not attributed and not problems:
        problems.append(f"{', '.join(killed_servers)} was killed but no trainer reported it (every trainer finished)")
    details = {"killed_servers": killed_servers,
               "ps_lost": [{"trainer": t, "server": ps, "seconds": lat} for t, ps, lat in attributed]}
    note = "; ".join(problems) or "; ".join(
        f"{t} failed {lat:.2f}s after {ps!r} was killed, naming it" for t, ps, lat in attributed)
    return Verdict(not problems, note, details)


def _step_label(trainer: str, step: int, trainers: int) -> Any:
    return step if trainers == 1 else f"{step} of {trainer}"


WHAT = {"grads": "gradient", "params": "parameter after the optimizer step"}


def compare(actual: Records, expected: Records, config: Config, seed: int) -> Comparison:
    """Every step of every trainer that finished: each owner's gradients, its
    parameters after the step, and the loss. A run of another length than
    the baseline's is a mismatch too. Which owners a step has is read from
    both sides, and what the baseline has is counted on its own: a tensor
    of the baseline that was never compared fails the comparison."""
    result = Comparison()
    counts = {"grads": 0, "params": 0}  # compared: in the run and in the baseline
    has = {"grads": 0, "params": 0}  # in the baseline
    worst = {"grads": 0.0, "params": 0.0}
    device = next((str(got.get("device", "cpu")) for got in actual.values()), "cpu")
    tolerance = tolerances(config.rtol, config.atol, device)
    exact = {"rtol": 0.0, "atol": 0.0, "norm": False}  # for counts: no device rounds them

    def check(a: dict, e: dict, *, step: Any, rank: str, what: str, within: dict = tolerance) -> float:
        diff, found = compare_tensors(a, e, scenario=NAME, step=step, rank=rank, seed=seed, what=what, **within)
        result.mismatches += found
        return diff

    for trainer, got in actual.items():
        steps, want = got["steps"], expected[trainer]["steps"]
        if len(steps) != len(want):
            check({"steps": torch.tensor(len(steps))}, {"steps": torch.tensor(len(want))},
                  step="all", rank=trainer, what="number of steps", within=exact)
        for base in want:
            for kind in has:
                has[kind] += len(base[kind])
        for i, (step, base) in enumerate(zip(steps, want, strict=False)):
            label = _step_label(trainer, i, len(actual))
            for kind in ("grads", "params"):
                # One comparison per owning rank, so that a mismatch names it.
                for owner in sorted({k.split("/", 1)[0] for k in (*step[kind], *base[kind])}):
                    mine = {k: v for k, v in step[kind].items() if k.startswith(owner + "/")}
                    theirs = {k: v for k, v in base[kind].items() if k.startswith(owner + "/")}
                    worst[kind] = max(worst[kind], check(mine, theirs, step=label, rank=owner, what=WHAT[kind]))
                    counts[kind] += len(set(mine) & set(theirs))
            check({"loss": step["loss"]}, {"loss": base["loss"]}, step=label, rank=trainer, what="loss")
    if counts["params"] < has["params"]:
        # Gradients' coverage is the report's to judge (Comparison.expected); parameters' is this judge's.
        result.mismatches.append(Mismatch(
            NAME, "all", ", ".join(sorted(actual)), f"{has['params'] - counts['params']} of the "
            f"{has['params']} parameter tensors the baseline has (never compared)", float("inf"),
            float("inf"), tolerance["atol"], tolerance["rtol"], seed, WHAT["params"]))
    result.max_diff, result.checked, result.expected = worst["grads"], counts["grads"], has["grads"]
    result.details = {
        "max_param_diff": worst["params"],
        "params_checked": counts["params"],
        "params_expected": has["params"],
        "tolerance": {**tolerance, "device": device},
        "tensors": sorted({name for r in actual.values() for s in r["steps"] for name in s["grads"]}),
    }
    return result


def epoch_means(steps: list[dict]) -> list[float]:
    """The mean loss of each epoch."""
    by_epoch: dict[int, list[float]] = {}
    for step in steps:
        by_epoch.setdefault(step["epoch"], []).append(float(step["loss"]))
    return [sum(v) / len(v) for _, v in sorted(by_epoch.items())]


def _mean_per_step(records: Records) -> list[float]:
    losses = [[float(s["loss"]) for s in r["steps"]] for r in records.values()]
    return [sum(col) / len(col) for col in zip(*losses, strict=False)]  # trainers may stop early


def outcome(actual: Records, expected: Records, config: Config) -> Outcome:
    """Every trainer's mean loss falls from its first epoch to its last."""
    notes = []
    epoch_losses = {}
    for trainer, got in sorted(actual.items()):
        means = epoch_means(got["steps"])
        epoch_losses[trainer] = means
        if len(means) < 2:
            notes.append(f"{trainer}: only {len(means)} epoch, cannot tell whether the loss falls")
        elif not means[-1] < means[0]:
            notes.append(f"{trainer}: mean loss did not fall: first epoch {means[0]:.4f}, last {means[-1]:.4f}")
    lasts = [m[-1] for m in epoch_losses.values() if m]
    return Outcome(
        ok=not notes,
        note="; ".join(notes) or "; ".join(
            f"{t}: mean loss {m[0]:.3f} -> {m[-1]:.3f} over {len(m)} epochs" for t, m in epoch_losses.items()),
        metric=sum(lasts) / len(lasts) if lasts else float("nan"),
        steps=max(len(r["steps"]) for r in actual.values()),
        history=_mean_per_step(actual),
        baseline_history=_mean_per_step({t: expected[t] for t in actual}),
        details={"epoch_losses": epoch_losses},
    )
