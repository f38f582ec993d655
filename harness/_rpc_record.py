"""Record the RPCs a rank issues, for its timeline (inside a rank only).

``install`` wraps ``rpc_sync``, ``rpc_async`` and ``remote`` in the
``torch.distributed.rpc`` namespace, so code that calls ``rpc.rpc_async(...)``
(or imports the names after the rank started) writes an ``rpc_begin`` event
when it issues a call and an ``rpc_end`` event when the call completes. An
RPC still open when the rank died shows as begun and never ended: what the
rank was waiting on.

Kept cheap on purpose: two event writes per call (a few microseconds against
an RPC's hundreds), nothing at all after ``cap`` calls. What torch sends
from C++ (RRef bookkeeping, distributed autograd's backward pass) is not
seen; its Python callers of the API (``DistributedOptimizer``) are.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from .context import EventLog

DEFAULT_CAP = 2000  # RPCs recorded per rank; a long run's timeline stays readable


def install(events: EventLog, names: Sequence[str], rank: int, cap: int = DEFAULT_CAP) -> None:
    """Wrap the RPC API of this process so that every call is recorded."""
    import torch.distributed.rpc as rpc

    recorder = _Recorder(events, tuple(names), cap, rank)
    for api in ("rpc_sync", "rpc_async", "remote"):
        original = getattr(rpc, api)
        if getattr(original, "_rpc_harness_recorded", False):
            continue  # installed already (a torchrun rank calls install once, but be safe)
        wrapper = recorder.wrap(api, original)
        setattr(rpc, api, wrapper)


class _Recorder:
    def __init__(self, events: EventLog, names: tuple[str, ...], cap: int, rank: int = 0) -> None:
        self.events = events
        self.names = names
        self.cap = cap
        self.ids = itertools.count(1)
        self.lock = threading.Lock()
        self.capped = False
        self.rank = rank
        self.tails: dict[tuple[str, str, str], str] = {}

    def wrap(self, api: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def recorded(to: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
            call = self._begin(api, to, func, kwargs.get("args", args[0] if args else None))
            if call is None:
                return original(to, func, *args, **kwargs)
            try:
                value = original(to, func, *args, **kwargs)
            except BaseException as error:
                self._end(call, error)
                raise
            if api == "rpc_async":
                value.add_done_callback(lambda future: self._end(call, _error_of(future)))
            elif api == "remote":
                # The RRef is usable at once; its creation completes later.
                try:
                    value._get_future().add_done_callback(lambda future: self._end(call, _error_of(future)))
                except Exception:  # noqa: BLE001 - a torch without it: record issue time only
                    self._end(call, None)
            else:
                self._end(call, None)
            return value

        recorded._rpc_harness_recorded = True  # type: ignore[attr-defined]
        recorded.__wrapped__ = original  # type: ignore[attr-defined]
        recorded.__doc__ = original.__doc__
        recorded.__name__ = original.__name__
        return recorded

    def _begin(self, api: str, to: Any, func: Any, args: Any) -> int | None:
        with self.lock:
            call = next(self.ids)
            if call > self.cap:
                if not self.capped:
                    self.capped = True
                    self.events.write("event", name=f"rpc recording stopped after {self.cap} calls")
                return None
        # Encoded by hand: json.dumps of a dict per event is most of the cost.
        key = (api, self._peer(to), _describe(func, args))
        tail = self.tails.get(key)
        if tail is None:
            tail = self.tails[key] = (
                f', "api": {json.dumps(key[0])}, "to": {json.dumps(key[1])}, "func": {json.dumps(key[2])}}}\n'
            )
        self.events.append(
            f'{{"t": {time.time()!r}, "rank": {self.rank}, "tid": {threading.get_ident()}, '
            f'"kind": "rpc_begin", "id": {call}{tail}'.encode()
        )
        return call

    def _end(self, call: int, error: BaseException | None) -> None:
        try:
            if error is None:
                self.events.append(
                    f'{{"t": {time.time()!r}, "rank": {self.rank}, "tid": {threading.get_ident()}, '
                    f'"kind": "rpc_end", "id": {call}}}\n'.encode()
                )
            else:
                self.events.write("rpc_end", id=call, error=f"{type(error).__name__}: {str(error)[:200]}")
        except Exception:  # noqa: BLE001 - never fail an RPC (or a torch callback) for a record
            pass

    def _peer(self, to: Any) -> str:
        if isinstance(to, str):
            return to
        if isinstance(to, int) and 0 <= to < len(self.names):
            return self.names[to]
        return str(getattr(to, "name", to))


def _describe(func: Any, args: Any) -> str:
    if type(func).__name__ == "ScriptFunction":  # TorchScript: its own name, not the class's
        name = str(getattr(func, "name", "script function"))
    else:
        name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)
    # Helpers like the tutorials' ``_call_method(method, rref, ...)`` say
    # little by themselves; the method they call is what a reader wants.
    if isinstance(args, (tuple, list)) and args and callable(args[0]) and hasattr(args[0], "__qualname__"):
        name += f"({args[0].__qualname__})"
    return name


def _error_of(future: Any) -> BaseException | None:
    try:
        future.wait()
    except BaseException as error:  # noqa: BLE001 - the failure is the record
        return error
    return None
