"""RPC helpers every scenario shares, written once.

- the tutorials' helpers: :func:`call_method` runs a method on the object
  an RRef owns, on its owner; :func:`remote_method` calls it from anywhere
  (``_async`` variants for methods that return a Future);
- one liveness rule (:func:`is_dead`, :class:`FailureDetector`): a peer is
  dead once it fails ``PING_ATTEMPTS`` pings in a row, whatever the failure
  (EOF, a refused connection, a timeout), with no sign of life from it in
  between. A live peer answers a ping from its RPC thread pool however busy
  its main thread is, so a timeout is evidence too -- counting it as "alive
  but busy" let a server wait forever on a dead trainer whose pings timed
  out instead of failing with EOF. And a call from the peer is proof of
  life -- on a loaded machine a live peer's pings can time out too;
- one line of error text: :func:`one_line`, and :func:`origin` for where a
  remote exception was first raised.
"""

from __future__ import annotations

import re
import threading
from typing import Any

import torch.distributed.rpc as rpc

# A live peer answers in milliseconds; on a 2-core machine under a load
# average of 50, live peers' pings timed out at 1 s three times in a row.
PING_TIMEOUT = 2.0
PING_ATTEMPTS = 3  # consecutive failures that make a peer dead


def call_method(method: Any, rref: rpc.RRef, *args: Any, **kwargs: Any) -> Any:
    """Run ``method`` on the object ``rref`` holds, on its owner."""
    return method(rref.local_value(), *args, **kwargs)


@rpc.functions.async_execution
def call_method_async(method: Any, rref: rpc.RRef, *args: Any, **kwargs: Any) -> Any:
    """Like :func:`call_method` for methods that return a Future: the owner
    answers when the future completes, holding none of its RPC threads meanwhile."""
    return method(rref.local_value(), *args, **kwargs)


def remote_method(method: Any, rref: rpc.RRef, *args: Any, **kwargs: Any) -> Any:
    """``method(obj, *args)`` on the owner of ``rref``; waits for the result."""
    return rpc.rpc_sync(rref.owner(), call_method, args=[method, rref, *args], kwargs=kwargs)


def remote_method_async(method: Any, rref: rpc.RRef, *args: Any, **kwargs: Any) -> Any:
    """:func:`remote_method` for a method that returns a Future."""
    return rpc.rpc_sync(rref.owner(), call_method_async, args=[method, rref, *args], kwargs=kwargs)


def ping() -> bool:
    """Answered by any live worker."""
    return True


def answers(peer: str, timeout: float = PING_TIMEOUT) -> bool:
    """Whether ``peer`` answers one ping within ``timeout`` seconds."""
    try:
        rpc.rpc_sync(peer, ping, timeout=timeout)
    except Exception:  # noqa: BLE001 - any failure to answer is a miss
        return False
    return True


def is_dead(peer: str, *, attempts: int = PING_ATTEMPTS, timeout: float = PING_TIMEOUT) -> bool:
    """Whether ``peer`` is gone: it missed ``attempts`` pings in a row.

    Takes milliseconds for a peer whose connection fails at once, and at
    most ``attempts * timeout`` seconds for one that no longer answers at all.
    """
    return not any(answers(peer, timeout) for _ in range(attempts))


class FailureDetector:
    """The liveness rule for a peer watched over time (a server watching its
    trainers): each :meth:`check` pings once; ``attempts`` failed pings in a
    row with no :meth:`heard_from` in between make the peer dead. Worst case
    from death to verdict: ``attempts`` checks of at most ``timeout`` each."""

    def __init__(self, *, attempts: int = PING_ATTEMPTS, timeout: float = PING_TIMEOUT) -> None:
        self.attempts = attempts
        self.timeout = timeout
        self._misses: dict[str, int] = {}
        self._lock = threading.Lock()

    def heard_from(self, peer: str) -> None:
        """``peer`` just called us: it is alive, whatever its pings said."""
        with self._lock:
            self._misses[peer] = 0

    def check(self, peer: str) -> bool:
        """Ping ``peer`` once; whether it is now dead by the rule."""
        ok = answers(peer, self.timeout)
        with self._lock:
            self._misses[peer] = 0 if ok else self._misses.get(peer, 0) + 1
            return self._misses[peer] >= self.attempts


def is_remote_exception(error: BaseException) -> bool:
    """Whether ``error`` was raised by the code a peer ran for us (torch tags
    such errors with the worker they came from) rather than by the transport."""
    return "On WorkerInfo(" in str(error)


def one_line(error: BaseException) -> str:
    """``Type: first line of the message``."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


_REMOTE_HOP_RE = re.compile(r"On WorkerInfo\(id=\d+, name=([^)]+)\):(?:\n|\\n)")


def origin(error: BaseException) -> str:
    """Where a remote exception was first raised, and what it was: torch nests
    each hop's message (escaped) in the next, so the last hop is the origin."""
    text = str(error)
    hops = list(_REMOTE_HOP_RE.finditer(text))
    if not hops:
        return f"{type(error).__name__}: {text.strip()}"
    what = re.split(r"\n|\\n", text[hops[-1].end():], maxsplit=1)[0].replace("\\'", "'")
    return f"{what} (raised on {hops[-1].group(1)})"
