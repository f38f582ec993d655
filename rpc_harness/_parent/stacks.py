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
import sysconfig

from .._rank import stackdump as _stackdump

_RANK_FILE = os.path.join("rpc_harness", "_rank", "rank.py")
_HOOKS_FILE = os.path.join("rpc_harness", "rpc", "hooks.py")
_C10D_HOOKS_FILE = os.path.join("rpc_harness", "c10d", "hooks.py")
_WATCH_FILE = os.path.join("rpc_harness", "rank_setup.py")
_DUMPER_FILE = os.path.join("rpc_harness", "_rank", "stackdump.py")
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
            if match and match["file"].endswith((_HOOKS_FILE, _C10D_HOOKS_FILE)):
                continue  # the harness's RPC and collective wrappers: between the program's frames and torch's
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


# The harness's own waiting and wrapping in a rank: a program's rpc.shutdown()
# waiting for the supervisor's word (_rank/lifecycle), a wrapped Future.wait
# (_rank/gate), the rank's bootstrap (_rank/rank). Not context.py: a
# failpoint's frame (hang_at_failpoint, failpoint) says where a fault acted.
HARNESS_FILES = tuple(os.path.join("rpc_harness", *name.split("/")) for name in (
    "_rank/gate.py", "_rank/lifecycle.py", "_rank/rank.py", "rpc/hooks.py", "_rank/callpoints.py",
    "_rank/stackdump.py")) + (_C10D_HOOKS_FILE,)
FRAMES_ENV = "RPC_HARNESS_FRAMES"  # 1: reports show the harness's own frames too
_STDLIB = sysconfig.get_paths()["stdlib"] + os.sep
_BOOTSTRAP_NOTE = "  (harness bootstrap frames omitted)"
_THREAD_ID_RE = re.compile(r"^((?:Current thread|Thread) )0x[0-9a-f]+")
# A thread whose innermost Python frame is the harness's call of the program
# (_rank/rank.py: ``value = program(...)``) has returned from it and is in C
# code freeing what it left: its block is not dropped as the harness's own.
# Seen (torch 2.13, gloo): a DDP model dropped as its entry returned frees
# its process group, whose destructor joins gloo's threads holding the GIL,
# while one of them waits for the GIL to free a work made in a backward pass.
_PROGRAM_CALL_RE = re.compile(r"\bprogram\(")
RETURNED = ("  (its entry has returned: this thread is in C code, freeing what the entry left behind, such as "
            "a model and its process group, and that does not end)")


def show_harness_frames() -> bool:
    """Whether reports show the harness's own frames (``RPC_HARNESS_FRAMES=1``)."""
    return os.environ.get(FRAMES_ENV, "").strip() not in ("", "0")


def readable_stacks(text: str, *, harness_frames: bool = False) -> tuple[str, int]:
    """An annotated dump for a report: the harness's own frames left out
    (unless ``harness_frames``), threads whose stacks are alike shown once.
    Returns the text and how many frames were left out."""
    blocks, hidden, seen = [], 0, {}
    for block in text.strip().split("\n\n") if text.strip() else []:
        lines = block.splitlines()
        if not harness_frames:
            returned = _returned_from_program(lines)
            lines, dropped = _without_harness_frames(lines)
            hidden += dropped
            if len(lines) <= 1 and returned:
                lines.append(RETURNED)
            elif len(lines) <= 1:  # a thread only the harness had frames in
                continue
        key = _THREAD_ID_RE.sub(r"\1", "\n".join(lines))
        if key in seen:
            seen[key][1] += 1
            continue
        seen[key] = [len(blocks), 0]
        blocks.append(lines)
    for index, alike in seen.values():
        if alike:
            blocks[index].append(f"  (and {alike} more thread(s) with this stack)")
    return "\n\n".join("\n".join(lines) for lines in blocks), hidden


def same_stacks(a: str, b: str) -> bool:
    """Whether two dumps are alike but for their threads' ids."""
    return [_THREAD_ID_RE.sub(r"\1", line) for line in a.splitlines()] == [
        _THREAD_ID_RE.sub(r"\1", line) for line in b.splitlines()]


def _returned_from_program(lines: list[str]) -> bool:
    """Whether a thread's innermost frame is the harness's call of the program."""
    frames = _frames(lines[1:])
    if not frames or frames[0][0] is None or not frames[0][0].endswith(_RANK_FILE):
        return False
    return any(_PROGRAM_CALL_RE.search(line) for line in frames[0][1][1:])


def _without_harness_frames(lines: list[str]) -> tuple[list[str], int]:
    """One thread's lines (its header, frames, their source lines) without
    the harness's frames, nor the standard library's frames that the
    harness's own waiting called (a pipe's recv under its shutdown)."""
    header, frames = lines[:1], _frames(lines[1:])
    # The innermost frames down to the last harness frame among those of the
    # harness and the standard library: the harness waiting, not the program.
    top = 0
    for index, (file, _) in enumerate(frames):
        if file is None or not (_is_harness(file) or file.startswith(_STDLIB)):
            break
        if _is_harness(file):
            top = index + 1
    kept = [frame for file, frame in frames[top:] if file is None or not _is_harness(file)]
    kept = [[line for line in frame if line != _BOOTSTRAP_NOTE] for frame in kept]
    dropped = top + sum(1 for file, _ in frames[top:] if file is not None and _is_harness(file))
    return header + [line for frame in kept for line in frame], dropped


def _frames(lines: list[str]) -> list[tuple[str | None, list[str]]]:
    """A thread's frames, each (its file, its lines: the frame and its source)."""
    frames: list[tuple[str | None, list[str]]] = []
    for line in lines:
        match = _FRAME_RE.match(line)
        if match or not frames:
            frames.append((match["file"] if match else None, [line]))
        else:
            frames[-1][1].append(line)
    return frames


def _is_harness(file: str) -> bool:
    return file.endswith(HARNESS_FILES)


_TRACEBACK_FRAME_RE = re.compile(r'^  File "(?P<file>[^"]+)", line \d+, in ')


def hide_hook_frames(text: str) -> str:
    """A Python traceback without the frames of the harness's RPC wrappers
    (each a ``File`` line and the indented lines under it)."""
    return hide_traceback_frames(text, (_HOOKS_FILE,))[0]


def hide_traceback_frames(text: str, files: tuple[str, ...] = HARNESS_FILES) -> tuple[str, int]:
    """A Python traceback without the frames of ``files`` (each a ``File``
    line and the indented lines under it), and how many were left out."""
    out, skipping, hidden = [], False, 0
    for line in text.splitlines(keepends=True):
        match = _TRACEBACK_FRAME_RE.match(line)
        if match:
            skipping = match["file"].endswith(files)
            hidden += skipping
        elif not line.startswith("    "):
            skipping = False
        if not skipping:
            out.append(line)
    return "".join(out), hidden
