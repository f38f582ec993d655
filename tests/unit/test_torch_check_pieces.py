"""Each check of rpc_harness._parent.torch_check against a torch that differs, one
piece at a time (monkeypatched, then put back): the check fails, and says
what differs. (Found unchecked by mutation testing, tools/mutation.py: on the
torch the suite runs every check passes, so a check that no longer looked,
or said nothing, passed too.)"""

from __future__ import annotations

import importlib.util
import sys
import types

import pytest
import torch
import torch.distributed
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
import torch.distributed.rpc._testing  # noqa: F401 - at collection, before any in-process pytester run
import torch.futures
from torch.distributed.rpc import api

from rpc_harness._parent import torch_check as T
from rpc_harness.errors import Unsupported


@pytest.fixture(autouse=True)
def fresh_check(monkeypatch):
    monkeypatch.setattr(T, "_findings", None)
    yield
    T.forget()


def why(check):
    """The Mismatch a check raises, as its text."""
    with pytest.raises(T.Mismatch) as raised:
        check()
    return str(raised.value)


def test_a_path_is_read_from_its_longest_importable_module_then_attributes():
    assert T._get("torch.distributed.rpc.api.rpc_sync") is api.rpc_sync
    assert T._get("torch") is torch
    assert why(lambda: T._get("no_such_module_here.x")) == "no_such_module_here cannot be imported"
    assert why(lambda: T._get("torch.distributed.rpc.api.nothing.more")) == (
        "torch.distributed.rpc.api has no 'nothing'"
    )


def test_parameters_must_be_callable_and_start_with_the_expected_names(monkeypatch):
    monkeypatch.setattr(api, "rpc_sync", 5)
    assert (
        why(lambda: T._parameters("torch.distributed.rpc.api.rpc_sync", ("to",))) == "not callable"
    )
    assert why(T._callable("torch.distributed.rpc.api.rpc_sync")) == "not callable"
    T._parameters("builtins.dict", ("anything",))  # a builtin without a signature passes


def test_missing_attributes_are_all_named():
    assert why(lambda: T._attributes("torch.futures.Future", "wait", "nope", "neither")) == (
        "has no 'nope', 'neither'"
    )
    T._attributes("torch.futures.Future", "wait", "then")


def test_a_named_tuple_must_start_with_the_fields_read(monkeypatch):
    point = types.SimpleNamespace(_fields=("x", "y"))
    monkeypatch.setattr(sys.modules[__name__], "Point", point, raising=False)
    T._named_tuple(f"{__name__}.Point", "x")()
    T._named_tuple(f"{__name__}.Point", "x", "y")()
    assert (
        why(T._named_tuple(f"{__name__}.Point", "y"))
        == "has fields ('x', 'y'), the harness reads ('y',)"
    )
    assert why(T._named_tuple(f"{__name__}.Point", "x", "y", "z")) == (
        "has fields ('x', 'y'), the harness reads ('x', 'y', 'z')"
    )


def test_rpc_missing_from_the_build_is_said(monkeypatch):
    monkeypatch.setattr(rpc, "is_available", lambda: False)
    assert why(T._rpc_available) == "torch.distributed.rpc is not available in this build"
    monkeypatch.setattr(torch.distributed, "is_available", lambda: False)
    assert why(T._rpc_available) == "torch.distributed is not available in this build"


@pytest.mark.parametrize(
    "refused",
    [
        "init_method",
        "rpc_timeout",
        "num_worker_threads",
        "_transports",
        "_channels",
        "device_maps",
        "devices",
    ],
)
def test_tensorpipe_options_are_made_with_every_keyword_the_harness_gives(monkeypatch, refused):
    real = rpc.TensorPipeRpcBackendOptions

    def options(**kwargs):
        if refused not in kwargs or kwargs[refused] is None:
            raise TypeError(f"{refused} is required")
        return real(**kwargs)

    monkeypatch.setattr(rpc, "TensorPipeRpcBackendOptions", options)
    T._tensorpipe_options()  # a check that left the keyword out would fail here


def test_tensorpipe_options_must_have_their_attributes_and_the_backend_must_exist(monkeypatch):
    monkeypatch.setattr(
        rpc, "TensorPipeRpcBackendOptions", lambda **kwargs: types.SimpleNamespace(init_method=1)
    )
    assert why(T._tensorpipe_options) == "its options have no 'rpc_timeout'"
    monkeypatch.undo()
    monkeypatch.setattr(rpc.backend_registry, "BackendType", types.SimpleNamespace())
    assert why(T._tensorpipe_options) == "rpc.backend_registry.BackendType has no TENSORPIPE"


