"""Where a scenario's tensors live, and how close a GPU run must come to the
CPU baseline.

A scenario's rank puts its model on its own device: ``ctx.device`` under the
world option ``devices`` (``rpc-harness run --device cuda``), the CPU
otherwise and in the single-process baseline. The same code runs either
way: on the CPU every placement below is a no-op, so a CPU world computes
exactly what it computed before devices existed (the suite checks the
scenarios bit for bit there, with the device as a parameter).

Tolerances. The baseline always runs on the CPU. A CUDA kernel sums in
another order than the CPU's (cuBLAS and cuDNN tile their reductions), so a
GPU run cannot equal it bit for bit even with TF32 off and deterministic
algorithms on (both set by :func:`prepare`: TF32 would round matmul inputs
to 10 mantissa bits, a relative error near 1e-3; determinism makes two GPU
runs agree, not a GPU run and a CPU one). The float32 reordering error of
one step is a few ulps of the largest partial sum (around 1e-6 relative);
it compounds over optimizer steps, tens of steps here. Hence on CUDA each
scenario's ``rtol``/``atol`` are raised to at least :data:`GPU_RTOL` and
:data:`GPU_ATOL`, a hundred times the one-step error and still a thousand
times below what a real bug moves (the planted ones move gradients by 1e-2
and more). Measured on an H200 (2026-11-26, torch 2.11+cu130): every
scenario and fault check of ``rpc-harness run all --device cuda`` came
within 3.1e-6 (absolute) of its CPU baseline, 5.7e-7 to 3.1e-6 by world.
"""

from __future__ import annotations

import os
from typing import Any

import torch

GPU_RTOL = 1e-4
GPU_ATOL = 1e-5


def here() -> torch.device:
    """This rank's device (the world option ``devices``); the CPU outside a
    world, as in the baseline."""
    from rpc_harness import current_context

    ctx = current_context()
    return torch.device(getattr(ctx, "device", "cpu") if ctx is not None else "cpu")


def prepare(device: torch.device | str) -> None:
    """Deterministic numerics for a rank that computes on CUDA: TF32 off,
    cuDNN deterministic, torch's deterministic algorithms where it has them
    (warning, not raising, where it has none). Nothing on the CPU."""
    if torch.device(device).type != "cuda":
        return
    # cuBLAS reads it when its first handle is made: before any matmul.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cuda.matmul.allow_tf32 = False
    # Through set_flags (what torch's own cudnn.flags() uses), not by
    # assignment: torch's test utilities (torch.testing._internal.common_utils,
    # which its RPC examples import) freeze assignment to the cuDNN flags for
    # the whole process at import, and every rank forked from a forkserver
    # that preloaded such a test module inherits that. On an H200 the whole
    # suite's GPU scenario tests failed so (the forkserver had preloaded
    # tests/world/test_spawn.py), and passed alone.
    torch.backends.cudnn.set_flags(_benchmark=False, _deterministic=True, _allow_tf32=False)
    torch.use_deterministic_algorithms(True, warn_only=True)


def to_cpu(value: Any) -> Any:
    """``value`` with every tensor in it (dicts, lists, tuples) copied to the
    CPU: what a rank returns goes to the test process, which must never
    touch CUDA. A CPU tensor is returned as it is."""
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, dict):
        return {key: to_cpu(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(to_cpu(item) for item in value)
    return value


def tolerances(rtol: float, atol: float, device: str) -> tuple[float, float]:
    """The tolerances a run on ``device`` is judged with against the CPU
    baseline: the config's own on the CPU, at least ``GPU_RTOL``/``GPU_ATOL``
    on CUDA (the module docstring says why)."""
    if str(device).startswith("cuda"):
        return max(rtol, GPU_RTOL), max(atol, GPU_ATOL)
    return rtol, atol
