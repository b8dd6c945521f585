"""TTFT and cost under load: read bandwidth, request rate, admission control, KV precision.

All numbers come from :mod:`tiered_kv.sim.cluster.latency`: the idle-machine TTFT of a hit and a miss
against prompt length, and a queueing run of a seeded mix of restores and misses through one
shared read queue and per-machine compute queues. A slider move reruns that small queueing
simulation (about a thousand requests at small size), then redraws.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import altair as alt
import ipywidgets as widgets
import numpy as np
import polars as pl

from tiered_kv.viz.widgets import Dashboard, html_table, log_slider, slider

GIB = 2**30
#: (machines, seconds of traffic) of the queueing run at each notebook size.
RUN_SIZES = {"small": (8, 60.0), "full": (16, 300.0)}
#: Points per class of the TTFT distribution the chart draws (the run has up to ~20,000 requests).
CDF_POINTS = 200


@dataclass(frozen=True)
class TTFTSetting:
    """One point of the dashboard."""

    read_gib_s: float = 40.0
    rate_per_machine_s: float = 0.5
    admission: bool = False
    hit_fraction: float = 0.6
    kv_preset: str = "deepseek-v3"
    machines: int = 8
    duration_s: float = 60.0
    seed: int = 0

    def __post_init__(self) -> None:
        from tiered_kv.sim.cluster.latency import check_fields

        check_fields(self, [("read_gib_s", self.read_gib_s > 0, "> 0 GiB/s"),
                            ("rate_per_machine_s", self.rate_per_machine_s > 0, "> 0 requests/s"),
                            ("hit_fraction", 0 <= self.hit_fraction <= 1, "in [0, 1]")])


@dataclass(frozen=True)
class TTFTView:
    setting: TTFTSetting
    percentiles: pl.DataFrame  # class -> p50/p90/p99 TTFT (s), recomputed fraction
    ttft: pl.DataFrame  # per request: class, ttft_s
    idle_curve: pl.DataFrame  # prompt tokens -> hit / miss TTFT on an idle machine
    token_hit_rate: float
    cost_per_mtok: float  # in units of the miss price per million tokens
    miss_cost_per_mtok: float


def config(setting: TTFTSetting):
    from tiered_kv.sim.cluster.latency import preset

    return preset(setting.kv_preset).with_(read_bandwidth_bytes_per_s=setting.read_gib_s * GIB)


def idle_curve(setting: TTFTSetting) -> pl.DataFrame:
    """Hit and miss TTFT (seconds) against prompt length (tokens), no queueing."""
    from tiered_kv.sim.cluster.latency import hit_ttft, miss_ttft

    cfg = config(setting)
    n = np.unique(np.geomspace(1024, 131072, 36).round())
    return pl.concat([
        pl.DataFrame({"prompt_tokens": n, "case": "miss (recompute)", "ttft_s": miss_ttft(cfg, n)}),
        pl.DataFrame({"prompt_tokens": n, "case": "hit (load + replay)", "ttft_s": hit_ttft(cfg, n)}),
    ])


def evaluate(setting: TTFTSetting) -> TTFTView:
    """Run the queueing model at ``setting`` and collect every frame the dashboard shows."""
    from tiered_kv.sim.cluster.latency import (
        MixConfig,
        cost_per_mtok,
        mixed_workload,
        percentiles,
        simulate_queue,
    )

    cfg = config(setting)
    mix = MixConfig(machines=setting.machines, rate_per_machine_s=setting.rate_per_machine_s,
                    duration_s=setting.duration_s, hit_fraction=setting.hit_fraction, seed=setting.seed)
    w = mixed_workload(mix)
    r = simulate_queue(cfg, w["arrival_s"], w["machine"], w["n"], w["loaded"], admission=setting.admission)
    restore = w["restore"]
    rows = []
    for name, mask in (("restore", restore), ("miss", ~restore), ("all", np.ones_like(restore))):
        p = percentiles(r.ttft_s[mask])
        rows.append({"class": name, "requests": int(mask.sum()), "p50_s": p["p50"], "p90_s": p["p90"],
                     "p99_s": p["p99"], "recomputed": float(r.recomputed[mask].mean()) if mask.any() else 0.0})
    # tokens served from the SSD tier: loaded prefixes of restores that admission did not recompute
    hit_tokens = float(np.sum(np.where(r.recomputed, 0.0, w["loaded"])))
    input_tokens = float(np.sum(w["n"]))
    return TTFTView(
        setting=setting,
        percentiles=pl.DataFrame(rows),
        ttft=pl.DataFrame({"class": np.where(restore, "restore", "miss"), "ttft_s": r.ttft_s}),
        idle_curve=idle_curve(setting),
        token_hit_rate=hit_tokens / input_tokens if input_tokens else 0.0,
        cost_per_mtok=float(cost_per_mtok(cfg, hit_tokens, input_tokens)),
        miss_cost_per_mtok=float(cfg.miss_price_per_mtok),
    )


def ttft_cdf(ttft: pl.DataFrame, points: int = CDF_POINTS) -> pl.DataFrame:
    """The TTFT distribution per class at ``points + 1`` evenly spaced fractions (0 .. 1): what the chart
    draws instead of one row per request (a busy run passes altair's 5,000-row limit)."""
    q = np.linspace(0.0, 1.0, points + 1)
    rows = []
    for (cls,), part in ttft.group_by("class", maintain_order=True):
        x = np.sort(part["ttft_s"].to_numpy())
        if x.size:
            rows.append(pl.DataFrame({"class": cls, "fraction": q, "ttft_s": np.quantile(x, q),
                                      "requests": x.size}))
    schema = {"class": pl.Utf8, "fraction": pl.Float64, "ttft_s": pl.Float64, "requests": pl.Int64}
    return pl.concat(rows).cast(schema) if rows else pl.DataFrame(schema=schema)


def ttft_chart(view: TTFTView) -> alt.HConcatChart:
    idle = alt.Chart(view.idle_curve).mark_line(point=True).encode(
        alt.X("prompt_tokens:Q", scale=alt.Scale(type="log"), title="prompt length (tokens)"),
        alt.Y("ttft_s:Q", scale=alt.Scale(type="log"), title="TTFT on an idle machine (seconds)"),
        alt.Color("case:N"),
    ).properties(width=300, height=230, title="hit vs miss, no queueing")
    cdf = alt.Chart(ttft_cdf(view.ttft)).mark_line().encode(
        alt.X("ttft_s:Q", title="TTFT under load (seconds)"),
        alt.Y("fraction:Q", title="fraction of requests"),
        alt.Color("class:N", title="requests"),
        tooltip=["class", alt.Tooltip("fraction:Q", format=".0%"), alt.Tooltip("ttft_s:Q", format=".3g")],
    ).properties(width=300, height=230, title="TTFT distribution under load")
    return alt.hconcat(idle, cdf)


class TTFTDashboard(Dashboard):
    """Sliders: SSD read bandwidth, request rate per machine, hit fraction; admission; KV precision."""

    def __init__(self, size: str | None = None, setting: TTFTSetting | None = None) -> None:
        from tiered_kv.sim.cluster.latency import PRESETS
        from tiered_kv.viz import notebook_size

        machines, duration = RUN_SIZES[notebook_size(size)]
        base = setting or TTFTSetting(machines=machines, duration_s=duration)
        self.base = base
        self.bandwidth = log_slider("SSD read bandwidth (GiB/s)", base.read_gib_s, 1.0, 400.0)
        self.rate = log_slider("requests/s per machine", base.rate_per_machine_s, 0.05, 4.0)
        self.hit = slider(widgets.FloatSlider, "fraction of requests with a cached prefix", value=base.hit_fraction,
                          min=0.0, max=1.0, step=0.05)
        self.admission = widgets.Checkbox(value=base.admission, description="admission: recompute when sooner",
                                          indent=False, layout=widgets.Layout(width="480px"))
        self.kv = widgets.Dropdown(options=list(PRESETS), value=base.kv_preset, description="KV cache")
        self.assemble([self.bandwidth, self.rate, self.hit, self.admission, self.kv])

    def setting(self) -> TTFTSetting:
        return replace(self.base, read_gib_s=float(self.bandwidth.value), rate_per_machine_s=float(self.rate.value),
                       admission=bool(self.admission.value), hit_fraction=float(self.hit.value),
                       kv_preset=str(self.kv.value))

    def refresh(self, _change=None) -> None:
        self.view = evaluate(self.setting())
        rows = [{"class": r["class"], "requests": r["requests"], "p50 TTFT": _s(r["p50_s"]),
                 "p90 TTFT": _s(r["p90_s"]), "p99 TTFT": _s(r["p99_s"]),
                 "recomputed": f"{r['recomputed']:.0%}"} for r in self.view.percentiles.iter_rows(named=True)]
        cost = (f'<div class="tkv-cost">token hit rate {self.view.token_hit_rate:.1%}: '
                f"{self.view.cost_per_mtok:.3f} per million input tokens "
                f"(a miss costs {self.view.miss_cost_per_mtok:g}; a hit 1/50 of it)</div>")
        self.summary.value = html_table(rows, css_class="tkv-ttft", cell_classes={"p99 TTFT": "tkv-p99"}) + cost
        self.chart_view.show(ttft_chart(self.view))


def _s(seconds: float) -> str:
    return "n/a" if math.isnan(seconds) else f"{seconds:.3g} s"
