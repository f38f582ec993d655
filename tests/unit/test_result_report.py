"""A world's report, line by line, from hand-made results (rpc_harness.result;
tests/world/test_failure_reports.py shows it on real worlds). Each line is
compared whole: a report is read by people, and a word lost is a bug."""

from __future__ import annotations

import pytest

from rpc_harness.events import FaultFired
from rpc_harness.faults import FaultPlan
from rpc_harness.result import (
    CUT_SHORT,
    DIRTY,
    GROUP_NEVER_FORMED,
    INTERRUPTED,
    LOST,
    NAMES_MISMATCH,
    NEVER_FIRED,
    UNFINISHED,
    RankOutcome,
    WorldResult,
)

# A rank's stack dump as the rank's stackdump writes it: one thread with a
# frame of the program's and one of the harness's (left out of reports).
PROGRAM_STACK = (
    'Thread 0x00007f01 "MainThread" (most recent call first):\n'
    '  File "/x/rpc_harness/_rank/gate.py", line 294 in wait\n'
    "    return original(future)\n"
    '  File "/x/tests/programs/ps.py", line 74 in train\n'
    "    fut.wait()"
)
# Only the harness's frames: its entry had returned.
HARNESS_STACK = (
    'Thread 0x00007f02 "MainThread" (most recent call first):\n'
    '  File "/x/rpc_harness/_rank/lifecycle.py", line 163 in leave\n'
    "    word = self.conn.recv()"
)
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/x/rpc_harness/_rank/rank.py", line 114, in _run\n'
    "    value = program(boot.rank)\n"
    '  File "/x/tests/programs/ps.py", line 80, in run\n'
    '    raise ValueError("boom")\n'
    "ValueError: boom\n"
)


def world(*ranks: RankOutcome, faults: str = "", **fields) -> WorldResult:
    return WorldResult(
        names=tuple(r.name for r in ranks),
        seed=7,
        faults=FaultPlan.parse(faults),
        deadline=30.0,
        ranks=list(ranks),
        **fields,
    )


def fired(t: float, rank: int, fault: str, kind: str, hit: int = 1) -> dict:
    return FaultFired(t, rank, fault, kind, "a.b", hit).as_event()


# -- one rank's line ---------------------------------------------------------


def test_a_rank_that_ended_by_plan_or_by_the_harness_says_how():
    assert RankOutcome(0, "w0", status="ok").describe() == "rank 0 (w0): ok"
    assert RankOutcome(0, "", status="ok").describe() == "rank 0: ok", (
        "a rank that never named itself"
    )
    assert (
        RankOutcome(1, "w1", status="skipped", error="needs two GPUs").describe()
        == "rank 1 (w1): skipped: needs two GPUs"
    )
    killed = RankOutcome(
        2,
        "w2",
        status="killed",
        signal="SIGKILL",
        events=[fired(1.0, 2, "delay:w2@a.b=1s", "delay")],
    )
    assert killed.describe() == "rank 2 (w2): killed by SIGKILL as the fault plan asked"
    killed.events.append(fired(2.0, 2, "freeze:w2@a.b", "freeze"))
    assert (
        killed.describe()
        == "rank 2 (w2): frozen (SIGSTOP) as the fault plan asked, then killed by the harness"
    )
    assert (
        RankOutcome(3, "w3").describe()
        == "rank 3 (w3): stopped by the harness (SIGKILL) after the world failed"
    )
    assert (
        RankOutcome(3, "w3", stopped_because="rank 1 was killed").describe()
        == "rank 3 (w3): stopped by the harness (SIGKILL): rank 1 was killed"
    )


