"""`tiered-kv bench sim` reports medians of its repeats with every run beside them (never best-of)."""

from __future__ import annotations

import argparse
import json

import numpy as np

from tiered_kv.bench import sim


def _trace(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "small.jsonl"
    with path.open("w") as f:
        for i in range(300):
            n = int(rng.integers(1, 12))
            ids = [0, 1] + [int(x) for x in rng.integers(2, 400, n)]
            f.write(json.dumps({"timestamp": i * 1000, "input_length": 512 * len(ids), "output_length": 10,
                                "hash_ids": ids}) + "\n")
    return path


def test_timings_are_medians_with_every_run_kept(tmp_path):
    parser = argparse.ArgumentParser()
    sim.register(parser)
    args = parser.parse_args(["--trace", str(_trace(tmp_path)), "--repeat", "3", "--scales", "1,2",
                              "--capacity", "20000", "--no-cluster", "--cli-repeat", "0"])
    result = sim.run(args)
    conv = result["conversation"]
    for name in ("curves_s", "belady_one_capacity_s", "belady_curve_s", "lru_replay_s"):
        runs = conv["runs_s"][name]
        assert len(runs) == 3 and conv[name] == float(np.median(runs)), name
    assert len(conv["runs_s"]["per_point_replay_s"]) == 1
    assert set(result["scaling"]) == {"1x", "2x"} and all("runs_s" in v for v in result["scaling"].values())
    assert result["scaling"]["2x"]["block_accesses"] == 2 * conv["block_accesses"]


def test_median_of_keeps_the_runs():
    runs: dict[str, list[float]] = {}
    assert sim.median_of(lambda: None, 4, runs, "x") == float(np.median(runs["x"]))
    assert len(runs["x"]) == 4


def test_cli_bench_keeps_every_run_interleaved(monkeypatch):
    """Every warm and cold run is kept beside its median; the rounds interleave commands and baselines."""
    from itertools import count

    from tiered_kv.bench import _cli_startup as S

    calls, ticks = [], count(1)

    def wall(argv, cache_dir):
        calls.append((argv[-1] if argv[1] != "-c" else argv[2], cache_dir))
        return float(next(ticks))

    monkeypatch.setattr(S, "_wall", wall)
    out = S.run_cli_bench("conversation", 3)
    cli = out["cli"]
    assert set(cli) >= {"imports_s", "numpy_imports_s", "curves", "simulate"}
    for name in ("curves", "simulate"):
        d = cli[name]
        for key in ("warm", "cold"):
            assert len(d[f"{key}_runs_s"]) == 3 and d[f"{key}_s"] == float(np.median(d[f"{key}_runs_s"]))
    assert out["cli_cold_s"] == max(cli[n]["cold_s"] for n in ("curves", "simulate"))
    assert cli["meets_targets"] == {"cli_warm_s": out["cli_warm_s"] <= 0.8, "cli_cold_s": out["cli_cold_s"] <= 2.0}
    warm_dirs = {d for _, d in calls[:2]}  # the unmeasured fill of the warm cache
    cold = [d for a, d in calls[2:] if a == "--json" and d not in warm_dirs]
    assert len(cold) == 6 and len(set(cold)) == 6  # a fresh cache for every cold run
    assert [a for a, _ in calls[2:6]] == ["import numpy, numba", "import numpy", "--json", "--json"]
