"""A report's stacks: the harness's own frames left out, alike threads shown
once (issue 28, item 4; tests/world/test_failure_reports.py shows it on a real world)."""

from __future__ import annotations

from rpc_harness._parent.stacks import readable_stacks

SHUTDOWN_WAIT = (
    'Thread 0x00007f01 "MainThread" (most recent call first):\n'
    '  File "/usr/lib/python3.11/multiprocessing/connection.py", line 395 in _recv\n'
    "    chunk = read(handle, remaining)\n"
    '  File "/x/rpc_harness/_rank/lifecycle.py", line 163 in leave\n'
    "    word = self.conn.recv()\n"
    '  File "/x/rpc_harness/_rank/lifecycle.py", line 59 in shutdown\n'
    "    return _current.leave(graceful=graceful, timeout=timeout)\n"
    '  File "/x/tests/programs/tutorial_ps.py", line 100 in run_worker\n'
    "    rpc.shutdown()\n"
    '  File "/x/rpc_harness/_rank/rank.py", line 114 in _run\n'
    "    value = program(boot.rank, *args, **kwargs)\n"
    "  (harness bootstrap frames omitted)"
)
FUTURE_WAIT = (
    'Thread 0x00007f0{n} "unnamed" (most recent call first):\n'
    '  File "/x/rpc_harness/_rank/gate.py", line 294 in wait\n'
    "    return original(future)\n"
    '  File "/x/torch/distributed/rpc/api.py", line 842 in rpc_sync\n'
    "    return fut.wait()\n"
    '  File "/x/tests/programs/tutorial_ps.py", line 74 in train\n'
)


def test_the_harnesss_waiting_frames_and_what_they_called_are_left_out(monkeypatch):
    monkeypatch.setattr("rpc_harness._parent.stacks._STDLIB", "/usr/lib/python3.11/")
    text, hidden = readable_stacks(SHUTDOWN_WAIT + "\n\n" + FUTURE_WAIT.format(n=2))
    assert "rpc_harness/" not in text and "multiprocessing" not in text and "bootstrap" not in text, text
    assert "    rpc.shutdown()" in text and "in rpc_sync" in text and "in train" in text
    assert hidden == 5  # _recv under the harness's leave, leave, shutdown, _run, _gate's wait
    assert readable_stacks(SHUTDOWN_WAIT, harness_frames=True) == (SHUTDOWN_WAIT, 0)


def test_threads_with_the_same_stack_are_shown_once():
    text, _ = readable_stacks("\n\n".join(FUTURE_WAIT.format(n=n).rstrip() for n in range(3)))
    assert text.count("in train") == 1, text
    assert "(and 2 more thread(s) with this stack)" in text


# A rank hung as its entry returned (seen with torch 2.13: a DDP model freed
# as the entry returned frees its process group, whose destructor waits for
# gloo's threads while holding the GIL): faulthandler's dump of it.
FREEING = (
    "Thread 0x00007f5d64ff16c0 (most recent call first):\n"
    "  <no Python frame>\n\n"
    "Current thread 0x00007f5d9d3f1b80 (most recent call first):\n"
    '  File "/x/rpc_harness/_rank/rank.py", line 153 in _run\n'
    "    value = program(ctx, *args, **kwargs)\n"
    "  (harness bootstrap frames omitted)"
)


def test_a_thread_stuck_as_its_entry_returned_is_shown_saying_so():
    text, _ = readable_stacks(FREEING)
    assert text.startswith("Thread 0x00007f5d64ff16c0 (most recent call first):\n  <no Python frame>\n\n"), text
    assert text.endswith("Current thread 0x00007f5d9d3f1b80 (most recent call first):\n"
                         "  (its entry has returned: this thread is in C code, freeing what the entry left behind, "
                         "such as a model and its process group, and that does not end)"), text


def test_a_thread_only_the_harness_has_frames_in_is_still_left_out(monkeypatch):
    monkeypatch.setattr("rpc_harness._parent.stacks._STDLIB", "/usr/lib/python3.11/")
    waiting = SHUTDOWN_WAIT.replace('  File "/x/tests/programs/tutorial_ps.py", line 100 in run_worker\n'
                                    "    rpc.shutdown()\n", "")
    assert readable_stacks(waiting) == ("", 4)  # _recv, leave, shutdown, _run
    text, _ = readable_stacks(waiting + "\n\n" + FUTURE_WAIT.format(n=2))
    assert "in train" in text and "shutdown" not in text, "the threads after it are still shown"
