"""Whether a reused world's rank is clean after an entry: the rules an
entry must keep so that the next entry finds the world as a fresh one would.

Runs in the rank (stdlib + torch), once every rank's entry has returned, on
the supervisor's word (``msg.Check``); in a world of collectives only, as
the rank's own entry returns (``msg.RunEntry.check``: no rank waits for
another's word in its look, the supervisor compares them). The rules read what torch itself
reports (measured on torch 2.13): ``rpc._rref_context_get_debug_info()``
gives ``num_owner_rrefs``, ``num_forks``, ``num_pending_users`` and
``num_pending_futures``; ``dist_autograd._get_debug_info()`` gives
``num_autograd_contexts`` and ``num_current_backward_passes``; the agent's
``get_debug_info()`` gives ``agent.client_active_calls`` (calls issued, not
answered) and ``agent.server_active_calls`` / ``server_active_async_calls``
(calls being served). A UserRRef shows in no count of its own rank: only
its owner's (an owner RRef with a fork). So a rank that must name the
RRefs it holds looks for them among live objects (``scan``; ~0.3 s, done
only once some rank found an RRef left).

Cross-rank bookkeeping is asynchronous: a UserRRef's delete reaches its
owner later, a dist_autograd context's release its peers later, an RPC
fired and forgotten may still be on its way. So the counts are read until
they settle. A check comes in two looks: a quick one (the young garbage
collected, ``QUICK_SETTLE`` seconds to settle), which a clean world passes
at its first read; and, where any rank found something, a thorough one in
every rank (all garbage collected, which takes tens of milliseconds in a
rank with torch loaded; ``SETTLE`` seconds; the RRefs named), whose
findings are the verdict.
"""

from __future__ import annotations

import gc
import sys
import threading
import time
import warnings
from typing import Any

# Each rule, as a report names it, and what it asks of an entry.
RULES = {
    "rrefs": "no RRef left: every RRef the entry made or was given is gone, on its owner and its users",
    "dist_autograd": "no dist_autograd context left open, no backward pass running",
    "futures": "no pending futures: every RPC the entry issued has its answer",
    "idle": "every rank idle: no RPC being served, no thread the entry started still running",
    # A collective world's (rpc_harness.c10d.clean):
    "work": "no pending work handle: every async_op collective the entry issued has completed",
    "sequence": "every rank at the same collective sequence number of the default group",
    "subgroups": "no subgroup the entry made still alive (dist.destroy_process_group(group) ends one)",
    "group": "the default group usable: a collective over it completes, with the right sum",
}
SETTLE = 2.0  # seconds the counts may take to settle before a rank is called dirty
QUICK_SETTLE = 0.2  # seconds the quick look waits for them


def threads_now() -> set[int]:
    """The Python threads alive now (before an entry: those not its own)."""
    return {thread.ident for thread in threading.enumerate() if thread.ident is not None}


def check(label: str, before: set[int], *, thorough: bool = False,
          collective: Any = None) -> tuple[tuple[str, ...], Any]:
    """What this rank (``label``: "rank 1 (worker1)") breaks of ``RULES``,
    one line per finding, each starting with its rule's name (none: clean),
    and its word on its default group (``c10d.sequence.GroupWord``; None
    in a world without one), which the supervisor compares with its
    peers'. ``before``: the threads alive before the entry ran.
    ``collective``: in a world with a default group, its groups as the
    entry began (``c10d.clean.Before``)."""
    # RRefs and futures held only by garbage cycles go now (the entry's
    # own are young; a thorough look collects every generation).
    gc.collect() if thorough else gc.collect(1)
    until = time.monotonic() + (SETTLE if thorough else QUICK_SETTLE)
    while True:
        found = _findings(before)
        if not found or time.monotonic() >= until:
            break
        time.sleep(0.005)
    word = None
    if collective is not None:
        from ..c10d import clean as c10d_clean

        more, word = c10d_clean.look(collective, thorough=thorough)
        found += more
    lines = [f"{rule}: {label} {text}" for rule, text in found]
    if thorough and _rpc_agent_set():  # no RRef without an agent: a scan of every object spared
        lines += [f"rrefs: {label} {text}" for text in held_rrefs()]
    return tuple(lines), word


def _rpc_agent_set() -> bool:
    import torch.distributed.rpc as rpc

    return bool(rpc.api._is_current_rpc_agent_set())


