"""Every private torch name the harness hooks, checked once per process at
its first world, in the parent, before any process starts.

The harness wraps and calls names torch does not promise to keep
(``rpc.api.rpc_sync``, ``rpc.internal._run_function``, ``PyRRef.to_here``,
TensorPipe's ``_transports``/``_channels``, the faulty agent of
``torch.distributed.rpc._testing`` ...). A torch that moved one would have
the ranks wrap nothing, or fail deep inside the forkserver. So each is
checked here, as the harness uses it: that it exists, and where that can be
seen without a world, that it behaves so (its parameters in the order the
wrappers pass them, what it returns, what it raises). A missing piece every
world needs raises :class:`~rpc_harness.errors.Unsupported` naming torch's
version and each missing piece; one only some worlds need (torch's faulty
agent for message faults and fuzzing, the C++ log flag that counts failed
sends) fails only the worlds that need it, saying why.

Imports torch (and ``torch.distributed.rpc``) in the calling process, on the
first world only: never for ``import rpc_harness`` or ``pytest --help``.
``torch.distributed.optim`` (~2 s to import) is read, not imported, when the
process has not imported it.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import os
import sys
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import Unsupported

# Which worlds need an optional piece.
FAULTY_AGENT = "the faulty agent"  # worlds with msgfail/msgdelay faults, or schedule fuzzing
RETRY_LOG = "the retry log"  # worlds with msgfail faults
ACCELERATOR = "torch.accelerator"  # none: without it a rank seeds CUDA's generators (rpc_harness.seeds)
REUSE_CHECKS = "the debug counts"  # what reused worlds check between entries (rpc_harness._rank.clean)
STORE_RENDEZVOUS = "the Gloo group's place in init_rpc"  # worlds with rendezvous="store" (rpc_harness.rpc.rendezvous)


@dataclass(frozen=True)
class Piece:
    """One thing the harness relies on in torch: ``name`` as the harness
    uses it, what it is used for, and a check that raises ``Mismatch`` (or
    any error) when torch's does not fit. ``feature``: None when every
    world needs it, else which worlds do."""

    name: str
    used_for: str
    check: Callable[[], None]
    feature: str | None = None


class Mismatch(Exception):
    """A piece that exists but is not what the harness expects."""


@dataclass
class Findings:
    """What the check found: the version, and each failed piece with why."""

    version: str
    missing: list[tuple[Piece, str]] = field(default_factory=list)

    def required(self) -> list[tuple[Piece, str]]:
        return [(piece, why) for piece, why in self.missing if piece.feature is None]

    def lacking(self, feature: str) -> list[tuple[Piece, str]]:
        return [(piece, why) for piece, why in self.missing if piece.feature == feature]


_findings: Findings | None = None  # this process's, once checked


# -- helpers -------------------------------------------------------------------------------


def _get(path: str) -> Any:
    """The object at a dotted path: the longest importable module, then
    attributes; raises Mismatch saying which part is missing."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            obj = importlib.import_module(module_name)
        except ImportError:
            continue
        break
    else:
        raise Mismatch(f"{parts[0]} cannot be imported")
    for index in range(cut, len(parts)):
        if not hasattr(obj, parts[index]):
            raise Mismatch(f"{'.'.join(parts[:index])} has no {parts[index]!r}")
        obj = getattr(obj, parts[index])
    return obj


def _parameters(path: str, expected: Sequence[str]) -> None:
    """The callable at ``path`` exists and its first parameters are
    ``expected``, in that order (the harness passes them by position)."""
    obj = _get(path)
    if not callable(obj):
        raise Mismatch("not callable")
    try:
        names = list(inspect.signature(obj).parameters)
    except (TypeError, ValueError):  # a builtin without a signature: nothing more to see
        return
    if names[:len(expected)] != list(expected):
        raise Mismatch(f"takes ({', '.join(names)}), the harness calls it with ({', '.join(expected)})")


def _attributes(path: str, *names: str) -> None:
    obj = _get(path)
    absent = [name for name in names if not hasattr(obj, name)]
    if absent:
        raise Mismatch(f"has no {', '.join(repr(name) for name in absent)}")


def _callable(path: str) -> Callable[[], None]:
    def check() -> None:
        if not callable(_get(path)):
            raise Mismatch("not callable")

    return check


