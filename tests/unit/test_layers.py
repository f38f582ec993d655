"""The installed namespace keeps DESIGN.md's layers: the library (the modules
directly under ``rpc_harness``) imports neither the scenarios nor the apps,
the scenarios never import the apps, and pytest is imported by the plugin
alone (and by the rank's assert rewriting, which runs only under pytest)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import rpc_harness

PACKAGE = Path(rpc_harness.__file__).parent
LIBRARY = sorted(path for folder in ("", "_parent/", "_rank/", "rpc/", "c10d/", "_schedule/")
                 for path in PACKAGE.glob(f"{folder}*.py") if path.name != "__main__.py")
SCENARIOS = sorted((PACKAGE / "scenarios").rglob("*.py"))
MAY_IMPORT_PYTEST = {"pytest_plugin.py", "asserts.py"}


def imported(path: Path, package: str | None = None) -> set[str]:
    """Every module ``path`` (of ``package``, by default the one its place
    under ``rpc_harness`` says) imports, relative imports resolved."""
    if package is None:
        package = ".".join(("rpc_harness", *path.relative_to(PACKAGE).parent.parts))
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def _reaches(names: set[str], prefix: str) -> list[str]:
    return sorted(name for name in names if name == prefix or name.startswith(prefix + "."))


@pytest.mark.parametrize("path", LIBRARY, ids=lambda path: str(path.relative_to(PACKAGE)))
def test_the_library_imports_neither_the_scenarios_nor_the_apps(path):
    names = imported(path)
    assert not _reaches(names, "rpc_harness.scenarios"), f"{path.name} imports the scenarios"
    assert not _reaches(names, "rpc_harness.apps"), f"{path.name} imports the apps"
    if path.name not in MAY_IMPORT_PYTEST:
        assert not _reaches(names, "pytest") and not _reaches(names, "_pytest"), f"{path.name} imports pytest"


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda path: str(path.relative_to(PACKAGE)))
def test_the_scenarios_never_import_the_apps(path):
    assert not _reaches(imported(path), "rpc_harness.apps"), f"{path} imports the apps"


def test_the_check_sees_a_relative_import_of_the_scenarios(tmp_path):
    """The check itself: a library module that reached the scenarios by a
    relative import would be seen."""
    module = tmp_path / "probe.py"
    module.write_text("from .scenarios import rl\nfrom . import apps\n")
    names = imported(module, "rpc_harness")
    assert _reaches(names, "rpc_harness.scenarios") and _reaches(names, "rpc_harness.apps")


# The schedule core: the _schedule package (the scheduler, its strategies,
# the recorder, virtual time) and the schedule's forms and messages.
# Testable with no process (the model test drives it), so none of it may
# reach torch, multiprocessing or the harness's process machinery.
SCHEDULE_CORE = tuple(sorted(str(path.relative_to(PACKAGE)) for path in (PACKAGE / "_schedule").glob("*.py"))) + (
    "schedule.py", "_messages.py", "seeds.py", "errors.py")


def _dotted(name: str) -> str:
    """``_schedule/scheduler.py`` -> ``rpc_harness._schedule.scheduler``."""
    parts = name[:-3].split("/")
    return ".".join(("rpc_harness", *(parts[:-1] if parts[-1] == "__init__" else parts)))


def _source(module: str) -> Path:
    """The file of an ``rpc_harness`` module or package."""
    base = PACKAGE.joinpath(*module.split(".")[1:])
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


CORE_MAY_IMPORT = {_dotted(name) for name in SCHEDULE_CORE}


def _at_import_time(path: Path) -> set[str]:
    """What importing ``path`` imports: its imports less those in function
    bodies (run when called) and under ``if TYPE_CHECKING:`` (read by type
    checkers only), relative imports resolved."""
    package = ".".join(("rpc_harness", *path.relative_to(PACKAGE).parent.parts))
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            return
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = (package.rsplit(".", node.level - 1)[0] if node.level > 1 else package) if node.level else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return names


def _closure(start: str) -> set[str]:
    """The rpc_harness modules ``start`` reaches when it is imported."""
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        path = _source(name)
        if name in seen or not path.exists():
            continue
        seen.add(name)
        todo.extend(n for n in _at_import_time(path) if n.startswith("rpc_harness."))
    return seen


@pytest.mark.parametrize("name", SCHEDULE_CORE)
def test_the_schedule_core_imports_neither_torch_nor_processes(name):
    names = _at_import_time(PACKAGE / name)
    for outside in ("torch", "multiprocessing", "threading", "subprocess"):
        assert not _reaches(names, outside), f"{name} imports {outside}"
    reached = _closure(_dotted(name))
    assert reached <= CORE_MAY_IMPORT, f"{name} reaches {sorted(reached - CORE_MAY_IMPORT)}"


# The two sides of a world (issue 39): what runs in a rank (_rank/ and the
# communication layers rpc/ and c10d/) never imports what runs in the test
# process (_parent/: launching, watching, reporting). They meet in the
# messages of _messages.py and the files a rank writes, so a rank's side can
# be read, tested and changed without the parent's. The package itself
# (rpc_harness/__init__.py, the public facade above both) is not followed.
RANK_SIDE = sorted(path for folder in ("_rank", "rpc", "c10d") for path in (PACKAGE / folder).glob("*.py"))


def _parent_side_reached(path: Path) -> list[str]:
    package = ".".join(("rpc_harness", *path.relative_to(PACKAGE).parent.parts))
    direct = {name for name in imported(path, package) if name.startswith("rpc_harness.")}
    reached = set().union(*(_closure(name) for name in direct)) | direct
    return sorted(name for name in reached if name.startswith("rpc_harness._parent"))


@pytest.mark.parametrize("path", RANK_SIDE, ids=lambda path: str(path.relative_to(PACKAGE)))
def test_nothing_a_rank_runs_imports_the_parent_side(path):
    assert not _parent_side_reached(path), f"{path.relative_to(PACKAGE)} reaches {_parent_side_reached(path)}"


def test_the_side_check_sees_an_import_of_the_parent_side_through_another_module(tmp_path, monkeypatch):
    """The check itself: a rank-side module reaching the parent's side,
    directly or through a shared module, is seen."""
    (tmp_path / "_rank").mkdir()
    (tmp_path / "_parent").mkdir()
    (tmp_path / "shared.py").write_text("from ._parent import launcher\n")
    (tmp_path / "_parent" / "launcher.py").write_text("")
    (tmp_path / "_parent" / "__init__.py").write_text("")
    direct = tmp_path / "_rank" / "direct.py"
    direct.write_text("from .._parent.supervisor import Supervisor\n")
    through = tmp_path / "_rank" / "through.py"
    through.write_text("from .. import shared\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path)
    assert _parent_side_reached(direct) == ["rpc_harness._parent.supervisor",
                                            "rpc_harness._parent.supervisor.Supervisor"]
    assert "rpc_harness._parent" in _parent_side_reached(through)