def _counts() -> dict[str, int]:
    import torch.distributed.autograd as dist_autograd
    import torch.distributed.rpc as rpc

    if not _rpc_agent_set():  # a world of collectives only
        return {}
    info: dict[str, Any] = dict(rpc._rref_context_get_debug_info())
    info.update(dist_autograd._get_debug_info())
    info.update(rpc.api._get_current_rpc_agent().get_debug_info())
    return {key: int(value) for key, value in info.items() if str(value).lstrip("-").isdigit()}


def _findings(before: set[int]) -> list[tuple[str, str]]:
    counts = _counts()
    found = []
    owners, forks = counts.get("num_owner_rrefs", 0), counts.get("num_forks", 0)
    pending_users = counts.get("num_pending_users", 0)
    if owners or forks:
        found.append(("rrefs", f"owns {owners} RRef(s) that {forks} user(s) elsewhere still hold "
                               f"(num_owner_rrefs={owners}, num_forks={forks})"))
    if pending_users:
        found.append(("rrefs", f"holds {pending_users} UserRRef(s) their owner has not confirmed yet "
                               f"(num_pending_users={pending_users})"))
    contexts, passes = counts.get("num_autograd_contexts", 0), counts.get("num_current_backward_passes", 0)
    if contexts or passes:
        found.append(("dist_autograd", f"has {contexts} dist_autograd context(s) open and {passes} backward "
                                       f"pass(es) running (num_autograd_contexts={contexts}): a "
                                       "dist_autograd.context() entered and never exited, here or by a peer "
                                       "that sent this rank work in it"))
    issued, fetches = counts.get("agent.client_active_calls", 0), counts.get("num_pending_futures", 0)
    if issued or fetches:
        found.append(("futures", f"waits for the answers of {issued} RPC(s) it issued and {fetches} RRef "
                                 f"fetch(es) (agent.client_active_calls={issued}, num_pending_futures={fetches}): "
                                 "a future the entry did not wait for"))
    serving = counts.get("agent.server_active_calls", 0) + counts.get("agent.server_active_async_calls", 0)
    if serving:
        found.append(("idle", f"is still serving {serving} RPC(s) (agent.server_active_calls and "
                              "server_active_async_calls)"))
    started = [thread for thread in threading.enumerate()
               if thread.ident not in before and not isinstance(thread, threading._DummyThread)]
    if started:
        names = ", ".join(repr(thread.name) for thread in started[:5])
        found.append(("idle", f"still runs {len(started)} thread(s) the entry started: {names}"))
    return found


def held_rrefs(limit: int = 5) -> list[str]:
    """The RRefs live objects of this rank still hold, each with where it
    is held (a module's global, or what holds it)."""
    from torch._C._distributed_rpc import PyRRef

    found: dict[int, tuple[Any, str]] = {}
    # Looking at every object touches deprecated ones too (torch.distributed's
    # reduce_op warns on its __class__): their warnings would go to the
    # rank's output, in every report of the world.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        places = _global_places()
        for holder in gc.get_objects():
            for ref in gc.get_referents(holder):
                if isinstance(ref, PyRRef) and id(ref) not in found:
                    found[id(ref)] = (ref, _place(holder, ref, places))
    lines = []
    for ref, place in list(found.values())[:limit]:
        kind = "owns" if ref.is_owner() else f"holds (owner {ref.owner_name()})"
        lines.append(f"still {kind} {ref}, held by {place}")
    if len(found) > limit:
        lines.append(f"and {len(found) - limit} more RRef(s)")
    return lines


def _global_places() -> dict[int, str]:
    """``id`` of every module's globals dict and of each global that is a
    container, to the name it is reached by."""
    places: dict[int, str] = {}
    for name, module in list(sys.modules.items()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        places[id(namespace)] = name
        for key, value in list(namespace.items()):
            if isinstance(value, (list, dict, set, tuple)) or hasattr(value, "__dict__"):
                places.setdefault(id(value), f"{name}.{key}")
    return places


def _place(holder: Any, ref: Any, places: dict[int, str]) -> str:
    where = places.get(id(holder))
    if isinstance(holder, dict) and where in sys.modules:  # a module's own global
        key = next((key for key, value in holder.items() if value is ref), "?")
        return f"the global {where}.{key}"
    if where is not None:
        return f"the global {where} (a {type(holder).__name__})"
    return f"a {type(holder).__name__} object"
