"""The installed namespace keeps DESIGN.md's layers: the library (the modules
directly under ``rpc_harness``) imports neither the scenarios nor the apps,
the scenarios never import the apps, and pytest is imported by the plugin
alone (and by the rank's assert rewriting, which runs only under pytest)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import rpc_harness

PACKAGE = Path(rpc_harness.__file__).parent
LIBRARY = sorted(path for path in PACKAGE.glob("*.py") if path.name != "__main__.py")
SCENARIOS = sorted((PACKAGE / "scenarios").rglob("*.py"))
MAY_IMPORT_PYTEST = {"pytest_plugin.py", "_asserts.py"}


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


@pytest.mark.parametrize("path", LIBRARY, ids=lambda path: path.name)
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
