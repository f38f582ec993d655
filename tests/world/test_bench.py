"""The bench's measurements that need a real world: RPC recording, death to report."""

from __future__ import annotations

from rpc_harness.apps import bench


def test_rpc_recording_is_measured_against_torchs_own_rpc_sync():
    row = bench.rpc_recording_cost(1, calls=20)
    assert set(row) == {"recorded_us", "plain_us", "added_us", "worlds"}
    assert row["plain_us"] > 0 and row["recorded_us"] > 0 and row["worlds"] == 1


def test_the_time_from_a_death_to_its_report_is_measured():
    row = bench.failure_latency(1)
    assert set(row) == {"median_s", "max_s", "runs"} and row["runs"] == 1
    assert 0 < row["median_s"] == row["max_s"]


def test_the_device_section_measures_both_arms_through_one_code_path():
    # devices=() measures the CPU in both arms: what runs here, without CUDA;
    # on a CUDA machine the device arm is the same code with devices=("cuda",).
    figures = bench.device_figures((), [], repeat=1, calls=5)
    assert figures["devices"] == "cpu" and set(figures["bring_up"]) == {"device", "cpu"}
    assert all(value > 0 for value in (*figures["bring_up"].values(), *figures["round_trip"].values()))
