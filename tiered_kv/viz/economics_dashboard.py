"""The retention-economics dashboard: SSD capacity and per-class TTL sliders over the TTL curves
and the oracle frontier (notebook 03's economics section).

:func:`build_analysis` computes everything once with :mod:`tiered_kv.sim.retention`, including the
optimal per-class TTLs and the best shared TTL at every capacity the slider can take, so a slider
move (:func:`economics_view`) only looks them up. Hit rates are token hit rates of counted
requests; storage is average stored bytes (byte-seconds over the trace's span, Little's law).
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field

import altair as alt
import numpy as np
import polars as pl

from tiered_kv.sim import retention as R
from tiered_kv.sim.trace_replay import CompiledTrace
from tiered_kv.units import DAY_S, DEEPSEEK_TTL_DAYS, format_bytes, format_duration
from tiered_kv.viz.style import binary_unit
from tiered_kv.viz.widgets import Dashboard, log_slider, records

#: steps of the capacity slider; the optimum is precomputed at every one of them
CAPACITY_STEPS = 120
_KINDS = ["idle TTL", "oracle frontier", "chosen TTL", "optimal TTL at capacity"]
_COLORS = ["#1f77b4", "#d62728", "black", "#2ca02c"]


@dataclass(eq=False)
class EconomicsAnalysis:
    """Precomputed curves, frontier and per-capacity optima of one trace."""

    model: R.TTLModel
    frontier: R.Frontier
    class_names: tuple[str, ...]
    input_tokens: np.ndarray  # per class (counted requests)
    span_s: float
    curves: pl.DataFrame  # class, policy ("idle TTL" | "oracle frontier"), ttl_days, avg_bytes, token_hit_rate
    capacity_grid: np.ndarray  # bytes, log spaced: the capacity slider's values
    ttl_range_days: tuple[float, float]
    default_ttl_days: dict[str, float]
    title: str = ""
    _optimal: dict[float, R.TTLChoice] = field(default_factory=dict)
    _shared: dict[float, R.TTLChoice] = field(default_factory=dict)

    def _choice(self, cache: dict, rule, capacity_bytes: float) -> R.TTLChoice:
        key = float(capacity_bytes)
        if key not in cache:
            cache[key] = rule(self.model, key)
        return cache[key]

    def optimal(self, capacity_bytes: float) -> R.TTLChoice:
        """:func:`tiered_kv.sim.retention.optimal_ttls` at ``capacity_bytes`` (cached)."""
        return self._choice(self._optimal, R.optimal_ttls, capacity_bytes)

    def shared(self, capacity_bytes: float) -> R.TTLChoice:
        """:func:`tiered_kv.sim.retention.best_shared_ttl` at ``capacity_bytes`` (cached)."""
        return self._choice(self._shared, R.best_shared_ttl, capacity_bytes)

    def snap_capacity(self, capacity_bytes: float) -> float:
        """The grid capacity nearest ``capacity_bytes`` in log space (slider values land on it)."""
        g = self.capacity_grid
        i = int(np.argmin(np.abs(np.log(g) - math.log(max(capacity_bytes, 1e-300)))))
        return float(g[i]) if math.isclose(g[i], capacity_bytes, rel_tol=1e-6) else float(capacity_bytes)


def build_analysis(trace: CompiledTrace | pl.DataFrame, *, title: str = "",
                   precompute: bool = True) -> EconomicsAnalysis:
    """Everything the dashboard shows, from a compiled trace or a trace frame (slow part, once): up to 48
    TTLs (zero left out) and up to 48 frontier points per class, chunks at the default bytes per token."""
    from tiered_kv.sim.retention.report import _frontier_points, pair_ttls, ttl_grid
    from tiered_kv.sim.trace_replay import compile_trace

    if isinstance(trace, pl.DataFrame):
        trace = compile_trace(trace)
    cb = R.StorageModel.for_trace(trace).chunk_bytes
    gaps = R.reuse_gaps(trace)
    model = R.TTLModel.build(trace, gaps, cb)
    front = R.oracle_frontier(trace, gaps, cb)
    names, span, inp = trace.class_names, gaps.span_s, model.input_tokens

    grid = ttl_grid(span, 48)
    grid = grid[grid > 0]
    rows = []
    for c, name in enumerate(names):
        denom = max(int(inp[c]), 1)
        rows.append(pl.DataFrame({"class": name, "policy": "idle TTL", "ttl_days": grid / DAY_S,
                                  "avg_bytes": model.cost(c, grid) / span,
                                  "token_hit_rate": model.hits(c, grid) / denom}))
        pts = _frontier_points(front.class_cost[c], 48)
        rows.append(pl.DataFrame({"class": name, "policy": "oracle frontier",
                                  "ttl_days": np.full(len(pts), np.nan),
                                  "avg_bytes": front.class_cost[c][pts] / span,
                                  "token_hit_rate": front.class_hits[c][pts] / denom}))
    curves = pl.concat(rows).filter(pl.col("avg_bytes") > 0)

    # capacity range: from a tiny share up to what keeping every reused chunk until reuse costs
    longest = max((float(k[-1]) for k in model.keys if len(k)), default=span)
    hi = max(float(sum(model.cost(c, longest) for c in range(len(names)))) / span * 1.5, cb)
    lo = max(hi / 1e4, cb / span)
    capacity_grid = np.geomspace(lo, hi, CAPACITY_STEPS + 1)

    ttl_hi = max(span, longest, 60.0) / DAY_S
    ttl_lo = min(10.0, span / 100) / DAY_S
    pair = pair_ttls(names)
    default_ttl = {n: float(min(max(pair[c] / DAY_S, ttl_lo), ttl_hi))
                   if span >= max(DEEPSEEK_TTL_DAYS.values()) * DAY_S
                   else float(span / 10 / DAY_S) for c, n in enumerate(names)}
    ana = EconomicsAnalysis(model=model, frontier=front, class_names=names, input_tokens=np.asarray(inp),
                            span_s=span, curves=curves, capacity_grid=capacity_grid,
                            ttl_range_days=(ttl_lo, ttl_hi), default_ttl_days=default_ttl, title=title)
    if precompute:
        for cap in capacity_grid:
            ana.optimal(float(cap))
            ana.shared(float(cap))
    return ana


def economics_view(analysis: EconomicsAnalysis, capacity_bytes: float, ttls: dict[str, float] | tuple | list) -> dict:
    """What the dashboard shows at per-class TTLs ``ttls`` (days, by class name or in class order):
    per-class rows and totals for the chosen TTLs, the optimal per-class TTLs and the best shared
    TTL at ``capacity_bytes``, and the oracle frontier there (pure lookups; no simulation)."""
    a, m = analysis, analysis.model
    names = a.class_names
    ttl_days = [float(ttls[n]) for n in names] if isinstance(ttls, dict) else [float(t) for t in ttls]
    if len(ttl_days) != len(names):
        raise ValueError(f"ttls: need one TTL per class {names}, got {len(ttl_days)}")
    ttl_s = np.array(ttl_days) * DAY_S
    cap = float(capacity_bytes)
    opt, sh = a.optimal(cap), a.shared(cap)
    hits, cost = m.evaluate_separable(ttl_s)
    denom = np.maximum(a.input_tokens, 1)
    total = max(int(a.input_tokens.sum()), 1)
    o_hits, o_cost = m.evaluate_separable(opt.ttl_s)
    classes = {}
    for c, n in enumerate(names):
        classes[n] = {"ttl_days": ttl_days[c], "hit_tokens": float(hits[c]),
                      "token_hit_rate": float(hits[c]) / float(denom[c]), "avg_bytes": float(cost[c]) / a.span_s,
                      "optimal_ttl_days": opt.ttl_s[c] / DAY_S,
                      "optimal_token_hit_rate": float(o_hits[c]) / float(denom[c]),
                      "optimal_avg_bytes": float(o_cost[c]) / a.span_s,
                      "optimal_marginal_hits_per_byte_day": opt.marginal_hits_per_byte_day[c]}
    chosen_bytes = float(cost.sum()) / a.span_s
    return {
        "capacity_bytes": cap,
        "classes": classes,
        "chosen": {"token_hit_rate": float(hits.sum()) / total, "hit_tokens": float(hits.sum()),
                   "avg_bytes": chosen_bytes, "fits": chosen_bytes <= cap * (1 + 1e-9)},
        "optimal": {"token_hit_rate": opt.hit_tokens / total, "hit_tokens": opt.hit_tokens,
                    "avg_bytes": opt.avg_bytes, "ttl_days": {n: opt.ttl_s[c] / DAY_S for c, n in enumerate(names)}},
        "shared": {"token_hit_rate": sh.hit_tokens / total, "hit_tokens": sh.hit_tokens,
                   "avg_bytes": sh.avg_bytes, "ttl_days": sh.ttl_s[0] / DAY_S if sh.ttl_s else 0.0},
        "frontier": {"token_hit_rate": float(a.frontier.at(cap * a.span_s)) / total},
    }


def summary_line(view: dict) -> str:
    """One line: total hit rate of the chosen TTLs vs the optimum vs the best shared TTL."""
    ch, op, sh = view["chosen"], view["optimal"], view["shared"]
    opt = ", ".join(f"{n} {format_duration(d * DAY_S)}" for n, d in op["ttl_days"].items())
    fit = "fits" if ch["fits"] else "EXCEEDS"
    return (f"At {format_bytes(view['capacity_bytes'])} SSD: chosen TTLs {ch['token_hit_rate']:.2%} "
            f"({format_bytes(ch['avg_bytes'])} average stored, {fit} the capacity); optimal per-class TTLs "
            f"({opt}) {op['token_hit_rate']:.2%}; best shared TTL ({format_duration(sh['ttl_days'] * DAY_S)}) "
            f"{sh['token_hit_rate']:.2%}; oracle frontier {view['frontier']['token_hit_rate']:.2%}.")


def economics_datasets(analysis: EconomicsAnalysis, view: dict) -> dict[str, list[dict]]:
    """The named data sources of :func:`economics_template` at one setting."""
    unit, scale = _unit(analysis)
    col = f"avg_stored_{unit}"
    lines = analysis.curves.with_columns((pl.col("avg_bytes") / scale).alias(col), pl.col("policy").alias("kind"))
    pts = [{"class": n, "kind": kind, "ttl_days": row[pre + "ttl_days"], col: row[pre + "avg_bytes"] / scale,
            "token_hit_rate": row[pre + "token_hit_rate"]}
           for n, row in view["classes"].items()
           for kind, pre in (("chosen TTL", ""), ("optimal TTL at capacity", "optimal_"))]
    pts = [p for p in pts if p[col] > 0]
    return {"lines": records(lines), "points": records(pl.DataFrame(pts)) if pts else []}


def _unit(analysis: EconomicsAnalysis) -> tuple[str, float]:
    return binary_unit(float(analysis.curves["avg_bytes"].max()))


def economics_template(analysis: EconomicsAnalysis) -> alt.HConcatChart:
    """One panel per class: hit rate vs average stored bytes, TTL curve and oracle frontier, with
    the chosen and the optimal TTL points (named data sources; a redraw swaps the data only)."""
    unit, scale = _unit(analysis)
    col = f"avg_stored_{unit}"
    panels = []
    for name in analysis.class_names:
        sub = analysis.curves.filter(pl.col("class") == name)
        fr = sub.filter(pl.col("policy") == "oracle frontier")
        top = float(fr["token_hit_rate"].max()) if fr.height else 0.0
        near = fr.filter(pl.col("token_hit_rate") >= 0.05 * top)  # hide the near-zero tail
        lo = float(near["avg_bytes"].min()) / scale if near.height else 1e-9
        hi = float(sub["avg_bytes"].max()) / scale if sub.height else 1.0
        x = alt.X(f"{col}:Q", title=f"average stored {unit} (log scale)",
                  scale=alt.Scale(type="log", domain=[max(lo, 1e-12), max(hi, lo * 10)], nice=False))
        y = alt.Y("token_hit_rate:Q", title="token hit rate (fraction)", scale=alt.Scale(domain=[0, 1]))
        is_cls = alt.datum["class"] == name
        color = alt.Color("kind:N", title="", scale=alt.Scale(domain=_KINDS, range=_COLORS))
        line = alt.Chart(alt.Data(name="lines")).transform_filter(is_cls).mark_line(clip=True).encode(
            x, y, color=color, strokeDash=alt.StrokeDash("kind:N", title="", legend=None),
            tooltip=["kind:N", alt.Tooltip("ttl_days:Q", format=".3g", title="TTL (days)"),
                     alt.Tooltip(f"{col}:Q", format=".3g"), alt.Tooltip("token_hit_rate:Q", format=".2%")])
        dots = alt.Chart(alt.Data(name="points")).transform_filter(is_cls).mark_point(
            size=110, filled=True, clip=True).encode(
            x, y, color=color, shape=alt.Shape("kind:N", title="", legend=None),
            tooltip=["kind:N", alt.Tooltip("ttl_days:Q", format=".3g", title="TTL (days)"),
                     alt.Tooltip("token_hit_rate:Q", format=".2%")])
        panels.append(alt.layer(line, dots).properties(width=300, height=240, title=name))
    return alt.hconcat(*panels).resolve_scale(x="independent").properties(
        title=analysis.title or "hit rate vs average stored bytes: TTL curve and oracle frontier per class")


class EconomicsDashboard(Dashboard):
    """Capacity and per-class TTL sliders over an :class:`EconomicsAnalysis`; ``view`` is the dict of
    the last redraw (:func:`economics_view`)."""

    def __init__(self, analysis: EconomicsAnalysis) -> None:
        self.analysis = a = analysis
        g = a.capacity_grid
        lo, hi = a.ttl_range_days
        ttl_days = a.default_ttl_days
        # start at what the starting TTLs store on average
        capacity_bytes = sum(float(a.model.cost(c, ttl_days[n] * DAY_S)) for c, n in enumerate(a.class_names))
        capacity_bytes /= a.span_s
        cap0 = float(g[min(int(np.searchsorted(g, capacity_bytes * (1 - 1e-9))), len(g) - 1)])  # grid, >= asked
        self.capacity_slider = log_slider("SSD capacity", cap0, float(g[0]), float(g[-1]),
                                          steps=len(g) - 1, unit="bytes")
        self.ttl_sliders = {n: log_slider(f"TTL {n}", ttl_days[n], lo, hi, unit="days") for n in a.class_names}
        self.template = economics_template(a)
        self.assemble([self.capacity_slider, *self.ttl_sliders.values()])

    def capacity(self) -> float:
        return self.analysis.snap_capacity(float(self.capacity_slider.value))

    def ttls(self) -> dict[str, float]:
        return {n: float(s.value) for n, s in self.ttl_sliders.items()}

    def refresh(self, _change=None) -> None:
        self.view = economics_view(self.analysis, self.capacity(), self.ttls())
        self.summary.value = f'<div class="tkv-economics">{html.escape(summary_line(self.view))}</div>'
        self.chart_view.show_data(self.template, economics_datasets(self.analysis, self.view))


def synthetic_analysis(size: str | None = None, days: float | None = None) -> EconomicsAnalysis:
    """Analysis of :func:`tiered_kv.viz.retention.synthetic_workload` (``ci`` for 3 days at small size;
    14 days of ``mixed`` at 1/8 of its rates at full size)."""
    from tiered_kv.viz.retention import synthetic_workload

    frame, what = synthetic_workload(size, days)
    return build_analysis(frame, title=f"{what}: hit rate vs average stored bytes")