# -- the checks that need more than a name ----------------------------------------------------


def _rpc_available() -> None:
    import torch.distributed

    if not torch.distributed.is_available():
        raise Mismatch("torch.distributed is not available in this build")
    import torch.distributed.rpc as rpc

    if not rpc.is_available():
        raise Mismatch("torch.distributed.rpc is not available in this build")


def _named_tuple(path: str, *fields: str) -> Callable[[], None]:
    def check() -> None:
        have = tuple(getattr(_get(path), "_fields", ()))
        if have[:len(fields)] != fields:
            raise Mismatch(f"has fields {have}, the harness reads {fields}")

    return check


def _tensorpipe_options() -> None:
    import torch.distributed.rpc as rpc

    options = rpc.TensorPipeRpcBackendOptions(
        init_method="file:///nonexistent", rpc_timeout=5.0, num_worker_threads=4, _transports=["uv"],
        _channels=["basic"], device_maps={}, devices=[],
    )
    for name in ("init_method", "rpc_timeout", "num_worker_threads", "device_maps", "devices"):
        if not hasattr(options, name):
            raise Mismatch(f"its options have no {name!r}")
    if not hasattr(rpc.backend_registry.BackendType, "TENSORPIPE"):
        raise Mismatch("rpc.backend_registry.BackendType has no TENSORPIPE")


def _faulty_agent() -> None:
    import torch
    import torch.distributed.rpc as rpc

    initialised = getattr(torch._C, "_distributed_rpc_testing", None)
    if initialised is not None and "torch.distributed.rpc._testing" not in sys.modules:
        # Imported once and taken out of sys.modules since (pytester's
        # in-process runs restore sys.modules): importing it again would
        # register its C++ types a second time, which aborts the process.
        faulty: Any = initialised
    else:
        try:
            faulty = importlib.import_module("torch.distributed.rpc._testing")  # registers FAULTY_TENSORPIPE
        except ImportError as error:
            raise Mismatch(f"torch.distributed.rpc._testing cannot be imported ({error})") from None
    options_type = getattr(faulty, "FaultyTensorPipeRpcBackendOptions", None)
    if options_type is None:
        raise Mismatch("torch.distributed.rpc._testing has no FaultyTensorPipeRpcBackendOptions")
    options_type(num_worker_threads=8, rpc_timeout=5.0, init_method="file:///nonexistent",
                 messages_to_fail=["PYTHON_CALL"], messages_to_delay={"PYTHON_CALL": 0.1}, num_fail_sends=1)
    if not hasattr(rpc.backend_registry.BackendType, "FAULTY_TENSORPIPE"):
        raise Mismatch("importing torch.distributed.rpc._testing registered no FAULTY_TENSORPIPE backend")


def _log_flag() -> None:
    import ctypes

    import torch

    path = os.path.join(os.path.dirname(torch.__file__), "lib", "libc10.so")
    try:
        ctypes.c_int.in_dll(ctypes.CDLL(path), "FLAGS_caffe2_log_level")
    except (OSError, ValueError) as error:
        raise Mismatch(f"not exported by {path} ({error})") from None


def _futures() -> None:
    import torch
    import torch.futures

    if not issubclass(torch.futures.Future, torch._C.Future):
        raise Mismatch("torch.futures.Future is not a torch._C.Future")
    future = torch.futures.Future()
    then = future.then(lambda done: done.value() + 1)
    seen: list[int] = []
    future.add_done_callback(lambda done: seen.append(done.value()))
    future.set_result(1)
    if then.wait() != 2 or seen != [1] or torch.futures.wait_all([future]) != [1]:
        raise Mismatch("then/add_done_callback/wait_all do not behave as futures")
    if torch.futures.collect_all([future]).wait()[0].value() != 1:
        raise Mismatch("collect_all does not collect")


def _current_context() -> None:
    import torch.distributed.autograd as dist_autograd

    try:
        dist_autograd._current_context()
    except RuntimeError:
        return  # outside a context it raises RuntimeError, which the harness reads as "none"
    raise Mismatch("returned outside any distributed autograd context; the harness expects RuntimeError")


