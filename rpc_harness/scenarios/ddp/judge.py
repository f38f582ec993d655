"""The DDP scenario's judge: the fault contract, every rank's gradients and
parameters against the baseline at every step, and the loss falling."""

from __future__ import annotations

from typing import Any

import torch

from rpc_harness import WorldResult
from rpc_harness.gradcheck import Mismatch
from rpc_harness.gradcheck import compare as compare_exactly
from rpc_harness.result import OK
from rpc_harness.scenario import Comparison, Outcome, Verdict

from .._collective import compare_run, falling_loss
from .._device import tolerances
from .._verdicts import collective_contract
from .config import NAME, Config
from .model import build_model, held_out_batch, loss_fn

Records = dict[str, dict[str, Any]]  # worker name -> what its entry returned


def records(world: WorldResult) -> Records | None:
    """Every rank's record; None unless every rank finished (a collective
    run is whole or nothing)."""
    if any(r.status != OK or not isinstance(r.value, dict) for r in world.ranks):
        return None
    return {r.name: r.value for r in world.ranks}


def contract(world: WorldResult, records: Records | None, config: Config) -> Verdict:
    """See rpc_harness/scenarios/_verdicts.py."""
    return collective_contract(world, step="ddp.step")


def replay_points(records: Records) -> list[dict[str, torch.Tensor]]:
    """The parameters each step started from, by the first rank's record
    (DDP keeps every rank's the same; each rank is compared to the baseline)."""
    first = records[min(records, key=lambda name: records[name]["rank"])]
    return [first["init"], *(step["params"] for step in first["steps"][:-1])]


def device_of(records: Records) -> str:
    """The device the run trained on (every rank on its own of one kind):
    the first rank's, as its record says; the CPU for records without one."""
    first = records[min(records, key=lambda name: records[name]["rank"])]
    return str(first.get("device", "cpu"))


def compare(actual: Records, expected: dict[str, Any], config: Config, seed: int) -> Comparison:
    """Step by step, rank by rank: the gradients and the parameters after
    the step within their bounds (on CUDA, the GPU tolerances:
    ``_collective.compare_run``); the initial parameters bit for bit."""
    result = Comparison()
    device = device_of(actual)
    starts = replay_points(actual)  # what the baseline began each step from
    worst = {"grads": 0.0, "params": 0.0}
    ratio = {"grads": 0.0, "params": 0.0}
    counts = {"params": 0, "params_expected": 0}
    ranks = sorted(actual, key=lambda name: actual[name]["rank"])
    for name in ranks:
        _, bad = compare_exactly(actual[name]["init"], expected["init"], scenario=NAME, step="init", rank=name,
                                 seed=seed, what="initial parameter", rtol=0.0, atol=0.0)
        result.mismatches += bad
    for index, base in enumerate(expected["steps"]):
        for name in ranks:
            steps = actual[name]["steps"]
            got = steps[index] if index < len(steps) else {"grads": {}, "params": {}}
            for kind, what in (("grads", "gradient"), ("params", "parameter")):
                diff, over, bad = compare_run(got[kind], base[kind], base[kind[:-1] + "_bounds"], device=device,
                                              start=starts[index] if kind == "params" and index < len(starts) else None,
                                              scenario=NAME,
                                              step=index, rank=name, seed=seed, what=what,
                                              atol=config.atol, rtol=config.rtol)
                worst[kind], ratio[kind] = max(worst[kind], diff), max(ratio[kind], over)
                result.mismatches += bad
                present = len(set(got[kind]) & set(base[kind]))
                if kind == "grads":
                    result.checked += present
                    result.expected += len(base[kind])
                else:
                    counts["params"] += present
                    counts["params_expected"] += len(base[kind])
    for name in ranks:
        extra = len(actual[name]["steps"]) - len(expected["steps"])
        if extra > 0:
            result.mismatches += compare_exactly(
                {"steps": torch.tensor(len(actual[name]["steps"]))}, {"steps": torch.tensor(len(expected["steps"]))},
                scenario=NAME, step="all", rank=name, seed=seed, what="number of steps", rtol=0.0, atol=0.0)[1]
    if counts["params"] < counts["params_expected"]:
        # Gradients' coverage is the report's to judge (Comparison.expected); parameters' is this judge's.
        missing = counts["params_expected"] - counts["params"]
        result.mismatches.append(Mismatch(NAME, "all", ", ".join(ranks), f"{missing} of the "
                                          f"{counts['params_expected']} parameter tensors the baseline has "
                                          "(never compared)", float("inf"), float("inf"), config.atol, config.rtol,
                                          seed, "parameter"))
    result.max_diff = worst["grads"]
    result.details = {"max_param_diff": worst["params"], "worst_grad_ratio": ratio["grads"],
                      "worst_param_ratio": ratio["params"], "params_checked": counts["params"],
                      "params_expected": counts["params_expected"],
                      "tolerance": {**_tolerance(config, device), "device": device}}
    return result


def _tolerance(config: Config, device: str) -> dict[str, Any]:
    """How the run was held to the baseline, for the report."""
    if device.startswith("cuda"):
        return {**tolerances(config.rtol, config.atol, device),
                "bound": "GPU: each tensor, and each step's parameter update, as a whole "
                         "(rpc_harness/scenarios/_device.py)"}
    return {"bound": "derived (rpc_harness/scenarios/_collective.py)", "rtol": config.rtol, "atol": config.atol}


def outcome(actual: Records, expected: dict[str, Any], config: Config) -> Outcome:
    """The held-out loss (a seeded batch no step trains on) falls from the
    initial parameters to the last step's. Measured here on the recorded
    parameters, not per training batch: each step's batch is new, and a
    batch's loss before the step moves with the batch more than with a
    few steps of training."""
    first = actual[min(actual, key=lambda name: actual[name]["rank"])]
    return falling_loss(first, expected, lambda params: held_out_loss(config, first["seed"], params))


def held_out_loss(config: Config, seed: int, params: dict[str, torch.Tensor]) -> float:
    """The tutorial's loss of ``params`` on the held-out batch."""
    model = build_model(config, seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(params[name])
        x, y = held_out_batch(config, seed)
        return float(loss_fn(model(x), y))
