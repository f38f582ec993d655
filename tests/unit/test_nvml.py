"""GPU memory by process through NVML (rpc_harness._parent.nvml): on a machine
without NVIDIA's driver every answer is None; the arithmetic on what NVML
lists is tested with a list made by hand."""

from __future__ import annotations

from rpc_harness._parent import nvml as _nvml


def test_without_nvidias_driver_nvml_answers_none(monkeypatch):
    monkeypatch.setattr(_nvml, "_LIBRARY", "libnvidia-ml-not-here.so.1")
    monkeypatch.setattr(_nvml, "_nvml", None)
    assert _nvml.gpu_processes() is None
    assert _nvml.held_by([1, 2]) == {}


def test_memory_held_by_a_worlds_ranks():
    listed = {101: 3 * 2**30, 102: 512 * 2**20, 999: 2**30}
    assert _nvml.held_by([101, 102, 103], listed) == {101: 3 * 2**30, 102: 512 * 2**20}
    assert _nvml.describe(3 * 2**30) == "3.0 GiB" and _nvml.describe(512 * 2**20) == "512 MiB"
