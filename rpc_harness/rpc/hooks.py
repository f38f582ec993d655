"""The RPCs a rank issues and serves: named, recorded for its timeline, turned
into failpoints (``rpc.call:NAME``, ``rpc.serve:NAME``) and counted for
``msgdelay`` faults. Inside a rank only.

Where torch lets Python see an RPC, measured on torch 2.13:

- Issued: ``torch.distributed.rpc.api.rpc_sync``, ``rpc_async`` and
  ``remote``. RRef proxies (``rref.rpc_sync().method(...)``) reach them
  through references torch's C++ takes when RPC starts, so the wrappers must
  be in place before ``init_rpc``; ``rref_proxy`` keeps its own reference to
  ``rpc_async`` and compares against it, so that one is replaced too. A
  proxy's call is named by its RRef's type, which torch fetches first
  (``PyRRef._get_type``, wrapped to keep every fetch: first calls made at
  once each start one, and the RRef caches only one of them).
- Served: ``torch.distributed.rpc.internal._run_function`` runs every Python
  function a peer asks for (calls, ``remote`` constructions, proxies,
  ``@async_execution`` functions), also captured by C++ at ``init_rpc``. An
  exception a failpoint raises there reaches the caller as the function's
  own would. TorchScript functions, ``to_here()``, RRef bookkeeping and the
  distributed backward pass run in C++ and are not seen.

:func:`install` wraps all of them once per process, in the forkserver
before any module binds the API by name (``from torch.distributed.rpc
import rpc_sync``); the wrappers do nothing until :func:`start` gives the
rank's context. A failpoint's NAME is the called function's qualified
name; for the tutorials' ``call_method(method, rref, ...)`` helpers also the
method's (``Observer.run_episode``); for an RRef proxy ``Type.method``.
"""

from __future__ import annotations

import functools
import itertools
import json
import threading
import time
import types
from collections.abc import Callable
from typing import Any

from .. import _messages as _msg
from .._rank import gate as _gate
from ..context import EventLog, RankContext
from . import msgfaults as _msgfaults

DEFAULT_CAP = 2000  # calls (and serves) recorded per rank; a long run's timeline stays readable
_APIS = ("rpc_sync", "rpc_async", "remote")
_MARK = "_rpc_harness_hook"

_watch: _Watch | None = None  # this rank's, once start() ran
_originals: dict[str, Callable[..., Any]] = {}  # torch's rpc_sync, rpc_async, remote
# The types of the objects this rank's remote(to, SomeClass) calls made, by RRef.
_remote_types: dict[str, type] = {}
# The type fetches this rank's RRefs started, by RRef. Proxies' first calls
# made at once each start one, and torch caches whichever ends its call last:
# a call whose own fetch is done may find the cached one still under way.
_type_fetches: dict[str, list[Any]] = {}
_type_fetches_lock = threading.Lock()
# Set on a thread serving a proxy method sent as the function: the owner's
# call to itself inside it is torch's plumbing, not an RPC the program issued.
_serving_proxy_method = threading.local()


def install() -> None:
    """Wrap torch's RPC entry points in this process (idempotent)."""
    import torch
    import torch.distributed.rpc as rpc
    from torch.distributed.rpc import api, internal, rref_proxy

    for name in _APIS:
        original = getattr(api, name)
        if getattr(original, _MARK, False):
            continue
        _originals[name] = original
        wrapper = _call_wrapper(name, original)
        setattr(api, name, wrapper)  # what C++ hands RRef proxies, and api.py's own callers use
        setattr(rpc, name, wrapper)  # what rpc.rpc_sync(...) callers use
    rref_proxy.rpc_async = api.rpc_async  # its `rpc_api is not rpc_async` test must see ours
    if not getattr(internal._run_function, _MARK, False):
        internal._run_function = _serve_wrapper(internal._run_function)
    to_here = torch._C._distributed_rpc.PyRRef.to_here
    if not getattr(to_here, _MARK, False):
        torch._C._distributed_rpc.PyRRef.to_here = _fetch_wrapper(to_here)
    local_value = torch._C._distributed_rpc.PyRRef.local_value
    if not getattr(local_value, _MARK, False):
        torch._C._distributed_rpc.PyRRef.local_value = _local_value_wrapper(local_value)
    get_type = torch._C._distributed_rpc.PyRRef._get_type
    if not getattr(get_type, _MARK, False):
        torch._C._distributed_rpc.PyRRef._get_type = _type_wrapper(get_type)
    _gate.install()


