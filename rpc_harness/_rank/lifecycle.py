"""A rank's way into the RPC world and out of it, whoever calls ``init_rpc``
and ``rpc.shutdown``: the harness (``run`` worlds) or the program itself
(``spawn`` worlds, written the tutorials' way).

Leaving is where a program on its own goes wrong: a graceful shutdown waits
for every peer, so after a planned kill it waits forever. So every rank
leaves through the supervisor: it says it is done, the supervisor answers
once every live rank is done, gracefully only when nobody died, and the rank
shuts down as told. :func:`install` puts ``torch.distributed.rpc.init_rpc``
and ``shutdown`` behind this in a process (the forkserver, before any module
binds them by name); outside a rank they are torch's own.

A spawned program's ``init_rpc`` keeps its name, options and timeouts; the
harness supplies what a world on one machine needs: its own rendezvous when
the call leaves the tutorials' default (``env://``), the backend its message
faults need, and checks that rank and world size are the ones it started.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import torch.distributed.rpc as rpc

from .. import _messages as msg
from ..c10d import group as c10d_group
from ..context import EventLog, RankContext
from ..rank_setup import rpc_backend, tensorpipe_options
from ..rpc import stores as _stores
from . import gate as _gate

DEFAULT_INIT_METHOD = "env://"  # what init_rpc uses when the program names none

_current: Lifecycle | None = None
_original_init: Callable[..., Any] | None = None
_original_shutdown: Callable[..., Any] | None = None


def install() -> None:
    """Route this process's ``init_rpc`` and ``shutdown`` through its rank's
    lifecycle (idempotent)."""
    global _original_init, _original_shutdown
    from torch.distributed.rpc import api

    if _original_init is not None:
        return
    _original_init, _original_shutdown = rpc.init_rpc, rpc.shutdown

    def init_rpc(name: str, backend: Any = None, rank: int = -1, world_size: int | None = None,
                 rpc_backend_options: Any = None) -> None:
        if _current is None:
            return _original_init(name, backend, rank, world_size, rpc_backend_options)
        return _current.program_init(name, backend, rank, world_size, rpc_backend_options)

    def shutdown(graceful: bool = True, timeout: float = 0) -> None:
        if _current is None:
            return _original_shutdown(graceful=graceful, timeout=timeout)
        return _current.leave(graceful=graceful, timeout=timeout)

    for wrapper, original in ((init_rpc, _original_init), (shutdown, _original_shutdown)):
        wrapper.__doc__, wrapper.__wrapped__ = original.__doc__, original  # type: ignore[attr-defined]
    rpc.init_rpc, rpc.shutdown, api.shutdown = init_rpc, shutdown, shutdown


def original_shutdown(graceful: bool) -> None:
    """torch's own ``rpc.shutdown`` (for a rank failing on its way out)."""
    assert _original_shutdown is not None
    _original_shutdown(graceful=graceful)


