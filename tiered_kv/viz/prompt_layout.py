"""Prompt layout: hit rate against the depth of a volatile per-call line (figure 17, notebook 06).

Why it is asked: figure 17's docstring. :func:`depth_rates` gives the unlimited-cache token hit rate
of one hour of each synthetic class and of the real conversation trace at one depth;
:func:`keep_depth` is the answer key's search.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache

import polars as pl

from tiered_kv.viz.widgets import Dashboard, html_table, slider

#: The series of :func:`depth_table`.
SERIES = ("agent, synthetic", "chatbot, synthetic", "chatbot, real trace (Mooncake conversation)")


def _config(quick: bool, name: str, **volatile):
    from tiered_kv.sim.workload import PRESETS

    cfg = replace(PRESETS["ci"], warmup_days=1.0) if quick else PRESETS[name]
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


def depth_rates(depth_tokens: float, *, quick: bool = True) -> dict[str, float]:
    """Token hit rate (unlimited cache) of each series with the line at ``depth_tokens`` in every
    request (negative: no line; ``math.inf``: at the end)."""
    return dict(_rates(float(depth_tokens), bool(quick)))


@lru_cache(maxsize=256)
def _rates(depth_tokens: float, quick: bool) -> tuple[tuple[str, float], ...]:
    from tiered_kv.sim.traces import insert_volatile_block
    from tiered_kv.sim.workload import infinite_hit_rate

    out = []
    for series, df in _frames(quick).items():
        if depth_tokens >= 0:
            df = insert_volatile_block(df, depth_tokens)
        out.append((series, infinite_hit_rate(df)))
    return tuple(out)


def block_tokens(series: str, *, quick: bool = True) -> int:
    """Tokens per block of ``series`` (the line's depth is rounded down to a block)."""
    frames = _frames(quick)
    if series not in frames:
        raise ValueError(f"series: must be one of {list(frames)}, got {series!r}")
    return int(frames[series]["block_size"][0])


def smallest_block(rate_at, target: float, max_blocks: int) -> float:
    """Smallest ``k`` in ``0..max_blocks`` with ``rate_at(k) >= target`` (``math.inf`` if none), by
    bisection: ``rate_at`` must be non-decreasing, as the hit rate is in the line's depth."""
    if max_blocks < 0:
        raise ValueError(f"max_blocks: must be >= 0, got {max_blocks}")
    if rate_at(max_blocks) < target:
        return math.inf
    lo, hi = 0, max_blocks
    while lo < hi:
        mid = (lo + hi) // 2
        if rate_at(mid) >= target:
            hi = mid
        else:
            lo = mid + 1
    return float(lo)


def keep_depth(series: str, share: float, *, quick: bool = True) -> float:
    """The shallowest depth (tokens, a whole number of blocks) at which a line in every request
    keeps at least ``share`` of ``series``' hit rate without the line (``math.inf``: none up to
    65,536 tokens)."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share: must be in [0, 1], got {share}")
    block = block_tokens(series, quick=quick)
    target = share * depth_rates(-1, quick=quick)[series]
    k = smallest_block(lambda k: depth_rates(k * block, quick=quick)[series], target, 65_536 // block)
    return k * block


#: Depths (tokens) of the curve behind notebook 06's slider, and the slider's range.
CURVE_DEPTHS = (0, 512, 1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768)
SLIDER_MAX_TOKENS = 32_768


def depth_curve(depths=CURVE_DEPTHS, *, quick: bool = True) -> pl.DataFrame:
    """(series, depth_tokens, token_hit_rate) at each of ``depths`` (the dashboard's lines)."""
    return pl.DataFrame([{"series": s, "depth_tokens": float(d), "token_hit_rate": r}
                         for d in depths for s, r in depth_rates(d, quick=quick).items()])


def layout_rows(depth_tokens: float, *, quick: bool = True) -> list[dict]:
    """Per series: hit rate with no line, with the line at ``depth_tokens`` and at the end."""
    none, at, end = (depth_rates(d, quick=quick) for d in (-1, depth_tokens, math.inf))
    return [{"series": s, "no line": none[s], "line at depth": at[s], "line at the end": end[s]} for s in none]


def layout_chart(curve: pl.DataFrame, depth_tokens: float, rows: list[dict]):
    """Hit rate against depth per series, the slider's depth as a rule and its rates as points."""
    import altair as alt

    color = alt.Color("series:N", title=None, legend=alt.Legend(orient="bottom", columns=1, labelLimit=400))
    x = alt.X("depth_tokens:Q", title="depth of the per-call line (tokens from the top of the prompt)",
              scale=alt.Scale(domain=[0, SLIDER_MAX_TOKENS]))
    y = alt.Y("token_hit_rate:Q", title="token hit rate (unlimited cache)", axis=alt.Axis(format="%"),
              scale=alt.Scale(domain=[0, 1]))
    lines = alt.Chart(curve).mark_line(point=True).encode(
        x=x, y=y, color=color, tooltip=["series", "depth_tokens", alt.Tooltip("token_hit_rate:Q", format=".1%")])
    here = pl.DataFrame([{"series": r["series"], "depth_tokens": float(depth_tokens),
                          "token_hit_rate": r["line at depth"]} for r in rows])
    rule = alt.Chart(pl.DataFrame({"depth_tokens": [float(depth_tokens)]})).mark_rule(
        strokeDash=[4, 3], color="gray").encode(x="depth_tokens:Q")
    points = alt.Chart(here).mark_point(size=120, filled=True, shape="diamond").encode(
        x="depth_tokens:Q", y="token_hit_rate:Q", color=color,
        tooltip=["series", alt.Tooltip("token_hit_rate:Q", format=".1%", title="at the slider's depth")])
    return (lines + rule + points).properties(
        width=480, height=280, title=f"volatile per-call line at depth {depth_tokens:,.0f} tokens")


class PromptLayoutDashboard(Dashboard):
    """A slider for the depth of a per-call line; the hit rate of every series against depth."""

    def __init__(self, size: str | None = None, depth_tokens: int = 2048) -> None:
        import ipywidgets as widgets

        from tiered_kv.viz import notebook_size

        self.size = notebook_size(size)
        self.quick = self.size == "small"
        self.curve = depth_curve(quick=self.quick)
        self.depth = slider(widgets.IntSlider, "depth of the per-call line (tokens)", value=int(depth_tokens),
                            min=0, max=SLIDER_MAX_TOKENS, step=512)
        self.assemble((self.depth,))

    def refresh(self, _change=None) -> None:
        d = float(self.depth.value)
        rows = layout_rows(d, quick=self.quick)
        self.view = {"depth_tokens": d, "rates": pl.DataFrame(rows), "curve": self.curve}
        shown = [{k: (f"{v:.1%}" if isinstance(v, float) else v) for k, v in r.items()} for r in rows]
        self.summary.value = html_table(shown, css_class="tkv-layout")
        self.chart_view.show(layout_chart(self.curve, d, rows))


def depth_table(depths, *, quick: bool = True) -> tuple[pl.DataFrame, pl.DataFrame]:
    """:func:`depth_curve` at no line (-1), ``depths`` and the end (inf); and (series, token_hit_rate)
    of each synthetic class with the line right below its stable prefix (figure 17)."""
    from tiered_kv.sim.workload import infinite_hit_rate

    below = pl.DataFrame([{"series": s, "token_hit_rate": infinite_hit_rate(df)}
                          for s, df in _frames(quick, below=True).items()])
    return depth_curve((-1.0, *depths, math.inf), quick=quick), below