def start(ctx: RankContext, events: EventLog, cap: int = DEFAULT_CAP) -> None:
    """Begin naming, recording and failing this rank's RPCs."""
    global _watch
    _watch = _Watch(ctx, events, cap)


# -- naming ---------------------------------------------------------------------------


def rpc_names(func: Any, args: Any, *, serving: bool) -> tuple[str, ...]:
    """The failpoint names of one RPC (see the module docstring)."""
    from torch.distributed.rpc import rref_proxy

    args = args or ()
    if isinstance(func, _gate.Tagged):
        func = func.func
    if func is rref_proxy._local_invoke or func is rref_proxy._local_invoke_async_execution:
        rref, method = args[0], args[1]
        owner_type = type(rref.local_value()) if serving else _rref_type(rref)
        return (f"{getattr(owner_type, '__qualname__', 'RRef')}.{method}",)
    if is_proxy_method(func):
        rref, method = func.args[0], func.args[2]
        owner_type = type(rref.local_value()) if rref.is_owner() else _known_type(rref)
        return (f"{getattr(owner_type, '__qualname__', 'RRef')}.{method}",)
    name = function_name(func)
    if len(args) >= 2 and isinstance(args[0], (types.FunctionType, types.MethodType)) and _is_rref(args[1]):
        return (name, args[0].__qualname__)
    return (name,)


def is_proxy_method(func: Any) -> bool:
    """Whether ``func`` is an RRef proxy's method sent as the function itself,
    ``rpc_async(owner, rref.rpc_sync().run_episode)`` (as the RL tutorial's
    agent starts its episodes): ``functools.partial(_invoke_rpc, rref,
    rpc_api, method_name, timeout)``, which the owner runs by calling itself."""
    from torch.distributed.rpc import rref_proxy

    return isinstance(func, functools.partial) and func.func is rref_proxy._invoke_rpc and len(func.args) >= 3


def _known_type(rref: Any) -> Any:
    """The type of the object a user RRef points at: known when this rank
    made it with ``remote(to, SomeClass)``, or cached by torch; otherwise
    asked of its owner (one internal RPC, whose answer torch caches)."""
    found = _remote_types.get(str(rref)) or _rref_type(rref)
    return found if found is not None else rref._get_type()


def function_name(func: Any) -> str:
    """A function's qualified name; a TorchScript function's own name; never
    a repr holding an address, which no plan could aim at."""
    import torch

    script = func if isinstance(func, torch.jit.ScriptFunction) else getattr(func, "_wrapped_async_rpc_function", None)
    if isinstance(script, torch.jit.ScriptFunction):
        return str(script.name)
    if isinstance(func, functools.partial):
        return function_name(func.func)
    return getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or type(func).__qualname__


def describe(names: tuple[str, ...]) -> str:
    """How a timeline names an RPC: ``call_method(Observer.run_episode)``."""
    return f"{names[0]}({names[1]})" if len(names) > 1 else names[0]


def is_internal(func: Any) -> bool:
    """torch's own RPCs: init_rpc's and shutdown's all-gathers, RRef type queries."""
    from torch.distributed.rpc import rref_proxy

    module = getattr(func, "__module__", None) or ""
    return module.startswith("torch.distributed.rpc") and func not in (
        rref_proxy._local_invoke, rref_proxy._local_invoke_async_execution)


def _is_rref(value: Any) -> bool:
    import torch

    return isinstance(value, torch._C._distributed_rpc.PyRRef)


def _rref_type(rref: Any) -> Any:
    # When a proxy's call is issued torch has fetched the type already: no
    # RPC here. The RRef caches one fetch, not necessarily the call's own
    # (see _type_fetches), so any fetch that is done answers.
    # (Waits on done fetches, never scheduling points: whether one is done
    # yet is the clock's business, and a name must not add a step.)
    found = rref._get_type(blocking=False)
    if isinstance(found, type):
        return found
    if found.done():
        return _gate.raw_wait(found)
    with _type_fetches_lock:
        fetches = list(_type_fetches.get(str(rref), ()))
    for fetch in fetches:
        if fetch.done() and _error_of(fetch) is None:
            return _gate.raw_wait(fetch)
    return None


# -- the wrappers ---------------------------------------------------------------------