def test_a_rank_that_raised_says_what_and_in_which_phase():
    def raised(phase: str, error: str = "ValueError: boom") -> str:
        return RankOutcome(1, "w1", status="raised", error=error, phase=phase).describe()

    assert raised("entry") == "rank 1 (w1): raised ValueError: boom (in its entry)"
    assert raised("shutdown") == "rank 1 (w1): raised ValueError: boom (while shutting down)"
    assert raised("resting") == "rank 1 (w1): raised ValueError: boom (during resting)", (
        "a phase with no words"
    )
    assert raised("entry", "RuntimeError: Cannot extract tensors from value: <lock>") == (
        "rank 1 (w1): raised RuntimeError: Cannot extract tensors from value: <lock> (in its entry) [in a world with "
        "devices, TensorPipe pickles every value an RPC returns or an RRef owns to find its CUDA tensors, and "
        "torch's extractor skips plain locks, futures and RRefs only: give the object a __getstate__ that leaves "
        "out its RLocks, Conditions and threads, or use threading.Condition(threading.Lock())]"
    )


def test_a_hung_rank_says_how_far_its_entry_had_come():
    def hung(phase: str, progress=None) -> str:
        return RankOutcome(0, "w0", status="hung", phase=phase, progress=progress).describe()

    not_joined = "rank 0 (w0): had not joined the RPC world when the bring-up budget ran out"
    assert hung("starting") == not_joined and hung("start-up") == not_joined
    assert (
        hung("entry", (12, 24, "batches"))
        == "rank 0 (w0): hung: still in its entry (after 12/24 batches) at the deadline"
    )
    assert hung("entry") == "rank 0 (w0): hung: still in its entry at the deadline", (
        "no progress reported"
    )
    # Progress is its entry's: past the entry it says nothing of where the rank is.
    assert (
        hung("shutdown", (24, 24, "batches"))
        == "rank 0 (w0): hung: still while shutting down at the deadline"
    )


@pytest.mark.parametrize(
    ("signal", "cause"),
    [
        (
            "SIGKILL",
            "killed by SIGKILL from outside the harness (the kernel's OOM killer, or a user)",
        ),
        (
            "SIGABRT",
            "aborted itself (SIGABRT: torch aborts a rank on a fatal error, e.g. a peer gone for good)",
        ),
        ("SIGSEGV", "crashed (SIGSEGV)"),
        ("SIGBUS", "crashed (SIGBUS)"),
        ("SIGILL", "crashed (SIGILL)"),
        ("SIGFPE", "crashed (SIGFPE)"),
        ("SIGTERM", "killed by SIGTERM"),
    ],
)
def test_a_rank_that_died_by_a_signal_names_who_sends_it(signal, cause):
    died = RankOutcome(
        1, "w1", status="died", signal=signal, phase="entry", progress=(3, 10, "steps")
    )
    assert (
        died.describe()
        == f"rank 1 (w1): {cause} in its entry (after 3/10 steps); the fault plan did not kill it"
    )


def test_a_rank_that_exited_says_its_code_and_the_gpu_memory_it_held():
    exited = RankOutcome(1, "w1", status="died", exitcode=3, phase="done")
    assert exited.describe() == (
        "rank 1 (w1): exited with code 3 after its entry, waiting to shut down "
        "without reporting a result"
    )
    exited.gpu_memory = 3 * 2**29
    assert exited.describe().endswith("without reporting a result; it held 1.5 GiB of GPU memory")
    assert RankOutcome(0, "w0", status="ok", gpu_memory=0).describe() == "rank 0 (w0): ok"


# -- the world's figures -----------------------------------------------------


def test_a_worlds_ranks_are_found_by_rank_or_by_name_and_iterated_in_rank_order():
    a, b = RankOutcome(0, "a", status="ok"), RankOutcome(1, "b", status="ok")
    result = world(a, b)
    assert result["b"] is b and result[0] is a and list(result) == [a, b]


