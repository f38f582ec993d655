"""The torch x Python test matrix: one session per pair. Not part of
.ci/run, which stays on the pinned CPU wheel; run it by hand (``pip install
nox``) before claiming a torch version works, and record what it printed in
the README's table of tested versions (with the date and the commit).

    nox -l                                   # every session
    nox -s "world(python='3.11', torch='2.13.0')"
    nox -s world -- tests/world/test_spawn.py -x   # posargs replace the default test selection
    nox -s world -- quick                   # the unit tests and the world tests of every hook
    nox -t supported                        # only the pairs the harness is known to work on

Each session makes its own venv and installs the repo with that torch.
torch 2.13.0 may come as a local CPU wheel (constraints.txt); every other
pair installs PyPI's CUDA build with its nvidia-* wheels (4.8 to
7.1 GB a venv; they import and run on a CPU-only machine). Venvs are reused
between runs (``reuse_existing_virtualenvs``); delete .nox/ when the disk is
short. Run one session at a time on a 2-core machine: each runs pytest -n 2.

The interpreters are found as ``python3.X``; under pyenv make them all
visible first, without changing pyenv's global choice::

    PYENV_VERSION=3.11.7:3.10.13:3.12.1:3.13.0 nox -l
"""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "venv"
nox.options.download_python = "never"  # no interpreter downloads: PyPI only
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = True
nox.options.sessions = ["world"]

# The releases on PyPI this matrix covers, newest first.
TORCH_ON_311 = ["2.14.1", "2.13.0", "2.12.1", "2.11.0", "2.10.0", "2.9.1", "2.8.0", "2.7.1", "2.6.0", "2.5.1", "2.4.1"]
# The other Pythons run the newest release the project is developed on.
OTHER_PYTHONS = ["3.10", "3.12", "3.13"]
MAIN_TORCH = "2.13.0"

# Pairs measured to fail, and why; they stay listed so that `nox -s world`
# shows them failing rather than silently skipping them. Empty since the last
# run: the failures it found (torch.accelerator before 2.6, co_qualname
# before Python 3.11, DistributedOptimizer's step renamed in 2.14) are fixed.
KNOWN_BROKEN: dict[tuple[str, str], str] = {}

# The default selection: every world test, stopping at the first failure.
DEFAULT_ARGS = ["tests/world", "-x"]
# `nox -s world -- quick`: the unit tests and the world tests of every hook
# into torch (RPC calls and serving, faults and message faults, programs of
# other shapes, asserts, device maps, schedules, replay, the CLI): about a
# third of the world tests' time.
QUICK_ARGS = ["tests/unit", *(f"tests/world/test_{name}.py" for name in (
    "spawn", "fault_controls", "foreign_programs", "asserts", "devices", "schedule", "replay", "cli"))]


def _pairs(*, world: bool = True) -> list:
    pairs = [("3.11", torch) for torch in TORCH_ON_311] + [(python, MAIN_TORCH) for python in OTHER_PYTHONS]
    params = []
    for python, torch in pairs:
        # The unit tests start no rank: they passed on every pair measured.
        tags = ["broken"] if world and (python, torch) in KNOWN_BROKEN else ["supported"]
        params.append(nox.param(python, torch, tags=tags))
    return params


def _install(session: nox.Session, torch: str) -> None:
    # Not `-c constraints.txt`: it pins the one torch the project's CI uses.
    session.install("-e", ".[test]", f"torch=={torch}")
    session.run("python", "-c", "import torch, harness; print('torch', torch.__version__)")


@nox.session
@nox.parametrize(("python", "torch"), _pairs())
def world(session: nox.Session, torch: str) -> None:
    """World tests (real RPC worlds) under one (python, torch) pair."""
    _install(session, torch)
    args = QUICK_ARGS if session.posargs == ["quick"] else session.posargs or DEFAULT_ARGS
    session.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", *args)


@nox.session
@nox.parametrize(("python", "torch"), _pairs(world=False))
def unit(session: nox.Session, torch: str) -> None:
    """Unit tests (no process started) under one (python, torch) pair."""
    _install(session, torch)
    session.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", *(session.posargs or ["tests/unit"]))