def test_futures_must_be_torchs_and_behave_as_futures(monkeypatch):
    monkeypatch.setattr(torch.futures, "wait_all", lambda futures: [2])
    assert why(T._futures) == "then/add_done_callback/wait_all do not behave as futures"
    monkeypatch.undo()
    monkeypatch.setattr(torch.futures, "collect_all", lambda futures: torch.futures.Future())

    class Done(torch.futures.Future):
        pass

    def collect_all(futures):
        done = torch.futures.Future()
        wrong = torch.futures.Future()
        wrong.set_result(2)
        done.set_result([wrong])
        return done

    monkeypatch.setattr(torch.futures, "collect_all", collect_all)
    assert why(T._futures) == "collect_all does not collect"
    monkeypatch.undo()
    monkeypatch.setattr(torch.futures, "Future", type("Future", (), {}))
    assert why(T._futures) == "torch.futures.Future is not a torch._C.Future"


def test_the_current_context_must_raise_outside_one(monkeypatch):
    monkeypatch.setattr(dist_autograd, "_current_context", lambda: object())
    assert why(T._current_context) == (
        "returned outside any distributed autograd context; the harness expects RuntimeError"
    )


def test_find_builtin_must_tell_ops_from_functions(monkeypatch):
    import torch.jit._builtins as builtins

    monkeypatch.setattr(builtins, "_find_builtin", lambda f: "op")
    assert why(T._find_builtin) == "does not tell torch's builtin ops from Python functions"
    monkeypatch.setattr(builtins, "_find_builtin", lambda f: None)
    assert why(T._find_builtin) == "does not tell torch's builtin ops from Python functions"


@pytest.mark.parametrize(
    ("name", "check"),
    [("_get_should_profile", T._should_profile), ("_is_current_rpc_agent_set", T._agent_set)],
)
def test_flags_read_from_torch_must_be_bools(monkeypatch, name, check):
    monkeypatch.setattr(api, name, lambda: 1)
    assert why(check) == "does not return a bool"


def test_async_execution_must_mark_its_function(monkeypatch):
    import torch.distributed.rpc.functions as functions

    monkeypatch.setattr(functions, "async_execution", lambda f: f)
    assert why(T._async_execution) == (
        "async_execution no longer marks its function with _wrapped_async_rpc_function"
    )


def test_the_faulty_agents_options_and_backend_are_checked(monkeypatch):
    import torch.distributed.rpc._testing as faulty

    monkeypatch.delattr(faulty, "FaultyTensorPipeRpcBackendOptions")
    assert (
        why(T._faulty_agent)
        == "torch.distributed.rpc._testing has no FaultyTensorPipeRpcBackendOptions"
    )
    monkeypatch.undo()
    monkeypatch.setattr(rpc.backend_registry, "BackendType", types.SimpleNamespace())
    assert why(T._faulty_agent) == (
        "importing torch.distributed.rpc._testing registered no FAULTY_TENSORPIPE backend"
    )


def fake_optim(tmp_path, monkeypatch, files):
    folder = tmp_path / "optim"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    monkeypatch.delitem(sys.modules, "torch.distributed.optim", raising=False)
    spec = types.SimpleNamespace(submodule_search_locations=[str(folder)])
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: spec)


STEP = "class DistributedOptimizer:\n    def step(self):\n        pass\n"


@pytest.mark.parametrize(
    ("files", "missing"),
    [
        ({"a.py": "x = 1\n", "b.py": STEP, "notes.txt": "class DistributedOptimizer"}, None),
        ({"a.py": "# class DistributedOptimizer is elsewhere\n", "z.py": STEP}, None),
        (
            {"a.py": "class DistributedOptimizer:\n    def other(self):\n        pass\n"},
            "DistributedOptimizer in a.py has no step",
        ),
        (
            {"a.py": "class DistributedOptimizer:\n    step = 1\n"},
            "DistributedOptimizer in a.py has no step",
        ),
        (
            {"a.py": "x = 1\n", "b.txt": STEP},
            "torch.distributed.optim defines no DistributedOptimizer",
        ),
        ({}, "torch.distributed.optim defines no DistributedOptimizer"),
    ],
)
def test_the_optimizers_step_is_read_from_torchs_source(tmp_path, monkeypatch, files, missing):
    fake_optim(tmp_path, monkeypatch, files)
    if missing is None:
        T._optimizer_step()
    else:
        assert why(T._optimizer_step) == missing


