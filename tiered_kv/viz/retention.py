"""The retention dashboard: per-class TTL, watermark and SSD capacity sliders on one trace.

Everything slow happens once, in :func:`tiered_kv.sim.retention.settings.build_table`; a slider move
evaluates the precomputed table (:func:`evaluate`, no simulation of its own) and swaps the chart's
data in place.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

import altair as alt
import ipywidgets as widgets
import numpy as np
import polars as pl

from tiered_kv.sim.retention import settings as R
from tiered_kv.units import DAY_S, format_bytes, format_duration, format_tokens
from tiered_kv.viz.widgets import Dashboard, html_table, log_slider, records, slider, table_css


@dataclass(frozen=True)
class RetentionView:
    """Everything the dashboard draws for one setting."""

    setting: R.Setting
    rates: pl.DataFrame  # per class + all: token hit rate
    ttl_curves: pl.DataFrame  # per class: hit rate against own TTL
    capacity_curve: pl.DataFrame  # overall hit rate against capacity
    occupancy: pl.DataFrame  # resident tokens over time
    effective_retention_s: np.ndarray  # per class


def evaluate(table: R.RetentionTable, setting: R.Setting) -> RetentionView:
    """All frames the dashboard shows at ``setting`` (pure; what a slider move runs)."""
    return RetentionView(
        setting=setting,
        rates=R.hit_rates(table, setting),
        ttl_curves=R.ttl_curves(table, setting, R.ttl_grid(table)),
        capacity_curve=R.capacity_curve(table, setting, R.capacity_grid(table)),
        occupancy=R.occupancy(table, setting),
        effective_retention_s=R.effective_retention(table, setting),
    )


def retention_datasets(view: RetentionView) -> dict[str, list[dict]]:
    """The named data sources of :func:`retention_template` at one setting (JSON rows)."""
    s = view.setting
    marks = pl.DataFrame(
        {"class": list(view.rates["class"][:-1]), "ttl_seconds": [max(t, 1.0) for t in s.ttl_s],
         "token_hit_rate": list(view.rates["token_hit_rate"][:-1])}
    )
    cap_max = float(view.capacity_curve["capacity_tokens"].max())
    cap_tokens = min(s.capacity_tokens, cap_max) if math.isfinite(s.capacity_tokens) else cap_max
    return {
        "ttl_curves": records(view.ttl_curves.filter(pl.col("ttl_seconds") > 0)),
        "ttl_marks": records(marks),
        "capacity_curve": records(view.capacity_curve),
        "capacity_mark": [{"capacity_tokens": cap_tokens}],
        "occupancy": records(view.occupancy),
    }


def retention_template(title: str = "") -> alt.HConcatChart:
    """Hit rate against TTL (per class), against capacity, and SSD occupancy over time (over named
    data sources: a redraw swaps the data only)."""
    x_ttl = alt.X("ttl_seconds:Q", scale=alt.Scale(type="log"), title="TTL (seconds)")
    y_rate = alt.Y("token_hit_rate:Q", title="token hit rate (fraction)", scale=alt.Scale(domain=[0, 1]))
    ttl = (
        alt.Chart(alt.Data(name="ttl_curves")).mark_line().encode(x_ttl, y_rate, color=alt.Color("class:N", title="class"))
        + alt.Chart(alt.Data(name="ttl_marks")).mark_point(size=90, filled=True).encode(x_ttl, y_rate, color="class:N")
    ).properties(width=260, height=200, title="hit rate vs TTL (other settings held)")
    x_cap = alt.X("capacity_tokens:Q", scale=alt.Scale(type="log"), title="SSD capacity (tokens)")
    cap = (
        alt.Chart(alt.Data(name="capacity_curve")).mark_line(color="#444").encode(x_cap, y_rate)
        + alt.Chart(alt.Data(name="capacity_mark")).mark_rule(color="red").encode(x_cap)
    ).properties(width=260, height=200, title="hit rate vs capacity (TTLs held)")
    occ = alt.Chart(alt.Data(name="occupancy")).mark_area(opacity=0.6).encode(
        alt.X("time_seconds:Q", title="time since trace start (seconds)"),
        alt.Y("resident_tokens:Q", title="resident KV on SSD (tokens)"),
    ).properties(width=260, height=200, title="SSD occupancy over time")
    return alt.hconcat(ttl, cap, occ).properties(title=title)


def summary_rows(view: RetentionView) -> list[dict]:
    """Rows of the summary table: class, TTL, effective retention, token hit rate, hit tokens."""
    eff = [*view.effective_retention_s, math.nan]
    return [{"class": row["class"],
             "TTL": "" if math.isnan(row["ttl_seconds"]) else format_duration(row["ttl_seconds"]),
             "effective retention": "" if math.isnan(e) else format_duration(e),
             "token hit rate": f"{row['token_hit_rate']:.2%}", "hit tokens": f"{row['hit_tokens']:,}"}
            for row, e in zip(view.rates.iter_rows(named=True), eff, strict=True)]


def usage_line(view: RetentionView, bytes_per_token: float | None = None) -> str:
    """Peak and mean resident KV on the SSD tier, in tokens (and bytes at ``bytes_per_token``)."""
    occ = view.occupancy["resident_tokens"]
    peak, mean = float(occ.max()), float(occ.mean())
    text = f"SSD resident KV: peak {format_tokens(peak)}, mean {format_tokens(mean)}"
    if bytes_per_token:
        text += (f" = {format_bytes(peak * bytes_per_token)} peak, {format_bytes(mean * bytes_per_token)}"
                 f" mean at {bytes_per_token:g} B/token")
    return text


class RetentionDashboard(Dashboard):
    """Sliders (TTL per class, capacity, watermark) over a precomputed :class:`RetentionTable`;
    ``view`` holds the frames of the last redraw."""

    def __init__(self, table: R.RetentionTable, *, title: str = "", ttl_s: dict[str, float] | None = None,
                 bytes_per_token: float | None = None) -> None:
        self.table = table
        self.title = title
        self.bytes_per_token = bytes_per_token
        hi_ttl = max(table.duration_s, 10.0)
        ttl_s = ttl_s or {}
        self.ttl_sliders = {
            name: log_slider(f"TTL {name}", ttl_s.get(name, hi_ttl), 1.0, hi_ttl, unit="seconds")
            for name in table.classes
        }
        footprint = float(max(table.distinct_blocks, 32) * table.block_size)
        self.capacity_slider = log_slider("SSD capacity", footprint, 16.0 * table.block_size, footprint,
                                          unit="tokens")
        self.watermark_slider = slider(widgets.FloatSlider, "watermark (fraction)", value=1.0, min=0.5, max=1.0,
                                       step=0.01)
        self.template = retention_template(title)
        self.assemble([*self.ttl_sliders.values(), self.capacity_slider, self.watermark_slider])

    def setting(self) -> R.Setting:
        ttl = tuple(float(self.ttl_sliders[c].value) for c in self.table.classes)
        return R.Setting(ttl, float(self.capacity_slider.value), float(self.watermark_slider.value))

    def refresh(self, _change=None) -> None:
        self.view = evaluate(self.table, self.setting())
        table = html_table(summary_rows(self.view), css_class="tkv-retention",
                           cell_classes={"token hit rate": "tkv-hit"})
        usage = usage_line(self.view, self.bytes_per_token)
        self.summary.value = f'{table_css("tkv-retention")}{table}<div class="tkv-ssd">{html.escape(usage)}</div>'
        self.chart_view.show_data(self.template, retention_datasets(self.view))

    def hit_rate(self, cls: str = "total") -> float:
        """Token hit rate of ``cls`` (or ``"total"``) at the current slider values."""
        return float(self.view.rates.filter(pl.col("class") == cls)["token_hit_rate"][0])


# --- the two workloads of notebook 03 ------------------------------------------------------

#: Slice of the conversation trace used at small size (seconds from its start).
SMALL_TRACE_SECONDS = 900.0
#: Synthetic multi-day workload: (preset, rate factor, days) at each notebook size.
SYNTH_SIZES = {"small": ("ci", 1.0, 3.0), "full": ("mixed", 0.125, 14.0)}


def _fp4_bytes_per_token() -> float:
    from tiered_kv.sim.cluster.latency import preset

    return preset("deepseek-v3-fp4").kv_bytes_per_token


def conversation_table(size: str | None = None) -> R.RetentionTable:
    """Retention table of the shipped Mooncake conversation trace (first 15 min at small size)."""
    from tiered_kv.sim.traces import load_trace, shipped_trace
    from tiered_kv.viz import notebook_size

    frame = load_trace(shipped_trace("conversation"))
    if notebook_size(size) == "small":
        frame = frame.filter(pl.col("timestamp_s") < frame["timestamp_s"].min() + SMALL_TRACE_SECONDS)
    return R.build_table(frame)


def synthetic_workload(size: str | None = None, days: float | None = None) -> tuple[pl.DataFrame, str]:
    """(the two-class synthetic workload of :data:`SYNTH_SIZES` at ``size``, seed 0, its description);
    ``days`` overrides the size's."""
    from tiered_kv.sim.workload import synth
    from tiered_kv.viz import notebook_size

    name, factor, d = SYNTH_SIZES[notebook_size(size)]
    d = days or d
    cfg = synth.PRESETS[name].scaled(factor) if factor != 1.0 else synth.PRESETS[name]
    rate = f" at {factor:g} of its rates" if factor != 1.0 else ""
    return synth.generate(cfg, d, 0), f"synthetic '{name}'{rate}, {d:g} days"


def synthetic_table(size: str | None = None) -> R.RetentionTable:
    """Retention table of the two-class synthetic workload (14 days at 1/8 of Mooncake rates; 3 days tiny)."""
    return R.build_table(synthetic_workload(size)[0])


def conversation_dashboard(size: str | None = None) -> RetentionDashboard:
    """Dashboard over the real conversation trace (one class: chatbot)."""
    return RetentionDashboard(conversation_table(size), title="Mooncake conversation trace (real)",
                              bytes_per_token=_fp4_bytes_per_token())


def synthetic_dashboard(size: str | None = None) -> RetentionDashboard:
    """Dashboard over the synthetic chatbot + agent workload, TTLs starting at 3 days."""
    table = synthetic_table(size)
    return RetentionDashboard(table, title="synthetic multi-day workload (chatbot + agent)",
                              ttl_s=dict.fromkeys(table.classes, 3 * DAY_S),
                              bytes_per_token=_fp4_bytes_per_token())
