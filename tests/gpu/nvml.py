"""A minimal NVML reader (ctypes): the compute processes on the machine's
GPUs and the memory each holds. NVML does not initialize CUDA, so the test
process stays fork-safe. Written for tests/gpu, without a GPU to run it on:
not yet run."""

from __future__ import annotations

import ctypes
import ctypes.util

NVML_SUCCESS = 0
NVML_ERROR_INSUFFICIENT_SIZE = 7


class ProcessInfo(ctypes.Structure):
    # nvmlProcessInfo_t as nvmlDeviceGetComputeRunningProcesses_v2/_v3 fill it.
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


def _library() -> ctypes.CDLL:
    name = ctypes.util.find_library("nvidia-ml") or "libnvidia-ml.so.1"
    lib = ctypes.CDLL(name)
    _check(lib.nvmlInit_v2(), "nvmlInit_v2")
    return lib


def _check(code: int, call: str) -> None:
    if code != NVML_SUCCESS:
        raise RuntimeError(f"NVML {call} failed with code {code}")


def _processes_function(lib: ctypes.CDLL):
    for name in ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"):
        if hasattr(lib, name):
            return name, getattr(lib, name)
    raise RuntimeError("this NVML has no nvmlDeviceGetComputeRunningProcesses_v2/_v3")


def compute_processes() -> dict[int, int]:
    """pid -> bytes of GPU memory, over every GPU NVML lists (a pid on
    several GPUs sums)."""
    lib = _library()
    try:
        count = ctypes.c_uint()
        _check(lib.nvmlDeviceGetCount_v2(ctypes.byref(count)), "nvmlDeviceGetCount_v2")
        name, function = _processes_function(lib)
        found: dict[int, int] = {}
        for index in range(count.value):
            handle = ctypes.c_void_p()
            _check(lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)), "nvmlDeviceGetHandleByIndex_v2")
            size = ctypes.c_uint(0)
            code = function(handle, ctypes.byref(size), None)
            while code == NVML_ERROR_INSUFFICIENT_SIZE:
                size = ctypes.c_uint(size.value + 8)  # room for processes started meanwhile
                infos = (ProcessInfo * size.value)()
                code = function(handle, ctypes.byref(size), infos)
                if code == NVML_SUCCESS:
                    for info in infos[: size.value]:
                        found[info.pid] = found.get(info.pid, 0) + int(info.usedGpuMemory)
            _check(code, name)
        return found
    finally:
        lib.nvmlShutdown()
