"""The bench's table (its figures are printed, never asserted)."""

from __future__ import annotations

from rpc_harness import bench


def test_the_table_quotes_every_figure():
    figures = {
        "bring_up": [{"world_size": 2, "harness_median_s": 0.17, "spawn_median_s": 2.0, "speedup": 11.8}],
        "failure_latency": {"median_s": 0.04, "max_s": 0.05},
        "unarmed_failpoint_ns": 110.0,
        "rpc_recording": {"plain_us": 340.0, "recorded_us": 365.0, "added_us": 25.0},
        "scenarios": [{"scenario": "ps", "world_size": 3, "steps_per_s": 23.1,
                       "failpoint_overhead_pct": 0.0008, "peak_rss_mb_per_rank": 435.0}],
    }
    text = bench.table(figures)
    assert "| 2-rank world up + down (median) | 0.170 s | 2.00 s | 12x |" in text
    assert "| rank death -> failure report (median / max) | 40 / 50 ms |" in text
    assert "| unarmed failpoint | 110 ns/call |" in text
    assert "| 340 / 25 us |" in text
    assert "| ps (world 3) | 23.1 steps/s, failpoints 0.0008% of run time, peak 435 MB/rank |" in text
