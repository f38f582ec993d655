"""CUDA kept out of every process a rank is forked from.

Measured on an H200 (torch 2.11+cu130): ``torch.cuda.is_available()`` calls
``cudaGetDeviceCount``, which initializes the driver, and every process
forked afterwards fails to use CUDA ("Cannot re-initialize CUDA in forked
subprocess"; TensorPipe's CUDA helpers and torch's seeding fail even in
CPU-only worlds). The forkserver imports test modules, conftests and
``rpc_preload`` modules before it forks any rank, so one test module with the
idiomatic ``skipif(not torch.cuda.is_available())`` broke every world after it.

Three guards, after vLLM's (it sets the same variable, vllm#15951):

- Every process of the harness asks for CUDA through NVML
  (``PYTORCH_NVML_BASED_CUDA_CHECK=1``): ``is_available()`` then counts
  devices without initializing the driver. The pytest plugin sets it in the
  test process, the forkserver in itself, and ranks inherit it.
- While the forkserver preloads, torch's ways into the driver
  (``torch.cuda._lazy_init``, which every CUDA tensor, seeding and device
  query goes through, from Python or C++; and ``_cuda_getDeviceCount``,
  NVML's fallback) raise instead, naming the module being imported. That
  module is dropped from the forkserver's ``sys.modules`` so each rank
  imports it itself, where CUDA is allowed, and the parent warns, naming it.
- After each preloaded module, the forkserver asks the driver itself
  whether it is initialized (:func:`driver_initialized`): a library other
  than torch (CuPy, JAX, a ctypes ``cuInit``) cannot be refused, but the
  module that did it is named to the parent, and a rank of a world that asks
  for CUDA says who did it and what to do, instead of torch's "CUDA driver
  initialization failed" at its first CUDA call. CPU worlds go on.
"""

from __future__ import annotations

import ctypes
import json
import os
import warnings
from typing import Any

NVML_ENV = "PYTORCH_NVML_BASED_CUDA_CHECK"
# The modules the forkserver refused to preload, as JSON: inherited by ranks.
CULPRITS_ENV = "_RPC_HARNESS_CUDA_CULPRITS"
# The modules after whose import the CUDA driver was initialized, as JSON.
DRIVER_CULPRITS_ENV = "_RPC_HARNESS_CUDA_DRIVER_CULPRITS"
_DRIVER = "libcuda.so.1"
_CUDA_SUCCESS = 0


class ForkserverCudaWarning(UserWarning):
    """A module the forkserver preloaded asked for CUDA there: it was not
    preloaded, and each rank imports it itself."""


_category: type[Warning] = ForkserverCudaWarning
_warned: set[tuple[str, str]] = set()  # (what it did, module)


def ask_through_nvml() -> None:
    """Have ``torch.cuda.is_available()`` in this process (and every process
    it starts) count devices through NVML instead of initializing CUDA."""
    os.environ.setdefault(NVML_ENV, "1")


def cuda_available() -> bool:
    """Whether this process could use CUDA, asked without initializing it, so
    that processes forked from here still can: write GPU skips with it,
    ``pytest.mark.skipif(not rpc_harness.cuda_available(), reason="no GPU")``.
    (``torch.cuda.is_available()`` is just as safe where the rpc-harness
    plugin is loaded, which asks through NVML for the whole session.)"""
    ask_through_nvml()
    import torch

    return bool(torch.cuda.is_available())


def driver_initialized() -> bool:
    """Whether the CUDA driver was initialized in this process, by torch or
    by any other library, asked without initializing it: ``cuDeviceGetCount``
    answers CUDA_ERROR_NOT_INITIALIZED until ``cuInit`` has run (seen on an
    H200, torch 2.11+cu130: 3 before, 0 after; a fork of an initialized
    process answers 3 too, so only the process itself can tell). False where
    there is no driver."""
    try:
        driver = ctypes.CDLL(_DRIVER)
    except OSError:
        return False
    count = ctypes.c_int(0)
    return bool(driver.cuDeviceGetCount(ctypes.byref(count)) == _CUDA_SUCCESS)


