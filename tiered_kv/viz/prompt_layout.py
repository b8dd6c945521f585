"""Prompt layout: hit rate against the depth of a volatile per-call line (figure 17, notebook 06).

A line that changes on every call (timestamp, request id) placed at token depth d makes the
block holding it and every later block unique to the request
(:func:`tiered_kv.sim.traces.insert_volatile_block`). :func:`depth_table` measures the token hit
rate of an unlimited cache against d for one hour of each synthetic class and for the real
Mooncake conversation trace; :func:`depth_rates` is the same for one depth (the notebook's
slider).
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache

import polars as pl

#: The series of :func:`depth_table`.
SERIES = ("agent, synthetic", "chatbot, synthetic", "chatbot, real trace (Mooncake conversation)")


def _config(quick: bool, name: str, **volatile):
    from tiered_kv.sim.workload import PRESETS

    base = PRESETS["ci"] if quick else PRESETS[name]
    cfg = replace(base, warmup_days=1.0) if quick else base
    if volatile:
        cfg = replace(cfg, classes=tuple(replace(c, **volatile) for c in cfg.classes))
    return cfg


@lru_cache(maxsize=8)
def _frames(quick: bool, below: bool = False) -> dict[str, pl.DataFrame]:
    """One hour of each series (hour 12 of a steady-state run; the shipped real trace)."""
    from tiered_kv.sim.traces import load_trace, shipped_trace
    from tiered_kv.sim.workload import hour_slice

    hour = 12 if not quick else 2
    extra = {"volatile_depth_tokens": 0.0, "volatile_below_prefix": True} if below else {}
    frames = {f"{name}, synthetic": hour_slice(_config(quick, name, **extra), name, hour, 0)
              for name in ("agent", "chatbot")}
    if not below:
        frames[SERIES[2]] = load_trace(shipped_trace("conversation"), traffic_class="chatbot")
    return frames


def depth_rates(depth_tokens: float, *, quick: bool = True, fraction: float = 1.0,
                seed: int = 0) -> dict[str, float]:
    """Token hit rate (unlimited cache) of each series with the line at ``depth_tokens``
    (negative: no line; ``math.inf``: at the end) in a fraction ``fraction`` of requests."""
    from tiered_kv.sim.traces import insert_volatile_block
    from tiered_kv.sim.workload import infinite_hit_rate

    out = {}
    for series, df in _frames(quick).items():
        if depth_tokens >= 0:
            df = insert_volatile_block(df, depth_tokens, fraction, seed)
        out[series] = infinite_hit_rate(df)
    return out


def below_prefix_rates(*, quick: bool = True) -> dict[str, float]:
    """Token hit rate of each synthetic class with the line right below its stable prefix."""
    from tiered_kv.sim.workload import infinite_hit_rate

    return {s: infinite_hit_rate(df) for s, df in _frames(quick, below=True).items()}


def depth_table(*, quick: bool = True, depths=(0, 512, 2048, 8192, 32768)) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(series, depth_tokens, token_hit_rate) at ``depths`` plus the end (inf) and no line (-1);
    and (series, token_hit_rate) with the line right below the stable prefix."""
    rows = [{"series": s, "depth_tokens": float(d), "token_hit_rate": r}
            for d in (-1.0, *depths, math.inf) for s, r in depth_rates(d, quick=quick).items()]
    below = pl.DataFrame([{"series": s, "token_hit_rate": r} for s, r in below_prefix_rates(quick=quick).items()])
    return pl.DataFrame(rows), below


def depth_chart(depth_tokens: float, *, quick: bool = True):
    """Bar chart of each series' hit rate with no line and with the line at ``depth_tokens``."""
    import altair as alt

    none, at = depth_rates(-1, quick=quick), depth_rates(depth_tokens, quick=quick)
    where = "at the end" if math.isinf(depth_tokens) else f"at depth {depth_tokens:,.0f} tokens"
    data = pl.DataFrame([{"series": s, "layout": layout, "token_hit_rate": v}
                         for layout, rates in (("no volatile line", none), (f"line {where}", at))
                         for s, v in rates.items()])
    return alt.Chart(data).mark_bar().encode(
        y=alt.Y("series:N", title=None, axis=alt.Axis(labelLimit=320)),
        yOffset="layout:N",
        x=alt.X("token_hit_rate:Q", title="token hit rate (unlimited cache)", axis=alt.Axis(format="%"),
                scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("layout:N", title=None, legend=alt.Legend(orient="bottom")),
        tooltip=["series", "layout", alt.Tooltip("token_hit_rate:Q", format=".1%")],
    ).properties(width=420, height=160, title=f"volatile per-call line {where}")
