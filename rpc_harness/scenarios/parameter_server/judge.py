"""Judging a parameter-server world: the fault contract (a killed server is
named fast; with a live server the log is serial and complete), the
baseline's replay of the log, the comparison, and the held-out accuracy."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rpc_harness import WorldResult
from rpc_harness.gradcheck import compare as compare_tensors
from rpc_harness.result import KILLED, OK, RAISED
from rpc_harness.scenario import Comparison, Outcome, Verdict

from .._device import tolerances
from .baseline import BaselineRun
from .config import NAME, PS_NAME, Config

# A dead parameter server must be named by the trainers this fast (seconds
# from the kill to the first trainer's error) for the contract to hold; a
# dead peer's pipe reports EOF within milliseconds, so this is pure margin.
ATTRIBUTION_BOUND = 10.0


@dataclass
class Records:
    """What a world with a live server left: the server's log and report,
    and each trainer that finished its value (losses, accuracy)."""

    log: dict[str, Any]
    trainers: dict[str, dict[str, Any]]

    @property
    def order(self) -> list[tuple[str, int]]:
        """The applied steps, as (trainer, batch), in the order applied."""
        return [(s["trainer"], s["batch"]) for s in self.log["steps"]]


def records(world: WorldResult) -> Records | None:
    """The server's log and the finished trainers' values; None when the
    server did not return its log (killed, failed)."""
    server = world[PS_NAME]
    if server.status != OK or not isinstance(server.value, dict):
        return None
    trainers = {r.name: r.value for r in world.ranks
                if r.name != PS_NAME and r.status == OK and isinstance(r.value, dict)}
    return Records(server.value, trainers)


def server_was_killed(world: WorldResult) -> bool:
    return world[PS_NAME].status == KILLED


def contract(world: WorldResult, records: Records | None, config: Config) -> Verdict:
    """A killed server is named fast by the trainers; a live one logged a
    serial history in which every survivor finished, and reaped only the
    trainers the plan killed."""
    if server_was_killed(world):
        return server_killed_contract(world)
    problems = []
    if world.timed_out:
        problems.append(f"the world hung until its deadline of {world.deadline:g}s")
    problems += [r.describe() for r in world.failures]
    if records is None:
        problems = problems or [world[PS_NAME].describe()]
        return Verdict(False, "; ".join(problems) + "; the server returned no log\n" + world.report(output_lines=10))
    problems += log_problems(world, records, config)
    killed = sorted(r.name for r in world.ranks if r.name != PS_NAME and r.status == KILLED)
    if problems:
        note = "; ".join(problems)
        if world.failures or world.timed_out:
            note += "\n" + world.report(output_lines=10)
        return Verdict(False, note)
    return Verdict(True, f"{len(records.trainers)} trainer(s) finished"
                   + (f"; {', '.join(killed)} killed as planned" if killed else ""))


def log_problems(world: WorldResult, records: Records, config: Config) -> list[str]:
    """What the server's log says against the contract: step k began at
    version k (no overlap), each trainer's batches were applied in order and
    all of them for a trainer that finished, and the dead were killed."""
    problems = []
    steps = records.log["steps"]
    for k, step in enumerate(steps):
        if step["index"] != k or step["version"] != k:
            problems.append(
                f"step {k} ({step['trainer']} batch {step['batch']}) began at parameter version "
                f"{step['version']} but was applied at version {k}: steps overlapped"
            )
    for rank in world.ranks:
        if rank.name == PS_NAME:
            continue
        batches = [s["batch"] for s in steps if s["trainer"] == rank.name]
        if batches != list(range(len(batches))):
            problems.append(f"{rank.name}'s applied batches are out of order: {batches}")
        if rank.status == OK and len(batches) != config.batches:
            problems.append(f"{rank.name} finished but only {len(batches)} of {config.batches} batches were applied")
    killed = {r.name for r in world.ranks if r.status == KILLED}
    if set(records.log["dead"]) - killed:
        problems.append(f"the server reaped {sorted(set(records.log['dead']) - killed)}, which the plan did not kill")
    return problems


def server_killed_contract(world: WorldResult) -> Verdict:
    """A killed server: every trainer that failed raised fast, naming it."""
    kill_times = [fired.t for fired in world[PS_NAME].fired_faults() if fired.kind == "kill"]
    trainers = [r for r in world.ranks if r.name != PS_NAME]
    raised = [r for r in trainers if r.status == RAISED]
    problems = []
    if world.timed_out:
        problems.append(f"the world hung until its deadline of {world.deadline:g}s")
    problems += [r.describe() for r in trainers if r.failed and r.status != RAISED]
    if not raised:
        problems.append("no trainer reported the dead parameter server")
    problems += [f"{r.label} raised without naming {PS_NAME!r}: {r.error}"
                 for r in raised if PS_NAME not in (r.error or "")]
    raise_times = [e["t"] for r in raised for e in r.events if e.get("kind") == "raised"]
    details: dict[str, Any] = {}
    if kill_times and raise_times:
        latency = min(raise_times) - min(kill_times)
        details["attribution_s"] = latency
        if latency > min(ATTRIBUTION_BOUND, world.deadline / 4):
            problems.append(f"the first trainer named the dead server only {latency:.2f}s after the kill")
    elif raised:
        problems.append("the kill or the trainers' errors left no timestamps")
    if problems:
        return Verdict(False, "; ".join(problems) + "\n" + world.report(output_lines=10), details)
    return Verdict(True, f"server killed; {', '.join(r.name for r in raised)} failed fast naming {PS_NAME!r}",
                   details)


def compare(actual: Records, expected: BaselineRun, config: Config, seed: int) -> Comparison:
    """Step k's gradient (and loss) against the baseline's at version k,
    and the final parameters."""
    result = Comparison()
    steps = actual.log["steps"]
    device = str(actual.log.get("device", "cpu"))
    tolerance = tolerances(config.rtol, config.atol, device)
    # The baseline replays the run's own order, so both have as many steps;
    # a step only one side has is a mismatch of each of its tensors, not a crash.
    for index in range(max(len(steps), len(expected.steps))):
        step = steps[index] if index < len(steps) else None
        base = expected.steps[index] if index < len(expected.steps) else None
        trainer, batch, version = ((step["trainer"], step["batch"], step["version"]) if step is not None
                                   else (base.trainer, base.batch, base.version))
        where = f"{index} ({trainer} batch {batch}, parameter version {version})"
        got, want = (step["grads"] if step is not None else {}), (base.grads if base is not None else {})
        diff, bad = compare_tensors(got, want, scenario=NAME, step=where, rank=trainer, seed=seed, **tolerance)
        result.max_diff = max(result.max_diff, diff)
        result.checked += len(set(got) & set(want))
        result.expected += len(want)
        result.mismatches += bad
        if step is not None and base is not None and step["loss"] is not None:
            _, bad = compare_tensors({"loss": torch.tensor(step["loss"])}, {"loss": torch.tensor(base.loss)},
                                     scenario=NAME, step=where, rank=step["trainer"], seed=seed,
                                     what="loss", **tolerance)
            result.mismatches += bad
    diff, bad = compare_tensors(actual.log["final"], expected.final, scenario=NAME,
                                step=f"final (after {len(steps)} steps)", rank=PS_NAME, seed=seed,
                                what="parameter", **tolerance)
    result.max_diff = max(result.max_diff, diff)
    result.mismatches += bad
    result.details = {"order": actual.order, "dropped_steps": actual.log["dropped"], "reaped": actual.log["dead"],
                      "tolerance": {**tolerance, "device": device}}
    return result


def outcome(actual: Records, expected: BaselineRun, config: Config) -> Outcome:
    """Held-out accuracy above the bar, and every trainer measured the same."""
    accuracy = actual.log["accuracy"]
    steps = actual.log["steps"]
    notes = []
    judged = len(steps) >= config.min_accuracy_steps
    if judged and accuracy <= config.min_accuracy:
        notes.append(f"held-out accuracy {accuracy:.3f} is not above {config.min_accuracy:g} "
                     f"(chance 0.1) after {len(steps)} steps")
    measured = {name: value["accuracy"] for name, value in actual.trainers.items()}
    disagree = {name: acc for name, acc in measured.items() if abs(acc - accuracy) > 1e-9}
    if disagree:
        notes.append(f"trainers measured other accuracies than the server's {accuracy:.4f}: {disagree}")
    return Outcome(
        ok=not notes,
        note="; ".join(notes) or (
            f"accuracy {accuracy:.3f} > {config.min_accuracy:g} after {len(steps)} steps" if judged else
            f"accuracy {accuracy:.3f} after {len(steps)} steps, not judged: the bar of {config.min_accuracy:g} "
            f"holds from {config.min_accuracy_steps} steps"),
        metric=accuracy,
        steps=len(steps),
        history=[s["loss"] for s in steps],
        baseline_history=[s.loss for s in expected.steps],
        details={"baseline_accuracy": expected.accuracy, "trainer_accuracy": measured},
    )
