"""tools/mutation.py knows every module of the library and the tests of each
(issue 38: the misses of an outside trial clustered in modules the tool had
never been pointed at), and ``--changed`` picks the modules a branch touched."""

from __future__ import annotations

import ast
import pathlib
import runpy
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _tool():
    # run_path keeps the tool out of sys.modules (it is no package of ours).
    return runpy.run_path(str(ROOT / "tools" / "mutation.py"), run_name="mutation")


def _has_a_function(path: pathlib.Path) -> bool:
    return any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) for node in ast.walk(ast.parse(
        path.read_text())))


def test_every_library_module_is_in_the_mutation_table():
    tool = _tool()
    library = tool["library_modules"]()
    assert "rpc_harness/explore.py" in library and "rpc_harness/_schedule/scheduler.py" in library
    assert not any("/scenarios/" in m or "/apps/" in m for m in library), "the library is not its scenarios or apps"
    missing = sorted(set(library) - set(tool["MODULES"]))
    assert not missing, f"add to MODULES in tools/mutation.py, with the tests that cover them: {missing}"


def test_every_module_of_the_table_exists_and_names_tests_that_exist():
    for module, tests in _tool()["MODULES"].items():
        assert (ROOT / module).is_file(), f"{module} is gone: take it out of MODULES"
        for test in tests:
            assert (ROOT / test).is_file(), f"{module}: {test} does not exist"
        if not tests:
            assert not _has_a_function(ROOT / module), f"{module} has functions to mutate: name its tests"


def test_a_module_missing_from_the_table_is_found(tmp_path):
    # The check above reads the folders, not the table: a new module fails it.
    (tmp_path / "rpc_harness" / "_schedule").mkdir(parents=True)
    for name in ("rpc_harness/options.py", "rpc_harness/brand_new.py", "rpc_harness/_schedule/x.py",
                 "rpc_harness/scenarios/y.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    assert _tool()["library_modules"](tmp_path) == ["rpc_harness/_schedule/x.py", "rpc_harness/brand_new.py",
                                                    "rpc_harness/options.py"]


def _git(where: pathlib.Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=where, check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(where), "PATH": "/usr/bin:/bin"})


def test_changed_picks_the_modules_changed_since_the_base_committed_or_not(tmp_path):
    tool = _tool()
    modules = tool["MODULES"]
    for name in ("rpc_harness/options.py", "rpc_harness/faults.py", "rpc_harness/explore.py",
                 "rpc_harness/spec.py", "rpc_harness/trace.py", "README.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x = 1\n")
    _git(tmp_path, "init", "-q", "-b", "main")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "base")
    _git(tmp_path, "checkout", "-q", "-b", "work")
    (tmp_path / "rpc_harness/spec.py").write_text("x = 2\n")  # committed on the branch
    (tmp_path / "README.md").write_text("y\n")  # not a module
    _git(tmp_path, "commit", "-q", "-am", "change")
    _git(tmp_path, "checkout", "-q", "main")
    (tmp_path / "rpc_harness/trace.py").write_text("x = 5\n")
    _git(tmp_path, "commit", "-q", "-am", "main moves on: a change of main's is not the branch's")
    _git(tmp_path, "checkout", "-q", "work")
    (tmp_path / "rpc_harness/faults.py").write_text("x = 3\n")  # in the work tree only
    (tmp_path / "rpc_harness/_rank").mkdir()
    (tmp_path / "rpc_harness/_rank/gate.py").write_text("x = 4\n")  # new, untracked
    changed = tool["changed_modules"]("main", tmp_path)
    assert changed == [m for m in modules if m in ("rpc_harness/spec.py", "rpc_harness/faults.py",
                                                     "rpc_harness/_rank/gate.py")]


def test_changed_with_a_base_that_does_not_exist_is_one_line(tmp_path):
    _git(tmp_path, "init", "-q", "-b", "main")
    with pytest.raises(SystemExit, match=r"^git merge-base nope HEAD: "):
        _tool()["changed_modules"]("nope", tmp_path)
