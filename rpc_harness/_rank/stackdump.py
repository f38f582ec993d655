"""A rank's stacks, on the supervisor's request, read where reading is safe.

faulthandler's dump from a signal handler walks every thread's frames
without the GIL. A thread that starts or ends meanwhile, as a thread pool's
do, crashes the process: a process of 8 threads that come and go died of
SIGSEGV within 1 to 27 such dumps, 20 times out of 20. A survivor whose
stacks the harness asked for then died, and was reported as dead of its own.

So the supervisor asks through a FIFO, and a thread of the rank answers
holding the GIL, from ``sys._current_frames()``. faulthandler on SIGUSR1
stays for a rank that does not answer (one whose threads cannot take the
GIL: a C call stuck while holding it, where nothing moves), and for a rank
asked before it armed the FIFO. The answer has faulthandler's form, which
``_stacks.annotate_stacks`` reads, with each thread's name added.
"""

from __future__ import annotations

import errno
import os
import sys
import threading
from collections.abc import Callable
from typing import TextIO

_THREAD_NAME = "rpc-harness-stacks"
# The last line of every answer. A reader sees a file grow while a write is
# still being copied in (Linux fills it page by page), so an answer is whole
# only once this line is in; the report leaves it out.
END = "(end of stacks)"
# What a rank brings up to date before it answers (the collective history's
# completions): called in the answering thread, holding the GIL, each
# guarded, since the stacks matter more.
_before: list[Callable[[], None]] = []


def before_answering(update: Callable[[], None]) -> None:
    """Call ``update`` before each answer (once per process, however often registered)."""
    if update not in _before:
        _before.append(update)


def arm(stacks: TextIO, request_path: str) -> None:
    """Answer each byte written to the FIFO at ``request_path`` with a dump
    of every thread's stack to ``stacks``."""
    os.mkfifo(request_path, 0o600)
    # Read and write: the FIFO then always has a writer, so a read waits
    # for the next request instead of seeing end of file.
    fd = os.open(request_path, os.O_RDWR)
    threading.Thread(target=_answer, args=(fd, stacks), name=_THREAD_NAME, daemon=True).start()


def request(request_path: str) -> bool:
    """Ask the rank that armed ``request_path`` for its stacks; False when no
    rank is there to answer (not armed yet, or gone)."""
    try:
        fd = os.open(request_path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as error:
        if error.errno in (errno.ENOENT, errno.ENXIO):
            return False
        raise
    try:
        os.write(fd, b"?")
    except BlockingIOError:  # a full FIFO: requests enough are already waiting
        pass
    except BrokenPipeError:  # the rank died between the open and the write (seen in a bench)
        return False
    finally:
        os.close(fd)
    return True


def _answer(fd: int, stacks: TextIO) -> None:
    out = stacks.fileno()
    while os.read(fd, 4096):
        for update in _before:
            try:
                update()
            except Exception:  # noqa: BLE001, S110 - the stacks are what was asked for
                pass
        # Past the file object's buffer, which would hold back a piece of a
        # large dump until the next: the end line goes out with the rest.
        data = dump().encode()
        while data:
            data = data[os.write(out, data):]


def answered(text: str) -> bool:
    """Whether ``text``, what a rank wrote since it was asked, holds a whole answer."""
    return f"\n{END}\n" in text


def dump() -> str:
    """Every thread's stack but this module's own, innermost frame first, in
    faulthandler's form (one block per thread, blocks apart by a blank line),
    then the END line."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    blocks = []
    for ident, frame in sys._current_frames().items():
        if names.get(ident) == _THREAD_NAME:
            continue
        lines = [f'Thread 0x{ident:016x} "{names.get(ident, "unnamed")}" (most recent call first):']
        while frame is not None:
            lines.append(f'  File "{frame.f_code.co_filename}", line {frame.f_lineno or 0} in {frame.f_code.co_name}')
            frame = frame.f_back
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + f"\n\n{END}\n\n"
