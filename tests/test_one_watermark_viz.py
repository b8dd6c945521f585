"""The tables and chart of the one-watermark analysis (figure 14, notebook 03) read the study's numbers."""

import numpy as np
import polars as pl
import pytest

from tiered_kv.sim.retention import one_watermark as G
from tiered_kv.sim.trace_replay import compile_trace
from tiered_kv.sim.workload import generate
from tiered_kv.viz import one_watermark as W


@pytest.fixture(scope="module")
def res():
    trace = compile_trace(generate("ci", 4.0, seed=2))
    return G.one_watermark_study(trace, ttl_s={"chatbot": 2 * 86_400.0, "agent": 86_400.0})


def test_tables_carry_the_study_numbers(res):
    table = W.retention_table(res)
    s = res["summary"]
    assert table.height == s.height == 2 * len(G.MECHANISMS)
    assert set(table["collector"]) == set(W.COLLECTOR_NAMES.values())
    got = table["idle_p50_days"].to_numpy()
    want = s["idle_p50_s"].to_numpy() / 86_400
    assert np.allclose(got, want, equal_nan=True)
    for m in G.MECHANISMS:
        for c in ("agent", "chatbot"):
            ev = res["evictions"].filter((pl.col("mechanism") == m) & (pl.col("traffic_class") == c))["idle_s"]
            expect = float(np.median(ev.to_numpy())) / 86_400 if ev.len() else float("nan")
            assert W.median_idle_days(res, m, c) == pytest.approx(expect, nan_ok=True)

    rates = W.hit_rate_table(res)
    assert rates.height == len(G.MECHANISMS) + 2
    assert rates["token_hit_rate"][-1] == res["frontier_token_hit_rate"] and rates["points_vs_oracle"][-1] == 0
    assert "1 d agent" in rates["retention"][-2] and "2 d chatbot" in rates["retention"][-2]
    assert (rates["points_vs_oracle"] <= 1e-9).all()


def test_idle_quantiles_are_the_evictions_quantiles(res):
    q = W.idle_quantiles(res, points=5)
    lru = q.filter((pl.col("collector") == "one LRU") & (pl.col("traffic_class") == "agent"))
    ev = res["evictions"].filter((pl.col("mechanism") == "lru") & (pl.col("traffic_class") == "agent"))
    assert np.allclose(lru["idle_days"].to_numpy(), np.quantile(ev["idle_s"].to_numpy() / 86_400, lru["quantile"]))
    assert (q.group_by("collector", "traffic_class").agg(pl.col("idle_days").diff().min() >= 0)["idle_days"]).all()
    spec = W.idle_chart(res, "t").to_dict()
    assert spec["title"] == "t"


def test_a_collector_with_no_eviction_gives_typed_empty_rows():
    trace = compile_trace(generate("ci", 0.5, seed=0))
    run = G.run_gc(trace, "lru", 1e30, bytes_per_token=1.0)
    frame = G.eviction_frame(run, trace.class_names)
    assert frame.height == 0 and frame.schema["mechanism"] == pl.Utf8
    res = G.one_watermark_study(trace)  # 7-day TTLs over half a day: little or nothing evicted
    assert W.idle_quantiles(res).schema["idle_days"] == pl.Float64
    assert W.retention_table(res).height == 2 * len(G.MECHANISMS)