def _find_builtin() -> None:
    import torch

    find = _get("torch.jit._builtins._find_builtin")
    if find(torch.add) is None or find(_find_builtin) is not None:
        raise Mismatch("does not tell torch's builtin ops from Python functions")


def _should_profile() -> None:
    if not isinstance(_get("torch.distributed.rpc.api._get_should_profile")(), bool):
        raise Mismatch("does not return a bool")


def _agent_set() -> None:
    if not isinstance(_get("torch.distributed.rpc.api._is_current_rpc_agent_set")(), bool):
        raise Mismatch("does not return a bool")


def _async_execution() -> None:
    from torch.distributed.rpc.functions import async_execution

    def function() -> None:
        pass

    if getattr(async_execution(function), "_wrapped_async_rpc_function", None) is not function:
        raise Mismatch("async_execution no longer marks its function with _wrapped_async_rpc_function")


def _optimizer_step() -> None:
    """DistributedOptimizer.step, read from torch's source unless the
    process imported torch.distributed.optim already (importing it is ~2 s)."""
    module = sys.modules.get("torch.distributed.optim")
    if module is not None:
        step = getattr(getattr(module, "DistributedOptimizer", None), "step", None)
        if not callable(step):
            raise Mismatch("torch.distributed.optim.DistributedOptimizer has no step")
        return
    found = importlib.util.find_spec("torch.distributed.optim")
    folders = list(found.submodule_search_locations or []) if found is not None else []
    for folder in folders:
        for filename in sorted(os.listdir(folder)):
            if not filename.endswith(".py"):
                continue
            with open(os.path.join(folder, filename), encoding="utf-8") as file:
                source = file.read()
            if "class DistributedOptimizer" not in source:
                continue
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.ClassDef) and node.name == "DistributedOptimizer":
                    if any(isinstance(item, ast.FunctionDef) and item.name == "step" for item in node.body):
                        return
                    raise Mismatch(f"DistributedOptimizer in {filename} has no step")
    raise Mismatch("torch.distributed.optim defines no DistributedOptimizer")


_REGISTRY = "torch.distributed.rpc.backend_registry"
# What torch's TensorPipe init does with its Gloo group, in order: builds it,
# gathers the device maps through it, waits at its barrier. Nothing else.
GROUP_USES = ("_init_process_group", "_tensorpipe_exchange_and_check_all_device_maps", "barrier")


def _store_rendezvous() -> None:
    """What rpc_harness.rpc.rendezvous replaces and calls, and that torch's
    TensorPipe init uses its group for nothing more (read from its source)."""
    _parameters(f"{_REGISTRY}._init_process_group", ("store", "rank", "world_size"))
    _parameters(f"{_REGISTRY}._tensorpipe_exchange_and_check_all_device_maps",
                ("my_name", "my_device_count", "my_device_maps", "my_devices", "group"))
    _parameters(f"{_REGISTRY}._validate_device_maps",
                ("all_names", "all_device_counts", "all_device_maps", "all_devices"))
    _parameters(f"{_REGISTRY}._create_reverse_mapping", ("my_name", "all_names", "all_device_maps"))
    _parameters(f"{_REGISTRY}._create_device_list", ("my_devices", "my_device_maps", "reverse_device_maps"))
    _get("torch.distributed.rpc.constants.DEFAULT_PROCESS_GROUP_TIMEOUT")
    uses = group_uses(inspect.getsource(_get(f"{_REGISTRY}._tensorpipe_init_backend_handler")))
    if tuple(uses) != GROUP_USES:
        raise Mismatch(f"_tensorpipe_init_backend_handler uses its group for {', '.join(uses) or 'nothing'}; "
                       f"the store stands in for {', '.join(GROUP_USES)}")


def group_uses(source: str) -> list[str]:
    """What a function's source does with its ``group``, in order: the call
    that makes it, the calls it is passed to, the attributes read off it."""
    found: list[tuple[int, int, str]] = []
    for node in ast.walk(ast.parse(textwrap.dedent(source))):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "group" for t in node.targets):
            made_by = node.value.func if isinstance(node.value, ast.Call) else node.value
            found.append((node.lineno, node.col_offset, ast.unparse(made_by)))
        elif isinstance(node, ast.Call) and any(isinstance(a, ast.Name) and a.id == "group"
                                                for a in (*node.args, *(k.value for k in node.keywords))):
            found.append((node.lineno, node.col_offset, ast.unparse(node.func)))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "group":
            found.append((node.lineno, node.col_offset, node.attr))
    return [use for _, _, use in sorted(found)]


