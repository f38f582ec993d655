"""tests/checkout_guard.py: a session that writes into the checkout fails,
naming what it left, also when an xdist worker wrote it (issue 38: the
bench's refusal test left an empty rpc-harness-out/ in the checkout)."""

from __future__ import annotations

import pathlib

import pytest

GUARD = (pathlib.Path(__file__).parent.parent / "checkout_guard.py").read_text()

WRITES = """
import os

def test_writes_into_the_current_folder():
    os.makedirs("rpc-harness-out", exist_ok=True)  # empty: git status would not show it

def test_writes_into_its_own_folder(tmp_path):
    (tmp_path / "out.json").write_text("{}")
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "xdist"])
def test_a_session_that_leaves_a_folder_in_the_checkout_fails_naming_it(pytester, workers):
    pytester.makeconftest(GUARD)
    pytester.makepyfile(test_leaves=WRITES)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *workers)
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert f"left behind: {pytester.path / 'rpc-harness-out'}" in out, out
    assert "out.json" not in out


def test_a_session_that_writes_only_in_its_temporary_folders_and_the_runners_passes(pytester):
    pytester.makeconftest(GUARD)
    pytester.makepyfile(test_clean=WRITES.replace('os.makedirs("rpc-harness-out", exist_ok=True)',
                                                  'os.makedirs("__pycache__", exist_ok=True)'))
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.OK
    assert "left behind" not in result.stdout.str()
