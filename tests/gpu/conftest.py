"""tests/gpu: what only a CUDA machine can check (issue 29). Every test here
is marked ``gpu`` (and ``world``: they bring worlds up) and skipped where
CUDA is not available, by ``rpc_harness.cuda_available()``, which asks NVML
and leaves CUDA uninitialized (this conftest is imported by the forkserver
too, before every rank's fork).

Run on an H200 on 2026-11-26 (docs/benchmarks.md says what passed there);
``tools/gpu_check.sh`` runs them on a CUDA machine."""

from __future__ import annotations

import pathlib

import pytest

import rpc_harness

GPU_TESTS = pathlib.Path(__file__).parent


def pytest_collection_modifyitems(items):
    cuda = None
    for item in items:
        if GPU_TESTS not in item.path.parents:
            continue
        item.add_marker(pytest.mark.gpu)
        item.add_marker(pytest.mark.world)
        if cuda is None:
            cuda = rpc_harness.cuda_available()
        if not cuda:
            item.add_marker(pytest.mark.skip(reason="needs CUDA (rpc_harness.cuda_available() is False)"))
