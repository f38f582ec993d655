"""pytest's rewriting as a rank installs it (rpc_harness._rank.asserts.apply), in this
process with everything it touches put back: sys.meta_path, pytest's
explanation hook, the modules imported."""

from __future__ import annotations

import sys

import pytest
from _pytest.assertion import rewrite, util

from rpc_harness._rank import asserts as _asserts

SOURCE = "def check():\n    got = [1, 2, 3]\n    assert got == [1, 2, 4]\n"


@pytest.fixture
def settings(pytestconfig):
    """This session's, as the plugin hands it to ranks, aimed at the files here."""
    described = _asserts.session_rewriting(pytestconfig)
    if described is None:
        pytest.skip("this session does not rewrite asserts (--assert=plain)")
    assert set(described) == {"python_files", "modules", "ini", "verbosity"}
    return dict(described, python_files=["rankcheck_*.py"], modules=["registered_helper"])


@pytest.fixture
def isolated(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.setattr(util, "_reprcompare", util._reprcompare)
    monkeypatch.setattr(util, "_config", util._config)
    monkeypatch.setattr(_asserts, "_hook", None)
    monkeypatch.syspath_prepend(str(tmp_path))
    names = ("rankcheck_lists", "registered_helper", "plain_helper")
    for name in names:
        (tmp_path / f"{name}.py").write_text(SOURCE)
    yield
    for name in names:
        sys.modules.pop(name, None)


def raised(function):
    with pytest.raises(AssertionError) as caught:
        function()
    return str(caught.value)


def test_matching_and_registered_modules_are_rewritten_and_explained_others_are_not(isolated, settings):
    _asserts.apply(settings)
    import plain_helper
    import rankcheck_lists
    import registered_helper

    for module in (rankcheck_lists, registered_helper):
        message = raised(module.check)
        assert message.startswith("assert [1, 2, 3] == [1, 2, 4]\n"), message
        assert "At index 2 diff: 3 != 4" in message
    assert raised(plain_helper.check) == ""


def test_none_takes_the_hook_and_the_explanations_away(isolated, settings):
    _asserts.apply(settings)
    hook = _asserts._hook
    assert hook in sys.meta_path and util._reprcompare is not None
    _asserts.apply(None)
    assert hook not in sys.meta_path and _asserts._hook is None
    assert util._reprcompare is None and util._config is None


def test_a_pytest_whose_hook_cannot_be_built_leaves_asserts_plain(isolated, settings, monkeypatch):
    def broken(config):
        raise AttributeError("this pytest reads something else")

    monkeypatch.setattr(rewrite, "AssertionRewritingHook", broken)
    _asserts.apply(settings)
    assert _asserts._hook is None and util._reprcompare is None
    import rankcheck_lists

    assert raised(rankcheck_lists.check) == ""
