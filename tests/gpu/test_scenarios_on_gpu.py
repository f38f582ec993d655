"""Each scenario with its models on the GPU (``devices="cuda"``) equal to
its single-process CPU baseline within the GPU tolerances
(rpc_harness/scenarios/_device.py says which and why), and its fault checks
(killed trainer, slow observer, server kill, ...) run on the GPU too.
Passed alone on an H200 (2026-11-26), with the largest gradient difference
from the CPU baseline 3.1e-6; all ten failed inside the whole suite there.
The likely cause was found later, on a CPU: the ranks inherited torch's
frozen cuDNN flags from a preloaded test module (docs/benchmarks.md); fixed
in ``_device.prepare``, not yet run on a GPU."""

from __future__ import annotations

import pytest

from rpc_harness import check_report, run_scenario
from rpc_harness.scenario import available, load, runs_on_devices

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


ON_DEVICES = [name for name in available() if runs_on_devices(load(name))]  # ddp_rpc: the CPU only, and refuses


@pytest.mark.parametrize("name", ON_DEVICES)
def test_the_scenario_on_the_gpu_equals_its_cpu_baseline(name):
    report = run_scenario(name, seed=2, devices="cuda")
    check_report(report)
    assert report.details["tolerance"]["device"].startswith("cuda")
    assert "devices='cuda'" in report.python_replay, "the replay lines carry the device"


def _fault_checks():
    for name in ON_DEVICES:
        sc = load(name)
        for label, plan in sc.fault_checks(sc.default_world_size, sc.config_type()).items():
            yield pytest.param(name, plan, id=f"{name}-{label}")


@pytest.mark.parametrize(("name", "plan"), list(_fault_checks()))
def test_the_scenarios_fault_checks_hold_on_the_gpu(name, plan):
    report = run_scenario(name, seed=2, faults=plan, devices="cuda")
    check_report(report)


@pytest.mark.parametrize("name", ["ddp", "fsdp"])
def test_a_collective_scenario_shares_the_gpus_over_gloo(name):
    # Three ranks: on a machine with fewer GPUs they share them (NCCL could not).
    report = run_scenario(name, world_size=3, seed=2, devices="cuda")
    check_report(report)
    assert report.details["tolerance"]["device"].startswith("cuda")
    assert report.grads_checked == report.grads_expected > 0
    assert all(rank.value["device"].startswith("cuda") for rank in report.world.ranks)
