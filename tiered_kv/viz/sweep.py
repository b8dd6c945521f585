"""The chart of a parameter sweep (:mod:`tiered_kv.sim.sweep`): a facet grid drawn from its Parquet rows.

``tiered-kv sweep CONFIG.toml --plot`` calls :func:`plot` on :func:`tiered_kv.sim.sweep.load_results`
and writes the SVG offline (vl-convert, through :mod:`tiered_kv.viz.render`).
"""

from __future__ import annotations

import math
from pathlib import Path

from tiered_kv.sim.sweep import METRICS


def plot(results, metric: str = "disk_token_fraction"):
    """An altair facet chart of ``results``: ``metric`` against capacity, one colour per policy/TTL,
    one column per node count and one row per routing x workload (means over seeds)."""
    import altair as alt
    import polars as pl

    from tiered_kv.units import format_bytes

    if metric not in results.columns:
        raise ValueError(f"metric: {metric!r} is not a result column; allowed: {list(METRICS)}")
    df = results.with_columns(
        pl.col("capacity_bytes").fill_null(math.inf).alias("_cap"),
        (pl.col("routing") + " / " + pl.col("preset")).alias("routing / workload"),
    )
    df = (df.group_by(["label", "_cap", "nodes", "routing / workload"])
          .agg(pl.col(metric).mean(), pl.col("seed").n_unique().alias("seeds"))
          .sort("_cap"))
    caps = sorted(df["_cap"].unique().to_list())
    names = {c: "unlimited" if math.isinf(c) else format_bytes(c) for c in caps}
    df = df.with_columns(pl.col("_cap").replace_strict(names, return_dtype=pl.Utf8).alias("SSD pool"))
    chart = alt.Chart(df).mark_line(point=True).encode(
        x=alt.X("SSD pool:O", sort=[names[c] for c in caps], title="shared SSD pool"),
        y=alt.Y(f"{metric}:Q", title=metric.replace("_", " "),
                axis=alt.Axis(format="%") if "fraction" in metric or "rate" in metric else alt.Axis()),
        color=alt.Color("label:N", title="policy"),
        tooltip=["label", "SSD pool", "nodes", "routing / workload", alt.Tooltip(f"{metric}:Q", format=".4f"), "seeds"],
    ).properties(width=220, height=180)
    facets = {}
    if df["nodes"].n_unique() > 1:
        facets["column"] = alt.Column("nodes:O", title="machines")
    if df["routing / workload"].n_unique() > 1:
        facets["row"] = alt.Row("routing / workload:N", title=None)
    title = f"sweep: {metric.replace('_', ' ')}"
    if not facets:
        return chart.properties(title=title)
    return chart.facet(**facets).properties(title=title)


def save_svg(chart, path: str | Path) -> Path:
    """Write ``chart`` as SVG, offline (vl-convert via :mod:`tiered_kv.viz.render`' helper)."""
    from tiered_kv.viz.render import svg_mimebundle

    path = Path(path)
    path.write_text(svg_mimebundle(chart.to_dict())["image/svg+xml"], encoding="utf-8")
    return path
