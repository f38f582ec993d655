"""pytest marks an installed plugin's package for assertion rewriting and
warns where it finds it imported already by another loader: a session run
in-process after rpc_harness was imported so (seen in this suite's xdist
workers) must not warn about it."""

from __future__ import annotations

import importlib.machinery

import rpc_harness


def test_an_inprocess_session_does_not_warn_that_rpc_harness_cannot_be_rewritten(pytester, monkeypatch):
    plain = importlib.machinery.SourceFileLoader("rpc_harness", rpc_harness.__file__)
    monkeypatch.setattr(rpc_harness, "__loader__", plain)  # imported, as pytest sees it, by another loader
    pytester.makepyfile("def test_nothing():\n    assert True\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-W", "always")
    result.assert_outcomes(passed=1)
    assert "cannot be rewritten" not in result.stdout.str(), result.stdout.str()
