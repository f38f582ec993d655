"""Stack requests with no one to answer, and dumps glued to faulthandler's
(tests/world/test_stacks.py asks a live process, 200 times)."""

from __future__ import annotations

import os


def test_a_request_with_no_one_to_answer_says_so(tmp_path):
    from rpc_harness._rank import stackdump as _stackdump

    assert not _stackdump.request(str(tmp_path / "never-armed"))
    os.mkfifo(tmp_path / "armed-by-the-dead", 0o600)  # what a rank that ended leaves behind
    assert not _stackdump.request(str(tmp_path / "armed-by-the-dead"))



def test_a_rank_that_dies_between_the_open_and_the_write_is_gone_not_an_error(tmp_path, monkeypatch):
    # The window a bench run hit: the FIFO opened (its reader, the rank, was
    # there), then the rank died and the write broke the pipe; the
    # supervisor's BrokenPipeError ended the whole spawn() call.
    from rpc_harness._rank import stackdump as _stackdump

    fifo = tmp_path / "dump"
    os.mkfifo(fifo, 0o600)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    real_open = os.open

    def open_then_the_rank_dies(path, flags, *args):
        fd = real_open(path, flags, *args)
        os.close(reader)
        return fd

    monkeypatch.setattr(_stackdump.os, "open", open_then_the_rank_dies)
    assert _stackdump.request(str(fifo)) is False


def test_a_dump_right_under_faulthandlers_is_read_thread_by_thread():
    from rpc_harness._parent.stacks import annotate_stacks

    # faulthandler's dump ends without a blank line; the rank's own answer
    # then starts right under its last thread. Read as one block, the main
    # thread went out with the watchdog's.
    text = (
        "Thread 0x00007fc95c3ff6c0 (most recent call first):\n"
        '  File "/x/rpc_harness/rank_setup.py", line 54 in watch\n'
        "\n"
        "Current thread 0x00007fc97b1bfb80 (most recent call first):\n"
        '  File "/x/tests/worlds.py", line 488 in stuck_in_c\n'
        'Thread 0x00007fc95c3ff6c0 "rpc-harness-parent-watch" (most recent call first):\n'
        '  File "/x/rpc_harness/rank_setup.py", line 54 in watch\n'
        "\n"
        'Thread 0x00007fc97b1bfb80 "MainThread" (most recent call first):\n'
        '  File "/x/tests/worlds.py", line 490 in stuck_in_c\n'
        "\n"
    )
    out = annotate_stacks(text)
    assert "line 488 in stuck_in_c" in out and "line 490 in stuck_in_c" in out, out
    assert " in watch" not in out


def test_an_answer_is_whole_only_with_its_end_line_which_the_report_leaves_out():
    from rpc_harness._parent.stacks import annotate_stacks
    from rpc_harness._rank import stackdump as _stackdump

    answer = _stackdump.dump()
    assert _stackdump.answered(answer)
    # A reader can see a write half copied in: without its end line, an answer is not whole yet.
    assert not _stackdump.answered(answer[: answer.index(_stackdump.END)])
    shown = annotate_stacks(answer + answer)
    assert _stackdump.END not in shown
    assert shown.count('"MainThread" (most recent call first)') == 2


class _FakeClock:
    """``time`` for the supervisor: sleeping moves the clock, and is counted."""

    def __init__(self) -> None:
        self.now, self.slept = 0.0, 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += seconds


def test_stopping_a_world_waits_for_a_live_ranks_stacks_but_not_for_a_rank_that_exited(tmp_path, monkeypatch):
    # Every rank failing in its setup at once: the first failure stops the
    # world, and the others, busy failing, were asked for their stacks. They
    # exit without answering; waiting the whole stack wait for each (twice,
    # with SIGUSR1 between) made such a world take 2 to 5 s instead of 0.2.
    from types import SimpleNamespace

    from rpc_harness._parent import supervisor as _supervisor

    clock = _FakeClock()
    monkeypatch.setattr(_supervisor, "time", clock)
    ended_r, ended_w = os.pipe()
    os.close(ended_w)  # a process that ended: its sentinel reads as ready (EOF)
    live_r, live_w = os.pipe()
    supervisor = object.__new__(_supervisor.Supervisor)
    supervisor.procs = {0: SimpleNamespace(sentinel=ended_r), 1: SimpleNamespace(sentinel=live_r)}
    supervisor.workdir, supervisor.stacks_read = str(tmp_path), {}
    try:
        assert supervisor._await_stacks({0}, signalled=set()) == set() and clock.slept == 0, "not waited for"
        assert supervisor._await_stacks({0, 1}, signalled=set()) == {1}, "a live rank that did not answer"
        assert clock.slept >= _supervisor._STACK_WAIT, "waited for, to the end of the stack wait"
    finally:
        for fd in (ended_r, live_r, live_w):
            os.close(fd)