def _c10d_dispatch() -> None:
    """The Python kernel rpc_harness.c10d.hooks registers in front of every
    c10d op: at BackendSelect, handed the dispatch keys, redispatching below."""
    import torch

    if "with_keyset" not in inspect.signature(torch.library.Library.impl).parameters:
        raise Mismatch("torch.library.Library.impl takes no with_keyset")
    below = torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.BackendSelect)
    if below.has(torch._C.DispatchKey.BackendSelect) or not below.has(torch._C.DispatchKey.CPU):
        raise Mismatch("the keys after BackendSelect are not those below it")


def _c10d_op(op: Any) -> Callable[[], None]:
    """A c10d dispatcher op with a process group, and tensors where the table says."""

    def check() -> None:
        import torch
        import torch.distributed  # noqa: F401 - registers the c10d ops

        if not torch.distributed.is_available():
            raise Mismatch("torch.distributed is not available in this build")
        arguments = getattr(torch.ops.c10d, op.name).default._schema.arguments
        if not any(arg.name == "process_group" for arg in arguments):
            raise Mismatch(f"c10d::{op.name} takes no process_group")
        for index, what in ((op.tensors, "Tensor"), (op.peer, "int")):
            if index is not None and (index >= len(arguments) or what not in str(arguments[index].type)):
                raise Mismatch(f"c10d::{op.name}'s argument {index} is not a {what}: {_schema_text(arguments)}")

    return check


def _schema_text(arguments: Any) -> str:
    return ", ".join(f"{arg.type} {arg.name}" for arg in arguments)


def _p2p_functions() -> None:
    import torch.distributed.distributed_c10d as c10d

    for name in ("send", "recv", "isend", "irecv"):
        if not hasattr(inspect.unwrap(getattr(c10d, name)), "__code__"):
            raise Mismatch(f"distributed_c10d.{name} is not a Python function")


def _accelerator() -> None:
    _callable("torch.accelerator.is_available")()


# -- the table --------------------------------------------------------------------------------

_CALL = ("to", "func", "args", "kwargs", "timeout")

def _c10d_pieces() -> tuple[Piece, ...]:
    from ..c10d.ops import OPS

    return (
        Piece("torch.library.Library.impl(with_keyset=) at BackendSelect",
              "a Python kernel in front of every c10d op: failpoints c10d.OP and the collective history",
              _c10d_dispatch),
        *(Piece(f"torch.ops.c10d.{op.name}", f"failpoint c10d.{op.point} and its history (its group, tensors)",
                _c10d_op(op)) for op in OPS),
        Piece("torch.distributed.ProcessGroup.unbox / Work.unbox",
              "the group of a collective (its name, members) and its work's completion",
              lambda: (_attributes("torch.distributed.ProcessGroup", "unbox", "group_name", "group_desc"),
                       _attributes("torch.distributed.Work", "unbox", "get_future"))),
        Piece("torch.distributed.distributed_c10d.send/recv/isend/irecv",
              "telling isend from send (and irecv from recv) at failpoints c10d.isend, c10d.irecv", _p2p_functions),
    )


