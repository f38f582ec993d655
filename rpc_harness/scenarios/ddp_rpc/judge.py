"""The DDP + RPC scenario's judge: the fault contract, every trainer's
gradients (its own embedding gradient on the server, DDP's averaged
Linear) and parameters after every step against the baseline, and the
held-out loss falling."""

from __future__ import annotations

from typing import Any

import torch

from rpc_harness import WorldResult
from rpc_harness.gradcheck import Mismatch
from rpc_harness.gradcheck import compare as compare_exactly
from rpc_harness.result import OK
from rpc_harness.scenario import Comparison, Outcome, Verdict

from .._collective import compare_within, falling_loss
from .._verdicts import collective_contract
from .baseline import forward
from .config import MASTER, NAME, Config
from .model import build_embedding, build_fc, held_out

Records = dict[str, Any]  # the master's value: {"seed", "trainers": {name: {"index", "steps"}}}


def records(world: WorldResult) -> Records | None:
    """The master's collection of every trainer's record; None unless every rank finished."""
    if any(r.status != OK for r in world.ranks) or not isinstance(world[MASTER].value, dict):
        return None
    return world[MASTER].value


def contract(world: WorldResult, records: Records | None, config: Config) -> Verdict:
    """See rpc_harness/scenarios/_verdicts.py; a fault inside a trainer's
    collective is placed in its step by ``trainer.step``."""
    return collective_contract(world, step="trainer.step")


def first_trainer(records: Records) -> dict[str, Any]:
    trainers = records["trainers"]
    return trainers[min(trainers, key=lambda name: trainers[name]["index"])]


def replay_points(records: Records) -> list[dict[str, torch.Tensor] | None]:
    """The parameters each step started from: the seeded ones (None), then
    the first trainer's after each step."""
    steps = first_trainer(records)["steps"]
    return [None, *(step["params"] for step in steps[:-1])]


def compare(actual: Records, expected: dict[str, Any], config: Config, seed: int) -> Comparison:
    """Step by step, trainer by trainer: the gradients and the parameters
    after the step, within their bounds."""
    result = Comparison()
    worst = {"grads": 0.0, "params": 0.0}
    ratio = {"grads": 0.0, "params": 0.0}
    params_checked = params_expected = 0
    trainers = sorted(actual["trainers"], key=lambda name: actual["trainers"][name]["index"])
    for index, base in enumerate(expected["steps"]):
        for name in trainers:
            steps = actual["trainers"][name]["steps"]
            got = steps[index] if index < len(steps) else {"grads": {}, "params": {}}
            for kind, what, want, bounds in (("grads", "gradient", base["grads"][name], base["grad_bounds"][name]),
                                             ("params", "parameter", base["params"], base["param_bounds"])):
                diff, over, bad = compare_within(got[kind], want, bounds, scenario=NAME, step=index, rank=name,
                                                 seed=seed, what=what, atol=config.atol, rtol=config.rtol)
                worst[kind], ratio[kind] = max(worst[kind], diff), max(ratio[kind], over)
                result.mismatches += bad
                present = len(set(got[kind]) & set(want))
                if kind == "grads":
                    result.checked += present
                    result.expected += len(want)
                else:
                    params_checked += present
                    params_expected += len(want)
    if params_checked < params_expected:
        result.mismatches.append(Mismatch(NAME, "all", ", ".join(trainers), f"{params_expected - params_checked} "
                                          f"of the {params_expected} parameter tensors the baseline has (never "
                                          "compared)", float("inf"), float("inf"), config.atol, config.rtol, seed,
                                          "parameter"))
    for name in trainers:
        ran = len(actual["trainers"][name]["steps"])
        if ran > len(expected["steps"]):
            result.mismatches += compare_exactly({"steps": torch.tensor(ran)},
                                                 {"steps": torch.tensor(len(expected["steps"]))}, scenario=NAME,
                                                 step="all", rank=name, seed=seed, what="number of steps",
                                                 rtol=0.0, atol=0.0)[1]
    result.max_diff = worst["grads"]
    result.details = {"max_param_diff": worst["params"], "worst_grad_ratio": ratio["grads"],
                      "worst_param_ratio": ratio["params"], "params_checked": params_checked,
                      "params_expected": params_expected,
                      "tolerance": {"bound": "derived (rpc_harness/scenarios/_collective.py)",
                                    "rtol": config.rtol, "atol": config.atol}}
    return result


def outcome(actual: Records, expected: dict[str, Any], config: Config) -> Outcome:
    """The held-out loss falls from the seeded parameters to the last step's
    (``_collective.falling_loss``; the records hold no initial parameters:
    ``None`` stands for the seeded ones)."""
    seed = actual["seed"]
    run = {"init": None, "steps": first_trainer(actual)["steps"]}
    return falling_loss(run, expected, lambda params: held_out_loss(config, seed, params))


def held_out_loss(config: Config, seed: int, params: dict[str, torch.Tensor] | None) -> float:
    """The loss of ``params`` (None: the seeded ones) on the held-out bags."""
    embedding, fc = build_embedding(config, seed), build_fc(config, seed)
    with torch.no_grad():
        if params is not None:
            for prefix, module in (("embedding", embedding), ("fc", fc)):
                for name, p in module.named_parameters():
                    p.copy_(params[f"{prefix}.{name}"])
        return float(forward(embedding, fc, held_out(config, seed)))
