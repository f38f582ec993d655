"""A pytest plugin that names each test that changed process-wide state and
did not put it back: environment variables, the working directory,
``sys.path``, torch's numerics and threads, the torch and RPC functions tests
fake, signal handlers. Such a test passes alone and breaks, or hides, the
tests its xdist worker runs after it (found so: a test that left
TP_SOCKET_IFNAME in its worker; on a CUDA machine, tests that left torch
deterministic and without TF32).

    PYTHONPATH=tools pytest -p state_leaks [pytest args]   # -n 2 works too

Writes one block per leaking test to ``STATE_LEAKS_LOG`` (default
``state-leaks.log`` in the current folder) and says how many at the end.
Changes torch or its dependencies make to themselves on first use, and the
harness's own hand-over to its forkserver, are not counted (``IGNORED``).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import pytest

# Not a test's doing: torch._dynamo wraps torch.manual_seed and sets the
# inductor cache on first import; gymnasium imports pygame, which sets its
# prompt variable; the launcher hands its forkserver settings through the
# environment (rpc_harness._parent.launcher.PRELOAD_ENV) before each world.
IGNORED = {"env TORCHINDUCTOR_CACHE_DIR", "env PYGAME_HIDE_SUPPORT_PROMPT", "env _RPC_HARNESS_FORKSERVER",
           "torch.manual_seed", "env PYTEST_CURRENT_TEST"}


def _functions() -> dict[str, Any]:
    import torch
    import torch.distributed.rpc as rpc

    owners = {"torch": (torch, ["manual_seed", "use_deterministic_algorithms"]),
              "torch.cuda": (torch.cuda, ["_lazy_init", "is_available", "device_count", "_is_in_bad_fork",
                                          "is_initialized", "set_device", "manual_seed", "manual_seed_all"]),
              "torch._C": (torch._C, ["_cuda_getDeviceCount"]),
              "rpc": (rpc, ["init_rpc", "shutdown", "rpc_sync", "rpc_async", "remote"])}
    return {f"{label}.{name}": getattr(owner, name, None) for label, (owner, names) in owners.items() for name in names}


def snapshot() -> dict[str, Any]:
    import torch

    state: dict[str, Any] = {f"env {name}": value for name, value in os.environ.items()}
    state["cwd"] = os.getcwd()
    state["sys.path"] = list(sys.path)
    state["deterministic algorithms"] = (torch.are_deterministic_algorithms_enabled(),
                                         torch.is_deterministic_algorithms_warn_only_enabled())
    state["cudnn and tf32 flags"] = (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark,
                                     torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    state["default dtype"] = torch.get_default_dtype()
    state["intra-op threads"] = torch.get_num_threads()
    state["grad mode"] = torch.is_grad_enabled()
    state.update(_functions())
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGCHLD):
        state[f"handler of {sig.name}"] = signal.getsignal(sig)
    return state


def changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    return [f"{key}: {before.get(key)!r} -> {after.get(key)!r}" for key in sorted(set(before) | set(after))
            if key not in IGNORED and before.get(key) != after.get(key)]


_leaks = 0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    global _leaks
    before = snapshot()
    yield
    found = changes(before, snapshot())
    if found:
        _leaks += 1
        with open(os.environ.get("STATE_LEAKS_LOG", "state-leaks.log"), "a") as log:
            log.write(f"=== {item.nodeid}\n" + "".join(f"    {line}\n" for line in found))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not hasattr(terminalreporter.config, "workerinput"):
        where = os.environ.get("STATE_LEAKS_LOG", "state-leaks.log")
        terminalreporter.write_line(f"state_leaks: see {where} for the tests that left state changed "
                                    f"({_leaks} in this process; under xdist each worker appends its own)")
