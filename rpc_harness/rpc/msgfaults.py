"""Counting what message faults did: how many sends each ``msgfail`` failed
and each ``msgdelay`` delayed, so that a message fault that never fired is
seen like any other, and the timeline shows when they did.

Message faults act inside torch's FaultyTensorPipeAgent, which exposes no
counts (its bindings, ``get_debug_info()`` and metrics say nothing). Two
honest sources instead, measured on torch 2.13:

- ``msgfail`` only applies to the four message types torch retries, and
  torch's retry path logs every failed try, ``Send try K failed``, at C++
  INFO level. INFO is off unless ``TORCH_CPP_LOG_LEVEL`` was set when torch
  loaded (long before a forkserver's ranks exist), but c10 reads its
  exported flag at each log call, so a rank with a ``msgfail`` turns it on
  before ``init_rpc`` and its captured stderr holds one line per failed
  send. The line does not name the message type, hence one ``msgfail`` per
  rank; a real send failure of a retried message reads the same.
- ``msgdelay`` is limited to the message types Python sends, and the agent
  sleeps before each such send. The harness's RPC hooks see every send
  Python makes and know its type by torch's rules (inside a
  ``dist_autograd`` context a call travels as ``FORWARD_AUTOGRAD_REQ``, which
  the agent does not delay). What is counted is the sends the plan delays.
"""

from __future__ import annotations

import ctypes
import datetime
import os
import re
import time
from collections.abc import Mapping
from typing import Any

# "[I1123 02:55:31.796198890 rpc_agent.cpp:217] Send try 1 failed"
_SEND_TRY_RE = re.compile(
    r"^\[I(?P<month>\d\d)(?P<day>\d\d) (?P<clock>\d\d:\d\d:\d\d)(?P<fraction>\.\d+)? [^\]]*\] "
    r"Send try (?P<try>\d+) failed$", re.M)


def enable_retry_log() -> None:
    """Make torch log each failed try of a retried message (C++ INFO level)
    in this process, torch being imported already."""
    import torch

    library = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libc10.so"))
    ctypes.c_int.in_dll(library, "FLAGS_caffe2_log_level").value = 0  # 0: INFO


def failed_sends(log: str, *, near: float | None = None) -> list[tuple[float, int]]:
    """``(time, try)`` of every failed try torch logged in ``log`` (a rank's
    captured output). The line carries month, day and clock time, local;
    the year is the one ``near`` (a time from the same world) falls in."""
    year = time.localtime(near if near is not None else time.time()).tm_year
    out = []
    for match in _SEND_TRY_RE.finditer(log):
        clock = datetime.datetime.strptime(
            f"{year}-{match['month']}-{match['day']} {match['clock']}", "%Y-%m-%d %H:%M:%S")
        seconds = float(match["fraction"] or 0.0)
        out.append((clock.timestamp() + seconds, int(match["try"])))
    return out


def _in_autograd_context() -> bool:
    import torch.distributed.autograd as dist_autograd

    try:
        dist_autograd._current_context()
    except RuntimeError:
        return False
    return True


def _requires_grad(value: Any) -> bool:
    import torch

    if isinstance(value, torch.Tensor):
        return value.requires_grad
    if isinstance(value, (list, tuple)):
        return any(_requires_grad(v) for v in value)
    if isinstance(value, Mapping):
        return any(_requires_grad(v) for v in value.values())
    return False


def send_type(api: str, func: Any, args: Any = None, kwargs: Any = None) -> str:
    """The message type torch's agent sees for one ``rpc_sync``, ``rpc_async``
    or ``remote`` issued from this thread now."""
    import torch
    from torch.distributed.rpc import api as rpc_api

    script = isinstance(func, torch.jit.ScriptFunction) or isinstance(
        getattr(func, "_wrapped_async_rpc_function", None), torch.jit.ScriptFunction)
    builtin = torch.jit._builtins._find_builtin(func) is not None
    kind = "SCRIPT" if script or builtin else "PYTHON"
    if _in_autograd_context() and (not builtin or _requires_grad(args) or _requires_grad(kwargs)):
        # Python calls, remote() and TorchScript always record for autograd
        # inside a context; a builtin only when a tensor argument needs it.
        return "FORWARD_AUTOGRAD_REQ"
    if rpc_api._get_should_profile():
        return "RUN_WITH_PROFILING_REQ"
    return f"{kind}_REMOTE_CALL" if api == "remote" else f"{kind}_CALL"


def fetch_type(scripted: bool) -> str:
    """The message type of a ``to_here()`` on a user RRef."""
    if _in_autograd_context():
        return "FORWARD_AUTOGRAD_REQ"
    return "SCRIPT_RREF_FETCH_CALL" if scripted else "PYTHON_RREF_FETCH_CALL"
