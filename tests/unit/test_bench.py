"""The bench's table (its figures are printed, never asserted)."""

from __future__ import annotations

from rpc_harness.apps import bench


def test_the_table_quotes_every_figure():
    figures = {
        "bring_up": [{"world_size": 4, "harness_median_s": 0.17, "spawn_median_s": 2.0, "speedup": 11.8,
                      "pss_mb": 40.2, "uss_mb": 12.6, "world_pss_gb": 0.16},
                     {"world_size": 256, "harness_median_s": 48.0, "pss_mb": 16.0, "uss_mb": 15.1,
                      "world_pss_gb": 4.0}],
        "fixture_path": {"median_s": 0.2, "plain_median_s": 0.21, "first_s": 5.0, "plain_first_s": 5.1},
        "reused_entries": {"reused_median_s": 0.0096, "fresh_median_s": 0.233, "runs": 50, "first_s": 3.2,
                           "per_minute": 6250.0, "by_size": [{"world_size": 4, "median_s": 0.0101, "runs": 10},
                                                             {"world_size": 64, "median_s": 0.05, "runs": 10}]},
        "failure_latency": {"median_s": 0.04, "max_s": 0.05},
        "unarmed_failpoint_ns": 110.0,
        "rpc_recording": {"plain_us": 340.0, "recorded_us": 365.0, "added_us": 25.0},
        "scenarios": [{"scenario": "ps", "world_size": 3, "steps_per_s": 23.1,
                       "failpoint_overhead_pct": 0.0008, "peak_rss_mb_per_rank": 435.0}],
    }
    text = bench.table(figures)
    assert "| 4-rank world up + down (median) | 0.170 s | 2.00 s | 12x |" in text
    assert "| 256-rank world up + down (median) | 48.000 s |  |  |" in text, "no spawn way past 16 ranks"
    assert "from a test module importing pytest and torch (median) | 0.200 s | 2.00 s | 10x |" in text
    assert ("| the same, asserts rewritten in ranks / not (--assert=plain): world (median), first world of a "
            "session (median) | 0.200 / 0.210 s, 5.00 / 5.10 s |") in text
    assert "| memory at 256 ranks: per rank PSS / USS (median), world PSS | 16 / 15 MB, 4.00 GB |" in text
    assert ("| entry in a reused 4-rank world (rpc_world_module) / in a fresh one (rpc_world), one rpc_sync a "
            "rank (median) | 9.6 ms (6,250 a minute) | 0.233 s | 24x |") in text
    assert ("| entry in a reused 4-rank world / a fresh 4-rank world (run_world), one rpc_sync a rank (median) "
            "| 10.1 ms | 0.170 s | 17x |") in text
    assert "| entry in a reused 64-rank world / a fresh 64-rank world (run_world), one rpc_sync a rank (median) " \
           "| 50.0 ms |  |  |" in text, "no fresh world of that size measured"
    assert "| rank death -> failure report (median / max) | 40 / 50 ms |" in text
    assert "| unarmed failpoint | 110 ns/call |" in text
    assert "| 340 / 25 us |" in text
    assert "| ps (world 3) | 23.1 steps/s, failpoints 0.0008% of run time, peak 435 MB/rank |" in text


def test_the_table_quotes_the_device_against_the_cpu():
    figures = {"device": {"devices": "cuda", "bring_up": {"device": 1.5, "cpu": 0.5},
                          "round_trip": {"device": 200e-6, "cpu": 800e-6},
                          "scenarios": [{"scenario": "ps", "world_size": 3, "device_steps_per_s": 40.0,
                                         "cpu_steps_per_s": 20.0, "device_ok": True, "cpu_ok": True}]}}
    text = bench.table(figures)
    assert "| 4-rank world up + down on cuda / on the CPU (median) | 1.500 s | 0.500 s | 3.00x |" in text
    assert "| rpc_sync round trip of a 1 MB tensor on cuda along the device maps / on the CPU (median) | " \
           "200 us | 800 us | 0.25x |" in text
    assert "| ps (world 3) steps/s on cuda / on the CPU | 40.0 | 20.0 | 2.00x |" in text