PIECES: tuple[Piece, ...] = (
    Piece("torch.distributed.rpc", "every world", _rpc_available),
    *(Piece(f"torch.distributed.rpc.api.{name}", "the RPC hooks wrap it: failpoints rpc.call:NAME, the timeline",
            lambda name=name: _parameters(f"torch.distributed.rpc.api.{name}", _CALL))
      for name in ("rpc_sync", "rpc_async", "remote")),
    Piece("torch.distributed.rpc.rref_proxy.rpc_async", "RRef proxies' calls, wrapped like rpc_async",
          lambda: _get("torch.distributed.rpc.rref_proxy.rpc_async")),
    Piece("torch.distributed.rpc.rref_proxy._invoke_rpc", "naming a proxy's method sent as the function",
          lambda: _parameters("torch.distributed.rpc.rref_proxy._invoke_rpc",
                              ("rref", "rpc_api", "func_name", "timeout"))),
    *(Piece(f"torch.distributed.rpc.rref_proxy.{name}", "naming an RRef proxy's calls (Type.method)",
            lambda name=name: _parameters(f"torch.distributed.rpc.rref_proxy.{name}",
                                          ("rref", "func_name", "args", "kwargs")))
      for name in ("_local_invoke", "_local_invoke_async_execution")),
    Piece("torch.distributed.rpc.internal._run_function",
          "the RPC hooks wrap it to see every Python function a peer runs: failpoints rpc.serve:NAME",
          lambda: _parameters("torch.distributed.rpc.internal._run_function", ("python_udf",))),
    Piece("torch.distributed.rpc.internal.PythonUDF", "the served call's function and arguments",
          _named_tuple("torch.distributed.rpc.internal.PythonUDF", "func", "args", "kwargs")),
    Piece("torch.distributed.rpc.internal.RemoteException", "a served call's failure on the timeline",
          _named_tuple("torch.distributed.rpc.internal.RemoteException", "msg")),
    Piece("torch._C._distributed_rpc.PyRRef", "to_here, local_value (message faults, schedules) and _get_type (naming proxies' calls) are wrapped",
          lambda: _attributes("torch._C._distributed_rpc.PyRRef", "to_here", "local_value", "_get_type",
                              "_get_future", "is_owner")),
    Piece("torch.distributed.rpc.TensorPipeRpcBackendOptions(_transports=, _channels=)",
          "every world runs TensorPipe over TCP with its basic channel", _tensorpipe_options),
    Piece("torch.distributed.rpc.init_rpc", "every rank joins through it (a spawned program's call is wrapped)",
          lambda: _parameters("torch.distributed.rpc.init_rpc",
                              ("name", "backend", "rank", "world_size", "rpc_backend_options"))),
    Piece("torch.distributed.rpc.api._init_rpc_states",
          "widening the listeners' backlogs once the agent has started (wrapped)",
          lambda: _parameters("torch.distributed.rpc.api._init_rpc_states", ("agent",))),
    Piece("torch.distributed.rpc.api.shutdown", "every rank leaves through it (wrapped)",
          lambda: _parameters("torch.distributed.rpc.api.shutdown", ("graceful", "timeout"))),
    Piece("torch.distributed.rpc.api._is_current_rpc_agent_set", "a failing rank's shutdown", _agent_set),
    Piece("torch.distributed.rpc.api._get_current_rpc_agent", "a spawned program's worker names",
          _callable("torch.distributed.rpc.api._get_current_rpc_agent")),
    Piece("torch._C._distributed_rpc.RpcAgent.get_worker_infos", "a spawned program's worker names",
          lambda: _attributes("torch._C._distributed_rpc.RpcAgent", "get_worker_infos")),
    Piece("torch.distributed.rpc.api._get_should_profile", "the message type msgdelay faults count",
          _should_profile),
    Piece("torch.distributed.rpc.constants.UNSET_RPC_TIMEOUT", "the wrapped calls' default timeout",
          lambda: _get("torch.distributed.rpc.constants.UNSET_RPC_TIMEOUT")),
    Piece("torch.distributed.rpc.functions.async_execution", "@async_execution functions are named and served",
          _async_execution),
    Piece("torch.jit._builtins._find_builtin", "telling Python functions from builtin ops", _find_builtin),
    Piece("torch._C.Future / torch.futures.Future", "controlled schedules wrap waits, callbacks and results",
          _futures),
    Piece("torch.distributed.autograd._current_context", "the message type msgdelay faults count",
          _current_context),
    Piece("torch.distributed.autograd.backward", "a scheduling point of controlled schedules",
          _callable("torch.distributed.autograd.backward")),
    Piece("torch.distributed.optim.DistributedOptimizer.step", "a scheduling point of controlled schedules",
          _optimizer_step),
    Piece("torch.accelerator.is_available", "seeding a rank's devices (without it: CUDA's, through torch.cuda)",
          _accelerator, feature=ACCELERATOR),
    Piece("torch.distributed.rpc._rref_context_get_debug_info", "a reused world's RRef and future counts",
          _callable("torch.distributed.rpc._rref_context_get_debug_info"), feature=REUSE_CHECKS),
    Piece("torch.distributed.autograd._get_debug_info", "a reused world's dist_autograd context count",
          _callable("torch.distributed.autograd._get_debug_info"), feature=REUSE_CHECKS),
    Piece("torch._C._distributed_rpc.RpcAgent.get_debug_info", "a reused world's calls issued and served",
          _callable("torch._C._distributed_rpc.RpcAgent.get_debug_info"), feature=REUSE_CHECKS),
    Piece(f"{_REGISTRY}._init_process_group",
          "the world's store stands in for the Gloo group of TensorPipe's init_rpc (rendezvous='store')",
          _store_rendezvous, feature=STORE_RENDEZVOUS),
    Piece("torch.distributed.rpc._testing.FaultyTensorPipeRpcBackendOptions",
          "message faults (msgfail, msgdelay) and schedule fuzzing run torch's faulty agent", _faulty_agent,
          feature=FAULTY_AGENT),
    Piece("FLAGS_caffe2_log_level (libc10)", "counting the sends a msgfail fault failed (torch's retry log)",
          _log_flag, feature=RETRY_LOG),
    *_c10d_pieces(),
)


