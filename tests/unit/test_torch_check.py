"""The check of the private torch names the harness hooks (rpc_harness._parent.torch_check):
it passes on the torch the suite runs, and a name taken away (then put back)
fails it with torch's version and the missing piece, before any process
starts."""

from __future__ import annotations

import sys

import pytest
import torch
import torch.distributed.rpc as rpc
import torch.distributed.rpc._testing  # noqa: F401 - at collection, before any in-process pytester run
from torch.distributed.rpc import api, internal

import rpc_harness
from rpc_harness._parent import launcher as _launcher
from rpc_harness._parent import torch_check as _torch_check
from rpc_harness.errors import Unsupported


@pytest.fixture(autouse=True)
def fresh_check(monkeypatch):
    """Each test checks anew, and leaves no findings behind for other tests."""
    monkeypatch.setattr(_torch_check, "_findings", None)
    yield
    _torch_check.forget()


def entry(ctx):
    return ctx.rank


# What an older torch lacks that the harness does without (torch.accelerator came with 2.6).
PREDATES = {_torch_check.ACCELERATOR} if not hasattr(torch, "accelerator") else set()


def _degraded_by_age() -> list[str]:
    return [line for line in _torch_check.degraded() if not line.startswith(tuple(PREDATES))]


def test_every_piece_is_there_on_this_torch():
    found = _torch_check.findings()
    assert found.version == torch.__version__
    missing = [(piece.name, why) for piece, why in found.missing if piece.feature not in PREDATES]
    assert missing == []
    _torch_check.require(faulty_agent=True, retry_log=True)
    assert _degraded_by_age() == []


def test_a_removed_name_fails_the_first_world_naming_torch_and_the_piece_before_any_process_starts(monkeypatch):
    def no_process(*args, **kwargs):
        raise AssertionError("a process was about to start")

    monkeypatch.setattr(_launcher._workdirs, "make", no_process)
    monkeypatch.setattr(_launcher, "_mp_context", no_process)
    monkeypatch.delattr(internal, "_run_function")
    with pytest.raises(Unsupported) as refused:
        rpc_harness.run_world(entry, world_size=2)
    message = str(refused.value)
    assert message.startswith(f"torch {torch.__version__} lacks what rpc-harness hooks in it")
    assert "before any process started" in message
    assert ("  - torch.distributed.rpc.internal._run_function: torch.distributed.rpc.internal has no "
            "'_run_function' (used for: the RPC hooks wrap it") in message
    assert message.count("\n  - ") == 1, "only the missing piece is named"


def test_a_name_that_changed_shape_is_named_with_what_changed(monkeypatch):
    def rpc_sync(func, to, args=None, kwargs=None, timeout=-1.0):
        raise AssertionError("never called")

    monkeypatch.setattr(api, "rpc_sync", rpc_sync)
    with pytest.raises(Unsupported, match=r"torch\.distributed\.rpc\.api\.rpc_sync: takes \(func, to, args, kwargs, "
                                          r"timeout\), the harness calls it with \(to, func, args, kwargs, timeout\)"):
        _torch_check.require()


def test_the_faulty_agent_missing_fails_only_the_worlds_that_need_it(monkeypatch):
    import torch.distributed.rpc._testing as faulty

    monkeypatch.delattr(faulty, "FaultyTensorPipeRpcBackendOptions")
    _torch_check.require()  # a world without message faults or fuzz
    with pytest.raises(Unsupported) as refused:
        _torch_check.require(faulty_agent=True)
    message = str(refused.value)
    assert f"this world has message faults (msgfail, msgdelay) or fuzz, which need the faulty agent of torch, and " \
           f"torch {torch.__version__} lacks it" in message
    assert "torch.distributed.rpc._testing.FaultyTensorPipeRpcBackendOptions" in message
    assert "Worlds without them run on this torch." in message
    assert _degraded_by_age() == [
        "torch.distributed.rpc._testing.FaultyTensorPipeRpcBackendOptions: torch.distributed.rpc._testing has no "
        "FaultyTensorPipeRpcBackendOptions (message faults (msgfail, msgdelay) and schedule fuzzing run torch's "
        "faulty agent)"]


