"""tiered_kv.viz.write_points: the write-point and short-prompt crossover cells of notebooks 03 and 04."""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest

from tiered_kv.sim.cluster import latency as L
from tiered_kv.viz import write_points as W


def test_every_block_without_expiry_is_an_infinite_cache():
    """Writing at every block and never expiring, the unit store is an infinite cache: its hit rate
    is an unbounded LRU replay's (the simulator's other engine), every distinct block is one unit
    written once, and the bytes written and stored are their tokens' bytes."""
    from tiered_kv.sim.policies import get_policy
    from tiered_kv.sim.retention.write_points import compare_strategies
    from tiered_kv.sim.trace_replay import compile_trace, replay
    from tiered_kv.sim.workload import generate

    trace = compile_trace(generate("ci", 1.0, 0))
    bpt = 100.0
    table = W.strategy_table(compare_strategies(trace, bytes_per_token=bpt).with_columns(pl.lit("w").alias("workload")))
    every = table.filter(pl.col("strategy") == "every-block").row(0, named=True)
    assert every["token_hit_rate"] == pytest.approx(
        replay(trace, get_policy("lru", capacity_tokens=10**15)).token_hit_rate, rel=1e-12)
    _, first = np.unique(trace.blocks, return_index=True)
    gib = float(trace.chunk_tokens[first].sum()) * bpt / 2**30
    days = (trace.timestamps[-1] - trace.timestamps[0]) / 86_400
    assert every["units"] == trace.n_unique and every["write_point_share"] == 1.0
    assert every["stored_gib_end"] == pytest.approx(gib, rel=1e-12)
    assert every["written_gib_per_day"] == pytest.approx(gib / days, rel=1e-12)
    # fewer write points: fewer units, never a better hit rate than writing everything
    others = table.filter(pl.col("strategy") != "every-block")
    assert (others["units"] < trace.n_unique).all() and (others["token_hit_rate"] <= every["token_hit_rate"]).all()
    assert others["written_vs_every_block"].to_list() == pytest.approx(
        (others["written_gib_per_day"] / every["written_gib_per_day"]).to_list())


def test_strategies_chart_has_units_and_rejects_a_bad_size():
    data, line = W.strategies("small")
    assert "'ci'" in line and "B/token" in line
    spec = W.strategy_chart(data).to_dict()
    titles = [c["encoding"]["x"]["title"] for c in spec["hconcat"]]
    assert all("(" in t for t in titles), titles  # units on every axis
    with pytest.raises(ValueError, match="size"):
        W.strategies("huge")


def test_crossover_table_and_curves_follow_the_latency_model():
    table = W.crossover_table((10.0, 40.0))
    at40 = table.filter(pl.col("bandwidth_gib_s") == 40.0)
    for row in at40.iter_rows(named=True):
        assert row["crossover_tokens"] == pytest.approx(L.recompute_crossover_tokens(L.preset(row["preset"])))
    bf16 = table.filter(pl.col("preset") == "deepseek-v3").sort("bandwidth_gib_s")["crossover_tokens"]
    assert bf16[0] > bf16[1] > 128  # a slower SSD moves the crossover up; never below R
    curves = W.crossover_curves(max_tokens=1024, points=16)
    assert set(curves["path"]) == {"recompute", "load from SSD + replay"}
    one = curves.filter((pl.col("preset") == "deepseek-v3") & (pl.col("prompt_tokens") == 1024))
    ms = dict(zip(one["path"], one["ttft_ms"], strict=True))
    assert ms["recompute"] == pytest.approx(1e3 * float(L.miss_ttft(L.preset("deepseek-v3"), 1024)))
    assert ms["load from SSD + replay"] < ms["recompute"]  # 1,024 tokens is above the crossover
    spec = W.crossover_chart(max_tokens=256).to_dict()
    axes = [(p["layer"][0]["encoding"]["x"]["title"], p["layer"][0]["encoding"]["y"]["title"]) for p in spec["hconcat"]]
    assert axes and all("(tokens)" in x and "(ms)" in y for x, y in axes)


def test_measured_crossover_reads_the_benchmark_json(tmp_path):
    rec = {"params": 10, "fmt": "mxfp4", "lengths": {
        "200": {"miss_ms": 30.0, "ssd_cold_hit_ms": 20.0}, "100": {"miss_ms": 10.0, "ssd_cold_hit_ms": 20.0}}}
    path = tmp_path / "ttft.json"
    path.write_text(json.dumps(rec))
    table, line = W.measured_crossover(path)
    assert table["prompt_tokens"].to_list() == [100, 200]
    # miss - hit goes from -10 ms at 100 tokens to +10 ms at 200, linear in log length: zero
    # half-way in log length, at sqrt(100 * 200) = 141.4 tokens
    assert "crossover at about 141 tokens" in line
    assert L.measured_crossover_tokens([100, 200], [10, 30], [20, 20]) == pytest.approx(math.sqrt(100 * 200))
    rec["lengths"]["100"]["miss_ms"] = 25.0
    path.write_text(json.dumps(rec))
    assert "below 100 tokens" in W.measured_crossover(path)[1]
    rec["lengths"]["100"]["miss_ms"], rec["lengths"]["200"]["miss_ms"] = 10.0, 15.0
    path.write_text(json.dumps(rec))
    assert "never faster" in W.measured_crossover(path)[1]
    table, line = W.measured_crossover(tmp_path / "absent.json")
    assert table.height == 0 and "no measurement" in line


def test_measured_crossover_prefers_the_short_prompt_run(tmp_path, monkeypatch):
    """Without a path, the run made for the crossover (short prompts) is read when it exists."""
    from tiered_kv.measure import crossover as M

    long_run = {"params": 10, "fmt": "mxfp4", "lengths": {"1024": {"miss_ms": 30.0, "ssd_cold_hit_ms": 20.0}}}
    # miss - hit: -10 ms at 64 tokens, +20 ms at 256: zero a third of the way in log length,
    # at 64 * 4 ** (1/3) = 101.6 tokens
    short_run = {"params": 10, "fmt": "mxfp4", "block_size_tokens": 32, "repeats": 5, "lengths": {
        "64": {"miss_ms": 10.0, "ssd_cold_hit_ms": 20.0}, "256": {"miss_ms": 40.0, "ssd_cold_hit_ms": 20.0}}}
    (tmp_path / "ttft.json").write_text(json.dumps(long_run))
    monkeypatch.setattr(M, "TTFT_JSON", tmp_path / "ttft.json")
    monkeypatch.setattr(M, "TTFT_SHORT_JSON", tmp_path / "ttft_short.json")
    assert "below 1,024 tokens" in W.measured_crossover()[1]
    (tmp_path / "ttft_short.json").write_text(json.dumps(short_run))
    table, line = W.measured_crossover()
    assert table["prompt_tokens"].to_list() == [64, 256] and "ttft_short.json" in line
    assert "crossover at about 102 tokens" in line and "32-token chunks" in line
