"""One watermark, two TTLs: the retention a single GC watermark gives each class (figure 14, notebook 03).

Why it is asked: figure 14's docstring. :func:`study` runs
:func:`tiered_kv.sim.retention.one_watermark.one_watermark_study` on a multi-day two-class workload;
the functions below turn its result into tables and a chart. Nothing here computes a hit.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import polars as pl

from tiered_kv.units import DAY_S

#: The collectors in words, in the order of :data:`tiered_kv.sim.retention.one_watermark.MECHANISMS`.
COLLECTOR_NAMES = {"lru": "one LRU", "weighted": "class weight on recency (agent x7/3)",
                   "ttl-priority": "TTLs as GC priority", "quotas": "separate quotas"}

#: Workload per notebook size: (synthetic preset, days). Small is figure 14's quick mode.
SIZES = {"small": ("ci", 8.0), "full": ("mixed", 14.0)}


@lru_cache(maxsize=2)
def study(size: str | None = None) -> tuple[dict, str]:
    """(:func:`~tiered_kv.sim.retention.one_watermark.one_watermark_study` result, a line naming the workload)
    for seed 0 of :data:`SIZES` at ``size`` (default: :func:`tiered_kv.viz.notebook_size`)."""
    from tiered_kv.sim.retention.one_watermark import one_watermark_study
    from tiered_kv.sim.trace_replay import compile_trace
    from tiered_kv.sim.workload import generate
    from tiered_kv.viz import notebook_size

    preset, days = SIZES[notebook_size(size)]
    df = generate(preset, days, 0)
    return one_watermark_study(compile_trace(df)), f"preset '{preset}', {days:g} days, seed 0, {df.height:,} requests"


def _collector(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.with_columns(pl.col("mechanism").replace(COLLECTOR_NAMES).alias("collector"))


def idle_quantiles(res: dict, points: int = 50) -> pl.DataFrame:
    """(collector, traffic_class, quantile, idle_days): the distribution of idle time at eviction
    per collector and class at ``points`` quantiles from 1% to 99% (no row where a class lost nothing)."""
    ev = _collector(res["evictions"]).with_columns((pl.col("idle_s") / DAY_S).alias("idle_days"))
    q = np.linspace(0.01, 0.99, points)
    rows = [pl.DataFrame({"collector": coll, "traffic_class": cls, "quantile": q,
                          "idle_days": np.quantile(part["idle_days"].to_numpy(), q)})
            for (coll, cls), part in ev.group_by(["collector", "traffic_class"], maintain_order=True)]
    schema = {"collector": pl.Utf8, "traffic_class": pl.Utf8, "quantile": pl.Float64, "idle_days": pl.Float64}
    return pl.concat(rows) if rows else pl.DataFrame(schema=schema)


def retention_table(res: dict) -> pl.DataFrame:
    """Per collector and class: evictions, idle time at eviction (p10/p50/p90, days), age since
    creation at eviction (p50, days) and token hit rate; null where a class had no eviction."""
    s = _collector(res["summary"])
    days = [(pl.col(f"{c}_s") / DAY_S).alias(f"{c}_days") for c in ("idle_p10", "idle_p50", "idle_p90", "age_p50")]
    return s.select("collector", "traffic_class", "evictions", *days, "token_hit_rate")


def hit_rate_table(res: dict) -> pl.DataFrame:
    """Total token hit rate of each collector, of the TTL pair with expiry timers and of the oracle
    frontier at the same average bytes, with the points each is below the oracle."""
    front = res["frontier_token_hit_rate"]
    rows = [{"retention": COLLECTOR_NAMES[r["mechanism"]], "token_hit_rate": r["token_hit_rate"]}
            for r in res["totals"].iter_rows(named=True)]
    pair = " / ".join(f"{ttl / DAY_S:g} d {name}" for name, ttl in res["ttl_s"].items())
    rows += [{"retention": f"TTL pair with expiry timers ({pair})", "token_hit_rate": res["pair_token_hit_rate"]},
             {"retention": "oracle frontier (same average bytes)", "token_hit_rate": front}]
    return pl.DataFrame(rows).with_columns(
        (100 * (pl.col("token_hit_rate") - front)).alias("points_vs_oracle"))


def median_idle_days(res: dict, mechanism: str, traffic_class: str) -> float:
    """Median idle time at eviction (days) of one class under one collector; NaN without evictions."""
    s = res["summary"]
    sel = s.filter((pl.col("mechanism") == mechanism) & (pl.col("traffic_class") == traffic_class))
    v = sel["idle_p50_s"][0] if sel.height else None
    return float("nan") if v is None else float(v) / DAY_S


def idle_chart(res: dict, title: str | None = None):
    """CDF of idle time at eviction per class, one panel per collector, over a bar of each
    collector's total hit rate (figure 14's chart)."""
    import altair as alt

    cdf = alt.Chart(idle_quantiles(res)).mark_line().encode(
        x=alt.X("idle_days:Q", title="idle time at eviction (days)"),
        y=alt.Y("quantile:Q", title="fraction of the class's evictions", axis=alt.Axis(format="%")),
        color=alt.Color("traffic_class:N", title="class"),
        tooltip=["collector", "traffic_class", alt.Tooltip("idle_days:Q", format=".2f"),
                 alt.Tooltip("quantile:Q", format=".0%")],
    ).properties(width=220, height=160).facet(facet=alt.Facet("collector:N", title=None), columns=2)
    totals = _collector(res["totals"])
    bars = alt.Chart(totals).mark_bar().encode(
        x=alt.X("token_hit_rate:Q", title="token hit rate (all classes)", axis=alt.Axis(format="%"),
                scale=alt.Scale(zero=False)),
        y=alt.Y("collector:N", title=None),
        tooltip=["collector", alt.Tooltip("token_hit_rate:Q", format=".2%")]).properties(width=460, height=90)
    chart = alt.vconcat(cdf, bars)
    return chart.properties(title=title) if title else chart
