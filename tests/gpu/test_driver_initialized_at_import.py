"""A test module that initializes the CUDA driver at import through a
library other than torch (here ``ctypes`` ``cuInit(0)``, as CuPy or JAX
would), in a pytest session of its own so that it poisons only that one:
the forkserver cannot refuse it, but names it in a warning; a CUDA world's
ranks stop saying who did it and what to do, not torch's "CUDA driver
initialization failed"; a CPU world still runs (issue 29, item 1)."""

from __future__ import annotations

pytestmark = __import__("pytest").mark.filterwarnings("ignore::DeprecationWarning")

DRIVER_AT_IMPORT = """
import ctypes

ctypes.CDLL("libcuda.so.1").cuInit(0)

def entry(ctx):
    return str(ctx.device)

def test_cuda_world(rpc_world):
    rpc_world.run(entry, world_size=2, devices="cuda")

def test_cpu_world(rpc_world):
    assert rpc_world.run(entry, world_size=2).values == ["cpu", "cpu"]
"""


def test_a_module_that_initialized_the_driver_at_import_is_named(pytester):
    pytester.makepyfile(test_cupy_like=DRIVER_AT_IMPORT)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "default", "-rw", timeout=300)
    result.assert_outcomes(passed=1, failed=1, warnings=1)
    result.stdout.fnmatch_lines([
        "*raised Unsupported: this rank was forked from rpc-harness's forkserver after importing test_cupy_like "
        "initialized the CUDA driver there*",
        "*ForkserverCudaPytestWarning: test_cupy_like initialized the CUDA driver at import*"])
