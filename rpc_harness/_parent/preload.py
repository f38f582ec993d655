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
``rpc_harness._rank.asserts``): its modules are imported through pytest's rewriting
hook, installed after the harness's own.

No module may initialize CUDA here (``rpc_harness._cuda_fork``): one that
asks for it is refused, dropped, imported by the ranks themselves, and
named to the parent.

The forkserver ends when its parent does, but only from its main loop,
which starts after these imports: a parent that ended during them (a test
timeout or Ctrl-C while the first world came up) left it importing for 5 to
60 s more on a loaded machine (issue 28). So a thread watches the parent
while they run. And a parent killed outright (SIGKILL, or xdist killing a
worker that was slow to stop) leaves its folders behind (its ``pymp-*``,
its worlds' ``rpc-world-*``): the forkserver, which outlives it, sweeps
them as it ends, rather than the next session's first world.
"""

import atexit
import importlib
import json
import os
import sys
import tempfile
import threading

from .._cuda_fork import PreloadWatch, write_culprits
from .launcher import PRELOAD_ENV
from .limits import raise_open_files
from .workdirs import sweep

_settings = json.loads(os.environ.pop(PRELOAD_ENV, "{}"))
# Python finds its temp folder at the first ask by writing a probe file of
# a random name there and removing it. Asked first at exit (the sweep), the
# probe could be seen, or left, by whoever looked as the forkserver ended
# (a CI run once saw "_3ev94ni" in a SIGTERMed session's temp folder): it
# is asked now, while the parent waits for the forkserver to start.
tempfile.gettempdir()
raise_open_files()  # every rank inherits it: a big world's leader holds about six files a rank
_parent = _settings.get("parent", os.getppid())
_PARENT_POLL = 0.1  # seconds; a parent gone is noticed within this


def _parent_gone() -> bool:
    return os.getppid() != _parent  # an orphan is the child of init, or of a subreaper


def _sweep_if_orphaned() -> None:
    if _parent_gone():
        sweep()


def _watch_parent(done: threading.Event) -> None:
    while not done.wait(_PARENT_POLL):
        if _parent_gone():
            _sweep_if_orphaned()
            os._exit(0)  # the import under way may never return: no clean exit to wait for


# torch's inductor cache folder: where TORCHINDUCTOR_CACHE_DIR says, by
# default torchinductor_<user> in the temp folder.
_INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


def _temp_folder_names() -> frozenset[str] | None:
    """The temp folder's entries before the preload (None where the user
    chose the inductor cache's place: then it is theirs, left alone)."""
    if _INDUCTOR_CACHE_ENV in os.environ:
        return None
    try:
        return frozenset(os.listdir(tempfile.gettempdir()))
    except OSError:
        return None


def _remove_empty_inductor_cache(before: frozenset[str] | None) -> None:
    """Importing ``torch._dynamo`` (preloaded: the first optimizer a rank
    builds imports it) makes torch's inductor cache folder and sets
    TORCHINDUCTOR_CACHE_DIR to it, whether anything is ever cached: every
    session left an empty ``torchinductor_<user>`` in the temp folder
    (issue 38). When the preload made it and nothing is in it, it goes, and
    so does the variable: a rank that compiles makes it again, as torch
    does anywhere."""
    folder = os.environ.get(_INDUCTOR_CACHE_ENV) if before is not None else None
    if folder is None:
        return
    os.environ.pop(_INDUCTOR_CACHE_ENV)
    if os.path.dirname(folder) == os.path.abspath(tempfile.gettempdir()) and os.path.basename(folder) not in before:
        try:
            os.rmdir(folder)  # only an empty one
        except OSError:
            pass


# Registered here, so forked ranks inherit it too, but they leave through
# os._exit (multiprocessing's forkserver children): it runs in the forkserver only.
atexit.register(_sweep_if_orphaned)
_preloaded = threading.Event()
_watcher = threading.Thread(target=_watch_parent, args=(_preloaded,), name="rpc-harness-parent-watch", daemon=True)
_watcher.start()
if _settings.get("sys_path"):
    sys.path[:] = _settings["sys_path"]
_base = set(_settings.get("base", ()))
_rewriting = False
_watch = PreloadWatch()
_temp_folders = _temp_folder_names()
for _name in _settings.get("modules", []):
    if not _rewriting and _name not in _base:
        # After the harness's own modules (torch among them), before the
        # session's (pytest, test modules, rpc_preload): those load as pytest
        # rewrote them, and none of them may initialize CUDA here.
        _rewriting = True
        _watch.start()
        if _settings.get("asserts") is not None:
            try:
                from .._rank.asserts import apply

                apply(_settings["asserts"])
            except BaseException:  # noqa: BLE001, S110 - each rank tries again, and reports
                pass
    _watch.module = _name
    try:
        importlib.import_module(_name)
    except BaseException:  # noqa: BLE001, S110 - see the docstring
        pass
    if _rewriting:
        _watch.imported(_name)
    if _name in _watch.culprits:
        sys.modules.pop(_name, None)  # each rank imports it itself, where CUDA is allowed
_watch.module = None
_watch.stop()
_remove_empty_inductor_cache(_temp_folders)
if _settings.get("cuda_report"):
    write_culprits(_settings["cuda_report"], _watch.culprits, _watch.driver_culprits)

# The forkserver's loop watches the parent from here on; and no thread may
# be left running when it forks ranks.
_preloaded.set()
_watcher.join()
