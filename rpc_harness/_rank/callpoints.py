"""``call:package.module:Qualified.name`` failpoints: any importable function
or method becomes a failpoint in a rank, with no change to its code.

The target must be hit whichever module refers to it, including modules
that ran ``from package.module import func`` before the patch (a forkserver
preloads modules long before a rank exists), functions stored in registries
or bound methods, and functions that arrive by RPC (pickled by name, they
resolve to the same object). So a Python function is not replaced: the
function object stays and its ``__code__`` is swapped for a trampoline that
hits the failpoint and calls a private copy of the original. Every existing
reference runs the trampoline. Objects without ``__code__`` (builtins,
callable instances) fall back to replacing the attribute and re-pointing the
module-level names that still hold the old object.

Limits: a call already running is not affected; ``torch.jit.script`` of a
patched function compiles the original source (no hit); C code holding a
function pointer is not seen.
"""

from __future__ import annotations

import builtins
import functools
import importlib
import itertools
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

# The trampoline finds the dispatcher by name among the builtins: it must
# work with the target's own globals, and CPython will not let the swapped
# code carry more free variables (closure cells) than the original has.
_DISPATCH = "__rpc_harness_callpoint__"
_TARGETS: dict[int, tuple[str, Callable[[str], None], Callable[..., Any]]] = {}
_KEYS = itertools.count(1)
_LOCK = threading.Lock()
_PATCHED: dict[str, Callable[[], None]] = {}  # target -> undo


def _dispatch(key: int, args: tuple, kwargs: dict) -> Any:
    point, hit, original = _TARGETS[key]
    hit(point)
    return original(*args, **kwargs)


def resolve(target: str) -> tuple[Any, str, Any]:
    """``"pkg.mod:A.b"`` -> (owner object, attribute name, the raw attribute,
    as the owner's ``__dict__`` holds it for classes: staticmethods stay
    staticmethods). Raises ImportError or AttributeError saying which."""
    module_name, _, qualname = target.partition(":")
    owner: Any = importlib.import_module(module_name)
    parts = qualname.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part)
    name = parts[-1]
    if isinstance(owner, type) and name in owner.__dict__:
        return owner, name, owner.__dict__[name]
    return owner, name, getattr(owner, name)


def check_target(target: str) -> str | None:
    """Why ``target`` cannot be patched, or None if it can (for validating a
    plan before any process starts)."""
    try:
        _, _, raw = resolve(target)
    except ImportError as error:
        return f"cannot import {target.partition(':')[0]!r}: {error}"
    except AttributeError as error:
        return f"no such attribute: {error}"
    func = getattr(raw, "__func__", raw)
    return None if callable(func) else f"{type(raw).__name__} is not callable"


def patch(target: str, hit: Callable[[str], None]) -> None:
    """Make every call of ``target`` (``"pkg.mod:Qual.name"``) first run
    ``hit("call:" + target)``. Patching a target twice does nothing more."""
    point = f"call:{target}"
    with _LOCK:
        if target in _PATCHED:
            return
        owner, name, raw = resolve(target)
        func = getattr(raw, "__func__", raw)  # staticmethod, classmethod, bound method
        if isinstance(func, types.FunctionType):
            _PATCHED[target] = _swap_code(func, point, hit)
        elif callable(func):
            _PATCHED[target] = _replace(owner, name, raw, func, point, hit)
        else:
            raise TypeError(f"call:{target}: {type(raw).__name__} is not callable")


def undo(target: str) -> None:
    """Restore ``target`` as it was (tests, and a reused world's rank after each entry)."""
    with _LOCK:
        restore = _PATCHED.pop(target, None)
    if restore is not None:
        restore()


def _swap_code(func: types.FunctionType, point: str, hit: Callable[[str], None]) -> Callable[[], None]:
    key = next(_KEYS)
    original_code = func.__code__
    copy = types.FunctionType(func.__code__, func.__globals__, func.__name__, func.__defaults__, func.__closure__)
    copy.__kwdefaults__ = func.__kwdefaults__
    copy.__qualname__, copy.__module__, copy.__doc__ = func.__qualname__, func.__module__, func.__doc__
    copy.__dict__.update(func.__dict__)
    _TARGETS[key] = (point, hit, copy)
    func.__code__ = _trampoline(func, key)
    had_wrapped = "__wrapped__" in func.__dict__
    if not had_wrapped:
        func.__wrapped__ = copy  # type: ignore[attr-defined]  # inspect.signature() shows the real parameters

    def restore() -> None:
        func.__code__ = original_code
        if not had_wrapped:
            func.__dict__.pop("__wrapped__", None)
        _TARGETS.pop(key, None)

    return restore


def _trampoline(func: types.FunctionType, key: int) -> types.CodeType:
    """Code that calls the dispatcher with the arguments it got, compiled
    with exactly the free variables of ``func`` (referenced only in code that
    never runs, so empty cells -- a method's ``__class__`` -- are never read)."""
    free = func.__code__.co_freevars
    body = "    def trampoline(*args, **kwargs):\n"
    if free:
        body += f"        if False:\n            ({', '.join(free)},)\n"
    body += f"        return {_DISPATCH}({key}, args, kwargs)\n"
    source = "def outer():\n" + "".join(f"    {name} = None\n" for name in free) + body + "    return trampoline\n"
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<rpc-harness call:{func.__module__}:{func.__qualname__}>", "exec"), namespace)
    code = namespace["outer"]().__code__
    if sys.version_info >= (3, 11):  # co_qualname came with 3.11
        return code.replace(co_name=func.__code__.co_name, co_qualname=func.__code__.co_qualname)
    return code.replace(co_name=func.__code__.co_name)


def _replace(owner: Any, name: str, raw: Any, func: Any, point: str, hit: Callable[[str], None]) -> Callable[[], None]:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        hit(point)
        return func(*args, **kwargs)

    replacement: Any = wrapper
    if isinstance(raw, staticmethod):
        replacement = staticmethod(wrapper)
    elif isinstance(raw, classmethod):
        replacement = classmethod(wrapper)
    setattr(owner, name, replacement)
    rebind(func, wrapper)

    def restore() -> None:
        setattr(owner, name, raw)
        rebind(wrapper, func)

    return restore


def rebind(old: object, new: object) -> int:
    """Point every module-level name bound to ``old`` at ``new``; how many."""
    count = 0
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for key, value in list(namespace.items()):
            if value is old:
                namespace[key] = new
                count += 1
    return count


setattr(builtins, _DISPATCH, _dispatch)