class Lifecycle:
    """One rank's joining and leaving, reported to its supervisor."""

    def __init__(self, *, ctx: RankContext, events: EventLog, send: Callable[[msg.ToSupervisor], None],
                 conn: Connection, init_method: str, rpc_timeout: float, spawned: bool,
                 program_timeout: float | None = None, process_group: str | None = None,
                 rpc: bool = True, given_names: tuple[str, ...] = ()) -> None:
        """``rpc_timeout`` is the world's; ``program_timeout`` the one the
        world was given explicitly (None: a spawned program keeps its own).
        ``process_group`` (a backend) and ``rpc``: what the harness brings
        up before the entry (a spawned program brings up its own).
        ``given_names``: the names a spawned world was started with (its
        ranks take them as they make their group; init_rpc must agree)."""
        global _current
        self.ctx, self.events, self.send, self.conn = ctx, events, send, conn
        self.init_method, self.rpc_timeout, self.spawned = init_method, rpc_timeout, spawned
        self.program_timeout = program_timeout
        self.process_group, self.rpc = process_group, rpc
        self.given_names = given_names if given_names and all(given_names) else ()
        self.phase = "starting"  # starting, entry, shutdown, exiting
        self.joined = False  # through init_rpc
        self.grouped = False  # through init_process_group (the world's, or a spawned program's own)
        self.made_group = False  # the default group is the world's: torn down here
        self.announced = False  # the supervisor was told this rank joined
        self.left = False
        self.reused = False  # a reused world's rank: its entries must leave RPC up for the next
        _current = self
        c10d_group.route(self.program_group)

    # -- joining ------------------------------------------------------------------------
    def join(self) -> None:
        """What the harness brings up for a ``run`` world's entry, in order:
        the default process group (world option ``process_group``), then
        the RPC agent (world option ``rpc``)."""
        self.join_group()
        if not self.rpc:
            self._announce(self.ctx.names)
            return
        assert _original_init is not None
        backend, options = rpc_backend(self.ctx, self.init_method, self.rpc_timeout)
        _original_init(self.ctx.name, backend=backend, rank=self.ctx.rank, world_size=self.ctx.world_size,
                       rpc_backend_options=options)
        self._joined(self.ctx.names)

    def join_group(self) -> None:
        """The world's default process group, on the world's store (none
        unless the world has ``process_group``); ``ctx.group`` then gives it."""
        if self.process_group is None:
            return
        self.phase = "group"
        self.events.write("group_start", backend=self.process_group)
        self.ctx.group = c10d_group.bring_up(self.process_group,
                                             c10d_group.world_store(self.init_method.removeprefix("file://")),
                                             self.ctx.rank, self.ctx.world_size, self.ctx.device)
        self.grouped = self.made_group = True
        self.events.write("group_done", backend=self.process_group)

    def program_group(self, call: Any) -> Any:
        """A program's own ``init_process_group`` (its arguments bound):
        torch's, with the world's store where the call leaves the rendezvous
        to ``env://``; the rank has then joined its world."""
        ctx = self.ctx
        if not self.spawned:  # an entry's own group: torch's call as it is (one default group a process)
            return c10d_group.call_original(call)
        if self.process_group is not None:
            raise RuntimeError(
                f"the world brought up the default process group already (process_group={self.process_group!r}): "
                "a spawned program that calls dist.init_process_group itself is spawned without process_group")
        rank, world_size = call.arguments.get("rank", -1), call.arguments.get("world_size", -1)
        if rank not in (-1, None, ctx.rank) or world_size not in (-1, None, ctx.world_size):
            # A group of some of the world's processes, numbered its own way
            # (the DDP + RPC tutorial's trainers, on a store of their own):
            # torch's call as it is; it is not the world's, and joins nothing.
            returned = c10d_group.call_original(call)
            ctx.group = c10d_group.default_group()
            return returned
        if c10d_group.uses_environment(call):
            call.arguments.pop("init_method", None)
            call.arguments.update(store=c10d_group.world_store(self.init_method.removeprefix("file://")),
                                  rank=ctx.rank, world_size=ctx.world_size)
        if not self.announced:
            self.phase = "group"
        self.events.write("group_start", backend=str(call.arguments.get("backend")))
        returned = c10d_group.call_original(call)
        self.grouped = True
        ctx.group = c10d_group.default_group()
        self.events.write("group_done", backend=c10d_group.backend())
        if not self.announced:
            # Its faults are aimed at the names spawn(names=...) gave; its
            # init_rpc, if it calls one later, must give the same.
            if self.given_names and ctx.name is None:
                ctx.join(self.given_names)
            self._announce(self.given_names)
        return returned

    def program_init(self, name: str, backend: Any, rank: int, world_size: int | None, options: Any) -> None:
        """A spawned program's own ``init_rpc``, with what the harness needs merged in."""
        ctx = self.ctx
        if not self.spawned:
            raise RuntimeError(
                "rpc_world.run() / rpc_harness.run_world() start RPC before calling the entry, which must not call "
                "rpc.init_rpc itself; for a program that calls init_rpc and shutdown itself use "
                "rpc_world.spawn() / rpc_harness.spawn()"
            )
        if not self.rpc:
            raise RuntimeError("init_rpc in a world spawned with rpc=False (a world without an RPC agent); spawn it "
                               "with rpc=True, the default")
        if self.joined:
            raise RuntimeError("a spawned rank may call rpc.init_rpc once: the harness supports one RPC world per process")
        if rank not in (-1, None, ctx.rank):
            raise ValueError(f"init_rpc(rank={rank}) in the process the harness started as rank {ctx.rank}")
        if world_size not in (None, ctx.world_size):
            raise ValueError(f"init_rpc(world_size={world_size}) in a world the harness started with "
                             f"{ctx.world_size} processes (nprocs={ctx.world_size})")
        # A store of the program's own that an earlier run left behind would
        # fail the bring-up with no word of why: refused here, by name.
        _stores.check(getattr(options, "init_method", DEFAULT_INIT_METHOD), ctx.workdir)
        backend, options = self._merged_backend(name, backend, options)
        if ctx.name is None:  # (a rank named as it made its group was armed then)
            ctx.take_name(name)  # peers may call this rank before its init_rpc returns
        assert _original_init is not None
        _original_init(name, backend=backend, rank=ctx.rank, world_size=ctx.world_size, rpc_backend_options=options)
        infos = sorted(rpc.api._get_current_rpc_agent().get_worker_infos(), key=lambda info: info.id)
        self._joined(tuple(info.name for info in infos))

    def _merged_backend(self, name: str, backend: Any, options: Any) -> tuple[Any, Any]:
        init_method = getattr(options, "init_method", DEFAULT_INIT_METHOD)
        # A timeout the world was given wins over the program's own options
        # (even default ones, which cannot be told from chosen ones).
        timeout = self.program_timeout or getattr(options, "rpc_timeout", self.rpc_timeout)
        threads = getattr(options, "num_worker_threads", None)
        ours, merged = rpc_backend(
            self.ctx, self.init_method if init_method == DEFAULT_INIT_METHOD else init_method, timeout,
            name=name, num_worker_threads=threads,
        )
        if ours == rpc.backend_registry.BackendType.TENSORPIPE:
            # The program's own device maps stay; its transports cannot be
            # read back, and TCP is what every world runs (rank_setup). Any
            # rank of a spawned world may map devices in its own code, so
            # every rank offers the CUDA channels where CUDA is available.
            merged = tensorpipe_options(merged.init_method, timeout, threads or 16, cuda_world=True,
                                        device_maps=getattr(options, "device_maps", None),
                                        devices=getattr(options, "devices", None))
        return ours, merged

    def _joined(self, names: tuple[str, ...]) -> None:
        self.ctx.join(names)
        self.joined = True
        self.events.write("init_rpc")
        self._announce(names)

    def _announce(self, names: tuple[str, ...]) -> None:
        """Tell the supervisor this rank is in its world (``names``: every
        worker's, once known; a spawned program's group, then its RPC agent,
        each say so). The entry starts at the first."""
        first = not self.announced
        self.announced = True
        self.phase = "entry"
        self.send(msg.Joined(tuple(names), group=self.grouped))
        if not first:
            return
        self.events.write("entry_start")
        if _gate._gate is not None:  # a controlled world: the entry is a task from here on
            _gate._gate.begin(self.ctx.name or str(self.ctx.rank), "main", "start")

    # -- leaving ------------------------------------------------------------------------
    def leave(self, *, graceful: bool = True, timeout: float = 0, value: bytes | None = None,
              after_entry: bool = False) -> None:
        """Say this rank is done (with its pickled return value, if known),
        wait for the supervisor's word, and shut down as it says: gracefully
        only if the program asked for it and no rank died.

        ``after_entry``: the harness leaves for an entry that returned (not
        the program's own ``rpc.shutdown()``). After a death it then skips
        torch's non-graceful teardown: that crashed the rank (SIGSEGV or
        SIGABRT, in ``_destroy_rref_context`` or the agent's ``shutdown()``)
        in about one parameter-server world in fifteen after a planned kill,
        with torch's Gloo group or without. Nothing runs in the rank after
        it but its exit (``os._exit``, as every forkserver child), so no
        program can tell; a program that calls ``rpc.shutdown()`` itself
        still gets torch's."""
        if not self.announced or self.left or (self.spawned and not self.joined and not after_entry):
            assert _original_shutdown is not None  # torch's own word on an agent that is not there
            return _original_shutdown(graceful=graceful, timeout=timeout)
        if self.reused:
            raise RuntimeError("an entry in a reused world (rpc_world_module, rpc_world_session) must not call "
                               "rpc.shutdown(): the next entry runs in the same world; use rpc_world for this one")
        if _gate._gate is not None:  # the entry's task is over (a spawned program's, in its shutdown)
            _gate._gate.end()
        self.ctx.flush_progress()  # what its RPC handlers reported since
        self.ctx.record_hits()
        self.events.write("entry_done")
        self.send(msg.EntryDone(value))
        self.phase = "shutdown"
        word = self.conn.recv()
        if not isinstance(word, msg.Shutdown):
            raise RuntimeError(f"the supervisor said {word!r} where a Shutdown was due")
        graceful = graceful and word.graceful
        self.ctx.flush_progress()
        self.events.write("shutdown_start", graceful=graceful)
        assert _original_shutdown is not None
        if self.joined and (graceful or not after_entry):
            _original_shutdown(graceful=graceful, timeout=timeout)
        if self.made_group:
            c10d_group.tear_down(graceful=graceful)
        # Again, now that it serves no more RPCs: a rank whose entry returns
        # at once (an observer) reaches its failpoints while serving peers.
        self.ctx.record_hits()
        self.events.write("shutdown_done")
        self.left = True
        self.phase = "exiting"
        self.send(msg.ShutdownDone())

    def wait_for_exit(self) -> None:
        """After a shutdown: wait until every rank has shut down. A rank that
        ended at once could take with it what a peer's shutdown still talks
        to: a program's own store (``tcp://``), which rank 0 hosts."""
        if not self.left:
            return
        try:
            word = self.conn.recv()
        except (EOFError, OSError):  # the supervisor is gone: nothing to wait for
            return
        if not isinstance(word, msg.Exit):
            raise RuntimeError(f"the supervisor said {word!r} where an Exit was due")


def spawn_environment(rank: int, world_size: int, master_port: int) -> dict[str, str]:
    """The variables the tutorials' programs read (or set) for ``env://``."""
    return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(master_port), "RANK": str(rank),
            "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank)}


def set_spawn_environment(rank: int, world_size: int, master_port: int) -> None:
    os.environ.update(spawn_environment(rank, world_size, master_port))
