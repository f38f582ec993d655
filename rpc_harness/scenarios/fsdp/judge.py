"""The FSDP2 scenario's judge: the fault contract, the ranks' gradients,
AdamW state and parameters against the baseline at every step, and the
held-out loss falling.

Mixed precision (bf16 parameters in the forward and backward, float32
reduction and master weights) holds the gradients to another tolerance:
the baseline stays float32, and bfloat16's unit roundoff (2**-8) put into
the derived bound exceeds the gradients themselves (2 * (N + F) * 2**-8 >
1), so no element-wise bound says anything. Each gradient tensor is
compared as a whole instead, ``||a - e|| <= MIXED_RTOL * ||e||``
(gradcheck's ``norm``). AdamW's state and the parameters keep their
rounding bounds: the optimizer steps the float32 master weights with the
run's own gradients, in the run as in the baseline (baseline.py).
"""

from __future__ import annotations

from typing import Any

import torch

from rpc_harness import WorldResult
from rpc_harness.gradcheck import Mismatch
from rpc_harness.gradcheck import compare as compare_tensors
from rpc_harness.result import OK
from rpc_harness.scenario import Comparison, Outcome, Verdict

from .._collective import compare_run, falling_loss, shard_owner
from .._device import tolerances
from .._verdicts import collective_contract
from .config import NAME, Config
from .model import build_model, held_out_batch, loss_fn

# The mixed-precision tolerance of a gradient tensor: the relative norm of its
# difference. Measured with the default config (world sizes 2 and 4, seeds
# 0..2, every step): at most 0.0138; seven times that. A planted bug moves
# a gradient by far more (one rank's data shifted: 0.3 and up).
MIXED_RTOL = 0.1

Records = dict[str, dict[str, Any]]  # worker name -> what its entry returned
KINDS = (("grads", "gradient"), ("state", "AdamW state"), ("params", "parameter"))
BOUNDS = {"grads": "grad_bounds", "state": "state_bounds", "params": "param_bounds"}


def records(world: WorldResult) -> Records | None:
    """Every rank's record; None unless every rank finished."""
    if any(r.status != OK or not isinstance(r.value, dict) for r in world.ranks):
        return None
    return {r.name: r.value for r in world.ranks}


def contract(world: WorldResult, records: Records | None, config: Config) -> Verdict:
    """See rpc_harness/scenarios/_verdicts.py."""
    return collective_contract(world, step="fsdp.step")


def whole(records: Records) -> dict[str, Any]:
    """The ranks' shards put together, in rank order (fully_shard splits dim
    0 as torch.chunk does), into the first rank's record's shape: ``init``
    and per step whole ``grads``, ``params`` and ``state``. A tensor some
    rank lacks is left out (and so counted as never compared)."""
    ranks = [records[name] for name in sorted(records, key=lambda name: records[name]["rank"])]
    first = ranks[0]
    steps = []
    for index in range(min(len(r["steps"]) for r in ranks)):
        step = {"loss": first["steps"][index]["loss"]}
        for kind, _ in KINDS:
            shards = [r["steps"][index][kind] for r in ranks]
            step[kind] = {name: torch.cat([shard[name] for shard in shards])
                          for name in shards[0] if all(name in shard for shard in shards)}
        steps.append(step)
    return {"rank": first["rank"], "seed": first["seed"], "init": first["init"], "steps": steps}


def replay_points(records: Records) -> list[dict[str, Any]]:
    """What each step started from, parameters and AdamW state, and the
    gradients it reduced (every rank's shards, put together)."""
    first = whole(records)
    steps = first["steps"]
    return [{"params": steps[k - 1]["params"] if k else first["init"], "state": steps[k - 1]["state"] if k else {},
             "grads": steps[k]["grads"]} for k in range(len(steps))]


