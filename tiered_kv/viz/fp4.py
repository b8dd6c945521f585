"""FP4 for the global KV tier: the E2M1 grid, error by format, bytes per token by architecture.

Every number comes from :mod:`tiered_kv.kernels.fp4` (the quantizer the SSD tier uses) and
:mod:`tiered_kv.arch`. The dashboard draws a fresh KV-shaped sample at each slider value (seeded)
and shows the error of the *typical* element (the 90% smallest in magnitude): the relative RMSE
of the whole sample is dominated by its largest values when the tails are heavy and falls as they
get heavier (:func:`tiered_kv.kernels.fp4_error.error_stats`).
"""

from __future__ import annotations

import math
from functools import lru_cache

import altair as alt
import ipywidgets as widgets
import polars as pl
import torch

from tiered_kv.keys import BLOCK, FORMATS
from tiered_kv.viz.widgets import Dashboard, html_table, slider

#: Elements per error sample at each notebook size (multiples of 8 heads x 128 dims).
SAMPLE_ELEMENTS = {"small": 1 << 14, "full": 1 << 18}


def staircase(fmt: str, points: int = 241) -> pl.DataFrame:
    """Input against decoded value over [-6, 6]: each input sits in its own block beside an anchor
    of 6.0 (the block's amax), so the block scale is exactly 1 and the curve is the E2M1 grid itself."""
    from tiered_kv.kernels.fp4 import dequantize, quantize

    x = torch.linspace(-6.0, 6.0, points)
    blocks = torch.zeros(points, BLOCK[fmt])
    blocks[:, 0] = 6.0
    blocks[:, 1] = x
    y = dequantize(quantize(blocks, fmt))[:, 1]
    return pl.DataFrame({"format": fmt, "input": x.numpy(), "decoded": y.numpy()})


def staircase_chart() -> alt.Chart:
    frame = pl.concat([staircase(f) for f in FORMATS])
    return alt.Chart(frame).mark_line(interpolate="step-after").encode(
        alt.X("input:Q", title="input value (block amax = 6)"),
        alt.Y("decoded:Q", title="decoded value"),
        alt.Color("format:N"),
        alt.StrokeDash("format:N"),
    ).properties(width=320, height=240, title="E2M1 codes after the block scale")


def error_frame(n: int, seed: int = 0, dof: float = 3.0) -> pl.DataFrame:
    """:func:`tiered_kv.kernels.fp4_error.error_stats` on N(0,1) and Student-t(dof) KV-shaped samples,
    plus ``variant`` (format and MXFP4 scale rule)."""
    from tiered_kv.kernels.fp4_error import error_stats

    frame = pl.DataFrame(error_stats(seed=seed, n=n, dof=dof))
    return frame.with_columns(
        (pl.col("format") + pl.when(pl.col("scale_rule") != "-").then(" " + pl.col("scale_rule")).otherwise(pl.lit("")))
        .alias("variant"))


#: Degrees of freedom of the tail sweep (:func:`tail_sweep`): Cauchy (1) to nearly Gaussian (50).
SWEEP_DOFS = (1.0, 1.26, 1.6, 2.0, 2.5, 3.0, 4.0, 6.0, 10.0, 20.0, 50.0)


@lru_cache(maxsize=8)
def tail_sweep(n: int, seed: int = 0, dofs=SWEEP_DOFS) -> pl.DataFrame:
    """:func:`error_frame` at each tail heaviness of ``dofs``: which format degrades first (the typical
    element's error rises, MXFP4's first; the whole-sample ratio falls, dominated by the largest values);
    cached, as the dashboard draws it on every move of the dof slider and only the seed changes it."""
    return pl.concat([error_frame(n, seed, float(d)) for d in dofs])


def error_chart(frame: pl.DataFrame, sweep: pl.DataFrame | None = None) -> alt.Chart | alt.HConcatChart:
    """Typical-element error by format (bars) and, with ``sweep``, against the tail heaviness."""
    long = frame.unpivot(index=["variant", "bits_per_element"],
                         on=["bulk_rel_rmse_gaussian", "bulk_rel_rmse_heavy_tailed"],
                         variable_name="sample", value_name="rel_rmse").with_columns(
        pl.col("sample").replace({"bulk_rel_rmse_gaussian": "N(0,1)",
                                  "bulk_rel_rmse_heavy_tailed": f"Student-t, dof {frame['dof'][0]:.3g}"}))
    color = alt.Color("variant:N", title="format", scale=alt.Scale(domain=sorted(set(frame["variant"]))))
    bars = alt.Chart(long).mark_bar().encode(
        alt.X("sample:N", title=None, sort=None),
        alt.Y("rel_rmse:Q", title="typical-element relative RMSE"),
        color, alt.XOffset("variant:N"),
        tooltip=["variant", "sample", alt.Tooltip("rel_rmse:Q", format=".4f"), "bits_per_element"],
    ).properties(width=260, height=240, title="error of the typical element (90% smallest)")
    if sweep is None:
        return bars
    dof = float(frame["dof"][0])
    lines = (alt.Chart(sweep).mark_line(point=True).encode(
        alt.X("dof:Q", scale=alt.Scale(type="log", reverse=True), title="Student-t dof (heavier tails to the right)"),
        alt.Y("bulk_rel_rmse_heavy_tailed:Q", title="typical-element relative RMSE"),
        color, tooltip=["variant", "dof", alt.Tooltip("bulk_rel_rmse_heavy_tailed:Q", format=".4f"),
                        alt.Tooltip("zeroed_heavy_tailed:Q", format=".1%", title="flushed to zero")])
        + alt.Chart(pl.DataFrame({"dof": [dof]})).mark_rule(color="#555", strokeDash=[4, 3]).encode(x="dof:Q")
    ).properties(width=300, height=240, title="as the tails get heavier")
    return alt.hconcat(bars, lines)


