"""A rank's stack dump on request: read holding the GIL, so asking never
crashes a process whose threads come and go (faulthandler's dump did)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

# A process that arms the dump and keeps threads starting and ending, as
# torch's RPC thread pool does. faulthandler's all-threads dump on SIGUSR1
# killed such a process with SIGSEGV within 1 to 27 dumps, 20 times in 20.
CHURNING = textwrap.dedent("""
    import sys, threading, time
    from harness import _stackdump

    def churn():
        while True:
            thread = threading.Thread(target=sum, args=(range(100),))
            thread.start()
            thread.join()

    _stackdump.arm(open(sys.argv[1], "w"), sys.argv[2])
    for _ in range(8):
        threading.Thread(target=churn, daemon=True).start()
    print("ready", flush=True)
    time.sleep(120)
""")


def test_asking_200_times_never_crashes_a_process_whose_threads_come_and_go(tmp_path):
    stacks, fifo = tmp_path / "stacks", str(tmp_path / "dump")
    proc = subprocess.Popen([sys.executable, "-c", CHURNING, str(stacks), fifo], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        from harness import _stackdump

        for asked in range(1, 201):
            size = stacks.stat().st_size
            assert _stackdump.request(fifo)
            until = time.monotonic() + 30
            while stacks.stat().st_size == size and proc.poll() is None and time.monotonic() < until:
                time.sleep(0.001)
            assert proc.poll() is None, f"the process died (exit {proc.returncode}) at request {asked}"
            assert stacks.stat().st_size > size, f"request {asked} got no dump in 30 s"
        text = stacks.read_text()
        assert text.count('"MainThread" (most recent call first)') >= 200
        assert " in churn" in text and " in <module>" in text
        assert "rpc-harness-stacks" not in text, "the answering thread leaves itself out"
    finally:
        proc.kill()
        proc.wait()


def test_a_request_with_no_one_to_answer_says_so(tmp_path):
    from harness import _stackdump

    assert not _stackdump.request(str(tmp_path / "never-armed"))
    os.mkfifo(tmp_path / "armed-by-the-dead", 0o600)  # what a rank that ended leaves behind
    assert not _stackdump.request(str(tmp_path / "armed-by-the-dead"))


def test_a_dump_right_under_faulthandlers_is_read_thread_by_thread():
    from harness._stacks import annotate_stacks

    # faulthandler's dump ends without a blank line; the rank's own answer
    # then starts right under its last thread. Read as one block, the main
    # thread went out with the watchdog's.
    text = (
        "Thread 0x00007fc95c3ff6c0 (most recent call first):\n"
        '  File "/x/harness/rank_setup.py", line 54 in watch\n'
        "\n"
        "Current thread 0x00007fc97b1bfb80 (most recent call first):\n"
        '  File "/x/tests/worlds.py", line 488 in stuck_in_c\n'
        'Thread 0x00007fc95c3ff6c0 "rpc-harness-parent-watch" (most recent call first):\n'
        '  File "/x/harness/rank_setup.py", line 54 in watch\n'
        "\n"
        'Thread 0x00007fc97b1bfb80 "MainThread" (most recent call first):\n'
        '  File "/x/tests/worlds.py", line 490 in stuck_in_c\n'
        "\n"
    )
    out = annotate_stacks(text)
    assert "line 488 in stuck_in_c" in out and "line 490 in stuck_in_c" in out, out
    assert " in watch" not in out
