"""``rank_setup.warm_math_kernels``: every rank calls each of torch's oneMKL
math kernels once, on one thread, before its RPC threads can make their
first calls at once (oneMKL 2024.2 may then run a low-accuracy kernel,
pytorch/pytorch#188792; the function's docstring has what was measured,
and tools/mkl_first_call_race.py measures it again). The world test that a
rank starts warm is in tests/world/test_launcher.py."""

from __future__ import annotations

import pathlib
import re
import threading

import pytest
import torch

from rpc_harness import rank_setup

VML_HEADER = pathlib.Path(torch.__file__).parent / "include" / "ATen" / "cpu" / "vml.h"


def test_the_warm_up_covers_every_op_this_torch_hands_to_onemkl():
    if not VML_HEADER.exists():
        pytest.skip(f"this torch ships no {VML_HEADER.name} to read its list from")
    routed = set(re.findall(r"^IMPLEMENT_VML_MKL\((\w+),", VML_HEADER.read_text(), re.M))
    assert routed, f"no IMPLEMENT_VML_MKL line in {VML_HEADER}: its form changed"
    assert set(rank_setup.MKL_MATH_OPS) == routed


def test_the_warm_up_calls_each_op_for_float32_and_float64_on_the_calling_thread(monkeypatch):
    calls = []
    for name in rank_setup.MKL_MATH_OPS:
        monkeypatch.setattr(torch, name, lambda x, name=name: calls.append((name, x.dtype, threading.get_ident())))
    monkeypatch.setattr(rank_setup, "_math_kernels_warm", False)
    assert not rank_setup.math_kernels_warm()
    rank_setup.warm_math_kernels()
    here = threading.get_ident()
    assert sorted(calls, key=str) == sorted(((name, dtype, here) for name in rank_setup.MKL_MATH_OPS
                                             for dtype in (torch.float32, torch.float64)), key=str)
    assert rank_setup.math_kernels_warm()


def test_each_warm_up_call_is_in_its_ops_domain():
    # A value outside an op's domain (acos of 2) would still choose the
    # kernel, but a NaN here would hide a mistyped op name behind a warning.
    for dtype in (torch.float32, torch.float64):
        one = torch.full((1,), 0.5, dtype=dtype)
        for name in rank_setup.MKL_MATH_OPS:
            assert torch.isfinite(getattr(torch, name)(one)).all(), name
