"""The parts of rpc_harness._rank.asserts on their own: the description of a
session's rewriting (from a fake pytest config), the rank's stand-in config,
and the explanation of a comparison. (Found unchecked by mutation testing,
tools/mutation.py: only world tests and three unit tests used them.)"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
from types import SimpleNamespace

import pytest
from _pytest.assertion.rewrite import assertstate_key

from rpc_harness._rank import asserts as _asserts


class FakeConfig:
    """What session_rewriting reads of a pytest Config."""

    VERBOSITY_ASSERTIONS = "assertions"

    def __init__(self, *, mode="rewrite", hook=None, ini=None, verbosity=2):
        self.mode = mode
        self.stash = {assertstate_key: SimpleNamespace(hook=hook)}
        self.ini = ini if ini is not None else {}
        self.verbosity = verbosity

    def getvalue(self, name):
        assert name == "assertmode"
        return self.mode

    def getini(self, key):
        if key not in self.ini:
            raise ValueError(key)
        return self.ini[key]

    def get_verbosity(self, kind):
        assert kind == "assertions"
        return self.verbosity


def hook(**names):
    return SimpleNamespace(
        fnpats=["test_*.py", "check_*.py"],
        _must_rewrite={"helpers", "rpc_harness.anything"},
        _rewritten_names={name: pathlib.Path(path) for name, path in names.items()},
    )


REWRITTEN = {
    "test_a": "/x/test_a.py",  # a pattern rewrites it in a rank too
    "check_b": "/x/check_b.py",
    "conftest": "/x/conftest.py",  # conftests never run in ranks
    "helpers": "/x/helpers/__init__.py",  # marked
    "helpers.sub": "/x/helpers/sub.py",  # under a mark
    "helpers_too": "/x/helpers_too.py",  # not under the mark "helpers"
    "rpc_harness.y": "/x/rpc_harness/y.py",  # ours: never rewritten in ranks
    "given": "/x/given.py",  # a file named on the command line
}


def test_a_session_is_described_by_its_patterns_marks_given_files_ini_and_verbosity():
    config = FakeConfig(
        hook=hook(**REWRITTEN),
        ini={
            "truncation_limit_lines": 5,
            "truncation_limit_chars": None,
            "assertion_text_diff_style": ["x"],
        },
    )
    assert _asserts.session_rewriting(config) == {
        "python_files": ["test_*.py", "check_*.py"],
        "modules": ["given", "helpers", "helpers_too"],
        "ini": {
            "truncation_limit_lines": 5,
            "truncation_limit_chars": None,
            "assertion_text_diff_style": "['x']",
        },
        "verbosity": 2,
    }


def test_ini_keys_this_pytest_lacks_are_left_out():
    config = FakeConfig(hook=hook(), ini={"truncation_limit_chars": 80})
    assert _asserts.session_rewriting(config)["ini"] == {"truncation_limit_chars": 80}


@pytest.mark.parametrize(
    "config",
    [
        FakeConfig(mode="plain", hook=hook()),
        FakeConfig(hook=None),
        FakeConfig(
            hook=SimpleNamespace(fnpats=["test_*.py"])
        ),  # a pytest that renamed the hook's parts
    ],
    ids=["plain", "no hook", "other hook"],
)
def test_no_description_where_the_session_does_not_rewrite_as_this_pytest_does(config):
    assert _asserts.session_rewriting(config) is None


def test_the_verbosity_of_an_older_pytest_is_its_verbose_option():
    class Old:
        def getoption(self, name):
            return {"verbose": 3}[name]

    assert _asserts._verbosity(Old()) == 3

    class Quiet:
        def getoption(self, name):
            return None

    assert _asserts._verbosity(Quiet()) == 0


def test_ours_and_covered_are_by_whole_package_names():
    assert _asserts._is_ours("rpc_harness") and _asserts._is_ours("rpc_harness.x.y")
    assert not _asserts._is_ours("rpc_harness_plugin") and not _asserts._is_ours("x.rpc_harness")
    assert _asserts._covered("a", ["a"]) and _asserts._covered("a.b", ["x", "a"])
    assert not _asserts._covered("ab", ["a"]) and not _asserts._covered("a", ["a.b"])
    assert not _asserts._covered("a", [])


@pytest.fixture(autouse=True)
def _a_session_not_on_ci(monkeypatch):
    """pytest explains and truncates otherwise on CI (``CI`` or
    ``BUILD_NUMBER`` set: no truncation, no "Use -v" hint). These tests read
    a session's explanations that is not on CI, wherever they run."""
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("BUILD_NUMBER", raising=False)


SETTINGS = {
    "python_files": ["test_*.py"],
    "modules": [],
    "ini": {"assertion_text_diff_style": "ndiff"},
    "verbosity": 0,
}


