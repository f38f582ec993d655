"""pytest's assertion rewriting, in ranks.

pytest rewrites the ``assert`` statements of test modules, conftests and
modules registered with ``pytest.register_assert_rewrite`` as it imports
them, through an import hook of its test process. Ranks import those modules
elsewhere: in the world's forkserver (preloaded) or in the rank itself, where
no hook is, so a failing ``assert a == b`` in an entry said only the message
its author wrote, or nothing.

So the test process describes its hook (:func:`session_rewriting`: the
``python_files`` patterns, the modules marked for rewriting, the ini values
and verbosity pytest's explanations read) and the ranks install pytest's own
hook, ``_pytest.assertion.rewrite.AssertionRewritingHook``, described alike
(:func:`apply`): in the forkserver before it preloads the test modules, so
every forked rank inherits their rewritten code, and again in each rank
before it loads its program, for a module the forkserver did not preload (and
for a session, such as pytester's in-process one, using a forkserver another
session started). The rewritten code was cached by the test process when it
imported the module (pytest's ``__pycache__/*-pytest-*.pyc``), so a rank only
reads it.

A rewritten assert asks ``_pytest.assertion.util._reprcompare`` for the
explanation of a comparison (the diffs of lists, dicts, strings); pytest sets
it around each test (``pytest_runtest_protocol``) to call the
``pytest_assertrepr_compare`` hook. In a rank there are no plugins: it is set
to pytest's own implementation of that hook, with the session's verbosity and
truncation, shaped as pytest shapes the hook's answer. A conftest's own
``pytest_assertrepr_compare`` is not called in ranks.

Imports pytest only where a session asked for rewriting (never for ``import
harness``, never in a rank of a world started outside pytest).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

# The ini values pytest's assertion code reads (those of an older pytest that
# lacks one are left out, and it is not asked for).
_INI = ("truncation_limit_lines", "truncation_limit_chars", "assertion_text_diff_style")
# This distribution's own packages: pytest marks an installed plugin's modules
# for rewriting, but the harness's own code in a rank stays as it is.
_OURS = ("rpc_harness",)

_hook: Any = None  # the rewriting hook this process installed, if any


def session_rewriting(config: Any) -> dict[str, Any] | None:
    """In the test process: what a rank needs to rewrite asserts as this
    session does, as plain data (it travels in an environment variable and in
    every rank's boot); None when the session does not rewrite
    (``--assert=plain``, or a pytest without the hook)."""
    try:
        from _pytest.assertion.rewrite import assertstate_key
        from _pytest.pathlib import fnmatch_ex
    except ImportError:  # pragma: no cover - a pytest without these
        return None
    if config.getvalue("assertmode") != "rewrite":
        return None
    state = config.stash.get(assertstate_key, None)
    hook = getattr(state, "hook", None)
    if hook is None:
        return None
    try:  # the hook's own attributes: a pytest that renamed them gets plain asserts in ranks, as before
        patterns = [str(pattern) for pattern in hook.fnpats]
        marked = {name for name in hook._must_rewrite if not _is_ours(name)}
        rewritten = dict(hook._rewritten_names)
    except (AttributeError, TypeError):
        return None
    # Modules it rewrote that neither a pattern nor a mark would rewrite in a
    # rank: test files named on the command line (pytest's isinitpath).
    given = set()
    for name, path in rewritten.items():
        if _is_ours(name) or _covered(name, marked) or path.name == "conftest.py":
            continue
        if not any(fnmatch_ex(pattern, path) for pattern in patterns):
            given.add(name)
    ini = {}
    for key in _INI:
        try:
            value = config.getini(key)
        except (ValueError, KeyError):
            continue
        ini[key] = value if value is None or isinstance(value, (int, str)) else str(value)
    return {"python_files": patterns, "modules": sorted(marked | given), "ini": ini,
            "verbosity": _verbosity(config)}


def _verbosity(config: Any) -> int:
    try:
        return int(config.get_verbosity(type(config).VERBOSITY_ASSERTIONS))
    except (AttributeError, TypeError, ValueError):  # pytest < 8
        return int(config.getoption("verbose") or 0)


def _is_ours(name: str) -> bool:
    return name.split(".", 1)[0] in _OURS


def _covered(name: str, marked: Iterable[str]) -> bool:
    return any(name == mark or name.startswith(mark + ".") for mark in marked)


class RankConfig:
    """The few parts of a pytest ``Config`` that pytest's rewriting hook and
    its explanations read, from a :func:`session_rewriting` (a rank has no
    session, no plugins and no terminal)."""

    def __init__(self, settings: dict[str, Any]) -> None:
        from types import SimpleNamespace

        from _pytest.assertion.rewrite import assertstate_key
        from _pytest.stash import Stash

        # Unset truncation limits read as None in pytest too (its defaults apply).
        self._ini: dict[str, Any] = {"truncation_limit_lines": None, "truncation_limit_chars": None,
                                     **settings.get("ini", {})}
        self._ini["python_files"] = list(settings["python_files"])
        # The pass hook calls plugins, which a rank has none of.
        self._ini["enable_assertion_pass_hook"] = False
        self._verbosity = int(settings.get("verbosity", 0))
        self.stash = Stash()
        self.stash[assertstate_key] = SimpleNamespace(mode="rewrite", trace=_no_trace, hook=None)
        # No terminal reporter: explanations in plain text, never coloured.
        self.pluginmanager = SimpleNamespace(has_plugin=lambda name: False, hasplugin=lambda name: False)

    def getini(self, name: str) -> Any:
        try:
            return self._ini[name]
        except KeyError:
            raise ValueError(f"unknown ini option in a rank: {name!r}") from None

    def get_verbosity(self, verbosity_type: str | None = None) -> int:
        return self._verbosity

    def getoption(self, name: str, default: Any = None, skip: bool = False) -> Any:
        return {"verbose": self._verbosity, "assertmode": "rewrite"}.get(name, default)

    getvalue = getoption

    def get_terminal_writer(self) -> Any:
        """What pytest 8 asks for its diffs' highlighter: none, plain text."""
        from types import SimpleNamespace

        return SimpleNamespace(_highlight=lambda source, lexer="python": source, hasmarkup=False)

    def issue_config_time_warning(self, warning: Warning, stacklevel: int) -> None:
        """Marking a module imported already (the forkserver's, before the
        hook) warns in pytest; a rank has nowhere to show it."""


def _no_trace(*args: Any) -> None:
    pass


def apply(settings: dict[str, Any] | None) -> None:
    """Rewrite asserts in this process as ``settings`` say, from now on:
    install pytest's hook described by it (replacing one installed before)
    and set the explanation of comparisons; ``None`` removes them. Modules
    imported already keep the code they were loaded with."""
    global _hook
    if _hook is not None:
        if _hook in sys.meta_path:
            sys.meta_path.remove(_hook)
        _hook = None
        _set_explanations(None)
    if settings is None:
        return
    try:
        from _pytest.assertion.rewrite import AssertionRewritingHook

        config = RankConfig(settings)
        hook = AssertionRewritingHook(config)  # type: ignore[arg-type]
        hook.mark_rewrite(*settings.get("modules", ()))
        _set_explanations(config)
    except Exception:  # noqa: BLE001 - a pytest whose internals differ: plain asserts, as before
        _set_explanations(None)
        return
    sys.meta_path.insert(0, hook)
    _hook = hook


def _set_explanations(config: RankConfig | None) -> None:
    try:
        from _pytest.assertion import util
    except ImportError:  # pragma: no cover - nothing was set, nothing to unset
        return

    util._reprcompare = None if config is None else (lambda op, left, right: explain(config, op, left, right))
    util._config = config  # type: ignore[assignment]  # saferepr's size follows the verbosity


def explain(config: RankConfig, op: str, left: Any, right: Any) -> str | None:
    """What pytest's ``callbinrepr`` returns for a comparison in a test: its
    ``pytest_assertrepr_compare`` (pytest's own implementation), truncated
    as the session truncates, newlines escaped for ``format_explanation``.
    None, as there, for a comparison it has nothing to say about; and None,
    leaving the rewritten assert's plain explanation, if this pytest's
    internals differ from the ones this was written against."""
    try:
        from _pytest.assertion import pytest_assertrepr_compare, truncate

        lines = pytest_assertrepr_compare(config=config, op=op, left=left, right=right)  # type: ignore[arg-type]
        if not lines:
            return None
        if hasattr(truncate, "materialize_with_truncation"):  # pytest >= 9
            lines = truncate.materialize_with_truncation(lines, config)  # type: ignore[arg-type]
        else:  # pragma: no cover - pytest 8
            lines = truncate.truncate_if_required(list(lines), _Item(config))  # type: ignore[arg-type]
        if not lines:
            return None
        return "\n~".join(line.replace("\n", "\\n") for line in lines).replace("%", "%%")
    except Exception:  # noqa: BLE001 - an explanation must never replace the AssertionError
        return None


class _Item:  # pragma: no cover - pytest 8's truncate_if_required takes an item
    def __init__(self, config: RankConfig) -> None:
        self.config = config
