"""Nothing left on the GPU: after a CUDA world, killed ranks included, the
number of compute processes NVML lists is back to what it was (issue 29,
item 5). Read through NVML (rpc_harness._parent.nvml), which initializes no CUDA
in the test process. Passed on an H200 (2026-11-26; docs/benchmarks.md)."""

from __future__ import annotations

import time

import pytest
import worlds

from rpc_harness._parent import nvml as _nvml

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _processes() -> dict[int, int]:
    listed = _nvml.gpu_processes()
    assert listed is not None, "NVML cannot be read on this CUDA machine"
    return listed


def _settled(before: dict[int, int], within: float = 15.0) -> dict[int, int]:
    until = time.monotonic() + within
    while True:
        now = _processes()
        if set(now) <= set(before) or time.monotonic() > until:
            return now
        time.sleep(0.2)


@pytest.mark.parametrize("kill_rank", [None, 2])
def test_a_cuda_world_leaves_no_process_on_the_gpu(rpc_world, kill_rank):
    # (This process may hold a CUDA context of its own: another test of the
    # session may have put a tensor on the GPU here. It is in both sets.)
    before = _processes()
    result = rpc_world.run(worlds.ring_on_device, world_size=4, devices="cuda",
                           kwargs={"kill_rank": kill_rank, "nvml": True}, check=False)
    # A peer of the killed rank may fail its call: count the ranks that returned.
    answers = [r.value for r in result.ranks if isinstance(r.value, dict)]
    assert len(answers) >= (4 if kill_rank is None else 1) and all(a["listed_by_nvml"] for a in answers), (
        f"NVML must list the ranks while they run, or the check below proves nothing: {answers}")
    after = _settled(before)
    left = {pid: size for pid, size in after.items() if pid not in before}
    assert not left, f"compute processes left on the GPU after the world (pid: bytes): {left}"
    assert len(after) <= len(before)


def test_a_scenario_world_with_a_killed_rank_leaves_nothing_on_the_gpu():
    from rpc_harness import run_scenario
    from rpc_harness.scenario import load

    sc = load("ps")
    plan = next(iter(sc.fault_checks(sc.default_world_size, sc.config_type()).values()))
    before = _processes()
    run_scenario("ps", seed=3, faults=plan, devices="cuda")
    left = {pid: size for pid, size in _settled(before).items() if pid not in before}
    assert not left, f"compute processes left on the GPU after the world (pid: bytes): {left}"