def test_no_optim_package_at_all_is_said(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch.distributed.optim", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert why(T._optimizer_step) == "torch.distributed.optim defines no DistributedOptimizer"


def test_an_imported_optim_is_read_as_imported(monkeypatch):
    module = types.SimpleNamespace(
        DistributedOptimizer=type("DistributedOptimizer", (), {"step": lambda s: 0})
    )
    monkeypatch.setitem(sys.modules, "torch.distributed.optim", module)
    T._optimizer_step()
    monkeypatch.setitem(sys.modules, "torch.distributed.optim", types.SimpleNamespace())
    assert why(T._optimizer_step) == "torch.distributed.optim.DistributedOptimizer has no step"


def test_the_real_optimizer_source_is_read_without_importing_it(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch.distributed.optim", raising=False)
    T._optimizer_step()
    assert "torch.distributed.optim" not in sys.modules


def test_check_names_every_failed_piece_with_why_and_skips_the_rest_without_rpc(monkeypatch):
    def broken():
        raise T.Mismatch("broken")

    def crashing():
        raise KeyError("k")

    def silent():
        raise T.Mismatch()

    rpc_piece = T.Piece("torch.distributed.rpc", "every world", broken)
    found = T.check(
        [T.Piece("a", "x", crashing), T.Piece("b", "y", silent), T.Piece("ok", "z", lambda: None)]
    )
    assert [(piece.name, reason) for piece, reason in found.missing] == [
        ("a", "KeyError: 'k'"),
        ("b", "missing"),
    ]
    assert found.version == str(torch.__version__)
    later = T.Piece("later", "x", lambda: None)
    optional = T.Piece("opt", "x", broken, feature="f")
    found = T.check([rpc_piece, later, optional])
    assert [(piece.name, reason) for piece, reason in found.missing] == [
        ("torch.distributed.rpc", "broken"),
        ("later", "not checked: torch.distributed.rpc is not available"),
        ("opt", "broken"),
    ]
    assert [piece.name for piece, _ in found.required()] == ["torch.distributed.rpc", "later"]
    assert [piece.name for piece, _ in found.lacking("f")] == ["opt"]


def test_a_world_with_msgfail_faults_needs_the_retry_log(monkeypatch):
    def broken():
        raise T.Mismatch("not exported")

    pieces = tuple(
        T.Piece(p.name, p.used_for, broken, p.feature) if p.feature == T.RETRY_LOG else p
        for p in T.PIECES
    )
    monkeypatch.setattr(T, "PIECES", pieces)
    monkeypatch.setattr(T, "findings", lambda: T.check(pieces))
    T.require(faulty_agent=True)
    with pytest.raises(Unsupported) as refused:
        T.require(retry_log=True)
    assert str(refused.value).startswith(
        f"this world has msgfail faults, which need the retry log of torch, and torch {torch.__version__} "
        "lacks it (checked before any process started):\n  - FLAGS_caffe2_log_level (libc10): not exported "
        "(used for: counting the sends a msgfail fault failed (torch's retry log))\nWorlds without them"
    )


def test_a_torch_lacking_required_pieces_is_refused_with_every_piece_and_what_to_do(monkeypatch):
    def broken():
        raise T.Mismatch("gone")

    pieces = (T.Piece("first", "one use", broken), T.Piece("second", "another use", broken))
    monkeypatch.setattr(T, "findings", lambda: T.check(pieces))
    with pytest.raises(Unsupported) as refused:
        T.require()
    assert str(refused.value) == (
        f"torch {torch.__version__} lacks what rpc-harness hooks in it (checked before any process started):\n"
        "  - first: gone (used for: one use)\n"
        "  - second: gone (used for: another use)\n"
        "The harness relies on these private names of torch's RPC; use a torch version it was tested "
        "with (the README's table), or report this with the lines above."
    )


def test_a_class_without_fields_is_no_named_tuple(monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "Plain", object(), raising=False)
    assert (
        why(T._named_tuple(f"{__name__}.Plain", "x")) == "has fields (), the harness reads ('x',)"
    )


def test_the_retry_logs_flag_not_exported_is_said_with_the_library(monkeypatch):
    import ctypes

    def no_library(path):
        raise OSError("cannot open")

    monkeypatch.setattr(ctypes, "CDLL", no_library)
    assert why(T._log_flag).startswith("not exported by ") and why(T._log_flag).endswith(
        "libc10.so (cannot open)"
    )


def test_the_faulty_agent_that_cannot_be_imported_is_said(monkeypatch):
    real = importlib.import_module

    def import_module(name, *args):
        if name == "torch.distributed.rpc._testing":
            raise ImportError("no faulty agent here")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", import_module)
    assert why(T._faulty_agent) == (
        "torch.distributed.rpc._testing cannot be imported (no faulty agent here)"
    )


def test_the_c10d_checks_fail_on_a_torch_whose_ops_or_names_moved(monkeypatch):
    from rpc_harness.c10d.ops import BY_NAME, Op

    pieces = {piece.name: piece for piece in T._c10d_pieces()}
    assert set(pieces) >= {f"torch.ops.c10d.{name}" for name in BY_NAME}
    for piece in pieces.values():
        piece.check()  # this torch has them all
    # An op whose tensors or peer stand elsewhere than the table says.
    assert "argument 1 is not a Tensor" in why(T._c10d_op(Op("barrier", ("barrier",), 1)))
    assert "argument 0 is not a int" in why(T._c10d_op(Op("send", ("send",), 0, peer=0)))
    monkeypatch.delattr(torch.distributed.ProcessGroup, "unbox")
    assert "has no 'unbox'" in why(pieces["torch.distributed.ProcessGroup.unbox / Work.unbox"].check)
    monkeypatch.setattr(torch.library.Library, "impl", lambda self, op_name, fn, dispatch_key="": None)
    assert "takes no with_keyset" in why(pieces["torch.library.Library.impl(with_keyset=) at BackendSelect"].check)