def bytes_frame() -> pl.DataFrame:
    """KV bytes per token for each architecture and precision (:func:`tiered_kv.arch.kv_table`)."""
    from tiered_kv.arch import kv_table

    return pl.DataFrame(kv_table()).select("arch", "kind", "precision", "bits_per_element", "bytes_per_token",
                                           "source", "note")


def bytes_table(frame: pl.DataFrame, arch: str | None = None):
    """Every row of ``frame`` (:func:`bytes_frame`), or those of one ``arch``, as an HTML table (a polars
    frame shows only its first and last five rows; workshop question 4 reads the others)."""
    from IPython.display import HTML

    rows = frame if arch is None else frame.filter(pl.col("arch") == arch)
    if arch is not None and rows.is_empty():
        raise ValueError(f"arch: must be one of {sorted(set(frame['arch']))}, got {arch!r}")
    table = [{"architecture": r["arch"], "KV kind": r["kind"], "precision": r["precision"],
              "bits/element": "" if r["bits_per_element"] is None else f"{r['bits_per_element']:g}",
              "bytes/token": f"{r['bytes_per_token']:,.0f}", "source": r["source"], "note": r["note"] or ""}
             for r in rows.iter_rows(named=True)]
    css = ("<style>.tkv-bytes td, .tkv-bytes th {padding: 2px 10px; text-align: left}"
           " .tkv-bytes td:nth-child(4), .tkv-bytes td:nth-child(5) {text-align: right}</style>")
    return HTML(css + html_table(table, css_class="tkv-bytes"))


def bytes_chart(frame: pl.DataFrame) -> alt.Chart:
    return alt.Chart(frame.with_columns((pl.col("arch") + " · " + pl.col("precision")).alias("label"))).mark_bar().encode(
        alt.Y("label:N", sort="-x", title=None),
        alt.X("bytes_per_token:Q", scale=alt.Scale(type="log"), title="KV bytes per token (log)"),
        alt.Color("kind:N"),
        tooltip=["arch", "precision", alt.Tooltip("bytes_per_token:Q", format=",.1f"), "source"],
    ).properties(width=420, title="KV cache per token")


def summary_rows(frame: pl.DataFrame) -> list[dict]:
    """The dashboard's table: per variant, bits/element, typical error, zeroed share, whole-sample ratio."""
    return [{"format": r["variant"], "bits/element": f"{r['bits_per_element']:.3f}",
             "typical error, N(0,1)": f"{r['bulk_rel_rmse_gaussian']:.4f}",
             "typical error, heavy-tailed": f"{r['bulk_rel_rmse_heavy_tailed']:.4f}",
             "flushed to zero, heavy-tailed": f"{r['zeroed_heavy_tailed']:.1%}",
             "whole-sample ratio, heavy-tailed": f"{r['rel_rmse_heavy_tailed']:.4f}"}
            for r in frame.iter_rows(named=True)]


class FP4Dashboard(Dashboard):
    """Slider for the sample's tail heaviness (Student-t degrees of freedom) and its seed."""

    def __init__(self, size: str | None = None, dof: float = 3.0) -> None:
        from tiered_kv.viz import notebook_size

        self.n = SAMPLE_ELEMENTS[notebook_size(size)]
        self.dof_slider = slider(widgets.FloatLogSlider, "Student-t dof (lower = heavier tails)", value=dof,
                                 base=10, min=0, max=math.log10(50), step=0.05, width="520px")
        self.seed_slider = widgets.IntSlider(value=0, min=0, max=20, description="seed", continuous_update=False)
        self.assemble((self.dof_slider, self.seed_slider))

    def refresh(self, _change=None) -> None:
        seed = int(self.seed_slider.value)
        self.frame = error_frame(self.n, seed, float(self.dof_slider.value))
        self.sweep = tail_sweep(self.n, seed)
        self.summary.value = html_table(summary_rows(self.frame), css_class="tkv-fp4",
                                        cell_classes={"typical error, heavy-tailed": "tkv-heavy"})
        self.chart_view.show(error_chart(self.frame, self.sweep))
