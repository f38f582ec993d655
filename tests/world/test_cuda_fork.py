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
# every such call goes through torch.cuda._lazy_init. A CPU torch refuses it
# and the module goes on, as a module that guards it would; on a GPU machine
# it succeeds in the ranks (it failed there when this asked for a refusal).
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
        # Its own import may use CUDA: on a GPU machine it succeeds (refusal None),
        # on this CPU torch it fails, but never with the forkserver's refusal.
        assert refusal is None or "rpc-harness" not in refusal, "a rank's own import may use CUDA"
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


# A CUDA machine as the parent sees it; and a test module whose import leaves
# the driver initialized, as cupy or a ctypes cuInit(0) would: the forkserver
# cannot refuse that, only name it.
FAKE_CUDA_MACHINE_CONFTEST = """
import torch
import rpc_harness._cuda_fork as cuda_fork

cuda_fork.cuda_available = lambda: True
torch.cuda.device_count = lambda: 1
"""

DRIVER_MODULE = """
import rpc_harness._cuda_fork as cuda_fork

cuda_fork.driver_initialized = lambda: True

def entry(ctx):
    return str(ctx.device)

def test_cuda_world(rpc_world):
    rpc_world.run(entry, world_size=2, devices="cuda")

def test_cpu_world(rpc_world):
    assert rpc_world.run(entry, world_size=2).values == ["cpu", "cpu"]
"""


# One of the suite's slowest (pytest --durations): the forkserver's own imports are under test, so a
# pytest session of its own (a fresh forkserver). Both kinds of module at import share it (one
# session, not two: ~7 s each on 2 cores): one that asks for CUDA (refused, then imported by each
# rank itself) and one that leaves the driver initialized (named; its CUDA world fails, its CPU
# world and the CPU module's after them go on). Each is named by its own warning.
def test_a_module_that_asks_for_cuda_or_initialized_the_driver_at_import_is_named_and_cuda_worlds_say_so(
        pytester):
    pytester.makeconftest(FAKE_CUDA_MACHINE_CONFTEST)
    pytester.makepyfile(test_a_eager=EAGER_CUDA_MODULE, test_b_driver=DRIVER_MODULE, test_c_cpu=CPU_MODULE)
    result = _run(pytester, "-rwfp")
    result.assert_outcomes(passed=3, failed=1, warnings=2)
    # The module that asked for CUDA: not preloaded, imported by each rank (its test passed).
    result.stdout.fnmatch_lines(["*ForkserverCudaPytestWarning: test_a_eager asked for CUDA at import, in "
                                 "rpc-harness's forkserver: it was not preloaded there*"])
    result.stdout.fnmatch_lines(["PASSED test_a_eager.py::test_eager_module_world"])
    # The module that initialized the driver: its CUDA world stops, saying why.
    result.stdout.fnmatch_lines([
        "*raised Unsupported: this rank was forked from rpc-harness's forkserver after importing test_b_driver "
        "initialized the CUDA driver there*"])
    result.stdout.fnmatch_lines(["*ForkserverCudaPytestWarning: test_b_driver initialized the CUDA driver at "
                                 "import, in rpc-harness's forkserver*"])
    result.stdout.fnmatch_lines(["FAILED test_b_driver.py::test_cuda_world*"])


# One of the suite's slowest (pytest --durations): a pytest session of its own, so that the module
# that fakes a bad fork is preloaded by a fresh forkserver.
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
    assert json.loads(report.read_text()) == {"refused": ["tests.gpu_module"], "driver": []}


def test_the_forkserver_names_the_module_that_initialized_the_driver_once(tmp_path, recwarn):
    report = tmp_path / "forkserver-cuda.json"
    _cuda_fork.write_culprits(str(report), [], ["cupy_at_import"])
    _cuda_fork.warn_about_culprits(str(report))
    _cuda_fork.warn_about_culprits(str(report))
    named = [w for w in recwarn if issubclass(w.category, _cuda_fork.ForkserverCudaWarning)]
    assert len(named) == 1 and "cupy_at_import initialized the CUDA driver at import" in str(named[0].message)


class _FakeDriver:
    """libcuda's cuDeviceGetCount: 3 (CUDA_ERROR_NOT_INITIALIZED) until cuInit."""

    def __init__(self, initialized):
        self.initialized = initialized

    def cuDeviceGetCount(self, count):  # noqa: N802 - the driver's name
        return 0 if self.initialized else 3


@pytest.mark.parametrize("initialized", [False, True])
def test_the_driver_is_asked_whether_it_was_initialized_without_initializing_it(monkeypatch, initialized):
    monkeypatch.setattr(_cuda_fork.ctypes, "CDLL", lambda name: _FakeDriver(initialized))
    assert _cuda_fork.driver_initialized() is initialized


def test_no_driver_is_no_initialized_driver(monkeypatch):
    def missing(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(_cuda_fork.ctypes, "CDLL", missing)
    assert _cuda_fork.driver_initialized() is False


def test_the_first_module_after_which_the_driver_is_initialized_is_the_culprit(monkeypatch):
    driver = _FakeDriver(False)
    monkeypatch.setattr(_cuda_fork.ctypes, "CDLL", lambda name: driver)
    # What the forkserver sets in its own environment: put back here, for
    # the worlds this worker starts later (their forkserver inherits it).
    for name in (_cuda_fork.NVML_ENV, _cuda_fork.CULPRITS_ENV, _cuda_fork.DRIVER_CULPRITS_ENV):
        monkeypatch.setenv(name, "")  # recorded, so that teardown restores what was there (or nothing)
        monkeypatch.delenv(name)
    watch = _cuda_fork.PreloadWatch()
    watch.start()
    try:
        watch.imported("conftest")
        driver.initialized = True
        watch.imported("test_cupy")
        watch.imported("test_after")
    finally:
        watch.stop()
    assert watch.driver_culprits == ["test_cupy"]
    assert json.loads(__import__("os").environ[_cuda_fork.DRIVER_CULPRITS_ENV]) == ["test_cupy"]


def test_a_driver_culprit_stops_only_ranks_of_worlds_that_ask_for_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: False)
    monkeypatch.setenv(_cuda_fork.DRIVER_CULPRITS_ENV, json.dumps(["test_cupy"]))
    error = _cuda_fork.rank_fork_error(wants_cuda=True)
    assert isinstance(error, rpc_harness.Unsupported)
    assert "after importing test_cupy initialized the CUDA driver there" in str(error)
    assert _cuda_fork.rank_fork_error(wants_cuda=False) is None, "a CPU world goes on"
