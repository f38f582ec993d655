"""CUDA device maps in a world (rpc_harness._devices): which TensorPipe channels
a world asks for, and the refusal where CUDA is not available."""

from __future__ import annotations

import pytest
import torch

import rpc_harness
from rpc_harness import _devices
from rpc_harness.errors import Unsupported
from rpc_harness.rank_setup import tensorpipe_options

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")


def test_a_world_without_devices_runs_the_basic_channel_only():
    assert _devices.channels() == ["basic"]
    assert _devices.channels({"worker1": {}}, [], cuda=True) == ["basic"], "an empty map names no device"
    assert _devices.channels({"worker1": {0: 0}}, cuda=False) == ["basic"]


def test_device_maps_add_tensorpipes_cuda_channels_where_cuda_is_available():
    # What a CUDA machine's world asks TensorPipe for (not run here: no GPU).
    assert _devices.channels({"worker1": {0: 0}}, cuda=True) == ["cuda_ipc", "cuda_basic", "basic"]
    assert _devices.channels(None, ["cuda:0"], cuda=True) == ["cuda_ipc", "cuda_basic", "basic"]


def test_every_rank_of_a_world_that_may_move_cuda_tensors_offers_the_cuda_channels():
    # The one-sided map: worker1 names no device, worker0 does; a pipe needs
    # the CUDA channels on both ends.
    assert _devices.channels(None, None, cuda=True, world=True) == ["cuda_ipc", "cuda_basic", "basic"]
    assert _devices.channels({}, [], cuda=True, world=True) == ["cuda_ipc", "cuda_basic", "basic"]
    assert _devices.channels(None, None, cuda=False, world=True) == ["basic"], "no CUDA, no CUDA channels"


@no_cuda
def test_device_maps_are_refused_in_init_rpc_without_cuda():
    maps = {"worker1": {torch.device("cuda:0"): torch.device("cuda:0")}}
    with pytest.raises(Unsupported) as refused:
        tensorpipe_options("file:///nonexistent", 5.0, device_maps=maps, devices=[])
    message = str(refused.value)
    assert message.startswith("init_rpc with TensorPipe options of device_maps=")
    assert "CUDA is not available here" in message and "TCP transport with its basic channel" in message
    assert tensorpipe_options("file:///nonexistent", 5.0, device_maps={}, devices=[]).device_maps == {}


# -- the world option devices (issue 29, item 2) ----------------------------------------------


def test_each_rank_gets_its_device_round_robin():
    assert [_devices.rank_device(("cuda",), rank, 2) for rank in range(4)] == ["cuda:0", "cuda:1", "cuda:0", "cuda:1"]
    assert [_devices.rank_device(("cuda:1", "cuda:0"), rank, 2) for rank in range(3)] == ["cuda:1", "cuda:0", "cuda:1"]
    assert _devices.rank_device((), 3, 8) == "cpu"


def test_a_run_worlds_rank_maps_its_device_to_every_peers():
    maps = _devices.world_device_maps(("cuda",), ("a", "b", "c"), 1, 2)
    assert maps == {"a": {"cuda:1": "cuda:0"}, "c": {"cuda:1": "cuda:0"}}
    back = _devices.world_device_maps(("cuda",), ("a", "b", "c"), 0, 2)
    assert back["b"] == {"cuda:0": "cuda:1"}, "each pair maps both ways alike"


def test_the_report_says_when_ranks_share_a_gpu():
    assert _devices.sharing_note(("cuda",), 4, 2) == "cuda (4 ranks on 2 GPU(s), shared round-robin)"
    assert _devices.sharing_note(("cuda",), 2, 2) == "cuda"
    assert _devices.sharing_note((), 4, 2) == ""


def _no_launch(*args, **kwargs):
    raise AssertionError("a process was started for a world that should have been refused")


@no_cuda
def test_a_world_that_asks_for_cuda_is_refused_before_any_process_starts(monkeypatch):
    monkeypatch.setattr("rpc_harness._parent.launcher.launch", _no_launch)
    with pytest.raises(Unsupported) as refused:
        rpc_harness.run_world("programs.echo:echo", world_size=2, devices="cuda")
    assert str(refused.value).startswith("run_world(): devices='cuda' asks for CUDA, but CUDA is not available here")
    assert "\n" not in str(refused.value)


def test_devices_past_the_machines_and_with_the_faulty_agent_are_refused(monkeypatch):
    monkeypatch.setattr("rpc_harness._parent.launcher.launch", _no_launch)
    monkeypatch.setattr("rpc_harness._cuda_fork.cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(Unsupported, match=r"names cuda:2, but this machine has 2 CUDA device\(s\) \(cuda:0..cuda:1\)"):
        rpc_harness.run_world("programs.echo:echo", world_size=2, devices=["cuda:1", "cuda:2"])
    with pytest.raises(Unsupported, match="torch's faulty agent, which those need, takes no device maps"):
        rpc_harness.run_world("programs.echo:echo", world_size=2, devices="cuda", fuzz=0.01)


def test_the_devices_option_reads_its_text_forms_and_refuses_others():
    from rpc_harness.options import check_devices

    assert check_devices("cpu", "x") == () and check_devices("cuda", "x") == ("cuda",)
    assert check_devices("cuda:0, cuda:1", "x") == ("cuda:0", "cuda:1")
    assert check_devices("", "x") == check_devices([], "x") == (), "no devices at all: the CPU"
    for bad in ("gpu", "cuda,cpu", "cuda:01", 5, [""], "cuda,"):
        with pytest.raises(rpc_harness.WorldSpecError, match=r"^marker: invalid devices"):
            check_devices(bad, "marker")