class PreloadWatch:
    """While the forkserver preloads: torch's ways into the CUDA driver raise
    instead, and the module being imported is named as their caller."""

    def __init__(self) -> None:
        self.module: str | None = None
        self.culprits: list[str] = []
        self.driver_culprits: list[str] = []
        self._driver_was = False
        self._saved: list[tuple[Any, str, Any]] = []

    def start(self) -> None:
        os.environ[NVML_ENV] = "1"  # in the forkserver, whatever the parent had
        self._driver_was = driver_initialized()
        import torch

        for owner, name in ((torch.cuda, "_lazy_init"), (torch._C, "_cuda_getDeviceCount")):
            original = getattr(owner, name, None)
            if original is not None:
                self._saved.append((owner, name, original))
                setattr(owner, name, self._refuse)

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        who = self.module or "a preloaded module"
        if self.module is not None and self.module not in self.culprits:
            self.culprits.append(self.module)
        raise RuntimeError(
            f"rpc-harness: {who} asked for CUDA while the forkserver preloaded it; CUDA initialized there breaks "
            "every rank forked from it, so each rank imports this module itself instead"
        )

    def imported(self, module: str) -> None:
        """After ``module``'s import: name it if the CUDA driver is initialized
        now and was not before (the first module to do so is the culprit)."""
        if not self._driver_was and driver_initialized():
            self._driver_was = True
            self.driver_culprits.append(module)

    def stop(self) -> None:
        """Put torch back as it was (before any rank is forked) and hand the
        culprits down to the ranks."""
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)
        self._saved.clear()
        os.environ[CULPRITS_ENV] = json.dumps(self.culprits)
        os.environ[DRIVER_CULPRITS_ENV] = json.dumps(self.driver_culprits)


def write_culprits(path: str, culprits: list[str], driver_culprits: list[str] = ()) -> None:
    """The forkserver's word to its parent (see :func:`warn_about_culprits`):
    the modules it refused to preload, and the module after whose import the
    CUDA driver was initialized."""
    with open(path + ".tmp", "w") as file:
        json.dump({"refused": list(culprits), "driver": list(driver_culprits)}, file)
    os.replace(path + ".tmp", path)  # whole, or not there yet


def warn_as(category: type[Warning]) -> None:
    """The warning class culprits are reported with (the pytest plugin's is
    a ``PytestWarning``)."""
    global _category
    _category = category


# What the parent says of each module the forkserver named, by what it did.
_CULPRIT_WARNINGS = {
    "driver": "initialized the CUDA driver at import, in rpc-harness's forkserver, through a library other than "
              "torch (which the forkserver cannot refuse): ranks forked from it cannot use CUDA, and worlds that "
              "ask for CUDA devices fail, naming it. Move that call into the test or the entry, or the module out "
              "of rpc_preload; CPU worlds still run",
    "refused": "asked for CUDA at import, in rpc-harness's forkserver: it was not preloaded there, and each rank "
               "imports it itself (slower, but every world still runs). Ask for CUDA inside tests or entries, and "
               "write GPU skips with rpc_harness.cuda_available(), which does not initialize CUDA",
}


def warn_about_culprits(path: str) -> None:
    """In the parent, after a world: warn once about each module the
    forkserver refused to preload because it asked for CUDA."""
    try:
        with open(path) as file:
            said = json.load(file)
    except (OSError, ValueError):
        return  # no forkserver yet, or it found nothing to say
    for kind, says in _CULPRIT_WARNINGS.items():
        for module in said.get(kind, []):
            if (kind, module) not in _warned:
                _warned.add((kind, module))
                warnings.warn(_category(f"{module} {says}"), stacklevel=3)


def rank_fork_error(wants_cuda: bool = False) -> Exception | None:
    """In a rank, before its first CUDA call: the error to stop with when it
    was forked from a process that initialized CUDA (saying who did and what
    to do), or None. A driver initialized by another library stops only a
    rank whose world asks for CUDA (``wants_cuda``)."""
    import torch

    from .errors import Unsupported

    driver_culprits = json.loads(os.environ.get(DRIVER_CULPRITS_ENV, "[]"))
    if wants_cuda and driver_culprits and not torch.cuda._is_in_bad_fork():
        return Unsupported(
            f"this rank was forked from rpc-harness's forkserver after importing {', '.join(driver_culprits)} "
            "initialized the CUDA driver there (through a library other than torch), so CUDA cannot be used in "
            "it. Move that call into the test or the entry, or take the module out of rpc_preload"
        )
    if not torch.cuda._is_in_bad_fork():
        return None
    culprits = json.loads(os.environ.get(CULPRITS_ENV, "[]"))
    named = f" (it refused to preload {', '.join(culprits)})" if culprits else ""
    return Unsupported(
        "this rank was forked from rpc-harness's forkserver after CUDA was initialized there, so CUDA cannot be "
        f"used in it{named}. Something the forkserver imported (a test module, a conftest, an rpc_preload module) "
        "initialized CUDA through a library other than torch at import: move that call into the test or the "
        "entry, or take the module out of rpc_preload"
    )
