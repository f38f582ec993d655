"""Shared by both halves of the suite: ``unit/`` starts no process,
``world/`` brings real RPC worlds up (marked ``world``, so that
``pytest -m "not world"`` is the quick loop)."""

import pathlib
import shutil
import tempfile
import time

import pytest
from checkout_guard import pytest_sessionfinish, pytest_sessionstart  # noqa: F401 - hooks of this suite
from failure_log import pytest_runtest_logreport  # noqa: F401 - a hook of this suite
from hypothesis import settings

# No per-example deadline: on a loaded 2-core machine (pytest -n auto) an
# example's time says nothing about the code, and a flaky test is a broken
# one. Timings belong in `rpc-harness bench`. Derandomized: each property
# test draws the same examples every run (seeded from its name), so a CI
# verdict never depends on the run's luck; a random search for new failures
# is a run under another profile (`--hypothesis-profile=rpc-thorough`).
settings.register_profile("rpc-harness-suite", deadline=None, derandomize=True)
settings.load_profile("rpc-harness-suite")

WORLD_TESTS = pathlib.Path(__file__).parent / "world"


def pytest_collection_modifyitems(items):
    for item in items:
        if WORLD_TESTS in item.path.parents:
            item.add_marker(pytest.mark.world)
    # The longest tests first, so that under xdist no worker is still running
    # one of them alone at the end (a stable sort: the rest keeps its order,
    # identical in every worker, as xdist requires).
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


def wait_gone(pids, within=10.0):
    """Pids still alive (not zombies) after up to ``within`` seconds."""
    until = time.monotonic() + within
    alive = list(pids)
    while alive and time.monotonic() < until:
        alive = [pid for pid in alive if is_alive(pid)]
        if alive:
            time.sleep(0.05)
    return alive


def is_alive(pid):
    try:
        with open(f"/proc/{pid}/status") as file:
            return "State:\tZ" not in file.read()
    except OSError:
        return False


@pytest.fixture
def assert_gone():
    def check(pids, within=10.0):
        __tracebackhide__ = True
        left = wait_gone(pids, within)
        assert not left, f"rank processes outlived their world: {left}"

    return check


@pytest.fixture
def short_tmp():
    """A private temp folder with a short path, for a child process's TMPDIR:
    multiprocessing puts its forkserver's unix socket there, and an AF_UNIX
    path holds at most 107 bytes, which tmp_path's nested names can pass
    (they grow with pytest's numbered base folder)."""
    folder = pathlib.Path(tempfile.mkdtemp(prefix="rpch-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)
