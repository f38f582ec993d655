"""``_tally.cut_short``: a ``msgfail=N`` that failed some message fewer
than N times, because the world ended while torch was still retrying it,
is named (the world test is in tests/world/test_fault_controls.py)."""

from __future__ import annotations

from rpc_harness._parent import tally as _tally
from rpc_harness.events import FaultFired
from rpc_harness.faults import TORCH_SEND_TRIES, FaultPlan
from rpc_harness.result import RankOutcome

POINT = "CLEANUP_AUTOGRAD_CONTEXT_REQ"


def outcome_with_tries(fault: str, attempts: list[int]) -> RankOutcome:
    """worker0, whose output torch's retry log turned into these failed tries."""
    outcome = RankOutcome(0, "worker0", status="ok")
    outcome.events = [FaultFired(float(k), 0, fault, "msgfail", POINT, k + 1, attempt).as_event()
                      for k, attempt in enumerate(attempts)]
    return outcome


def cut(fault: str, attempts: list[int]) -> list[str]:
    return _tally.cut_short(FaultPlan.parse(fault), [outcome_with_tries(fault, attempts)])


def test_messages_failed_fewer_times_than_asked_are_counted():
    lines = cut(f"msgfail:worker0@{POINT}=3", [1, 1, 2, 1, 2, 3])  # three messages, one failed three times
    assert lines == [
        f"msgfail:worker0@{POINT}=3 failed 2 of its 3 message(s) fewer than 3 times, cut short by the world's end: "
        "torch was still retrying them (about a second apart, then longer), so they were never delivered; keep the "
        "world running until the retries are done, or ask for fewer failed tries"]
    assert len(cut(f"msgfail:worker0@{POINT}=2", [1, 1, 2])) == 1, "=2 is the smallest count it can judge"


def test_other_faults_of_the_plan_are_passed_over_not_an_end_to_the_count():
    # A kill, a raise with its message and a delay of 3 s before the msgfail:
    # none is a count of tries, and the msgfail after them is still judged.
    fault = f"msgfail:worker0@{POINT}=3"
    plan = FaultPlan.parse(f"kill:worker0@a.b#9,raise:worker0@a.b=boom,delay:worker0@a.b=3s,{fault}")
    lines = _tally.cut_short(plan, [outcome_with_tries(fault, [1, 2])])
    assert len(lines) == 1 and lines[0].startswith(f"{fault} failed 1 of its 1 message(s) fewer than 3 times")


def test_every_message_failed_as_often_as_asked_is_no_problem():
    assert cut(f"msgfail:worker0@{POINT}=2", [1, 2, 1, 2]) == []
    assert cut(f"msgfail:worker0@{POINT}=2", []) == [], "a fault that never fired is unfired's to say"


def test_one_failed_try_and_torchs_whole_budget_are_not_its_to_judge():
    # =1: the retry that delivers logs nothing, run or not; =6: lost_messages says it.
    assert cut(f"msgfail:worker0@{POINT}=1", [1, 1]) == []
    assert cut(f"msgfail:worker0@{POINT}={TORCH_SEND_TRIES}", [1, 2]) == []
    assert cut(f"msgfail:worker0@{POINT}={TORCH_SEND_TRIES - 1}", [1, 2]) != []