def test_the_last_injected_error_is_the_last_raise_to_fire_by_time():
    # Three raises (out of rank order in time) and a kill after them.
    w0 = RankOutcome(
        0,
        "w0",
        status="ok",
        events=[
            fired(1.0, 0, "raise:w0@a.b#1=x", "raise"),
            fired(3.0, 0, "raise:w0@a.b#3=z", "raise", hit=3),
        ],
    )
    w1 = RankOutcome(
        1,
        "w1",
        status="killed",
        events=[
            fired(2.0, 1, "raise:w1@a.b#1=y", "raise"),
            fired(4.0, 1, "kill:w1@a.b#2", "kill", hit=2),
        ],
    )
    result = world(w0, w1)
    assert result.last_injected_error() == FaultFired(3.0, 0, "raise:w0@a.b#3=z", "raise", "a.b", 3)
    assert world(RankOutcome(0, "w0", status="ok")).last_injected_error() is None


def test_fault_counts_name_every_fault_of_the_plan_with_how_often_it_fired():
    plan = "raise:w0@a.b#1=x,kill:w1@a.b#2"
    w0 = RankOutcome(
        0,
        "w0",
        status="ok",
        events=[
            fired(1.0, 0, "raise:w0@a.b#1=x", "raise"),
            fired(2.0, 0, "raise:w0@a.b#1=x", "raise", hit=2),
        ],
    )
    result = world(w0, RankOutcome(1, "w1", status="ok"), faults=plan)
    assert result.fault_counts() == {"raise:w0@a.b#1=x": 2, "kill:w1@a.b#2": 0}


# -- the headline ------------------------------------------------------------


def headline(result: WorldResult) -> str:
    return result.report().splitlines()[0]


def test_an_ok_world_names_what_decided_its_run():
    ok = [RankOutcome(0, "w0", status="ok"), RankOutcome(1, "w1", status="ok")]
    assert headline(world(*ok, duration=1.25)) == "rpc world ok in 1.25s (world_size=2, seed=7)"
    assert headline(
        world(
            *ok,
            duration=1.25,
            faults="kill:w1@a.b#2",
            schedule_label="random(3)",
            fuzz=0.25,
            devices="cuda (shared)",
        )
    ) == (
        "rpc world ok in 1.25s (world_size=2, seed=7, faults=kill:w1@a.b#2, schedule=random(3), fuzz=0.25, "
        "devices=cuda (shared))"
    )


def test_a_world_that_did_not_come_up_counts_the_ranks_that_had_not_joined():
    result = world(
        RankOutcome(0, "w0", status="hung"),
        RankOutcome(1, "w1", status="ok"),
        RankOutcome(2, "w2", status="hung"),
        timed_out=True,
        budget="bring-up",
        bringup=60.0,
    )
    assert headline(result) == (
        "rpc world did not come up: 2 of 3 ranks had not joined within the bring-up budget "
        "of 60s (the deadline counts from when all have) (world_size=3, seed=7)"
    )


def test_a_world_that_hung_names_the_injected_error_seen_last():
    w0 = RankOutcome(0, "w0", status="hung", phase="entry")
    w1 = RankOutcome(
        1,
        "w1",
        status="hung",
        phase="entry",
        events=[fired(1.0, 1, "raise:w1@a.b#2=x", "raise", hit=2)],
    )
    assert headline(world(w0, w1, timed_out=True)) == (
        "rpc world hung: deadline of 30s passed (counted from when every rank had joined); last injected error: "
        "raise:w1@a.b#2=x in rank 1 (w1) on hit 2 (world_size=2, seed=7)"
    )
    assert headline(world(w0, RankOutcome(1, "w1", status="hung"), timed_out=True)) == (
        "rpc world hung: deadline of 30s passed (counted from when every rank had joined) (world_size=2, seed=7)"
    )


def test_failed_skipped_and_ended_early_worlds_each_say_so():
    ok, raised = RankOutcome(0, "w0", status="ok"), RankOutcome(1, "w1", status="raised", error="E")
    assert (
        headline(world(ok, raised))
        == "rpc world failed: 1 of 2 ranks failed (world_size=2, seed=7)"
    )
    assert headline(world(ok, RankOutcome(1, "w1", status="skipped", error="no GPU"))) == (
        "rpc world skipped (world_size=2, seed=7)"
    )
    assert (
        headline(
            world(
                ok,
                RankOutcome(1, "w1", status="killed"),
                ended_by="rank 1 was killed",
                duration=0.5,
            )
        )
        == "rpc world ended early by its fault plan in 0.50s (world_size=2, seed=7)"
    )


