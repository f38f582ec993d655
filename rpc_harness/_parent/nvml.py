"""Which processes hold GPU memory, read through NVML.

NVML answers without initializing CUDA, so the parent of a world (a pytest
process, whose forkserver must stay fork-safe) can ask it: the GPU tests
check that no process of a world still holds memory after the world, killed
ranks included, and a failed world's report says how much each rank held.

A small ctypes binding of the four calls needed (``nvmlInit_v2``,
``nvmlDeviceGetCount_v2``, ``nvmlDeviceGetHandleByIndex_v2``,
``nvmlDeviceGetComputeRunningProcesses_v3`` with ``nvmlProcessInfo_v3_t``),
rather than a dependency on pynvml for them. On a machine without NVIDIA's
driver the library is not there, and every answer is None.

NVML reports host pids: in a container with a pid namespace of its own, a
rank's pid may not be among them. Counting processes still works there.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable

_LIBRARY = "libnvidia-ml.so.1"
_SUCCESS = 0
_INSUFFICIENT_SIZE = 7
_MAX_PROCESSES = 1024  # twice the largest world: its ranks and anything else on the GPU


class _ProcessInfo(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


_nvml: ctypes.CDLL | None = None


def _library() -> ctypes.CDLL | None:
    global _nvml
    if _nvml is None:
        try:
            nvml = ctypes.CDLL(_LIBRARY)
        except OSError:
            return None
        if nvml.nvmlInit_v2() != _SUCCESS:
            return None
        _nvml = nvml
    return _nvml


def gpu_processes() -> dict[int, int] | None:
    """Bytes of GPU memory held by every process with a CUDA context on any
    of this machine's GPUs, by pid (summed over GPUs); None where NVML is not
    there."""
    nvml = _library()
    if nvml is None:
        return None
    count = ctypes.c_uint(0)
    if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != _SUCCESS:
        return None
    held: dict[int, int] = {}
    for index in range(count.value):
        device = ctypes.c_void_p()
        if nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(device)) != _SUCCESS:
            return None
        found = ctypes.c_uint(_MAX_PROCESSES)
        infos = (_ProcessInfo * _MAX_PROCESSES)()
        status = nvml.nvmlDeviceGetComputeRunningProcesses_v3(device, ctypes.byref(found), infos)
        if status not in (_SUCCESS, _INSUFFICIENT_SIZE):
            return None
        for info in infos[: min(found.value, _MAX_PROCESSES)]:
            held[info.pid] = held.get(info.pid, 0) + info.usedGpuMemory
    return held


def held_by(pids: Iterable[int], processes: dict[int, int] | None = None) -> dict[int, int]:
    """GPU memory each of ``pids`` holds (only those NVML lists)."""
    processes = gpu_processes() if processes is None else processes
    if processes is None:
        return {}
    return {pid: processes[pid] for pid in pids if pid in processes}


def describe(held: int) -> str:
    """``1.5 GiB`` / ``512 MiB``: GPU memory for a report."""
    mib = held / 2**20
    return f"{mib / 1024:.1f} GiB" if mib >= 1024 else f"{mib:.0f} MiB"
