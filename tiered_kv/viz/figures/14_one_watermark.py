"""One watermark LRU against two TTLs: the retention each class actually gets.

Why: DeepSeek's store has one LRU garbage collector under a disk watermark and no expiry timer,
yet quotes 3 days for agent KV and 7 days for chatbot KV. On the 14-day mixed workload, a
single watermark sized to the 3 d / 7 d pair's average storage is replayed under four victim
rules (:mod:`tiered_kv.sim.retention.gc`); the figure shows the idle time at eviction per class
and the hit rate each rule gets against the TTL pair and the oracle frontier at the same bytes.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from tiered_kv.viz.report import FigureResult

NAME = "14_one_watermark"
TITLE = "One watermark, two TTLs: idle time at eviction per class (14-day mixed workload)"

_NAMES = {"lru": "one LRU", "weighted": "class weight on recency (agent x7/3)",
          "ttl-priority": "TTLs as GC priority", "quotas": "separate quotas"}


def study(quick: bool) -> tuple[dict, str]:
    from tiered_kv.sim.replay import compile_trace
    from tiered_kv.sim.retention.gc import one_watermark_study
    from tiered_kv.sim.workload import generate

    preset, days = ("ci", 8.0) if quick else ("mixed", 14.0)
    df = generate(preset, days, 0)
    return one_watermark_study(compile_trace(df)), f"preset '{preset}', {days:g} days, seed 0, {df.height:,} requests"


def build(quick: bool) -> FigureResult:
    import altair as alt

    from tiered_kv.units import format_bytes

    res, size = study(quick)
    ev = res["evictions"].with_columns(
        pl.col("mechanism").replace(_NAMES).alias("collector"), (pl.col("idle_s") / 86_400).alias("idle_days"))
    # a quantile summary per collector and class keeps the chart small (not one mark per eviction)
    q = np.linspace(0.01, 0.99, 50)
    rows = []
    for (coll, cls), part in ev.group_by(["collector", "traffic_class"], maintain_order=True):
        v = part["idle_days"].to_numpy()
        rows.append(pl.DataFrame({"collector": coll, "traffic_class": cls, "quantile": q,
                                  "idle_days": np.quantile(v, q)}))
    data = pl.concat(rows) if rows else pl.DataFrame(schema={"collector": pl.Utf8, "traffic_class": pl.Utf8,
                                                             "quantile": pl.Float64, "idle_days": pl.Float64})
    cdf = alt.Chart(data).mark_line().encode(
        x=alt.X("idle_days:Q", title="idle time at eviction (days)"),
        y=alt.Y("quantile:Q", title="fraction of the class's evictions", axis=alt.Axis(format="%")),
        color=alt.Color("traffic_class:N", title="class"),
    ).properties(width=220, height=160).facet(facet=alt.Facet("collector:N", title=None), columns=2)
    summary = res["summary"]
    totals = res["totals"].with_columns(pl.col("mechanism").replace(_NAMES).alias("collector"))
    chart = alt.vconcat(cdf, alt.Chart(totals).mark_bar().encode(
        x=alt.X("token_hit_rate:Q", title="token hit rate (all classes)", axis=alt.Axis(format="%"),
                scale=alt.Scale(zero=False)),
        y=alt.Y("collector:N", title=None)).properties(width=460, height=90)).properties(title=TITLE)

    def p50(mech: str, cls: str) -> float:
        sel = summary.filter((pl.col("mechanism") == mech) & (pl.col("traffic_class") == cls))
        v = sel["idle_p50_s"][0] if sel.height else None
        return (v or float("nan")) / 86_400

    def rate(mech: str) -> float:
        return float(res["totals"].filter(pl.col("mechanism") == mech)["token_hit_rate"][0])

    front, pair = res["frontier_token_hit_rate"], res["pair_token_hit_rate"]
    parts = [f"{_NAMES[m]}: median idle at eviction agent {p50(m, 'agent'):.2f} d, chatbot "
             f"{p50(m, 'chatbot'):.2f} d, hit rate {rate(m):.2%} ({100 * (rate(m) - front):+.2f} points vs the oracle)"
             for m in _NAMES]
    notes = (
        f"Workload: {size}. One disk of {format_bytes(res['capacity_bytes'])} (the average stored bytes of "
        f"the 3 d / 7 d TTL pair), high/low watermarks 95 % / 85 %, cold at day 0. "
        "A single LRU evicts whatever has been idle longest, whatever its class, so both classes leave the "
        "disk at the same idle time: one LRU cannot give them different retention. Any rule that looks at "
        "the class can: " + "; ".join(parts) + f". The TTL pair with expiry timers: {pair:.2%}; the oracle "
        f"frontier at the same average bytes: {front:.2%}. The minimal mechanism is the TTLs as the "
        "collector's priority (evict the earliest last-touch + TTL): no timer, one ordering, and the 4-day "
        "offset between the classes reproduces 3 d / 7 d up to the watermark's margin (idle times sit below "
        "3 d and 7 d because the collector keeps the disk between 85 % and 95 % of the pair's average). "
        "On this workload the hit rate barely depends on the rule: the classes' reuse beyond 3 days is small.")
    return FigureResult(chart=chart, claims=[], data=data, notes=notes)
