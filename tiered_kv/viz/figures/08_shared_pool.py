"""One shared SSD pool against per-machine SSD caches of the same total size, by routing policy.

Why: DeepSeek shares one SSD pool across machines instead of routing a repeat to the machine that
saw it first. On the real Mooncake conversation trace, 10 machines, the same total SSD capacity
either pooled or split in ten, under random, round-robin and cache-aware routing (longest local
prefix under a load bound): a pooled cache hits the same whatever the routing (every request
sees every block), while split caches lose hits unless routing sends a repeat home, and
cache-aware routing wins back only part of them, at the price of a load bound. Computed by
:func:`tiered_kv.sim.cluster.pooling.pool_vs_split`; no GPU or host tier, so every hit is an SSD hit.
"""

from __future__ import annotations

import polars as pl

from tiered_kv.viz.report import FigureResult
from tiered_kv.viz.style import dashed_lines

NAME = "08_shared_pool"
TITLE = "Shared SSD pool vs per-machine caches (10 machines, real trace), by routing"


def series_frame(data: pl.DataFrame) -> pl.DataFrame:
    """One line per (SSD tier, routing), except that routings whose shared-pool lines coincide
    (the pool sees every block whatever the routing) are drawn once, named for all of them: three
    lines on top of each other show one colour beside three legend entries. The data keeps every row.
    """
    shared = data.filter(pl.col("ssd") == "shared pool")
    spread = shared.group_by("total_ssd_tokens").agg(
        (pl.col("token_hit_rate").max() - pl.col("token_hit_rate").min()).alias("spread"))
    same = spread.height > 0 and float(spread["spread"].max()) <= 1e-12
    label = (pl.when(pl.col("ssd") == "shared pool")
             .then(pl.lit("shared pool, any routing (identical)") if same else pl.lit("shared pool, ") + pl.col("routing"))
             .otherwise(pl.lit("per-machine, ") + pl.col("routing")))
    out = data.with_columns(label.alias("series"))
    if same:  # draw the coinciding lines once: the first routing's rows carry the line
        first = data["routing"][0]
        out = out.filter((pl.col("ssd") != "shared pool") | (pl.col("routing") == first))
    return out


def build(quick: bool) -> FigureResult:
    import altair as alt

    from tiered_kv.sim.cluster.pooling import pool_vs_split

    totals = [5_000_000, 20_000_000] if quick else [2_000_000, 5_000_000, 10_000_000, 20_000_000, 40_000_000]
    data = pl.DataFrame(pool_vs_split(totals)).select(
        "total_ssd_tokens", "routing",
        pl.col("ssd").replace_strict({"shared": "shared pool", "per-machine": "per-machine caches"}),
        "token_hit_rate", "machine_load_imbalance")
    drawn = series_frame(data)
    chart = dashed_lines(
        drawn,
        x=alt.X("total_ssd_tokens:Q", scale=alt.Scale(type="log"), title="total SSD capacity (tokens, log)",
                axis=alt.Axis(format="~s")),
        y=alt.Y("token_hit_rate:Q", title="token hit rate (fraction)", axis=alt.Axis(format="%")),
        color=alt.Color("series:N", title="SSD tier, routing", legend=alt.Legend(labelLimit=400)),
        dash="ssd:N", dash_title="SSD tier",
        tooltip=[alt.Tooltip("total_ssd_tokens:Q", title="total SSD tokens", format=","), "routing", "ssd",
                 alt.Tooltip("token_hit_rate:Q", format=".2%", title="token hit rate"),
                 alt.Tooltip("machine_load_imbalance:Q", format=".2f", title="load imbalance (max/mean)")],
    ).properties(width=520, height=320, title=TITLE)
    big = data.filter(pl.col("total_ssd_tokens") == max(totals))
    get = lambda r, s: big.filter((pl.col("routing") == r) & (pl.col("ssd") == s))["token_hit_rate"][0]
    coincide = any("identical" in s for s in drawn["series"].unique().to_list())
    notes = (f"At {max(totals):,} tokens in total: shared pool {get('random', 'shared pool'):.1%} under every "
             + ("routing (its three lines coincide: drawn once); " if coincide else "routing; ")
             + f"per-machine caches {get('random', 'per-machine caches'):.1%} (random), "
             f"{get('round-robin', 'per-machine caches'):.1%} (round-robin), "
             f"{get('cache-aware', 'per-machine caches'):.1%} (cache-aware, load bound 1.25x mean). "
             "Machine load imbalance (max/mean routed input tokens) is in the data.")
    return FigureResult(chart=chart, claims=[], data=data, notes=notes)
