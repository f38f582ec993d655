"""The fault contract the collective scenarios share: what a world whose
plan kills a rank, or makes one raise, must look like.

A collective program does not survive a lost rank (every step needs every
rank), so the contract is about how the world ends, not about training on:
the rank the plan killed is the one that died, the fault fired, no survivor
hangs (each raises from its collective or is stopped by the harness, before
the deadline), and the verdict names the victim and says the kill was
planned, where it struck (``c10d.all_reduce #2``: the rank's second
all-reduce, when the plan aims at a collective) and, for a fault inside a
collective, in which training step (the scenario's step failpoint's hit
count, which a rank a fault is aimed at records before it dies). A planned ``raise`` is reported from the rank that raised: the
verdict names it and its step (and the rank that reported it, when its
error reached the world through an RPC that called it), and the peers
that failed after it are named as following it, not as causes.
"""

from __future__ import annotations

from typing import Any

from rpc_harness import WorldResult
from rpc_harness.result import KILLED, OK, RAISED, STOPPED
from rpc_harness.scenario import Verdict

# How a survivor of a planned failure may end: it finished, its collective
# raised (the peer's socket closed), or the harness stopped it.
SURVIVOR_ENDINGS = (OK, RAISED, STOPPED)


def planned(world: WorldResult, kind: str) -> list[Any]:
    """The faults of ``kind`` the plan holds."""
    return [fault for fault in world.faults.faults if fault.kind == kind]


def reporter(world: WorldResult, origin: Any) -> Any:
    """The rank that reported ``origin``'s planned raise: itself, when its
    own code raised, or a rank whose RPC to it raised the same error (the
    ddp_rpc master's call to a trainer); None when nobody did."""
    mark = f"(rank {origin.rank}, {origin.name})"  # how an InjectedFault names where it fired
    reported = [r for r in world.ranks if r.status == RAISED and "InjectedFault" in (r.error or "")
                and mark in (r.error or "") + (r.traceback or "")]
    return origin if origin in reported else (reported[0] if reported else None)


def first_line(error: str | None) -> str:
    """An error's first line, cut at 160 characters, for a rank that raised
    with no error text too (``splitlines()[0]`` of its "" raised IndexError)."""
    return (error or "(no error text)").partition("\n")[0][:160]


def ending(rank: Any) -> list[Any]:
    """The kills and raises that fired in ``rank``: what ended it (a delay
    that fired before them ends nothing, and does not make it the first)."""
    return [fired for fired in rank.fired_faults() if fired.kind in ("kill", "raise")]


def collective_contract(world: WorldResult, step: str | None = None) -> Verdict:
    """The contract of a collective world under its plan (module docstring).
    ``step``: the scenario's failpoint at the top of each training step;
    where the fault struck elsewhere (inside a collective), the note says
    in which step, by that failpoint's hit count in the rank."""
    kills, raises = planned(world, "kill"), planned(world, "raise")
    if world.timed_out:
        return Verdict(False, f"the world hung until its deadline of {world.deadline:g}s\n"
                       + world.report(output_lines=10))
    if not kills and not raises:
        if world.failures:
            return Verdict(False, "; ".join(r.describe() for r in world.failures) + "\n"
                           + world.report(output_lines=10))
        return Verdict(True, f"all {world.world_size} ranks finished")
    fired = {(f.rank, f.kind): f for f in world.fired_faults()}
    origins = [r for r in world.ranks if r.status == KILLED or (r.rank, "raise") in fired]
    problems = []
    if not origins:
        problems.append(f"the planned {'kill' if kills else 'raise'} never ended a rank: "
                        + ", ".join(str(f) for f in kills + raises))
    for rank in world.ranks:
        if rank in origins:
            if rank.status == KILLED and (rank.rank, "kill") not in fired:
                problems.append(f"{rank.label} was killed but no kill of the plan fired in it")
            if rank.status != KILLED and reporter(world, rank) is None:
                problems.append(f"{rank.label}: its planned raise fired but no rank reported it: {rank.describe()}")
        elif rank.status not in SURVIVOR_ENDINGS:
            problems.append(rank.describe())
    if problems:
        return Verdict(False, "; ".join(problems) + "\n" + world.report(output_lines=10))
    first = min(origins, key=lambda r: min((f.t for f in ending(r)), default=float("inf")))
    how = "killed as planned" if first.status == KILLED else "raised as planned"
    where = ", ".join(f"{f.point} #{f.hit}" for f in ending(first))
    told = reporter(world, first) if first.status != KILLED else first
    after = [r for r in world.ranks if r is not first and r is not told and r.status == RAISED]
    note = f"{first.name} {how} at {where}"
    details = {"origin": first.name, "origin_status": first.status}
    during = first.hits.get(step) if step is not None else None
    if during and not where.startswith(f"{step} #"):
        details["during"] = f"{step} #{during}"
        note += f", during {step} #{during}"
    if told is not None and told is not first:
        note += f" (reported by {told.name}, which called it)"
    if after:
        note += "; after it, " + "; ".join(f"{r.name} raised {first_line(r.error)}"
                                           for r in after)
    stopped = [r.name for r in world.ranks if r.status == STOPPED]
    if stopped:
        note += f"; {', '.join(stopped)} stopped by the harness"
    return Verdict(True, note, details)
