"""CUDA kept out of the forkserver (issue 29, item 1), on a CPU machine: the
CUDA probes torch would use on a GPU machine are replaced by fakes that write
down who called them, in which process.

On a GPU machine, ``torch.cuda.is_available()`` without NVML initializes the
driver, and a module that did so in the forkserver broke every world after
it. Here the fakes stand in for the driver: a call of the driver-count probe
is the initialization that poisons a fork.
"""

from __future__ import annotations

import json

import pytest

# Imported before any in-process session, as in test_plugin.py.
import torch  # noqa: F401

import rpc_harness
from rpc_harness import _cuda_fork

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# A conftest that makes this CPU torch look like a CUDA build whose NVML
# answers: is_available() is True through NVML, and the driver's own count
# (the call that initializes CUDA) writes the pid that made it to a file.
FAKE_CUDA_CONFTEST = """
import os
import torch

DRIVER_CALLS = os.path.join(os.path.dirname(__file__), "driver_calls.txt")

def _driver_count():
    with open(DRIVER_CALLS, "a") as file:
        file.write(f"{os.getpid()}\\n")
    return 1

torch.cuda._is_compiled = lambda: True
torch.cuda._device_count_nvml = lambda: 1
torch._C._cuda_getDeviceCount = _driver_count
"""

# The idiomatic GPU test module: a module-level skipif on is_available().
IDIOMATIC_GPU_MODULE = """
import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")

def entry(ctx):
    return ctx.rank

def test_gpu_module_world(rpc_world):
    assert rpc_world.run(entry, world_size=2).values == [0, 1]
"""

# A module that initializes CUDA at import (a tensor on the GPU, a seeding):
# every such call goes through torch.cuda._lazy_init. Here the CPU torch
# refuses it, and the module goes on, as a module that guards it would.
EAGER_CUDA_MODULE = """
import os
import torch

IMPORTED_IN = os.getpid()
try:
    torch.cuda._lazy_init()
except Exception as error:
    REFUSAL = str(error)
else:
    REFUSAL = None

def entry(ctx):
    return IMPORTED_IN, os.getpid(), REFUSAL

def test_eager_module_world(rpc_world):
    for imported_in, pid, refusal in rpc_world.run(entry, world_size=2).values:
        assert imported_in == pid, "the module was preloaded in the forkserver, CUDA call and all"
        assert refusal is not None and "rpc-harness" not in refusal, "a rank's own import may use CUDA"
"""

CPU_MODULE = """
import os

def entry(ctx):
    return os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK")

def test_cpu_world_after_them(rpc_world):
    assert rpc_world.run(entry, world_size=2).values == ["1", "1"]
"""


def _run(pytester, *args):
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", "-W",
                                         "default", *args, timeout=300)


def test_the_idiomatic_gpu_skipif_initializes_cuda_nowhere(pytester):
    pytester.makeconftest(FAKE_CUDA_CONFTEST)
    pytester.makepyfile(test_a_gpu=IDIOMATIC_GPU_MODULE, test_b_cpu=CPU_MODULE)
    result = _run(pytester)
    result.assert_outcomes(passed=2)
    calls = pytester.path / "driver_calls.txt"
    assert not calls.exists(), f"CUDA's driver was initialized (pids {calls.read_text().split()})"


def test_a_module_that_asks_for_cuda_at_import_is_named_and_imported_by_each_rank(pytester):
    pytester.makepyfile(test_a_eager=EAGER_CUDA_MODULE, test_b_cpu=CPU_MODULE)
    result = _run(pytester, "-rw")
    result.assert_outcomes(passed=2, warnings=1)
    result.stdout.fnmatch_lines(["*ForkserverCudaPytestWarning: test_a_eager asked for CUDA at import, in "
                                 "rpc-harness's forkserver: it was not preloaded there*"])


def test_a_rank_forked_after_cuda_was_initialized_says_who_and_what_to_do(pytester):
    pytester.makepyfile(
        test_bad_fork="""
import torch

# What torch reports in a child of a process that initialized CUDA (this
# module is preloaded in the forkserver, so every rank inherits it).
torch.cuda._is_in_bad_fork = lambda: True

def entry(ctx):
    return ctx.rank

def test_bad_fork(rpc_world):
    rpc_world.run(entry, world_size=2)
""")
    result = _run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*raised Unsupported: this rank was forked from rpc-harness's forkserver after "
                                 "CUDA was initialized there, so CUDA cannot be used in it. Something the "
                                 "forkserver imported*"])


def test_the_bad_fork_message_names_the_modules_the_forkserver_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: True)
    monkeypatch.setenv(_cuda_fork.CULPRITS_ENV, json.dumps(["gpu_helpers"]))
    error = _cuda_fork.rank_fork_error()
    assert isinstance(error, rpc_harness.Unsupported) and "(it refused to preload gpu_helpers)" in str(error)
    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: False)
    assert _cuda_fork.rank_fork_error() is None  # a clean fork goes on


def test_cuda_available_asks_through_nvml(monkeypatch):
    monkeypatch.delenv(_cuda_fork.NVML_ENV, raising=False)
    asked = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: asked.append(__import__("os").environ.get(
        _cuda_fork.NVML_ENV)) or True)
    assert rpc_harness.cuda_available() is True
    assert asked == ["1"], "is_available() was asked before NVML was chosen"


def test_the_forkserver_names_its_culprits_to_the_parent_once(tmp_path, recwarn):
    report = tmp_path / "forkserver-cuda.json"
    _cuda_fork.write_culprits(str(report), ["tests.gpu_module"])
    _cuda_fork.warn_about_culprits(str(report))
    _cuda_fork.warn_about_culprits(str(report))
    named = [w for w in recwarn if issubclass(w.category, _cuda_fork.ForkserverCudaWarning)]
    assert len(named) == 1 and "tests.gpu_module asked for CUDA" in str(named[0].message)
    assert json.loads(report.read_text()) == ["tests.gpu_module"]