def test_bench_device_cuda_is_refused_with_exit_2_in_one_line_before_any_world(monkeypatch, capsys, tmp_path):
    import pytest

    from rpc_harness.apps import cli

    monkeypatch.chdir(tmp_path)  # the bench's default output folder is the current one's rpc-harness-out/

    monkeypatch.setattr("rpc_harness._cuda_fork.cuda_available", lambda: False)
    monkeypatch.setattr(bench, "run_world", lambda *a, **k: pytest.fail("a world started"))
    assert cli.main(["bench", "--device", "cuda", "--quick"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "\n" not in err and "--device: devices='cuda' asks for CUDA, but CUDA is not available here" in err
    assert captured.out == ""


def test_bench_device_with_only_or_svg_is_refused_and_device_cpu_is_the_whole_bench(monkeypatch, capsys, tmp_path):
    import pytest

    from rpc_harness.apps import cli

    monkeypatch.chdir(tmp_path)  # the bench's default output folder is the current one's rpc-harness-out/

    monkeypatch.setattr("rpc_harness._cuda_fork.cuda_available", lambda: True)
    monkeypatch.setattr("torch.cuda.device_count", lambda: 1)
    monkeypatch.setattr(bench, "run_bench", lambda **k: pytest.fail("the bench started"))
    for extra, option in ((["--only", "bring-up"], "--only"), (["--svg", str(tmp_path / "b.svg")], "--svg")):
        assert cli.main(["bench", "--device", "cuda", *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and f"{option} with --device: bench --device measures only the device" in err
    started = []
    monkeypatch.setattr(bench, "run_bench", lambda **k: started.append(k) or 0)
    assert cli.main(["bench", "--device", "cpu", "--only", "bring-up", "--json", str(tmp_path / "b.json")]) == 0
    assert started[0]["devices"] == () and started[0]["only"] == ("bring-up",)
    assert started[0]["svg_path"] == cli.DEFAULT_BENCH_SVG, "the curve is drawn where it always was"
    assert cli.main(["bench", "--device", "cuda", "--json", str(tmp_path / "c.json")]) == 0
    assert started[1]["devices"] == ("cuda",) and started[1]["svg_path"] is None


def test_pcts_bound_is_one_over_n_k_to_the_depth_less_one():
    assert bench.pct_bound(tasks=10, steps=24, depth=1) == 1 / 10
    assert bench.pct_bound(tasks=10, steps=24, depth=2) == 1 / 240
    assert bench.pct_bound(tasks=4, steps=9, depth=3) == 1 / (4 * 81)


def test_worlds_until_failure_count_a_capped_seed_as_worse_than_any_and_all_its_worlds():
    # Seeds failing at their 1st, 3rd world, and one that did not in 5.
    summary = bench.summarize_counts([1, 3, None], cap=5)
    assert summary["median"] == 3 and summary["worst"] is None, "the capped seed is the worst"
    assert summary["worlds"] == 1 + 3 + 5 and summary["failed"] == 2
    assert summary["rate"] == 2 / 9
    never = bench.summarize_counts([None, None], cap=5)
    assert never["median"] is None and never["rate"] == 0.0 and never["worlds"] == 10


def test_the_table_gives_each_race_and_way_of_running_its_median_worst_and_pcts_bound():
    row = {"program": "pipeline order", "strategy": "pct:2", "steps": 24, "tasks": 10, "median": 2, "worst": None,
           "rate": 0.4, "worlds": 45, "cap": 5, "bound": 1 / 240}
    deep = {**row, "strategy": "pct:3", "bound": 1 / (10 * 24 * 24)}
    free = {**row, "strategy": "free", "median": None, "rate": 0.0, "worlds": 100}
    del free["bound"]
    text = bench.table({"until_failure": {"seeds": 20, "cap": 5, "rows": [row, deep, free]}})
    assert "Worlds until the race fails, from 20 seeds (at most 5 each):" in text
    assert "| pipeline order (24, 10) | pct:2 | median 2, worst > 5 | 40% of 45 | 0.42% |" in text
    assert "| pipeline order (24, 10) | pct:3 | median 2, worst > 5 | 40% of 45 | 0.017% |" in text, "never 0.00%"
    assert "| pipeline order (24, 10) | free | median > 5, worst > 5 | 0% of 100 |  |" in text


def test_the_bring_up_picture_draws_all_three_ways(tmp_path):
    rows = [{"world_size": 2, "harness_median_s": 0.11, "spawn_median_s": 1.4, "pss_mb": 90.0,
             "world_pss_gb": 0.18},
            {"world_size": 16, "harness_median_s": 0.64, "spawn_median_s": 14.5, "pss_mb": 27.0,
             "world_pss_gb": 0.42}]
    reused = [{"world_size": 2, "median_s": 0.006, "runs": 10}, {"world_size": 16, "median_s": 0.03, "runs": 10}]
    svg = (tmp_path / "three.svg")
    bench.write_growth_picture(rows, str(svg), reused)
    text = svg.read_text()
    for name in ("fresh world (run_world)", "spawn + init_rpc", "an entry in a reused world (rpc_world_module)"):
        assert name in text, name
    bench.write_growth_picture(rows, str(tmp_path / "two.svg"))
    assert "reused world" not in (tmp_path / "two.svg").read_text(), "no reuse section run: two curves"


def test_the_table_quotes_the_collective_worlds_against_torchs_multiprocesstestcase():
    from rpc_harness.apps.bench import table

    figures = {"collectives": {"fresh_median_s": 0.12, "reused_median_s": 0.004, "first_s": 2.0, "runs": 30,
                               "consecutive_median_s": 0.0031, "bare_median_s": 0.0012, "bare_runs": 30,
                               "torch_median_s": 6.0, "torch_runs": 5, "torch_over_fresh": 50.0,
                               "torch_over_reused": 1500.0}}
    text = table(figures)
    assert ("| 4-rank gloo all_reduce test in a fresh collective world (rpc_world, rpc=False) / under torch's "
            "MultiProcessTestCase (median) | 0.120 s | 6.00 s | 50x |") in text
    assert ("| the same test as an entry in a reused collective world (rpc_world_module), each after a fresh "
            "world / under MultiProcessTestCase (median) | 4.0 ms | 6.00 s | 1500x |") in text
    assert "| the same entries one after another, as a module's tests run them (median) | 3.1 ms | | |" in text
    assert ("| its all_reduce alone, in a bare loop of 4 processes (no harness: a word down a pipe to each, an "
            "answer back; median) | 1.2 ms | | |") in text


def test_the_table_quotes_schedules_per_second_reused_against_fresh():
    figures = {"reused_schedules": {"schedules": 100, "steps": 22, "reused": {"per_s": 31.25, "seconds": 3.2},
                                    "fresh": {"per_s": 6.25, "seconds": 16.0},
                                    "race": {"verdict": "a schedule failed after 33 schedules of dpor search",
                                             "seconds": 1.5, "failed": True}}}
    text = bench.table(figures)
    assert ("| schedules per second, 4-rank world (3 messages to one rank, 100 random-walk schedules, 22 steps "
            "each; explore(reuse=True), its bring-up counted) | 31.2/s | 6.2/s | 5x |") in text
    assert ("| lost update as an entry of run(...), DPOR in a reused 4-rank world | a schedule failed after 33 "
            "schedules of dpor search, 1.5 s | | |") in text
