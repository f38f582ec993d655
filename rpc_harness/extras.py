"""The optional packages behind rpc-harness's extras, imported where they are
used.

The fixture needs torch and pytest alone. The built-in scenarios
(gymnasium, faker) and the Hypothesis strategies (hypothesis) come with
extras; a user who installed only the core gets one line naming the extra to
install when they reach for one of those parts, never an error when the
plugin loads or a scenario is listed.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from .errors import MissingExtra

# Each optional package, and the extra that brings it.
EXTRA_OF = {
    "gymnasium": "scenarios",
    "faker": "scenarios",
    "hypothesis": "hypothesis",
    "xdist": "xdist",
}


def require(module: str, needed_by: str) -> ModuleType:
    """Import ``module`` (a package of one of the extras) for ``needed_by``,
    or raise :class:`MissingExtra` naming the extra that installs it."""
    top = module.split(".", 1)[0]
    extra = EXTRA_OF[top]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name is None or error.name.split(".", 1)[0] != top:
            raise  # the package is there; something it imports is not
        raise MissingExtra(
            f"{needed_by} needs {top}, which is not installed: pip install 'rpc-harness[{extra}]'"
        ) from None


def installed(module: str) -> bool:
    """Whether ``module`` (a package of one of the extras) is installed,
    found without importing it."""
    return importlib.util.find_spec(module) is not None
