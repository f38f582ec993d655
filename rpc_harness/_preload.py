"""The one module a world's forkserver is told to preload: it imports what
the parent asked for, so that no rank pays for it (``import torch`` alone is
~2 s; a test module and pytest ~0.2 s a rank).

Two things stand between a forkserver and those imports, both measured on
Python 3.11: its ``main`` ignores the ``sys_path`` it is handed, so a module
importable only from the parent's path (a test module, found through
pytest's rootdir) would silently not be preloaded; and it catches only
ImportError, so a module that raises anything else at import (a
module-level ``pytest.skip``) would end the forkserver and every world after
it. So the parent puts its ``sys.path`` and module list in an environment
variable, and this module imports each one on its own: one that fails here
is imported again by the rank that needs it, and fails there, reported.

A pytest session that rewrites asserts also hands over how (see
``rpc_harness._asserts``): its modules are imported through pytest's rewriting
hook, installed after the harness's own.

No module may initialize CUDA here (``rpc_harness._cuda_fork``): one that
asks for it is refused, dropped, imported by the ranks themselves, and
named to the parent.
"""

import importlib
import json
import os
import sys

from ._cuda_fork import PreloadWatch, write_culprits
from ._launcher import PRELOAD_ENV

_spec = json.loads(os.environ.pop(PRELOAD_ENV, "{}"))
if _spec.get("sys_path"):
    sys.path[:] = _spec["sys_path"]
_base = set(_spec.get("base", ()))
_rewriting = False
_watch = PreloadWatch()
for _name in _spec.get("modules", []):
    if not _rewriting and _name not in _base:
        # After the harness's own modules (torch among them), before the
        # session's (pytest, test modules, rpc_preload): those load as pytest
        # rewrote them, and none of them may initialize CUDA here.
        _rewriting = True
        _watch.start()
        if _spec.get("asserts") is not None:
            try:
                from ._asserts import apply

                apply(_spec["asserts"])
            except BaseException:  # noqa: BLE001, S110 - each rank tries again, and reports
                pass
    _watch.module = _name
    try:
        importlib.import_module(_name)
    except BaseException:  # noqa: BLE001, S110 - see the docstring
        pass
    if _name in _watch.culprits:
        sys.modules.pop(_name, None)  # each rank imports it itself, where CUDA is allowed
_watch.module = None
_watch.stop()
if _spec.get("cuda_report"):
    write_culprits(_spec["cuda_report"], _watch.culprits)
