"""One line of an error (rpc_harness.errors.one_line), as a rank's report line shows it."""

from __future__ import annotations

from rpc_harness.errors import one_line


def test_an_assert_pytest_rewrote_keeps_its_comparison_after_the_authors_message():
    rewritten = AssertionError("rank 1 summed [1, 2, 3]\nassert 6 == 7\n +  where 6 = total([1, 2, 3])")
    assert one_line(rewritten) == "AssertionError: rank 1 summed [1, 2, 3] (assert 6 == 7)"


def test_an_assert_pytest_rewrote_without_a_message_is_its_comparison():
    rewritten = AssertionError("assert [1, 2, 3] == [1, 2, 4]\n  \n  At index 2 diff: 3 != 4")
    assert one_line(rewritten) == "AssertionError: assert [1, 2, 3] == [1, 2, 4]"


def test_other_errors_are_their_first_line():
    assert one_line(AssertionError()) == "AssertionError"
    assert one_line(AssertionError("plain says no")) == "AssertionError: plain says no"
    assert one_line(ValueError("bad\nassert this is not pytest's")) == "ValueError: bad"
