"""tools/plant_bugs.py stays runnable: each planted bug's snippet is in its
file exactly once (the tool refuses to plant it otherwise, and stops), and
each test it names exists. Code and tests change: on 2026-11-27 six
snippets and two test names had gone stale unseen, and a full run of the
tool would have stopped at the first."""

from __future__ import annotations

import pathlib
import re
import runpy

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _bugs():
    # run_path keeps the tool out of sys.modules (it is no package of ours).
    return runpy.run_path(str(ROOT / "tools" / "plant_bugs.py"), run_name="plant_bugs")["BUGS"]


def test_every_planted_bugs_snippet_is_in_its_file_once_and_every_test_it_names_exists():
    stale = []
    for bug in _bugs():
        count = (ROOT / bug.file).read_text().count(bug.original)
        if count != 1:
            stale.append(f"{bug.name!r}: its snippet is in {bug.file} {count} times")
        for test in bug.tests:
            path, _, name = test.partition("::")
            name = name.split("[")[0]
            source = (ROOT / path).read_text() if (ROOT / path).exists() else ""
            # A test function, or a Hypothesis state machine's TestCase bound to a test's name.
            if not re.search(rf"^(\s*def {re.escape(name)}\(|{re.escape(name)} = )", source, re.M):
                stale.append(f"{bug.name!r}: no test {test}")
    assert not stale, "\n".join(stale)
