"""Sphinx configuration of the rpc-harness docs (``.ci/run`` builds them with -W)."""

import os
import sys

# The package is installed editable; the path makes a plain checkout work too.
sys.path.insert(0, os.path.abspath(".."))

project = "rpc-harness"
author = "rpc-harness developers"
copyright = "rpc-harness developers"
release = "0.1.0"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]

# Markdown: `#anchor` links to headings, ::: fences.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]
# Blocks without a language (reports, replay lines) are plain text.
highlight_language = "text"

# The API reference: the public names, in the order of each page, with
# their signatures as written.
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
# False: the doors' signatures are written from the options' declaration
# (options.takes_world_options), not their source, whose defaults autodoc's
# preserve_defaults reads ("pop from empty list" for every door).
autodoc_preserve_defaults = False

# Every cross-reference must resolve (a renamed function a docstring names
# fails the build), except types that only appear in signatures: the
# standard library's and third parties' (no intersphinx: the build is
# offline) and the internal classes that public signatures mention.
nitpicky = True
nitpick_ignore_regex = [
    ("py:class", r"(collections\.abc|types|hypothesis|_pytest)\..*"),
    ("py:class", r".*\[.*"),  # pieces of a generic annotation: tuple[int, ...
    ("py:class", r"rpc_harness\.(entry\.EntryRef|gradcheck\.Mismatch|context\.EventLog|faults\.Argument)"),
    ("py:class", r"rpc_harness\.scenario\.(ConfigT|RecordsT|ExpectedT)"),  # the protocol's type variables
]

html_theme = "furo"
html_title = "rpc-harness"


def _check_public_api(app, env):
    """Fail the build (a warning, and -W) when a public name has no entry in
    the API reference: ``rpc_harness.__all__`` and ``rpc_harness.strategies``."""
    import inspect

    from sphinx.util import logging

    import rpc_harness
    import rpc_harness.strategies

    documented = set(env.get_domain("py").objects)
    public = [(rpc_harness, name) for name in rpc_harness.__all__]
    public += [(rpc_harness.strategies, name) for name, value in vars(rpc_harness.strategies).items()
               if not name.startswith("_") and inspect.isfunction(value)
               and value.__module__ == "rpc_harness.strategies"]
    for module, name in public:
        value = getattr(module, name)
        names = {f"{module.__name__}.{name}"}
        if hasattr(value, "__qualname__") and hasattr(value, "__module__"):
            names.add(f"{value.__module__}.{value.__qualname__}")
        if not names & documented:
            logging.getLogger(__name__).warning(
                "%s.%s is public but not in the API reference (docs/api.rst)", module.__name__, name)


def setup(app):
    app.connect("env-check-consistency", _check_public_api)
