"""Functions named so that any rank can import them: a world's entry or
program, its setup code. Checked in the parent, before any process starts.

A function is named ``package.module:function``, or, when it is defined in
a script (``python train.py``: its module is ``__main__``), by the script's
path, ``/abs/path/train.py:function``: ranks load the script by path, as
multiprocessing's children do, and so does any replay line, in any process
(``__main__:function`` would name whatever ``__main__`` the replaying
process has).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from .errors import WorldSpecError, clip


@dataclass(frozen=True)
class EntryRef:
    """An importable function, by name, so that any rank can import it."""

    module: str
    qualname: str
    main_file: str | None = None  # set when the function lives in a script's __main__

    def __str__(self) -> str:
        return f"{self.main_file or self.module}:{self.qualname}"

    @classmethod
    def of(cls, entry: Callable[..., Any] | str, *, where: str = "entry") -> EntryRef:
        """Check that ``entry`` can be imported again by name in another process."""
        if isinstance(entry, str):
            module, sep, qualname = entry.rpartition(":")  # a script's path may hold a colon, a name cannot
            if not sep or not module or not qualname:
                raise WorldSpecError(
                    f"{where}: {clip(entry)} is not of the form 'package.module:function' (or 'path/script.py:function')")
            if module.endswith(".py") or "/" in module:  # no module name holds a slash
                path = os.path.abspath(module)
                if not os.path.isfile(path):
                    raise WorldSpecError(f"{where}: {clip(entry)} names the script {clip(path)}, which is not a file")
                ref = cls("__main__", qualname, path)
            else:
                ref = cls(module, qualname)
            ref.load(where=where)
            return ref
        if not callable(entry):
            raise WorldSpecError(f"{where}: {entry!r} is not callable; pass a module-level function")
        module = getattr(entry, "__module__", None)
        qualname = getattr(entry, "__qualname__", None)
        if not module or not qualname or "<" in qualname:
            raise WorldSpecError(
                f"{where}: {qualname or entry!r} cannot be imported by name in the ranks "
                "(lambdas, nested functions and callable objects cannot); "
                "define it at the top level of an importable module"
            )
        main_file = None
        if module == "__main__":
            main_file = getattr(sys.modules["__main__"], "__file__", None)
            if main_file is None:
                raise WorldSpecError(
                    f"{where}: {qualname} lives in an interactive __main__ that ranks cannot import; "
                    "move it into a module"
                )
        ref = cls(module, qualname, main_file)
        if main_file is None and ref.load(where=where) is not entry:
            raise WorldSpecError(
                f"{where}: importing {ref} gives a different object than the one passed; "
                "pass the module-level function itself"
            )
        return ref

    def load(self, *, where: str = "entry") -> Callable[..., Any]:
        """Import and return the function (in the parent to check, in ranks to run)."""
        if self.main_file is not None:
            namespace = _run_script(self.main_file)
            obj: Any = namespace.get(self.qualname.split(".")[0])
            rest = self.qualname.split(".")[1:]
        else:
            try:
                obj = importlib.import_module(self.module)
            except (Exception, SystemExit) as error:  # a script's argparse at import exits
                what = f"it exited ({error.code})" if isinstance(error, SystemExit) else str(error)
                refused = WorldSpecError(f"{where}: cannot import module {self.module!r}: {what}")
                # One line, as every refusal: the frames of this method and
                # of importlib (~40 lines in a pytest report) say nothing of
                # the user's; only the module's own, where its import failed, do.
                own = _own_frames(error.__traceback__)
                if own is None:
                    raise refused from None
                raise refused from error.with_traceback(own)
            rest = self.qualname.split(".")
        for part in rest:
            obj = getattr(obj, part, None)
        if obj is None or not callable(obj):
            raise WorldSpecError(f"{where}: {self} does not name a function")
        return obj


def _own_frames(traceback: TracebackType | None) -> TracebackType | None:
    """``traceback`` from its first frame outside this module and importlib:
    the imported module's own code (None: the import failed before any ran,
    as when the module is not found)."""
    importlib_folder = os.path.dirname(importlib.__file__)
    while traceback is not None:
        filename = traceback.tb_frame.f_code.co_filename
        if filename != __file__ and not filename.startswith("<frozen importlib") and (
                os.path.dirname(filename) != importlib_folder):
            break
        traceback = traceback.tb_next
    return traceback


def import_folder(module_name: str) -> str:
    """The folder a loaded module's dotted name is imported from (up one
    level per package in the name), or "" when it is not loaded from a file."""
    module = sys.modules.get(module_name)
    if module is None or not getattr(module, "__file__", None):
        return ""
    path = os.path.dirname(os.path.abspath(module.__file__))
    for _ in range(module_name.count(".") + (os.path.basename(module.__file__) == "__init__.py")):
        path = os.path.dirname(path)
    return path


def found_anywhere(folder: str) -> bool:
    """Whether a Python process of this environment, started in any folder,
    imports the modules of ``folder`` without being told where they are:
    the interpreter's own library folders, or a folder that is not on
    ``sys.path`` here (its modules came through an import hook, as an
    editable install's do). A folder that only this process put on
    ``sys.path`` (pytest's rootdir-relative test folders, a script's own
    folder, the current folder) is not: a replay elsewhere must add it."""
    if not folder:
        return True
    if folder in _library_folders():
        return True
    return folder not in {os.path.abspath(path) for path in sys.path}  # "" is the current folder


@functools.cache
def _library_folders() -> frozenset[str]:
    """The interpreter's own library folders (asked once: sysconfig takes
    about a millisecond, and every entry of a reused world writes its
    replay line)."""
    import site
    import sysconfig

    paths = sysconfig.get_paths()
    library = {paths.get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    library |= {*site.getsitepackages(), site.getusersitepackages()}
    return frozenset(os.path.abspath(path) for path in library if path)


def _run_script(path: str) -> dict[str, Any]:
    """Run a script as ``__mp_main__`` and register it under that name, as
    multiprocessing's spawn does for its children: the script's functions
    say they live in ``__mp_main__``, and pickling one by reference (an
    ``rpc_sync`` to one of them) looks it up in ``sys.modules`` there, in
    the caller and in the callee alike."""
    import runpy
    import types

    namespace = runpy.run_path(path, run_name="__mp_main__")
    module = types.ModuleType("__mp_main__")
    module.__dict__.update(namespace)
    sys.modules["__mp_main__"] = module
    return namespace


def check_signature(
    ref: EntryRef, entry: Any, args: Sequence[Any], kwargs: Mapping[str, Any], *, spawned: bool, where: str
) -> None:
    """The entry must accept ``(ctx, *args, **kwargs)`` (``(rank, *args,
    **kwargs)`` when spawned): checked here, not in every rank."""
    function = entry if callable(entry) else (ref.load(where=where) if ref.main_file is None else None)
    if function is None:
        return
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # builtins without a signature: nothing to check
        return
    first = "rank" if spawned else "ctx"
    try:
        signature.bind(None, *args, **kwargs)
    except TypeError as error:
        shown = ", ".join([first, *(repr(a) for a in args), *(f"{k}={v!r}" for k, v in kwargs.items())])
        raise WorldSpecError(
            f"{where}: {ref}{signature} cannot be called as {ref.qualname}({shown}): {error}"
        ) from None
