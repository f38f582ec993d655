"""The bench's measurements that need a real world: RPC recording, death to report."""

from __future__ import annotations

import pytest

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


@pytest.mark.long  # ~17 s, nearly all of it the free-running world waiting out its timeout and shutdown
def test_a_verdict_on_a_timeout_is_measured_free_running_and_under_control():
    # The bench's figure is at 30 s; 1 s here: the free-running world times
    # out on the real clock, each controlled one on the schedule's.
    row = bench.timeout_verdicts(2, rpc_timeout=1.0)
    assert row["free_verdict"].startswith("RuntimeError: ") and "timeout" in row["free_verdict"], row
    assert row["same_verdict"] == 2 and row["verdicts"] == [row["free_verdict"]], row
    assert row["free_s"] >= 1.0  # a lower bound: the real timeout passed


def test_the_table_quotes_a_timeouts_verdict_under_control_against_free_running():
    figures = {"timeouts": {"rpc_timeout_s": 30.0, "free_s": 33.0, "free_verdict": "RuntimeError: RPCErr:1:RPC ran "
                            "for more than set timeout (30000 ms) and will now be marked with an error",
                            "reruns": 20, "controlled_median_s": 0.3, "controlled_max_s": 0.5, "same_verdict": 20,
                            "verdicts": ["x"]}}
    text = bench.table(figures)
    assert ("| a world whose verdict rests on a 30 s rpc_timeout, wall time (median of 20, max) | 0.30 s, 0.50 s "
            "| 33.0 s | 110x |") in text
    assert "| its verdict: the free-running one (RuntimeError: RPCErr:1:RPC ran for more than set timeout (30...) " \
           "| 20 of 20 | once | |" in text