def _call_wrapper(api_name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    from torch.distributed.rpc.constants import UNSET_RPC_TIMEOUT

    def wrapper(to: Any, func: Any, args: Any = None, kwargs: Any = None, timeout: float = UNSET_RPC_TIMEOUT) -> Any:
        watch = _watch
        if watch is None or is_internal(func):
            return original(to, func, args, kwargs, timeout)
        return watch.call(api_name, original, to, func, args, kwargs, timeout)

    return _like(wrapper, original)


def _serve_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    def _run_function(python_udf: Any) -> Any:
        watch = _watch
        if watch is None or isinstance(python_udf, AttributeError):
            return original(python_udf)  # an AttributeError: torch reports an unpicklable call
        if is_internal(python_udf.func):
            with _gate.plumbing():
                return original(python_udf)
        return watch.serve(original, python_udf)

    return _like(_run_function, original)


def _fetch_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    def to_here(self: Any, timeout: float = -1.0) -> Any:
        watch = _watch
        if watch is not None and watch.delays and not self.is_owner():
            watch.count_send(_msgfaults.fetch_type(str(self) in watch.scripted_rrefs))
        _wait_for_rref(self, "to_here")
        return original(self, timeout)

    return _like(to_here, original)


def _type_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    from torch.distributed.rpc.constants import UNSET_RPC_TIMEOUT

    def _get_type(self: Any, timeout: float = UNSET_RPC_TIMEOUT, blocking: bool = True) -> Any:
        found = original(self, timeout, blocking)
        if not isinstance(found, type):  # a fetch: kept, since torch may cache another in its place
            _gate.track_type_fetch(found, self)
            with _type_fetches_lock:
                fetches = _type_fetches.setdefault(str(self), [])
                if not any(fetch is found for fetch in fetches):
                    fetches.append(found)
        return found

    return _like(_get_type, original)


def _local_value_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    def local_value(self: Any) -> Any:
        _wait_for_rref(self, "local_value")
        return original(self)

    return _like(local_value, original)


def _wait_for_rref(rref: Any, what: str) -> None:
    """Under a controlled schedule, an RRef whose value a task still has to
    make (its ``remote()`` call's handler) is waited for through the scheduler."""
    gate = _gate._gate
    if gate is None:
        return
    if _gate.current_task() is None:
        follower = _gate.current_follower()
        if follower is not None and not rref.is_owner() and not rref._get_future().done():
            # Its remote()'s handler is a task, which cannot run until this callback returns.
            gate.unscheduled(f"{follower}, a callback of the program's on an answer, waits for an RRef ({what}) "
                             f"that a task has still to make: a callback runs between steps, so no task can run "
                             f"for what it waits for")
        return
    # Whether the value is there cannot be asked of an owner's RRef (torch has
    # no creation future for it): the scheduler knows which calls make RRefs.
    gate.block(("rref", _gate.rref_id(rref)), what)


def _like(wrapper: Callable[..., Any], original: Callable[..., Any]) -> Callable[..., Any]:
    for attr in ("__name__", "__qualname__", "__module__", "__doc__"):
        setattr(wrapper, attr, getattr(original, attr, None))
    wrapper.__wrapped__ = original  # type: ignore[attr-defined]  # the bench times torch's own call
    setattr(wrapper, _MARK, True)
    return wrapper


class _Watch:
    """One rank's RPCs: failpoints at each, spans on its timeline, counted
    sends for its msgdelay faults."""

    def __init__(self, ctx: RankContext, events: EventLog, cap: int) -> None:
        self.ctx = ctx
        self.calls = _Spans(events, ctx.rank, "rpc", cap)
        self.serves = _Spans(events, ctx.rank, "serve", cap)
        self.events = events
        self.scripted_rrefs: set[str] = set()  # RRefs this rank made by remote() of TorchScript
        self._lock = threading.Lock()
        self._sends: dict[str, int] = {}

    @property
    def delays(self) -> dict[str, Any]:
        """This rank's msgdelay faults by message type (known once it has a name)."""
        if self.ctx.name is None:
            return {}
        return {f.point: f for f in self.ctx.faults.for_target(self.ctx.name) if f.kind == "msgdelay"}

    def call(self, api: str, original: Callable[..., Any], to: Any, func: Any, args: Any, kwargs: Any,
             timeout: float) -> Any:
        names = rpc_names(func, args, serving=False)
        task = _gate.current_task()
        follower = _gate.current_follower() if task is None else None
        gate = _gate._gate if task is not None or follower is not None else None
        if task is not None:  # a controlled task: issuing a call is a scheduling point
            gate.point(f"rpc.call:{names[-1]}")  # type: ignore[union-attr]
        elif follower is None and _gate.active():
            _gate._gate.unscheduled(  # type: ignore[union-attr]
                f"{api} of {describe(names)} to {self._peer(to)} was issued by thread "
                f"{threading.current_thread().name!r}, which is neither a task nor a callback on a controlled "
                f"call's answer: its handler runs free")
        if not getattr(_serving_proxy_method, "active", False):
            for name in names:
                self.ctx.failpoint(f"rpc.call:{name}")
        if self.delays:
            self.count_send(_msgfaults.send_type(api, func, args, kwargs))
        span = self.calls.begin(describe(names), api=api, to=self._peer(to))
        if gate is not None:
            return self._controlled(gate, api, to, func, args, kwargs, timeout, names, span)
        if span is None:
            value = original(to, func, args, kwargs, timeout)
        else:
            try:
                value = original(to, func, args, kwargs, timeout)
            except BaseException as error:
                self.calls.end(span, error)
                raise
            if api == "rpc_async":
                value.add_done_callback(lambda future: self.calls.end(span, _error_of(future)))
            elif api == "remote":  # the RRef is usable at once; its creation completes later
                value._get_future().add_done_callback(lambda future: self.calls.end(span, _error_of(future)))
            else:
                self.calls.end(span, None)
        if api == "remote" and isinstance(func, type):
            _remote_types[str(value)] = func
        if api == "remote" and self.delays and _msgfaults.send_type(api, func).startswith("SCRIPT"):
            self.scripted_rrefs.add(str(value))
        return value

    def _controlled(self, gate: _gate.Gate, api: str, to: Any, func: Any, args: Any, kwargs: Any, timeout: float,
                    names: tuple[str, ...], span: int | None) -> Any:
        """A call issued by a controlled task, or by a callback of the
        program's on a controlled call's answer: the function goes tagged
        with the call's id (a handler of a Python function is a task named
        after it); the scheduler hears of the call before it can be
        answered, and of its answer; rpc_sync waits through the gate."""
        call = gate.call_id()
        python = _is_python(func)
        sent = _gate.Tagged(call, func) if python else func
        issue = _originals["remote" if api == "remote" else "rpc_async"]
        add_callback = _gate._ORIGINAL["add_done_callback"]  # ours: not a callback of the program's
        # The call's timeout is the schedule's (rpc_sync's and rpc_async's):
        # torch is told it never expires (0), and the program gets a future
        # that takes its answer or, at the timeout on the schedule's clock,
        # torch's timeout error. (remote()'s stays torch's, on the real clock.)
        seconds = _timeout_seconds(timeout) if api != "remote" else None
        try:
            value = issue(to, sent, args, kwargs, 0 if seconds is not None else timeout)
        except BaseException as error:
            if span is not None:
                self.calls.end(span, error)
            raise
        future = value._get_future() if api == "remote" else value
        if seconds is not None:
            future = _gate.on_schedule_clock(future, call, seconds)
        rref = _gate.rref_id(value) if api == "remote" else None
        if span is not None:
            add_callback(future, lambda done: self.calls.end(span, _error_of(done)))
        _gate.track_call(future, call, names[-1], python)  # before the scheduler hears of the call: it may wait for it
        gate.issued(call, self._rank_of(to), python, rref, timeout=seconds)
        if api == "remote" and isinstance(func, type):
            _remote_types[str(value)] = func
        if api == "rpc_sync":
            return future.wait()
        return value if api == "remote" else future

    def _rank_of(self, to: Any) -> int:
        if isinstance(to, int):
            return to
        name = to if isinstance(to, str) else getattr(to, "name", str(to))
        return self.ctx.rank_of(name) if name in self.ctx.names else -1

    def serve(self, original: Callable[..., Any], python_udf: Any) -> Any:
        import torch
        from torch.distributed.rpc import internal

        func = python_udf.func
        call = func.call if isinstance(func, _gate.Tagged) else None
        gate = _gate._gate if call is not None and _gate.active() else None
        if isinstance(func, _gate.Tagged):
            func = func.func
        names = rpc_names(func, python_udf.args, serving=True)
        spans: list[int | None] = []

        def hooked(*args: Any, **kwargs: Any) -> Any:
            # Inside torch's own try/except: an exception a failpoint raises
            # here reaches the caller exactly as the function's own would.
            if gate is not None:  # a handler of a controlled call: a task, named after its call
                caller = call.rsplit("/", 1)[0]  # type: ignore[union-attr]
                gate.begin(call, f"serving {names[-1]} for {caller}", f"serve {names[-1]}", call=call)  # type: ignore[arg-type]
            spans.append(self.serves.begin(describe(names)))
            if is_proxy_method(func):
                # The method itself runs in torch's call of the owner to
                # itself, served (and failpointed) there like any proxy call.
                _serving_proxy_method.active = True
                try:
                    return func(*args, **kwargs)
                finally:
                    _serving_proxy_method.active = False
            for name in names:
                self.ctx.failpoint(f"rpc.serve:{name}")
            return func(*args, **kwargs)

        result = original(internal.PythonUDF(hooked, python_udf.args, python_udf.kwargs))
        if gate is not None:
            # (torch._C.Future: an @async_execution function may return
            # rpc_async's own future, or a then() of it, not only a
            # torch.futures.Future it made)
            later = isinstance(result, torch._C.Future) and not result.done()
            gate.end(responds_later=later, after=_gate.call_of(result) if later else None)
            if later:  # @async_execution: answered once its future completes
                _gate._ORIGINAL["add_done_callback"](result, lambda _: gate.send(_msg.Due(call)))  # type: ignore[arg-type]
        span = spans[0] if spans else None
        if span is not None:
            if isinstance(result, internal.RemoteException):
                self.serves.end(span, RuntimeError(result.msg.strip().splitlines()[-1] if result.msg else "raised"))
            elif isinstance(result, torch._C.Future):  # @async_execution: served once it completes
                # (ours, not the program's: under control not counted as a callback on an answer)
                _gate._ORIGINAL.get("add_done_callback", type(result).add_done_callback)(
                    result, lambda future: self.serves.end(span, _error_of(future)))
            else:
                self.serves.end(span, None)
        return result

    def count_send(self, message_type: str) -> None:
        fault = self.delays.get(message_type)
        if fault is None:
            return
        with self._lock:
            sent = self._sends[message_type] = self._sends.get(message_type, 0) + 1
        self.events.write("fault", fault=str(fault), fault_kind="msgdelay", point=message_type, hit=sent)

    def _peer(self, to: Any) -> str:
        names = self.ctx.names
        if isinstance(to, str):
            return to
        if isinstance(to, int) and 0 <= to < len(names):
            return names[to]
        return str(getattr(to, "name", to))


class _Spans:
    """Begin/end records of one kind of span (``rpc`` or ``serve``), up to
    ``cap`` of them; written by hand, since ``json.dumps`` of a dict per event
    was most of a recorded call's cost."""

    def __init__(self, events: EventLog, rank: int, kind: str, cap: int) -> None:
        self.events, self.rank, self.kind, self.cap = events, rank, kind, cap
        self.ids = itertools.count(1)
        self.lock = threading.Lock()
        self.capped = False
        self.tails: dict[tuple, str] = {}

    def begin(self, func: str, **fields: str) -> int | None:
        with self.lock:
            span = next(self.ids)
            if span > self.cap:
                if not self.capped:
                    self.capped = True
                    self.events.write("event", name=f"{self.kind} recording stopped after {self.cap} spans")
                return None
        key = (func, *fields.items())
        tail = self.tails.get(key)
        if tail is None:
            extra = "".join(f', {json.dumps(k)}: {json.dumps(v)}' for k, v in fields.items())
            tail = self.tails[key] = f'{extra}, "func": {json.dumps(func)}}}\n'
        self.events.append(
            f'{{"t": {time.time()!r}, "rank": {self.rank}, "tid": {threading.get_ident()}, '
            f'"kind": "{self.kind}_begin", "id": {span}{tail}'.encode()
        )
        return span

    def end(self, span: int, error: BaseException | None) -> None:
        try:
            if error is None:
                self.events.append(
                    f'{{"t": {time.time()!r}, "rank": {self.rank}, "tid": {threading.get_ident()}, '
                    f'"kind": "{self.kind}_end", "id": {span}}}\n'.encode()
                )
            else:
                self.events.write(f"{self.kind}_end", id=span, error=f"{type(error).__name__}: {str(error)[:200]}")
        except Exception:  # noqa: BLE001 - never fail an RPC (or a torch callback) for a record
            pass


def _timeout_seconds(timeout: float) -> float | None:
    """A call's timeout in seconds, the world's where the call set none
    (torch's UNSET, negative); None where it never expires (0)."""
    if timeout < 0:
        from torch.distributed.rpc.api import get_rpc_timeout

        timeout = get_rpc_timeout()
    return float(timeout) if timeout > 0 else None


def _is_python(func: Any) -> bool:
    """Whether a peer runs ``func`` as a Python function (not TorchScript, not a builtin op)."""
    import torch

    script = isinstance(func, torch.jit.ScriptFunction) or isinstance(
        getattr(func, "_wrapped_async_rpc_function", None), torch.jit.ScriptFunction)
    return not script and torch.jit._builtins._find_builtin(func) is None


def _error_of(future: Any) -> BaseException | None:
    try:
        _gate.raw_wait(future)
    except BaseException as error:  # noqa: BLE001 - the failure is the record
        return error
    return None
