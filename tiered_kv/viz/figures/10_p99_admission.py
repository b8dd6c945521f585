"""p99 TTFT against offered load, with and without recompute-instead-of-load admission control.

Why: a shared SSD pool turns read bandwidth into a contended resource; when restores queue, a
request can be served sooner by recomputing its prefix than by waiting to load it. The model
(:mod:`tiered_kv.sim.cluster.latency`): 32 machines share one FIFO read queue of 40 GiB/s (one slice of
the storage pool), each with its own compute queue; a seeded Poisson mix of restores (60% of
requests, 90% of their prompt cached) and misses (which write their new KV back through the same
queue), lognormal prompts (median 8K tokens). Admission compares, at arrival, the predicted TTFT
of loading (read-queue wait + transfer + compute queue) with recomputing on the same machine.
"""

from __future__ import annotations

import polars as pl

from tiered_kv.viz.report import FigureResult
from tiered_kv.viz.style import dashed_lines

NAME = "10_p99_admission"
TITLE = "p99 TTFT vs load, with and without admission control (shared read queue)"

#: Names on the chart for the columns of :func:`tiered_kv.sim.cluster.latency.admission_table`.
PERCENTILE_NAMES = {"ttft_p50_s": "median (p50)", "ttft_p99_s": "p99"}
CLASS_NAMES = {"restore": "restores (prefix cached)", "miss": "misses"}


def build(quick: bool) -> FigureResult:
    import altair as alt

    from tiered_kv.sim.cluster import latency as L

    cfg = L.preset()
    rates = [0.5, 1.0, 1.5, 2.0, 2.5] if quick else [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 2.75, 3.0]
    duration = 120.0 if quick else 600.0
    mixes = [L.MixConfig(rate_per_machine_s=r, duration_s=duration, seed=0) for r in rates]
    data = pl.DataFrame(L.admission_table(cfg, mixes)).with_columns(
        pl.when(pl.col("admission")).then(pl.lit("admission: recompute when sooner"))
        .otherwise(pl.lit("always load")).alias("policy"))
    long = data.unpivot(index=["rate_per_machine_s", "policy", "class", "recomputed_fraction"],
                        on=["ttft_p50_s", "ttft_p99_s"], variable_name="percentile", value_name="ttft_s").with_columns(
        pl.col("percentile").replace(PERCENTILE_NAMES), pl.col("class").replace(CLASS_NAMES))
    chart = dashed_lines(
        long.filter(pl.col("class") != "all"),
        x=alt.X("rate_per_machine_s:Q", title="offered load (requests per second per machine)"),
        y=alt.Y("ttft_s:Q", scale=alt.Scale(type="log"), title="TTFT (seconds, log)"),
        color=alt.Color("policy:N", title="policy", legend=alt.Legend(orient="bottom", labelLimit=400)),
        dash="percentile:N", dash_title="TTFT percentile", dash_legend_kwargs={"orient": "bottom"},
        tooltip=[alt.Tooltip("rate_per_machine_s:Q", title="requests/s per machine"), "policy", "class", "percentile",
                 alt.Tooltip("ttft_s:Q", format=".2f", title="TTFT (s)"),
                 alt.Tooltip("recomputed_fraction:Q", format=".1%")],
    ).properties(width=260, height=280).facet(column=alt.Column("class:N", title="requests")).properties(title=TITLE)
    allc = data.filter(pl.col("class") == "all")
    worst = allc.group_by("rate_per_machine_s").agg(
        pl.col("ttft_p99_s").filter(pl.col("admission")).first().alias("with"),
        pl.col("ttft_p99_s").filter(~pl.col("admission")).first().alias("without")).sort("rate_per_machine_s")
    top = worst.row(-1, named=True)
    raised = worst.filter(pl.col("with") > pl.col("without") * (1 + 1e-9))["rate_per_machine_s"].to_list()
    verdict = ("Admission never raised p99 at any load here (also asserted in tests/test_latency.py)"
               if not raised else f"Admission raised p99 at loads {raised}")
    miss = data.filter((pl.col("class") == "miss") & (pl.col("rate_per_machine_s") == top["rate_per_machine_s"]))
    miss_with = miss.filter(pl.col("admission"))["ttft_p99_s"][0]
    miss_without = miss.filter(~pl.col("admission"))["ttft_p99_s"][0]
    notes = (f"{cfg.kv_bytes_per_token:,.0f} B/token KV, 40 GiB/s shared by 32 machines, {duration:g} s of traffic "
             f"per point (seed 0). At {top['rate_per_machine_s']:g} req/s/machine p99 TTFT is {top['without']:.1f} s "
             f"always loading and {top['with']:.1f} s with admission. {verdict}; once compute saturates, "
             "recomputing only moves the queue. Misses pay for it: their p99 at that load is "
             f"{miss_without:.1f} s always loading and {miss_with:.1f} s with admission (recomputed restores "
             "take their compute).")
    return FigureResult(chart=chart, claims=[], data=data, notes=notes)
