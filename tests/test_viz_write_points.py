"""tiered_kv.viz.write_points: the write-point and short-prompt crossover cells of notebooks 03 and 04."""

from __future__ import annotations

import json
import math

import polars as pl
import pytest

from tiered_kv.sim.cluster import latency as L
from tiered_kv.viz import write_points as W


def test_strategy_table_and_chart_at_small_size():
    data, line = W.strategies("small")
    assert "'ci'" in line and "B/token" in line
    table = W.strategy_table(data)
    assert table["strategy"].to_list() == ["every-block", "turn-ends", "turn-ends+4096", "common-prefixes"]
    assert table.filter(pl.col("strategy") == "every-block")["write_point_share"].to_list() == [1.0]
    assert table.filter(pl.col("strategy") == "every-block")["written_vs_every_block"].to_list() == [1.0]
    assert table["token_hit_rate"].is_between(0, 1).all() and (table["written_gib_per_day"] > 0).all()
    # fewer write points, fewer units
    assert (table["units"] <= table.filter(pl.col("strategy") == "every-block")["units"][0]).all()
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
    n = L.measured_crossover_tokens([100, 200], [10, 30], [20, 20])
    assert 100 < n < 200 and f"{n:,.0f} tokens" in line
    rec["lengths"]["100"]["miss_ms"] = 25.0
    path.write_text(json.dumps(rec))
    assert "below 100 tokens" in W.measured_crossover(path)[1]
    table, line = W.measured_crossover(tmp_path / "absent.json")
    assert table.height == 0 and "no measurement" in line
    assert not math.isinf(L.measured_crossover_tokens([1, 2], [3, 3], [1, 1]))


def test_measured_crossover_prefers_the_short_prompt_run(tmp_path, monkeypatch):
    """Without a path, the run made for the crossover (short prompts) is read when it exists."""
    long_run = {"params": 10, "fmt": "mxfp4", "lengths": {"1024": {"miss_ms": 30.0, "ssd_cold_hit_ms": 20.0}}}
    short_run = {"params": 10, "fmt": "mxfp4", "block_size_tokens": 32, "repeats": 5, "lengths": {
        "64": {"miss_ms": 10.0, "ssd_cold_hit_ms": 20.0}, "256": {"miss_ms": 40.0, "ssd_cold_hit_ms": 20.0}}}
    (tmp_path / "ttft.json").write_text(json.dumps(long_run))
    monkeypatch.setattr(W, "TTFT_JSON", tmp_path / "ttft.json")
    monkeypatch.setattr(W, "TTFT_SHORT_JSON", tmp_path / "ttft_short.json")
    assert "below 1,024 tokens" in W.measured_crossover()[1]
    (tmp_path / "ttft_short.json").write_text(json.dumps(short_run))
    table, line = W.measured_crossover()
    assert table["prompt_tokens"].to_list() == [64, 256] and "ttft_short.json" in line
    n = L.measured_crossover_tokens([64, 256], [10, 40], [20, 20])
    assert f"{n:,.0f} tokens" in line and "32-token chunks" in line
