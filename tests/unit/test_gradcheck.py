"""The gradient comparison itself: both ways to compare a tensor, at their
edges, and what a mismatch says (rpc_harness/gradcheck.py)."""

from __future__ import annotations

import math

import torch

from rpc_harness.gradcheck import Mismatch, close, compare, max_differences, relative_norm


def test_element_by_element_both_tolerances_count():
    e = torch.tensor([100.0, 0.0])
    assert close(torch.tensor([100.05, 0.0]), e, rtol=1e-3, atol=0.0), "rtol covers 0.05 of 100"
    assert not close(torch.tensor([100.05, 0.0]), e, rtol=1e-5, atol=0.0)
    assert close(torch.tensor([100.0, 0.01]), e, rtol=0.0, atol=0.02), "atol covers a zero baseline"
    assert not close(torch.tensor([100.0, 0.01]), e, rtol=1.0, atol=0.0), "rtol alone cannot cover a zero"
    assert not close(torch.tensor([100.0]), e, rtol=1.0, atol=1.0), "shapes differ"


def test_as_a_whole_the_bound_is_rtol_of_the_norm_plus_atol_per_element_in_norm():
    e = torch.zeros(16)  # ||e|| = 0: only atol * sqrt(16) = 4 * atol is left
    assert close(torch.full((16,), 1.0), e, rtol=0.5, atol=1.0, norm=True), "||a - e|| = 4: on the bound"
    assert not close(torch.full((16,), 1.5), e, rtol=0.5, atol=1.0, norm=True), "||a - e|| = 6 > 4"
    e = torch.full((4,), 3.0)  # ||e|| = 6
    assert close(e + 0.5, e, rtol=1 / 6, atol=0.0, norm=True), "||a - e|| = 1 = (1/6) * 6"
    assert not close(e + 0.5, e, rtol=1 / 6 * 0.99, atol=0.0, norm=True)


def test_as_a_whole_an_inf_or_a_nan_on_either_side_is_a_mismatch_unless_both_match():
    finite, inf = torch.tensor([1.0, 2.0]), torch.tensor([1.0, math.inf])
    assert not close(finite, inf, rtol=1.0, atol=1.0, norm=True)
    assert not close(inf, finite, rtol=1.0, atol=1.0, norm=True)
    assert close(inf, inf.clone(), rtol=0.0, atol=0.0, norm=True)
    nan = torch.tensor([1.0, math.nan])
    assert not close(nan, nan.clone(), rtol=1.0, atol=1.0, norm=True), "NaN equals nothing"


def test_max_differences_and_relative_norm_at_their_edges():
    assert max_differences(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 1.0])) == (1.0, 1.0)
    assert max_differences(torch.tensor([1.0]), torch.tensor([1.0, 2.0])) == (math.inf, math.inf)
    assert max_differences(torch.zeros(0), torch.zeros(0)) == (0.0, 0.0)
    assert max_differences(torch.tensor([1e-12], dtype=torch.float64), torch.tensor([0.0]))[1] == 1.0, "relative to at least 1e-12"
    assert relative_norm(torch.tensor([3.0, 4.0]), torch.tensor([0.0, 8.0])) == 5.0 / 8.0
    assert relative_norm(torch.zeros(2), torch.zeros(2)) == 0.0
    assert relative_norm(torch.ones(2), torch.zeros(2)) == math.inf
    assert relative_norm(torch.ones(2), torch.ones(3)) == math.inf


def test_compare_reports_every_missing_tensor_on_either_side_and_goes_on():
    worst, found = compare({"a": torch.ones(1), "c": torch.zeros(1)}, {"b": torch.ones(1), "c": torch.ones(1)},
                           scenario="ps", step=3, rank="trainer1", seed=7, rtol=0.1, atol=0.2, what="loss")
    assert worst == 1.0
    assert found == [
        Mismatch("ps", 3, "trainer1", "a (missing in the baseline)", math.inf, math.inf, 0.2, 0.1, 7, "loss"),
        Mismatch("ps", 3, "trainer1", "b (missing in the distributed run)", math.inf, math.inf, 0.2, 0.1, 7, "loss"),
        Mismatch("ps", 3, "trainer1", "c", 1.0, 1.0, 0.2, 0.1, 7, "loss"),
    ]


def test_compare_passes_its_way_of_comparing_on():
    expected = {"w": torch.tensor([1.0, 1.0, 1.0, 1.0])}
    tie = {"w": torch.tensor([1.0, 1.0, 1.0, 1.02])}  # 2% of one element, 1% of the tensor's norm
    assert compare(tie, expected, scenario="ps", step=0, rank="r", seed=0, rtol=0.015, atol=0.0, norm=True)[1] == []
    _, [elementwise] = compare(tie, expected, scenario="ps", step=0, rank="r", seed=0, rtol=0.015, atol=0.0)
    assert str(elementwise) == (
        "ps: gradient of 'w' on r at step 0 differs from the baseline: max abs diff 0.02, max rel diff 0.02 "
        "(tolerance atol=0, rtol=0.015); seed 0"
    )
