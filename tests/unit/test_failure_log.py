"""tests/failure_log.py: a failure is on disk as soon as pytest has it, so
that a GPU check stopped at its time limit still says why tests failed."""

from __future__ import annotations

from failure_log import ENV


def test_a_failure_is_written_down_as_it_happens_and_a_pass_is_not(pytester, monkeypatch, tmp_path):
    log = tmp_path / "failures.log"
    monkeypatch.setenv(ENV, str(log))
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # this suite's own worker, not the inner run's
    pytester.makeconftest("from failure_log import pytest_runtest_logreport  # noqa: F401\n")
    pytester.makepyfile(test_x="def test_ok():\n    pass\n\n\ndef test_bad():\n    assert 1 == 2, 'one is not two'\n")
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=1, failed=1)
    written = log.read_text()
    assert "=== test_x.py::test_bad (call)" in written and "one is not two" in written
    assert "test_ok" not in written

