"""A session that leaves something in the checkout fails.

Every test works in its own temporary folder: one that wrote into the
checkout (issue 38: the bench's refusal test left ``rpc-harness-out/``
there, an empty folder that ``git status`` does not even show) would leave
the same in a user's repository. The session lists every path under its
root folder when it starts and again when it ends, in the process that
runs it (the xdist controller, after every worker is done), and fails
naming each new one.

What the runner itself keeps there is not a test's doing: pytest's cache
folder (where failing worlds' traces go by design) and Python's bytecode.
A path git tracks when the session ends (a file merged or written by hand
while the suite ran) is part of the checkout, not a leftover.
"""

from __future__ import annotations

import os
import subprocess

import pytest

RUNNERS_OWN = frozenset({".pytest_cache", "__pycache__", ".git", ".venv"})
_before_key = pytest.StashKey[frozenset]()


def paths_under(root: str, *, temporary: str | None = None) -> frozenset[str]:
    """Every file and folder under ``root``, relative to it, but for the
    runner's own folders (and what is inside them) and the session's
    ``temporary`` folder, where that is inside ``root`` (``--basetemp``)."""
    found = set()
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = [name for name in subfolders if name not in RUNNERS_OWN and not name.endswith(".egg-info")
                         and os.path.join(folder, name) != temporary]
        relative = os.path.relpath(folder, root)
        found.update(os.path.normpath(os.path.join(relative, name)) for name in (*subfolders, *files))
    return frozenset(found)


def tracked_under(root: str) -> frozenset[str]:
    """What git tracks under ``root``, with the folders that hold it (none
    where ``root`` is no git checkout)."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return frozenset()
    tracked = set()
    for path in os.fsdecode(listed).split("\0"):
        while path:
            tracked.add(os.path.normpath(path))
            path = os.path.dirname(path)
    return frozenset(tracked)


def _runs_the_session(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput")  # an xdist worker runs a share of it


def _paths(config: pytest.Config) -> frozenset[str]:
    temporary = config.option.basetemp
    return paths_under(str(config.rootpath), temporary=os.path.abspath(temporary) if temporary else None)


def pytest_sessionstart(session: pytest.Session) -> None:
    if _runs_the_session(session.config):
        session.config.stash[_before_key] = _paths(session.config)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if not _runs_the_session(config) or _before_key not in config.stash:
        return
    root = str(config.rootpath)
    new = _paths(config) - config.stash[_before_key] - tracked_under(root)
    # A new folder's contents are the folder's: name the outermost new path only.
    left = sorted(path for path in new if os.path.dirname(path) not in new)
    if not left:
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_sep("=", "the session wrote into the checkout", red=True)
        for path in left:
            reporter.write_line(f"left behind: {os.path.join(root, path)}")
        reporter.write_line("every test works in its own temporary folder (tmp_path, monkeypatch.chdir(tmp_path))")
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
