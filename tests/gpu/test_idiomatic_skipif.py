"""GPU tests written the idiomatic way: ``torch.cuda.is_available()`` in a
module-level skipif. This module is preloaded in the forkserver like every
test module; the plugin makes that call ask NVML, so it initializes no CUDA
there and every world of the session still forks ranks that can use CUDA
(issue 29, item 1; the whole suite on a CUDA machine, with this module
present, is what proves it: tools/gpu_check.sh).

Run-style entries rpc_sync CUDA tensors along the device maps the harness
builds between every pair of ranks. Passed on an H200 (2026-11-26), alone
and inside the whole suite."""

from __future__ import annotations

import pytest
import torch
import worlds

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU"),
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]
# Read right after the skipif, at import: by the time a test runs, another
# test of this process (one with a tensor on cuda:0) may have initialized it.
CUDA_INITIALIZED_BY_THE_SKIPIF = torch.cuda.is_initialized()


def test_the_skipif_left_cuda_uninitialized_in_this_process():
    assert not CUDA_INITIALIZED_BY_THE_SKIPIF, "asking torch.cuda.is_available() initialized CUDA"


@pytest.mark.parametrize("world_size", [2, 4])
def test_run_style_entries_rpc_sync_cuda_tensors_along_the_harness_device_maps(rpc_world, world_size):
    count = torch.cuda.device_count()
    result = rpc_world.run(worlds.ring_on_device, world_size=world_size, devices="cuda")
    assert result.values == [{"device": f"cuda:{rank % count}", "value": [float(rank) + 1] * 4}
                             for rank in range(world_size)]
    if world_size > count:
        assert "shared round-robin" in result.report()


def test_a_rank_is_on_its_gpu(rpc_world):
    result = rpc_world.run(worlds.device_of, world_size=2, devices="cuda:0")
    assert result.values == ["cuda:0", "cuda:0"]
