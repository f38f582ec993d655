"""Seeds (rpc_harness.seeds): one root seed derives every stream of a
world, the same in any process and any later release, and seeds every
generator a rank uses."""

from __future__ import annotations

import random

import numpy
import torch

from rpc_harness import seeds
from rpc_harness.seeds import MAX_SEED, derive_seed, fresh_seed, rank_seed, seed_everything


def test_a_derived_seed_is_the_same_number_in_every_release():
    # A replay token written today must replay next month: these numbers
    # are what the derivation gave when it was written.
    assert derive_seed(7, "rank", 1) == 6016998906714382286
    assert derive_seed(2026, "fuzz") == 3697800461473708285
    assert 0 <= derive_seed(2**40, "x") <= MAX_SEED


def test_each_rank_has_its_own_seed_derived_from_the_worlds():
    assert rank_seed(7, 1) == derive_seed(7, "rank", 1) == 6016998906714382286
    assert rank_seed(7, 0) == 6851857144314773272
    assert len({rank_seed(7, r) for r in range(4)} | {rank_seed(8, r) for r in range(4)}) == 8


class _Rigged:
    """A SystemRandom that draws the lowest (or highest) number asked for."""

    highest = False

    def randrange(self, *bounds):
        allowed = range(*bounds)
        return allowed[-1] if self.highest else allowed[0]


def test_a_fresh_seed_is_from_one_to_ten_digits_never_zero(monkeypatch):
    monkeypatch.setattr(random, "SystemRandom", _Rigged)
    assert fresh_seed() == 1
    monkeypatch.setattr(_Rigged, "highest", True)
    assert fresh_seed() == 2**32 - 1


def _draws() -> tuple:
    return random.random(), torch.rand(1).item(), numpy.random.rand()


def test_seeding_everything_makes_python_torch_and_numpy_draw_alike():
    for seed in (5, MAX_SEED):  # a rank's seed is 63 bits: numpy takes 32
        seed_everything(seed)
        first = _draws()
        seed_everything(seed)
        assert _draws() == first
    seed_everything(5)
    five = _draws()
    seed_everything(7)  # of the same parity as 5: no stream may depend on it alone
    assert all(a != b for a, b in zip(five, _draws(), strict=True))


class _Generator:
    def __init__(self, calls: list) -> None:
        self.calls = calls

    def manual_seed(self, seed):
        self.calls.append(("cpu", seed))


class _Accelerator:
    def __init__(self, available: bool) -> None:
        self.available = available

    def is_available(self) -> bool:
        return self.available


def _seeded(monkeypatch, accelerator: object, cuda: bool) -> list:
    calls: list = []
    monkeypatch.setattr(torch, "manual_seed", lambda seed: calls.append(("all", seed)))
    monkeypatch.setattr(torch, "default_generator", _Generator(calls))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    if accelerator is None:
        monkeypatch.delattr(torch, "accelerator", raising=False)
    else:
        monkeypatch.setattr(torch, "accelerator", accelerator)
    seeds.seed_everything(11)
    return calls


def test_every_devices_generators_are_seeded_where_torch_has_a_device(monkeypatch):
    # torch >= 2.6 names any accelerator (CUDA, MPS, XPU); before, CUDA was the one.
    assert _seeded(monkeypatch, _Accelerator(True), cuda=False) == [("all", 11)]
    assert _seeded(monkeypatch, _Accelerator(False), cuda=True) == [("cpu", 11)]
    assert _seeded(monkeypatch, None, cuda=True) == [("all", 11)]
    assert _seeded(monkeypatch, None, cuda=False) == [("cpu", 11)]
