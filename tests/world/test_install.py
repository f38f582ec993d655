"""rpc-harness installed the way another repo installs it: into a scratch
venv that holds torch and pytest and nothing else, never in editable mode,
and used from a project of its own whose modules are named ``harness`` and
``scenarios``, the names rpc-harness's packages had before they moved into
the ``rpc_harness`` namespace (issue 28).

The venv is built without the network: torch, pytest and what they need are
linked in from the suite's own environment, chosen by their distributions'
metadata from what rpc-harness itself requires (its extras left out), so that the packages of rpc-harness's extras (gymnasium, faker,
hypothesis, xdist) are simply not there.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXTRAS_PACKAGES = ("gymnasium", "faker", "hypothesis", "xdist")
pytestmark = pytest.mark.long


def _closure(names: list[str]) -> set[str]:
    """The distributions ``names`` need, themselves included (extras not
    followed: what a plain ``pip install`` brings)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = re.split(r"[ ;<>=!~\[(]", todo.pop(), maxsplit=1)[0].lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        for requirement in metadata.distribution(name).requires or ():
            if "extra ==" not in requirement and "extra==" not in requirement:
                marker = requirement.split(";", 1)[1] if ";" in requirement else ""
                if marker and not _marker_holds(marker):
                    continue
                todo.append(requirement)
    return seen


def _marker_holds(marker: str) -> bool:
    from packaging.markers import Marker

    return Marker(marker).evaluate()


def _link_distributions(names: set[str], into: Path) -> None:
    """Link every top-level file and folder of each distribution (its
    ``.dist-info`` included, so entry points are found) into ``into``."""
    into.mkdir()
    for name in names:
        dist = metadata.distribution(name)
        tops = {Path(str(file)).parts[0] for file in dist.files or () if not str(file).startswith("..")}
        for top in tops:
            source = Path(dist.locate_file(top))
            target = into / top
            if source.exists() and not target.exists() and top != "__pycache__":
                target.symlink_to(source)


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory):
    """A venv with torch, pytest and rpc-harness (no extras) installed from a
    copy of this repository's files, as ``pip install <clone>`` does."""
    root = tmp_path_factory.mktemp("install")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    deps = root / "deps"
    # pip and setuptools build and install the copy; they are not what the
    # fixture needs, and neither brings a package of the extras.
    _link_distributions(_closure(["rpc-harness", "pip", "setuptools"]) - {"rpc-harness"}, deps)
    purelib = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True, timeout=60).stdout.strip()
    Path(purelib, "core-deps.pth").write_text(f"{deps}\n")
    source = root / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__",
                                                                 ".pytest_cache", ".hypothesis", "docs", "tests"))
    install = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                              "--no-build-isolation", str(source)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stdout + install.stderr
    return venv


def _run(venv: Path, args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST_", "PYTHON"))}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


USER_HARNESS = """
def make_batch(n):
    return list(range(n))
"""

USER_SCENARIOS = """
NAMES = ("alpha", "beta")
"""

USER_TEST = """
import torch
import torch.distributed.rpc as rpc

import scenarios
from harness import make_batch


def add(a, b):
    return a + b


def ring(ctx):
    peer = ctx.names[(ctx.rank + 1) % ctx.world_size]
    return rpc.rpc_sync(peer, add, args=(torch.ones(2) * ctx.rank, len(make_batch(1)))).tolist()


def test_ring_beside_the_users_own_harness_and_scenarios(rpc_world):
    assert scenarios.NAMES == ("alpha", "beta")
    result = rpc_world.run(ring, world_size=3)
    assert result.values[2] == [3.0, 3.0]
"""


@pytest.fixture
def user_project(tmp_path):
    """Another repo: its own ``harness.py`` and ``scenarios.py`` at the root
    pytest runs from, and a test of its own that uses both and the fixture."""
    (tmp_path / "harness.py").write_text(USER_HARNESS)
    (tmp_path / "scenarios.py").write_text(USER_SCENARIOS)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_user.py").write_text(textwrap.dedent(USER_TEST))
    (tmp_path / "pytest.ini").write_text("[pytest]\npythonpath = .\naddopts = -p no:cacheprovider\n")
    return tmp_path


def test_the_core_install_brings_torch_and_pytest_and_none_of_the_extras(core_venv, tmp_path):
    probe = "import importlib.util as u, sys; print([m for m in sys.argv[1:] if u.find_spec(m)])"
    found = _run(core_venv, ["python", "-c", probe, *EXTRAS_PACKAGES], tmp_path)
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == "[]", f"packages of the extras in a core install: {found.stdout}"
    here = _run(core_venv, ["python", "-c", "import rpc_harness, torch, pytest; print(rpc_harness.__file__)"], tmp_path)
    assert here.returncode == 0, here.stderr
    assert "site-packages" in here.stdout, f"rpc_harness did not come from the install: {here.stdout}"
    # Only the one namespace is installed: the old top-level names are free.
    old = _run(core_venv, ["python", "-c", "import importlib.util as u; print(u.find_spec('harness'), u.find_spec('scenarios'))"], tmp_path)
    assert old.stdout.strip() == "None None", old.stdout + old.stderr


def test_a_users_own_harness_and_scenarios_modules_beside_the_fixture(core_venv, user_project):
    run = _run(core_venv, ["python", "-m", "pytest", "-q", "-p", "no:randomly"], user_project)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "1 passed" in out, out
    assert "Error while loading plugin" not in out


def test_a_missing_extra_is_one_line_naming_it_at_the_point_of_use(core_venv, tmp_path):
    listed = _run(core_venv, ["rpc-harness", "list"], tmp_path)
    assert listed.returncode == 0, listed.stdout + listed.stderr  # listing needs none of the scenarios' packages
    assert listed.stderr == "", "listing says nothing of the packages it does not need"
    assert re.search(r"^\s*rl\b", listed.stdout, re.M), listed.stdout
    assert "    needs gymnasium (the [scenarios] extra): not installed: pip install 'rpc-harness[scenarios]'" \
        in listed.stdout, listed.stdout
    parallel = _run(core_venv, ["python", "-m", "pytest", "-n", "2"], tmp_path)
    assert parallel.returncode == 4, parallel.stdout + parallel.stderr  # pytest's usage error
    assert parallel.stderr.strip() == ("ERROR: -n: running tests in parallel needs pytest-xdist, which is not "
                                       "installed: pip install 'rpc-harness[xdist]'"), parallel.stderr
    run = _run(core_venv, ["rpc-harness", "run", "rl", "--steps", "2"], tmp_path)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    assert "pip install 'rpc-harness[scenarios]'" in run.stderr and "gymnasium" in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, f"one line, not more: {run.stderr}"
    strategies = _run(core_venv, ["python", "-c", "from rpc_harness import strategies"], tmp_path)
    assert strategies.returncode != 0
    last = strategies.stderr.strip().splitlines()[-1]
    assert last == ("rpc_harness.errors.MissingExtra: rpc_harness.strategies needs hypothesis, which is not "
                    "installed: pip install 'rpc-harness[hypothesis]'"), strategies.stderr