def test_a_rank_config_answers_what_pytests_hook_and_explanations_ask():
    patterns = ["test_*.py"]
    config = _asserts.RankConfig(dict(SETTINGS, python_files=patterns, verbosity="1"))
    assert (
        config.getini("python_files") == patterns and config.getini("python_files") is not patterns
    )
    assert (
        config.getini("truncation_limit_lines") is None
        and config.getini("truncation_limit_chars") is None
    )
    assert config.getini("enable_assertion_pass_hook") is False
    assert config.getini("assertion_text_diff_style") == "ndiff"
    with pytest.raises(ValueError, match=r"^unknown ini option in a rank: 'nope'$"):
        config.getini("nope")
    assert config.get_verbosity() == 1 and config.get_verbosity("assertions") == 1
    assert config.getoption("verbose") == 1 and config.getvalue("assertmode") == "rewrite"
    assert config.getoption("other") is None and config.getoption("other", "d") == "d"
    assert (
        config.stash[assertstate_key].mode == "rewrite"
        and config.stash[assertstate_key].hook is None
    )
    assert config.stash[assertstate_key].trace("anything") is None
    assert not config.pluginmanager.has_plugin("terminalreporter")
    assert not config.pluginmanager.hasplugin("terminalreporter")
    writer = config.get_terminal_writer()
    assert writer._highlight("a == b") == "a == b" and writer.hasmarkup is False
    assert config.issue_config_time_warning(UserWarning("x"), 1) is None


def test_a_rank_configs_ini_takes_the_sessions_truncation_limits():
    config = _asserts.RankConfig(dict(SETTINGS, ini={"truncation_limit_lines": 3}))
    assert config.getini("truncation_limit_lines") == 3
    assert _asserts.RankConfig({"python_files": []}).get_verbosity() == 0


def test_a_comparison_is_explained_as_in_a_test_lines_joined_for_format_explanation():
    config = _asserts.RankConfig(SETTINGS)
    assert _asserts.explain(config, "==", [1, 2], [1, 3]) == (
        "[1, 2] == [1, 3]\n~\n~At index 1 diff: 2 != 3\n~Use -v to get more diff"
    )
    # Newlines inside a line are escaped and % doubled (the rewritten assert %-formats it).
    assert (
        _asserts.explain(config, "==", "a%\nb", "a%\nc")
        == "'a%%\\nb' == 'a%%\\nc'\n~\n~  a%%\n~- c\n~+ b"
    )


def test_nothing_to_explain_is_none_as_in_a_test():
    assert _asserts.explain(_asserts.RankConfig(SETTINGS), "==", 1, 2) is None


def test_the_verbosity_decides_how_much_of_a_comparison_is_shown():
    left, right = list(range(50)), list(range(1, 51))
    short = _asserts.explain(_asserts.RankConfig(SETTINGS), "==", left, right)
    full = _asserts.explain(_asserts.RankConfig(dict(SETTINGS, verbosity=2)), "==", left, right)
    assert short.startswith("[0, 1, 2, 3, 4, 5, ...] == [1, 2, 3, 4, 5, 6, ...]")
    assert full.startswith(f"{left} == {right}") and "Full diff" in full


def test_a_long_explanation_is_truncated_as_the_session_truncates():
    left, right = {i: i for i in range(40)}, {i: -i for i in range(40)}
    config = _asserts.RankConfig(
        dict(SETTINGS, ini=dict(SETTINGS["ini"], truncation_limit_lines=4))
    )
    lines = _asserts.explain(config, "==", left, right).split("\n~")
    assert len(lines) <= 8 and "truncated" in lines[-1]


def test_an_explanation_that_fails_leaves_the_plain_one():
    config = _asserts.RankConfig({"python_files": []})  # lacks the diff style pytest asks for
    assert _asserts.explain(config, "==", [1, 2], [1, 3]) is None


@dataclasses.dataclass
class Box:
    a: int

    def __repr__(self):
        return "Box(\nline)"


def test_a_newline_inside_an_explanations_line_is_escaped():
    text = _asserts.explain(_asserts.RankConfig(SETTINGS), "==", Box(1), Box(2))
    assert text.startswith("Box(\\nline) == Box(\\nline)\n~\n~Differing attributes:")


def test_no_description_where_the_session_has_no_assertion_state():
    config = FakeConfig(hook=hook())
    config.stash = {}
    assert _asserts.session_rewriting(config) is None


@pytest.fixture
def restored(monkeypatch):
    """sys.meta_path and pytest's explanation hooks put back after the test."""
    from _pytest.assertion import util

    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.setattr(util, "_reprcompare", util._reprcompare)
    monkeypatch.setattr(util, "_config", util._config)
    monkeypatch.setattr(_asserts, "_hook", None)
    yield util
    _asserts.apply(None)


def test_the_hook_goes_first_and_the_explanations_read_the_ranks_config(restored):
    _asserts.apply(
        {"python_files": ["rankcheck_*.py"], "ini": SETTINGS["ini"], "verbosity": 2}
    )  # no modules
    assert _asserts._hook is not None and sys.meta_path[0] is _asserts._hook
    assert (
        isinstance(restored._config, _asserts.RankConfig) and restored._config.get_verbosity() == 2
    )
    assert restored._reprcompare("==", [1], [2]).startswith("[1] == [2]")