# -- running it ---------------------------------------------------------------------------------


def findings() -> Findings:
    """Check every piece (once per process; later calls return the same)."""
    global _findings
    if _findings is None:
        _findings = check(PIECES)
    return _findings


def check(pieces: Sequence[Piece] = PIECES) -> Findings:
    """Check ``pieces`` now, whatever was found before."""
    import torch

    found = Findings(version=str(torch.__version__))
    for piece in pieces:
        if piece.feature is None and any(p.name == "torch.distributed.rpc" for p, _ in found.missing):
            found.missing.append((piece, "not checked: torch.distributed.rpc is not available"))
            continue
        try:
            piece.check()
        except Exception as error:  # noqa: BLE001 - whatever it is, the piece is not as expected
            why = str(error) if isinstance(error, Mismatch) else f"{type(error).__name__}: {error}"
            found.missing.append((piece, why or "missing"))
    return found


def forget() -> None:
    """Check again at the next world (for tests that take a piece away)."""
    global _findings
    _findings = None


def require(*, faulty_agent: bool = False, retry_log: bool = False, reused: bool = False,
            store_rendezvous: bool = False) -> None:
    """Raise :class:`Unsupported` if this torch lacks a piece every world
    needs, or one this world needs (``faulty_agent``: it runs torch's faulty
    agent; ``retry_log``: it counts msgfail sends; ``reused``: a reused
    world, which checks torch's own counts between entries;
    ``store_rendezvous``: its ranks meet through its store, not Gloo)."""
    found = findings()
    required = found.required()
    if required:
        raise Unsupported(
            f"torch {found.version} lacks what rpc-harness hooks in it (checked before any process started):\n"
            + _lines(required)
            + "\nThe harness relies on these private names of torch's RPC; use a torch version it was tested "
            "with (the README's table), or report this with the lines above."
        )
    for wanted, feature, what in ((faulty_agent, FAULTY_AGENT, "message faults (msgfail, msgdelay) or fuzz"),
                                  (retry_log, RETRY_LOG, "msgfail faults"),
                                  (reused, REUSE_CHECKS, "entries that share it (rpc_world_module, rpc_world_session)"),
                                  (store_rendezvous, STORE_RENDEZVOUS,
                                   "ranks that meet through its store (rendezvous='store', the default; "
                                   "rendezvous='gloo' is torch's own way)")):
        lacking = found.lacking(feature) if wanted else []
        if lacking:
            raise Unsupported(
                f"this world has {what}, which need {feature} of torch, and torch {found.version} lacks it "
                f"(checked before any process started):\n" + _lines(lacking)
                + "\nWorlds without them run on this torch."
            )


def degraded() -> list[str]:
    """One line per optional piece this torch lacks: what does not work."""
    return [f"{piece.name}: {why} ({piece.used_for})" for piece, why in findings().missing if piece.feature]


def _lines(missing: list[tuple[Piece, str]]) -> str:
    return "\n".join(f"  - {piece.name}: {why} (used for: {piece.used_for})" for piece, why in missing)
