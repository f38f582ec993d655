"""Every example of the README and the docs runs as printed (issue 28): the
blocks marked as tests run in one pytest session, in a fresh process, beside
the modules they import; the scripts run as ``python NAME.py`` runs them, from
the same folder, one after another in one interpreter. How blocks are marked:
tests/doc_examples.py."""

from __future__ import annotations

import ast
import re
import subprocess
import sys

import doc_examples
import pytest

# The scripts, each run as `python NAME.py` runs it (as __main__, from its
# folder, with its name as sys.argv[0]), one after another in one interpreter:
# each of its own would import torch and start a forkserver anew (~5 s on 2
# cores). A script that raises, or exits other than 0, stops the run, named.
RUN_SCRIPTS = """
import runpy, sys

for name in sys.argv[1:]:
    print(f"--- {name}", flush=True)
    sys.argv = [name]
    try:
        runpy.run_path(name, run_name="__main__")
    except SystemExit as end:
        if end.code not in (None, 0):
            sys.exit(f"{name} exited {end.code!r}")
    print(f"--- {name} exited 0", flush=True)
"""


def count_tests(code):
    return sum(isinstance(node, ast.FunctionDef) and node.name.startswith("test") for node in ast.parse(code).body)


# One of the suite's slowest (pytest --durations): every example of the README and the docs, run as
# printed: their tests in a pytest session of their own, each script in an interpreter of its own.
@pytest.mark.long
def test_every_example_of_the_readme_and_the_docs_runs_as_printed(pytester):
    found, problems = doc_examples.files()
    assert not problems, "\n".join(problems)
    for name, (_, code) in found.items():
        (pytester.path / name).write_text(code)
    tests = sorted(name for name, (kind, _) in found.items() if kind == "test")
    expected = sum(count_tests(found[name][1]) for name in tests)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *tests, timeout=300)
    assert result.ret == 0 and result.parseoutcomes().get("passed") == expected, result.stdout.str()
    scripts = sorted(name for name, (kind, _) in found.items() if kind == "script")
    done = subprocess.run([sys.executable, "-c", RUN_SCRIPTS, *scripts], cwd=pytester.path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert re.findall(r"^--- (\S+) exited 0$", done.stdout, re.M) == scripts, done.stdout
