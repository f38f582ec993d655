"""A rank's stacks and tracebacks made readable for a report.

The supervisor asks a rank for every thread's stack (``_stackdump``) when
its world hangs or fails; the dump has no source lines and
carries the harness's own frames. These functions add the one and drop the
other, and drop the harness's RPC wrappers from a rank's traceback.
"""

from __future__ import annotations

import linecache
import os
import re

from . import _stackdump

_RANK_FILE = os.path.join("rpc_harness", "_rank.py")
_HOOKS_FILE = os.path.join("rpc_harness", "_rpc_hooks.py")
_WATCH_FILE = os.path.join("rpc_harness", "rank_setup.py")
_DUMPER_FILE = os.path.join("rpc_harness", "_stackdump.py")
# One thread's block from the next: a blank line, or a thread's header line.
# faulthandler ends its dump without a blank line, so a dump that follows
# another (its fallback's, then the rank's own) starts right under it.
_THREADS_RE = re.compile(r"\n\s*\n|\n(?=(?:Current thread|Thread) 0x)")
_FRAME_RE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>.+)$')


def annotate_stacks(text: str) -> str:
    """Make a stack dump (faulthandler's form) readable: add each frame's
    source line (the dump has none, and ``failpoint("trainer.step")`` is what a reader needs),
    drop the harness's own watchdog thread and the bootstrap frames below a
    rank's entry."""
    blocks = []
    for block in _THREADS_RE.split(text.strip()):
        # Each of a rank's own answers ends with its END line: not a frame.
        lines = [line for line in block.strip("\n").splitlines() if line != _stackdump.END]
        if not lines:
            continue
        if any(_WATCH_FILE in line and line.endswith(" in watch") for line in lines):
            continue
        if any(_DUMPER_FILE in line and line.endswith(" in _answer") for line in lines):
            continue  # the thread that answers stack requests (in a faulthandler dump)
        out = []
        for line in lines:
            match = _FRAME_RE.match(line)
            if match and match["file"].endswith(_HOOKS_FILE):
                continue  # the harness's RPC wrappers: between the program's frames and torch's
            out.append(line)
            if not match:
                continue
            source = linecache.getline(match["file"], int(match["line"])).strip()
            if source:
                out.append(f"    {source}")
            if match["file"].endswith(_RANK_FILE):
                out.append("  (harness bootstrap frames omitted)")
                break
        blocks.append("\n".join(out))
    return "\n\n".join(blocks)


_TRACEBACK_FRAME_RE = re.compile(r'^  File "(?P<file>[^"]+)", line \d+, in ')


def hide_hook_frames(text: str) -> str:
    """A Python traceback without the frames of the harness's RPC wrappers
    (each a ``File`` line and the indented lines under it)."""
    out, skipping = [], False
    for line in text.splitlines(keepends=True):
        match = _TRACEBACK_FRAME_RE.match(line)
        if match:
            skipping = match["file"].endswith(_HOOKS_FILE)
        elif not line.startswith("    "):
            skipping = False
        if not skipping:
            out.append(line)
    return "".join(out)
