"""CUDA device maps in a world (rpc_harness._devices): which TensorPipe channels
a world asks for, and the refusal where CUDA is not available."""

from __future__ import annotations

import pytest
import torch

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