@pytest.mark.parametrize(
    ("problem", "kind"),
    [
        (
            f"{NAMES_MISMATCH} a, b",
            "the program's worker names do not match the names it was run with",
        ),
        (f"kill:w0@a.b#1 {NEVER_FIRED}", "its fault plan did not do what it says"),
        (
            f"msgfail:w0@X=3 failed 2 of its 3 message(s) fewer than 3 times, {CUT_SHORT}: ...",
            "its fault plan did not do what it says",
        ),
        (f"3 {LOST} to msgfail:w0@X=6", "its fault plan lost messages"),
        (f"{UNFINISHED} w1", "a planned kill ended its program"),
        (f"{GROUP_NEVER_FORMED}: rank 1 timed out", GROUP_NEVER_FORMED),
        (f"{INTERRUPTED} (SIGINT)", INTERRUPTED),
        (f"{DIRTY}: a thread left running", DIRTY),
        ("something else went wrong", "see below"),
    ],
)
def test_a_world_failed_by_a_problem_besides_its_ranks_names_its_first_problems_kind(problem, kind):
    result = world(
        RankOutcome(0, "w0", status="ok"), problems=[problem, f"kill:w0@a.b#1 {NEVER_FIRED}"]
    )
    assert headline(result) == f"rpc world failed: {kind} (world_size=1, seed=7)"
    assert result.report().splitlines()[1:3] == [f"  {problem}", f"  kill:w0@a.b#1 {NEVER_FIRED}"]


def test_a_problem_kinds_words_are_read_where_each_kind_puts_them():
    # A plan's fault whose text holds another kind's words at the wrong place.
    def kind(problem: str) -> str:
        return headline(world(RankOutcome(0, "w0", status="ok"), problems=[problem]))

    assert kind(f"x {NAMES_MISMATCH}").startswith("rpc world failed: see below")
    assert kind(f"x {UNFINISHED}").startswith("rpc world failed: see below")
    assert kind(f"x {GROUP_NEVER_FORMED}").startswith("rpc world failed: see below")
    assert kind(f"x {INTERRUPTED}").startswith("rpc world failed: see below")
    assert kind(f"x {DIRTY}").startswith("rpc world failed: see below")


# -- the whole report --------------------------------------------------------


def test_a_failed_worlds_report_shows_each_failures_traceback_stacks_and_output_tail():
    w0 = RankOutcome(
        0,
        "w0",
        status="raised",
        error="ValueError: boom",
        phase="entry",
        traceback=TRACEBACK,
        output="one\ntwo\nthree\n",
        stacks=PROGRAM_STACK,
    )
    w1 = RankOutcome(1, "w1", status="ok", stacks=HARNESS_STACK)
    w2 = RankOutcome(
        2, "w2", status="stopped", stacks=PROGRAM_STACK.replace("0x00007f01", "0x00007f09")
    )
    result = world(
        w0,
        w1,
        w2,
        reuse="entry 2 of a module's world",
        problems=["kill:w1@a.b#1 never fired"],
        collectives=["rank 0: all_reduce #3"],
        repro="pytest tests/x.py --rpc-seed=7",
    )
    assert result.report(output_lines=2).splitlines() == [
        "rpc world failed: 1 of 3 ranks failed (world_size=3, seed=7)",
        "  ran in entry 2 of a module's world",
        "  kill:w1@a.b#1 never fired",
        "  rank 0 (w0): raised ValueError: boom (in its entry)",
        "  rank 1 (w1): ok",
        "  rank 2 (w2): stopped by the harness (SIGKILL) after the world failed",
        "  collectives: rank 0: all_reduce #3",
        "--- rank 0 (w0) traceback",
        "Traceback (most recent call last):",
        '  File "/x/tests/programs/ps.py", line 80, in run',
        '    raise ValueError("boom")',
        "ValueError: boom",
        "--- rank 0 (w0) stacks when the world was stopped",
        'Thread 0x00007f01 "MainThread" (most recent call first):',
        '  File "/x/tests/programs/ps.py", line 74 in train',
        "    fut.wait()",
        "--- rank 0 (w0) output (last 2 lines)",
        "two",
        "three",
        "--- rank 1 (w1) stacks when the world was stopped",
        "  (only the harness's own frames: its entry had returned)",
        "--- rank 2 (w2) stacks when the world was stopped: the same as rank 0 (w0)'s above",
        "(4 frames of the harness's own left out: RPC_HARNESS_FRAMES=1, or report(harness_frames=True), shows them)",
        "Replay: pytest tests/x.py --rpc-seed=7",
    ]
    assert "Replay" not in result.report(replay=False)
    assert result.report().count("\none\n") == 1, "20 lines of output by default"