def test_the_debug_counts_missing_fail_only_reused_worlds(monkeypatch):
    import torch.distributed.autograd as dist_autograd

    monkeypatch.delattr(dist_autograd, "_get_debug_info")
    _torch_check.require()  # a fresh world checks no counts
    with pytest.raises(Unsupported) as refused:
        _torch_check.require(reused=True)
    message = str(refused.value)
    assert "this world has entries that share it (rpc_world_module, rpc_world_session), which need the debug " \
           f"counts of torch, and torch {torch.__version__} lacks it" in message
    assert "torch.distributed.autograd._get_debug_info" in message


def test_torchs_tensorpipe_init_uses_its_gloo_group_only_for_what_the_store_does_for_it():
    from torch.distributed.rpc import backend_registry

    assert _torch_check.group_uses(_torch_check.inspect.getsource(
        backend_registry._tensorpipe_init_backend_handler)) == list(_torch_check.GROUP_USES)


def _handler_that_hands_its_group_to_the_agent(store, name, rank, world_size, options, agent_type=None):
    group = backend_registry_of_old._init_process_group(store, rank, world_size)  # noqa: F821 - read, never run
    reverse_maps, devices = backend_registry_of_old._tensorpipe_exchange_and_check_all_device_maps(  # noqa: F821
        name, 0, {}, [], group)
    agent = agent_type(store, name, rank, world_size, options, group)
    group.barrier().wait()
    return agent


def test_a_torch_whose_init_uses_its_group_for_more_fails_only_the_worlds_that_replace_it(monkeypatch):
    from torch.distributed.rpc import backend_registry

    monkeypatch.setattr(backend_registry, "_tensorpipe_init_backend_handler",
                        _handler_that_hands_its_group_to_the_agent)
    _torch_check.require()  # a world on torch's own path (rendezvous="gloo")
    with pytest.raises(Unsupported) as refused:
        _torch_check.require(store_rendezvous=True)
    message = str(refused.value)
    assert "this world has ranks that meet through its store (rendezvous='store', the default; rendezvous='gloo' " \
           "is torch's own way), which need the Gloo group's place in init_rpc of torch" in message
    assert ("_tensorpipe_init_backend_handler uses its group for backend_registry_of_old._init_process_group, "
            "backend_registry_of_old._tensorpipe_exchange_and_check_all_device_maps, agent_type, barrier") in message


def test_a_world_with_message_faults_is_refused_at_launch_when_the_faulty_agent_is_missing(monkeypatch):
    import torch.distributed.rpc._testing as faulty

    def no_process(*args, **kwargs):
        raise AssertionError("a process was about to start")

    monkeypatch.setattr(_launcher._workdirs, "make", no_process)
    monkeypatch.delattr(faulty, "FaultyTensorPipeRpcBackendOptions")
    with pytest.raises(Unsupported, match="message faults"):
        rpc_harness.run_world(entry, world_size=2, faults="msgdelay:worker0@PYTHON_CALL=0.1s")


def test_the_faulty_agent_taken_out_of_sys_modules_is_checked_without_importing_it_again(monkeypatch):
    # pytester's in-process runs restore sys.modules: importing torch's
    # faulty agent a second time registers its C++ types twice and aborts.
    monkeypatch.delitem(sys.modules, "torch.distributed.rpc._testing")
    assert _torch_check.check().lacking(_torch_check.FAULTY_AGENT) == []
    assert "torch.distributed.rpc._testing" not in sys.modules, "it was not imported again"


def test_the_check_runs_once_per_process(monkeypatch):
    _torch_check.require()
    monkeypatch.delattr(rpc, "init_rpc")  # taken away after the first world: not seen again
    _torch_check.require()
    _torch_check.forget()
    with pytest.raises(Unsupported, match="torch.distributed.rpc.init_rpc: torch.distributed.rpc has no 'init_rpc'"):
        _torch_check.require()
