"""Error messages' pieces (rpc_harness.errors): inputs echoed cut to size,
and where an error a peer raised came from."""

from __future__ import annotations

from rpc_harness.errors import (
    ControlLost,
    InjectedFault,
    WorldFailed,
    clip,
    is_remote_exception,
    one_line,
    origin,
)
from rpc_harness.faults import FaultPlan
from rpc_harness.result import RankOutcome, WorldResult

LETTERS = "abcdefghijklmnopqrstuvwxyz"


# -- clip ----------------------------------------------------------------------


def test_a_short_input_is_echoed_whole_up_to_the_limit():
    assert clip(12345678, limit=8) == "12345678"
    assert clip("abcdefgh", limit=10) == "'abcdefgh'"
    assert clip(LETTERS[:10], limit=10) == "'abcdefghij'"
    assert clip(True, limit=10) == "True" and clip(None) == "None"


def test_a_long_whole_number_keeps_its_first_half_and_last_quarter_of_the_limit():
    assert clip(123456789, limit=8) == "1234...89 (9 digits)"
    assert clip(10**20, limit=12) == "100000...000 (21 digits)"
    assert clip(10**5000) == "a whole number of about 5,000 digits", "past Python's digit limit"


def test_a_long_text_keeps_its_start_and_end_and_says_it_was_cut():
    assert clip(LETTERS, limit=9) == "'abcdef...xyz' (26 characters, cut)"
    assert clip(list(range(30)), limit=21) == "[0, 1, 2, 3, 4...28, 29] (110 characters, cut)"


def test_a_long_text_cut_around_where_the_problem_is():
    assert clip(LETTERS, at=13, limit=10) == "'...ijklmnopqr...' (26 characters, cut)"
    assert clip(LETTERS, at=2, limit=10) == "'abcdefghij...' (26 characters, cut)"
    assert clip(LETTERS, at=25, limit=10) == "'...qrstuvwxyz' (26 characters, cut)"
    assert clip(list(range(30)), at=105, limit=10) == "...7, 28, 29] (110 characters, cut)"


# -- errors a peer raised ------------------------------------------------------


def hop(worker: str, rank: int, error: BaseException) -> RuntimeError:
    """The error torch raises in the caller of an RPC whose callee raised
    ``error``: the callee named, its error's repr, its traceback."""
    return RuntimeError(
        f"On WorkerInfo(id={rank}, name={worker}):\n{error!r}\n"
        'Traceback (most recent call last):\n  File "x.py", line 1, in f\n'
    )


def test_an_error_a_peer_raised_is_named_where_it_was_first_raised():
    fault = InjectedFault("can't open: disk full")
    assert origin(hop("w2", 2, fault)) == "InjectedFault: can't open: disk full (raised on w2)"
    # Through a second peer: the innermost message, unescaped, and its rank.
    assert origin(hop("w1", 1, hop("w2", 2, fault))) == (
        "InjectedFault: can't open: disk full (raised on w2)"
    )
    # Three calls deep, its message escaped once more at each hop: still where it was raised.
    assert origin(hop("w0", 0, hop("w1", 1, hop("w2", 2, fault)))) == (
        "InjectedFault: can't open: disk full (raised on w2)"
    )
    assert origin(hop("w0", 0, hop("w1", 1, hop("w2", 2, InjectedFault('say "no"'))))) == (
        'InjectedFault: say "no" (raised on w2)'
    )
    assert origin(hop("w1", 1, InjectedFault(""))) == "InjectedFault (raised on w1)"
    assert (
        origin(RuntimeError("On WorkerInfo(id=1, name=w1):\\nboom\\nmore")) == "boom (raised on w1)"
    )
    assert origin(ValueError(" bad value \n")) == "ValueError: bad value"


def test_an_error_is_remote_when_torch_tagged_it_with_its_worker():
    assert is_remote_exception(hop("w1", 1, ValueError("x")))
    assert not is_remote_exception(ValueError("On WorkerInfo(id=1, name=w1) said no"))


def test_one_line_of_an_error_a_peer_raised_names_its_type_once():
    fault = InjectedFault("can't open: disk full")
    assert one_line(hop("w1", 1, hop("w2", 2, fault))) == (
        "RuntimeError: InjectedFault: can't open: disk full (raised on w2)"
    )
    assert (
        one_line(hop("w1", 1, RuntimeError("boom: bad")))
        == "RuntimeError: boom: bad (raised on w1)"
    )
    bare = InjectedFault(str(hop("w1", 1, InjectedFault(""))))
    assert one_line(bare) == "InjectedFault (raised on w1)"


def test_an_assert_that_is_its_own_comparison_is_not_given_another():
    assert one_line(AssertionError("assert x == 1\nassert y")) == "AssertionError: assert x == 1"


# -- errors that carry their world -------------------------------------------


def test_a_failed_world_and_a_lost_control_carry_their_world():
    result = WorldResult(
        ("w0",), 7, FaultPlan(), 30.0, [RankOutcome(0, "w0", status="raised", error="E")]
    )
    failed = WorldFailed(result)
    assert failed.result is result and str(failed) == result.report()
    lost = ControlLost(result, "no longer controlled from step 3")
    assert lost.result is result and str(lost) == "no longer controlled from step 3"
