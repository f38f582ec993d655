"""A rank's default process group: the one its world brings up (world
option ``process_group``), or the one a spawned program makes itself.

The world's group is made on the world's own store, the FileStore in its
private folder that the RPC rendezvous also uses, under a prefix of its
own: no ``MASTER_PORT``, no second rendezvous, nothing a parallel world can
collide with. A rank makes it after the store and before its RPC agent,
which is the order torch's DDP-with-RPC tutorial uses.

A spawned program calls ``dist.init_process_group`` itself. :func:`install`
routes that call through the rank's lifecycle (installed in the forkserver,
before any module binds the name, as ``_lifecycle`` does for ``init_rpc``),
which counts the rank as joined once it returns. Where the call leaves the
rendezvous to the environment (``env://``, the default: ``MASTER_ADDR`` and
``MASTER_PORT``, which torch's DDP tutorial hard-codes to 12355) the world's
store serves it instead, so two such worlds at once cannot meet on one
port; a program's own ``store`` or ``init_method`` is kept as given.
Outside a rank, ``init_process_group`` is torch's own.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

PREFIX = "rpc_harness/c10d"  # the world's group's keys in the world's store
ENV = "env://"  # what init_process_group uses when given neither store nor init_method

_original_init: Callable[..., Any] | None = None
# The rank's lifecycle while it runs (``_lifecycle.Lifecycle.program_group``).
_route: Callable[[inspect.BoundArguments], Any] | None = None


def world_store(store_path: str) -> Any:
    """The world's store as a group sees it: the world's FileStore, keys
    under :data:`PREFIX`. ``-1`` workers: the file is the world's, removed
    with its folder; torch's count of users would remove it under the RPC
    agent's feet when a group is destroyed."""
    return dist.PrefixStore(PREFIX, dist.FileStore(store_path, -1))


def bring_up(backend: str, store: Any, rank: int, world_size: int, device: Any = None) -> Any:
    """Make the default process group of ``backend`` on ``store`` (the
    world's: :func:`world_store`, or torchrun's under its runner) and return
    it. ``device`` (nccl): the rank's GPU, bound at once so that the
    communicator forms here rather than at the first collective."""
    assert _original_init is not None, "install() first"
    extra = {"device_id": device} if backend == "nccl" else {}
    _original_init(backend, store=store, rank=rank, world_size=world_size, **extra)
    return c10d.GroupMember.WORLD


def tear_down(*, graceful: bool) -> None:
    """Destroy the default group, if there is one: only when no peer died
    (``graceful``). After a death, a group's destruction can wait on work
    with the dead peer; the rank is about to exit (``os._exit``) anyway."""
    if graceful and dist.is_initialized():
        dist.destroy_process_group()


def backend() -> str:
    """The default group's backend, as torch names it (``gloo``, ``nccl``, ``cpu:gloo,cuda:nccl``)."""
    return str(dist.get_backend())


def uses_environment(call: inspect.BoundArguments) -> bool:
    """Whether a program's ``init_process_group`` call leaves the rendezvous
    to ``MASTER_ADDR``/``MASTER_PORT`` (``env://``, torch's default)."""
    arguments = call.arguments
    return arguments.get("store") is None and arguments.get("init_method") in (None, ENV)


def call_original(call: inspect.BoundArguments) -> Any:
    """torch's own ``init_process_group`` with a (possibly changed) call."""
    assert _original_init is not None
    return _original_init(*call.args, **call.kwargs)


def route(handler: Callable[[inspect.BoundArguments], Any] | None) -> None:
    """Send this process's ``init_process_group`` calls to ``handler`` (None: torch's own)."""
    global _route
    _route = handler


def install() -> None:
    """Wrap ``init_process_group`` in this process (idempotent)."""
    global _original_init
    if _original_init is not None:
        return
    original = _original_init = c10d.init_process_group
    signature = inspect.signature(original)

    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        if _route is None:
            return original(*args, **kwargs)
        return _route(signature.bind(*args, **kwargs))

    init_process_group.__doc__, init_process_group.__wrapped__ = original.__doc__, original  # type: ignore[attr-defined]
    init_process_group.__signature__ = signature  # type: ignore[attr-defined]
    c10d.init_process_group = init_process_group
    dist.init_process_group = init_process_group


def default_group() -> Any:
    """The default process group of this process (None: there is none)."""
    return c10d.GroupMember.WORLD if dist.is_initialized() else None
