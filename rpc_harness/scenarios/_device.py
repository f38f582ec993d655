"""Where a scenario's tensors live, and how close a GPU run must come to the
CPU baseline.

A scenario's rank puts its model on its own device: ``ctx.device`` under the
world option ``devices`` (``rpc-harness run --device cuda``), the CPU
otherwise and in the single-process baseline. The same code runs either
way: on the CPU every placement below is a no-op, so a CPU world computes
exactly what it computed before devices existed (the suite checks the
scenarios bit for bit there, with the device as a parameter).

Tolerances. The baseline always runs on the CPU, and a GPU run cannot equal
it bit for bit, even with TF32 off and deterministic algorithms on (both
set by :func:`prepare`: TF32 would round matmul inputs to 10 mantissa bits,
a relative error near 1e-3; determinism makes two GPU runs agree, not a GPU
run and a CPU one). Two things move a GPU's gradient:

- Rounding. A CUDA kernel sums in another order (cuBLAS and cuDNN tile
  their reductions): a few ulps of the largest partial sum, around 1e-6 of
  a tensor's size per step.
- Ties. ReLU and max-pool branch on their inputs. Where an input is within
  rounding of the branch point (a ReLU input near 0, two values of a pool
  window nearly equal), the GPU may take the other branch. Then one term of
  a sum moves to another element or vanishes: that element moves by far more
  than rounding (1% of its value and more), the tensor as a whole does not.

Elementwise bounds cannot hold the second: a GPU run of the parameter
server failed ``rtol=1e-4, atol=1e-5`` on an H100 (2026-11-27), one element
of ``conv2.weight`` 1.3e-5 off (1.1% of it), and passed the next run. On
the CPU the same happens under another rounding of the same sums, measured
on the parameter server's baseline (its 48 steps, every tensor):

- float64 against float32: in 20 of 70 seeds a step broke those bounds, by
  up to 93 times; every tensor stayed within 6.0e-3 of its norm
  (``||a - e|| / ||e||``), and within 5.7e-5 where no tie broke;
- float32 with oneDNN off (torch's native kernels: another float32
  summation order, as on a GPU): all of 150 seeds broke them; every tensor
  stayed within 9.0e-3 of its norm.

So on CUDA each tensor is compared as a whole (gradcheck's ``norm``):
``||a - e|| <= GPU_RTOL * ||e|| + GPU_ATOL * sqrt(n)``, with ``GPU_RTOL``
3e-2, over three times the largest of those. The smallest real bug measured,
a gradient one parameter version stale, moves the most-moved tensor of a
step by 0.06 to 0.68 of its norm at its least visible step (48 seeds), and
it shows at every step, not at one. A CPU run keeps its config's
elementwise tolerances (bit for bit in practice).
"""

from __future__ import annotations

import os
from typing import Any

import torch

# On CUDA, per tensor: ||a - e|| <= GPU_RTOL * ||e|| + GPU_ATOL * sqrt(n) (the module docstring says why).
GPU_RTOL = 3e-2
GPU_ATOL = 1e-5


def here() -> torch.device:
    """This rank's device (the world option ``devices``); the CPU outside a
    world, as in the baseline."""
    from rpc_harness import current_context

    ctx = current_context()
    return torch.device(ctx.device if ctx is not None else "cpu")


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


def tolerances(rtol: float, atol: float, device: str) -> dict[str, Any]:
    """How a run on ``device`` is compared with the CPU baseline, as keyword
    arguments of :func:`rpc_harness.gradcheck.compare`: the config's own
    tolerances element by element on the CPU; on CUDA each tensor as a
    whole, within at least ``GPU_RTOL`` of its norm and ``GPU_ATOL`` per
    element (the module docstring says why)."""
    if str(device).startswith("cuda"):
        return {"rtol": max(rtol, GPU_RTOL), "atol": max(atol, GPU_ATOL), "norm": True}
    return {"rtol": rtol, "atol": atol, "norm": False}
