"""Which faults of a plan fired, how often, and which never did.

A fault that never fires turns a test into one that tests nothing, so a
world whose plan has one fails (unless the fault is marked optional), and
the report names the fault and lists what its rank did reach, with hit
counts: the names to aim at instead. Failpoint faults are counted from the
``fault`` events their ranks wrote; ``msgdelay`` faults write one per send
they delay; ``msgfail`` faults are counted here, from the lines torch logged
for each failed send (see ``_msgfaults``), and become events too, so that
the timeline shows them.
"""

from __future__ import annotations

from collections import Counter

from ..events import FaultFired
from ..faults import TORCH_SEND_TRIES, Fault, FaultPlan
from ..result import CUT_SHORT, LOST, NEVER_FIRED, RankOutcome
from ..rpc import msgfaults as _msgfaults

SHOWN_HITS = 12  # failpoints listed for an unfired fault's rank


def add_message_failures(plan: FaultPlan, outcomes: list[RankOutcome]) -> None:
    """Turn each failed send torch logged in a ``msgfail`` target's output
    into a ``fault`` event of that rank: the tries the plan failed.

    ``msgfail=N`` fails tries 1..N of a message; a later try that fails was
    sent through torch's retry path untouched by the plan and failed for a
    reason of its own (its peer died, or had shut down while the retry,
    about a second after the first try, was still pending), so it is not
    the fault's doing and not counted. Torch logs those the same way."""
    by_name = {o.name: o for o in outcomes}
    for fault in plan:
        outcome = by_name.get(fault.target)
        if fault.kind != "msgfail" or outcome is None:
            continue
        near = next((e["t"] for e in outcome.events if "t" in e), None)
        failed = int(fault.arg or 1)  # type: ignore[arg-type]
        tries = [(t, attempt) for t, attempt in _msgfaults.failed_sends(outcome.output, near=near)
                 if attempt <= failed]
        for hit, (t, attempt) in enumerate(tries, start=1):
            outcome.events.append(FaultFired(t, outcome.rank, str(fault), fault.kind, fault.point, hit,
                                             attempt).as_event())
        outcome.events.sort(key=lambda e: e.get("t", 0.0))


def unfired(plan: FaultPlan, outcomes: list[RankOutcome]) -> list[str]:
    """One line for each fault that is not optional and never fired."""
    fired = Counter(f.fault for o in outcomes for f in o.fired_faults())
    by_name = {o.name: o for o in outcomes}
    return [_never_fired(f, by_name.get(f.target)) for f in plan if not f.optional and not fired[str(f)]]


def lost_messages(plan: FaultPlan, outcomes: list[RankOutcome]) -> list[str]:
    """One line for each ``msgfail`` that fails all of torch's tries of a
    message: every message whose first try it failed is lost, whether torch's
    retries (about a second apart) ran out before the world ended or were
    still pending when it did (they stop at shutdown, and log nothing more)."""
    out = []
    for fault in plan:
        if fault.kind != "msgfail" or int(fault.arg or 1) < TORCH_SEND_TRIES:  # type: ignore[arg-type]
            continue
        tries = _tries(fault, outcomes)
        touched, spent = tries.count(1), tries.count(TORCH_SEND_TRIES)
        if not touched:
            continue
        pending = f", {touched - spent} of them still in torch's retries when the world ended" if touched > spent else ""
        out.append(
            f"{fault} fails all {TORCH_SEND_TRIES} of torch's tries of a message: {touched} {LOST}{pending} "
            "(torch reports a lost RRef message only as a shutdown that waits ~100 s, a lost fork request by "
            "aborting its sender)"
        )
    return out


def cut_short(plan: FaultPlan, outcomes: list[RankOutcome]) -> list[str]:
    """One line for each ``msgfail=N`` (N from 2 to one short of torch's
    tries) that failed a message fewer than N times: torch retries a failed
    message on its own clock (about a second, then longer, between tries),
    so a world that ended first stopped the retries, and the message was
    never delivered. Each of its tries the plan did fail is logged, so this
    is certain. With N=1 it cannot be seen: the retry that would deliver the
    message logs nothing whether it ran or not."""
    out = []
    for fault in plan:
        wanted = int(fault.arg or 1) if fault.kind == "msgfail" else 0  # type: ignore[arg-type]
        if not 1 < wanted < TORCH_SEND_TRIES:
            continue
        tries = _tries(fault, outcomes)
        touched, failed_enough = tries.count(1), tries.count(wanted)
        if touched > failed_enough:
            out.append(
                f"{fault} failed {touched - failed_enough} of its {touched} message(s) fewer than {wanted} times, "
                f"{CUT_SHORT}: torch was still retrying them (about a second apart, then longer), so they were "
                "never delivered; keep the world running until the retries are done, or ask for fewer failed tries"
            )
    return out


def _tries(fault: Fault, outcomes: list[RankOutcome]) -> list[int | None]:
    """torch's try of each send ``fault`` (a ``msgfail``) failed, in any rank."""
    return [f.attempt for o in outcomes for f in o.fired_faults() if f.fault == str(fault)]


def _never_fired(fault: Fault, outcome: RankOutcome | None) -> str:
    head = f"fault {fault} {NEVER_FIRED}"
    if outcome is None:
        return f"{head}: no rank is called {fault.target!r}"
    if not fault.traits.at_failpoint:
        return (f"{head}: {fault.target} sent no {fault.point} message the plan could fail or delay "
                "(inside a dist_autograd context calls travel as FORWARD_AUTOGRAD_REQ); "
                "mark it optional with '?' if that is expected")
    hits = outcome.hits
    if not hits:
        reached = f"{fault.target} reached no failpoint"
    else:
        ranked = sorted(hits.items(), key=lambda item: (-item[1], item[0]))
        shown = ", ".join(f"{point} x{count}" for point, count in ranked[:SHOWN_HITS])
        more = f" and {len(ranked) - SHOWN_HITS} more" if len(ranked) > SHOWN_HITS else ""
        reached = f"{fault.target} reached {shown}{more}"
    where = ""
    if fault.point in hits and hits[fault.point] < fault.hit:
        where = f" (only {hits[fault.point]} hit(s) of {fault.point}, the fault waits for hit {fault.hit})"
    return f"{head}{where}: {reached}; mark it optional with '?' if the run may end first"
