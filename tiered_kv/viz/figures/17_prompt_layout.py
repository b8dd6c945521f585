"""Token hit rate against the depth of a volatile per-call line, for both classes and a real trace.

Why: a line that changes on every call (a timestamp, a request id) ends the shared prefix where
it sits, because block ids are chained: above the system prompt and tool definitions it
destroys every hit; below the stable prefix, or at the end, it costs about a block. The curves
insert one unique block at token depth d into every request
(:func:`tiered_kv.sim.traces.insert_volatile_block`) of one steady-state hour of each
synthetic class and of the real Mooncake conversation trace, and replay it with an unlimited
cache; the markers place the line right below each request's stable prefix (the generator
option ``volatile_below_prefix``).
"""

from __future__ import annotations

import math

import polars as pl

from tiered_kv.viz.report import FigureResult

NAME = "17_prompt_layout"
TITLE = "Token hit rate vs depth of a volatile per-call line (unlimited cache)"
DEPTHS = (0, 256, 512, 1024, 2048, 4096, 6144, 8192, 16384, 32768)


def build(quick: bool) -> FigureResult:
    import altair as alt

    from tiered_kv.viz.prompt_layout import depth_table

    data, below = depth_table(quick=quick, depths=DEPTHS)
    plot = data.filter(pl.col("depth_tokens") >= 0).with_columns(pl.when(pl.col("depth_tokens").is_infinite()).then(pl.lit(65536.0))
                             .otherwise(pl.col("depth_tokens").clip(lower_bound=128.0)).alias("x"))
    lines = alt.Chart(plot).mark_line(point=True).encode(
        x=alt.X("x:Q", scale=alt.Scale(type="log", base=2), title="depth of the line (tokens from the top; "
                "128 = at the top, 65,536 = at the end)"),
        y=alt.Y("token_hit_rate:Q", title="token hit rate", axis=alt.Axis(format="%")),
        color=alt.Color("series:N", title=None, legend=alt.Legend(orient="bottom", columns=1, labelLimit=400)),
        tooltip=["series", "depth_tokens", alt.Tooltip("token_hit_rate:Q", format=".1%")])
    marks = alt.Chart(below.with_columns(pl.lit(65536.0).alias("x"))).mark_point(
        shape="diamond", size=120, filled=True).encode(
        x="x:Q", y="token_hit_rate:Q", color="series:N",
        tooltip=["series", alt.Tooltip("token_hit_rate:Q", format=".1%", title="line below the stable prefix")])
    chart = (lines + marks).properties(width=520, height=300, title=TITLE)
    at = {(r["series"], r["depth_tokens"]): r["token_hit_rate"] for r in data.iter_rows(named=True)}
    parts = []
    for s in data["series"].unique(maintain_order=True):
        b = below.filter(pl.col("series") == s)
        parts.append(f"{s}: {at[(s, 0.0)]:.1%} with the line on top, {at[(s, math.inf)]:.1%} at the end"
                     + (f", {float(b['token_hit_rate'][0]):.1%} right below the stable prefix" if b.height else "")
                     + f" (no line: {at[(s, -1.0)]:.1%})")
    notes = ("Every request carries the line (fraction 1); depth rounded down to a 512-token block. "
             + "; ".join(parts) + ". Diamonds (drawn at the end of the axis): the line right below each "
             "request's system prompt and shared prefix: that keeps the prefix hits, but the line still "
             "sits above the conversation history, so a session's later turns lose their history; only at "
             "the end of the prompt does the line cost about one block. "
             + ("Quick mode: the 'ci' preset (1/200 of the Mooncake rates), 1-day warm-up." if quick else
                "Hour 12 of a steady-state run (7-day warm-up), seed 0."))
    return FigureResult(chart=chart, data=data, notes=notes)
