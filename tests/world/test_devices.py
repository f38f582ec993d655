"""A program that sends CUDA tensors with device maps (tests/programs/cuda_rpc.py,
the TensorPipe CUDA RPC tutorial's way): refused before its init_rpc with the
harness's own reason where CUDA is not available; run, with TensorPipe's CUDA
channels, where it is."""

from __future__ import annotations

import pytest
import torch
import worlds
from programs import cuda_rpc

import rpc_harness
from rpc_harness.errors import WorldFailed

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

HOWS = ["device_maps", "set_device_map", "devices"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
@pytest.mark.parametrize("how", HOWS)
def test_device_maps_are_refused_before_init_rpc_with_the_harness_reason(rpc_world, how):
    with pytest.raises(WorldFailed) as failed:
        rpc_world.spawn(cuda_rpc.run_worker, args=(2, how), nprocs=2)
    result = failed.value.result
    refused = result.ranks[0]
    assert refused.status == "raised" and refused.phase == "start-up", refused.describe()
    assert refused.error.startswith("Unsupported: TensorPipeRpcBackendOptions"), refused.error
    asked = {"device_maps": "(device_maps={'worker1': {0: 0}})",
             "set_device_map": ".set_device_map('worker1', {0: 0})",
             "devices": "(devices=['cuda:0'])"}[how]
    assert refused.error.startswith(f"Unsupported: TensorPipeRpcBackendOptions{asked} asks for CUDA tensors between "
                                    f"workers, but CUDA is not available here"), refused.error
    assert "TCP transport with its basic channel" in refused.traceback
    assert "torch.cuda.is_available() is False" in refused.traceback
    # The harness's reason comes first: not torch's own error on a CPU build.
    assert "Cannot access accelerator device" not in str(failed.value)
    assert result.ranks[1].status == "stopped", "worker1 waited in init_rpc until the world was stopped"


def test_every_rank_of_a_spawned_world_asks_for_the_cuda_channels_the_world_may_need(rpc_world, tmp_path):
    """The rank without a map of its own (worker1 of the one-sided map) asks
    for the world's channels too: seen through the channel decision, faked
    to record what each rank asks (CUDA channels cannot be built on a CPU
    torch)."""
    result = rpc_world.spawn(worlds.record_channel_requests, args=(2, str(tmp_path)), nprocs=2)
    assert result.values == [{"world": True}, {"world": True}]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (not run on the CPU machine this was written on)")
def test_cuda_tensors_travel_along_the_programs_device_maps(rpc_world):
    result = rpc_world.spawn(cuda_rpc.run_worker, args=(2, "device_maps"), nprocs=2)
    assert result.values[0] == {"device": "cuda:0", "value": [2.0, 2.0]}


def test_a_rank_knows_its_device_and_a_cpu_world_is_on_the_cpu(rpc_world_module):
    # A plain entry needs no fresh world: it runs in this module's reused one.
    result = rpc_world_module.run(worlds.device_of, world_size=2)
    assert result.values == ["cpu", "cpu"]
    assert "devices=" not in result.report(), "a CPU world's headline says nothing of devices"


class _EveryPidHoldsOneGiB(dict):
    """NVML as a GPU machine would answer: every process holds 1 GiB."""

    def __contains__(self, pid):
        return True

    def __getitem__(self, pid):
        return 2**30


def test_a_failed_worlds_report_says_how_much_gpu_memory_each_rank_held(monkeypatch):
    # NVML is asked in the supervisor, which runs in this process.
    monkeypatch.setattr("rpc_harness._parent.nvml.gpu_processes", _EveryPidHoldsOneGiB)
    result = rpc_harness.run_world(worlds.rank2_raises, world_size=3, check=False)
    assert [r.rank for r in result.failures] == [2] and not result.timed_out, result.report()
    lines = result.report().splitlines()
    held = [line for line in lines if line.endswith("it held 1.0 GiB of GPU memory")]
    # The two ranks still asleep when rank 2 raised were running as the world failed.
    assert {line.split(":")[0].strip() for line in held} >= {"rank 0 (worker0)", "rank 1 (worker1)"}, lines[:5]


def test_a_run_style_entry_moves_tensors_on_its_ranks_devices_the_cpu_here(rpc_world_module):
    # The entry tests/gpu runs with devices="cuda", here on the CPU: the same code path.
    result = rpc_world_module.run(worlds.ring_on_device, world_size=3)
    assert result.values == [{"device": "cpu", "value": [float(r) + 1] * 4} for r in range(3)]
