"""The bench's RPC recording measurement, on a real world."""

from __future__ import annotations

from rpc_harness import bench


def test_rpc_recording_is_measured_against_torchs_own_rpc_sync():
    row = bench.rpc_recording_cost(1, calls=20)
    assert set(row) == {"recorded_us", "plain_us", "added_us", "worlds"}
    assert row["plain_us"] > 0 and row["recorded_us"] > 0 and row["worlds"] == 1