def test_a_hung_worlds_stacks_are_at_the_deadline_and_its_harness_frames_are_shown_when_asked(
    monkeypatch,
):
    w0 = RankOutcome(
        0, "w0", status="hung", phase="entry", stacks=PROGRAM_STACK, traceback=TRACEBACK
    )
    result = world(w0, timed_out=True)
    assert result.report().splitlines()[2:5] == [
        "--- rank 0 (w0) traceback",
        "Traceback (most recent call last):",
        '  File "/x/tests/programs/ps.py", line 80, in run',
    ]
    assert "--- rank 0 (w0) stacks at the deadline" in result.report().splitlines()
    shown = result.report(harness_frames=True)
    assert (
        "lifecycle" not in shown
        and "rank.py" in shown
        and "gate.py" in shown
        and "left out" not in shown
    )
    monkeypatch.setenv("RPC_HARNESS_FRAMES", "1")
    assert result.report() == shown, "None: the environment says"
    monkeypatch.setenv("RPC_HARNESS_FRAMES", "0")
    assert "rank.py" not in result.report() and "gate.py" not in result.report()


def test_a_stack_shown_once_is_not_shown_again_but_different_ones_are():
    other = PROGRAM_STACK.replace("in train", "in serve")
    ranks = [
        RankOutcome(0, "w0", status="ok", stacks=PROGRAM_STACK),
        RankOutcome(1, "w1", status="ok", stacks=other),
        RankOutcome(2, "w2", status="ok", stacks=other),
    ]
    lines = world(*ranks).report().splitlines()
    assert [line for line in lines if line.startswith("---")] == [
        "--- rank 0 (w0) stacks when the world was stopped",
        "--- rank 1 (w1) stacks when the world was stopped",
        "--- rank 2 (w2) stacks when the world was stopped: the same as rank 1 (w1)'s above",
    ]
    assert lines.count('  File "/x/tests/programs/ps.py", line 74 in serve') == 1
    assert (
        world(RankOutcome(0, "w0", status="ok")).report()
        == "rpc world ok in 0.00s (world_size=1, seed=7)\n  rank 0 (w0): ok"
    )


def test_a_stacks_trailing_blank_is_cut_from_its_section():
    # A thread of the harness's alone after a program's leaves the program's
    # last line as the dump's end, trailing spaces and all.
    stacks = PROGRAM_STACK + "   \n\n" + HARNESS_STACK
    lines = world(RankOutcome(0, "w0", status="ok", stacks=stacks)).report().splitlines()
    assert lines[5] == "    fut.wait()", lines