def compare(actual: Records, expected: dict[str, Any], config: Config, seed: int) -> Comparison:
    """Step by step: the ranks' gradients, AdamW state and parameters, put
    together, within their bounds (a mismatch names the rank whose shard holds the
    first bad element); the initial parameters bit for bit."""
    result = Comparison()
    first = whole(actual)
    world_size = len(actual)
    device = str(actual[min(actual, key=lambda name: actual[name]["rank"])].get("device", "cpu"))
    starts = replay_points(actual)  # what the baseline began each step from
    worst = {kind: 0.0 for kind, _ in KINDS}
    ratio = {kind: 0.0 for kind, _ in KINDS}
    counts = {"compared": 0, "expected": 0}
    _, bad = compare_tensors(first["init"], expected["init"], scenario=NAME, step="init", rank="worker0", seed=seed,
                             what="initial parameter", rtol=0.0, atol=0.0)
    result.mismatches += bad
    for index, base in enumerate(expected["steps"]):
        got = first["steps"][index] if index < len(first["steps"]) else {kind: {} for kind, _ in KINDS}
        for kind, what in KINDS:
            if config.mixed_precision and kind == "grads":
                rtol = max(MIXED_RTOL, tolerances(config.rtol, config.atol, device)["rtol"])
                diff, bad = compare_tensors(got[kind], base[kind], scenario=NAME, step=index, rank="all ranks",
                                            seed=seed, what=what, rtol=rtol, atol=config.atol, norm=True)
                over = 0.0
            else:
                diff, over, bad = compare_run(
                    got[kind], base[kind], base[BOUNDS[kind]], device=device,
                    start=starts[index][kind] if kind != "grads" and index < len(starts) else None,
                    scenario=NAME, step=index, rank="all ranks", seed=seed, what=what, atol=config.atol,
                    rtol=config.rtol, owner=lambda mask: shard_owner(mask, world_size))
            worst[kind], ratio[kind] = max(worst[kind], diff), max(ratio[kind], over)
            result.mismatches += bad
            present = len(set(got[kind]) & set(base[kind]))
            if kind == "grads":
                result.checked += present
                result.expected += len(base[kind])
            else:
                counts["compared"] += present
                counts["expected"] += len(base[kind])
    if counts["compared"] < counts["expected"]:
        missing = counts["expected"] - counts["compared"]
        result.mismatches.append(Mismatch(NAME, "all", "all ranks", f"{missing} of the {counts['expected']} parameter "
                                          "and state tensors the baseline has (never compared)", float("inf"),
                                          float("inf"), config.atol, config.rtol, seed, "parameter"))
    extra = len(first["steps"]) - len(expected["steps"])
    if extra > 0:
        result.mismatches += compare_tensors(
            {"steps": torch.tensor(len(first["steps"]))}, {"steps": torch.tensor(len(expected["steps"]))},
            scenario=NAME, step="all", rank="worker0", seed=seed, what="number of steps", rtol=0.0, atol=0.0)[1]
    result.max_diff = worst["grads"]
    result.details = {
        "max_param_diff": worst["params"], "max_state_diff": worst["state"],
        "worst_grad_ratio": ratio["grads"], "worst_param_ratio": ratio["params"],
        "worst_state_ratio": ratio["state"], "others_checked": counts["compared"],
        "others_expected": counts["expected"],
        "tolerance": {**_tolerance(config, device), "device": device,
                      **({"gradients": f"as a whole, rtol={MIXED_RTOL:g} (mixed precision)"}
                         if config.mixed_precision else {})}}
    return result


def _tolerance(config: Config, device: str) -> dict[str, Any]:
    """How the run was held to the baseline, for the report."""
    if device.startswith("cuda"):
        return {**tolerances(config.rtol, config.atol, device),
                "bound": "GPU: each tensor, and each step's change of the parameters and AdamW state, as a whole "
                         "(rpc_harness/scenarios/_device.py)"}
    return {"bound": "derived (rpc_harness/scenarios/_collective.py, fsdp/baseline.py)", "rtol": config.rtol,
            "atol": config.atol}


def outcome(actual: Records, expected: dict[str, Any], config: Config) -> Outcome:
    """The held-out loss falls from the initial parameters to the last step's."""
    first = whole(actual)
    return falling_loss(first, expected, lambda params: held_out_loss(config, first["seed"], params))


def held_out_loss(config: Config, seed: int, params: dict[str, torch.Tensor]) -> float:
    """The loss of ``params`` on the held-out sequences."""
    model = build_model(config, seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(params[name])
        x, y = held_out_batch(config, seed)
        return float(loss_fn(model(x), y))
