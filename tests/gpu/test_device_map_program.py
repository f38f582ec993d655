"""The TensorPipe CUDA RPC tutorial's one-sided device map
(tests/programs/cuda_rpc.py: only worker0 names a map) under
``rpc_world.spawn``: every rank offers TensorPipe's CUDA channels, so the
pipe finds one (issue 29, item 3). Passed on an H200 (2026-11-26)."""

from __future__ import annotations

import pytest
from programs import cuda_rpc

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.mark.parametrize("how", ["device_maps", "set_device_map"])
def test_the_one_sided_device_map_works_under_spawn(rpc_world, how):
    result = rpc_world.spawn(cuda_rpc.run_worker, args=(2, how), nprocs=2)
    assert result.values[0] == {"device": "cuda:0", "value": [2.0, 2.0]}