def test_ranks_that_ended_alike_share_one_line_and_one_output():
    error = "RuntimeError: peer w0 is gone"
    alike = [
        RankOutcome(
            r, f"w{r}", status="raised", error=error, phase="entry", output=f"rank {r} says hi\n"
        )
        for r in range(1, 4)
    ]
    result = world(
        RankOutcome(0, "w0", status="killed", signal="SIGKILL"),
        *alike,
        RankOutcome(4, "w4", status="ok"),
    )
    assert result.report().splitlines() == [
        "rpc world failed: 3 of 5 ranks failed (world_size=5, seed=7)",
        "  rank 0 (w0): killed by SIGKILL as the fault plan asked",
        f"  3 ranks (1, 2, 3): raised {error} (in its entry)",
        "  rank 4 (w4): ok",
        "--- rank 1 (w1) output (last 1 lines) (and 2 more ranks alike)",
        "rank 1 says hi",
    ]
    two = world(*alike[:2]).report().splitlines()
    assert two[1:3] == [
        f"  rank 1 (w1): raised {error} (in its entry)",
        f"  rank 2 (w2): raised {error} (in its entry)",
    ]
    assert "--- rank 2 (w2) output (last 1 lines)" in two, "two alike are each shown"


def test_a_group_of_many_ranks_names_the_first_eight():
    ranks = [RankOutcome(r, f"w{r}", status="ok") for r in range(11)]
    assert (
        world(*ranks).report().splitlines()[1]
        == "  11 ranks (0, 1, 2, 3, 4, 5, 6, 7 and 3 more): ok"
    )
    assert world(*ranks[:8]).report().splitlines()[1] == "  8 ranks (0, 1, 2, 3, 4, 5, 6, 7): ok"


def test_a_failed_groups_traceback_says_how_many_more_ranks_are_alike():
    alike = [
        RankOutcome(r, f"w{r}", status="raised", error="E: x", phase="entry", traceback=TRACEBACK)
        for r in range(3)
    ]
    lines = world(*alike).report().splitlines()
    assert lines[2] == "--- rank 0 (w0) traceback (and 2 more ranks alike)"
    assert lines.count("--- rank 1 (w1) traceback") == 0


def test_a_groups_line_reads_as_its_first_ranks_and_nine_ranks_name_one_more():
    # Alike is status, phase, error, signal and why stopped: how far each
    # had come may differ, and the line says the first rank's.
    hung = [
        RankOutcome(r, f"w{r}", status="hung", phase="entry", progress=(r, 9, "steps"))
        for r in range(9)
    ]
    assert world(*hung).report().splitlines()[1] == (
        "  9 ranks (0, 1, 2, 3, 4, 5, 6, 7 and 1 more): hung: still in its entry (after 0/9 steps) "
        "at the deadline"
    )


def test_an_output_tail_is_its_last_twenty_lines_without_trailing_blank_lines():
    text = "\n\n" + "".join(f"line {n}\n" for n in range(25)) + "\n\n"
    raised = RankOutcome(0, "w0", status="raised", error="E", phase="entry", output=text)
    lines = world(raised).report().splitlines()
    assert lines[2:] == ["--- rank 0 (w0) output (last 20 lines)"] + [
        f"line {n}" for n in range(5, 25)
    ]
    raised.output = "\n\nfirst\nlast\n\n"
    assert world(raised).report().splitlines()[2:] == [
        "--- rank 0 (w0) output (last 4 lines)",
        "",
        "",
        "first",
        "last",
    ], "blank lines before the output are the output's"


def test_frames_left_out_of_every_traceback_are_counted_together():
    ranks = [
        RankOutcome(r, f"w{r}", status="raised", error=f"E{r}", phase="entry", traceback=TRACEBACK)
        for r in range(2)
    ]
    assert world(*ranks).report().splitlines()[-1] == (
        "(2 frames of the harness's own left out: RPC_HARNESS_FRAMES=1, or "
        "report(harness_frames=True), shows them)"
    )


def test_a_ranks_hits_are_its_last_record_of_them_or_none():
    rank = RankOutcome(0, "w0", status="ok")
    assert rank.hits == {}
    rank.events = [
        {"kind": "hits", "hits": {"a.b": 1}},
        {"kind": "hits", "hits": {"a.b": 2, "c.d": 1}},
    ]
    assert rank.hits == {"a.b": 2, "c.d": 1}
