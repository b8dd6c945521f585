"""FP4 for the global KV tier: the E2M1 grid, error by format, bytes per token by architecture.

Every number comes from :mod:`tiered_kv.kernels.fp4` (the quantizer the SSD tier uses) and
:mod:`tiered_kv.arch` (bytes per token from published parameters). The dashboard draws a fresh
KV-shaped sample at each slider value (seeded), so moving the tail-heaviness slider shows why
outlier channels hurt 32-element MXFP4 blocks more than 16-element NVFP4 blocks with an
E4M3 scale.
"""

from __future__ import annotations

import math

import altair as alt
import ipywidgets as widgets
import polars as pl
import torch

from tiered_kv.viz.widgets import ChartView, html_table

FORMATS = ("mxfp4", "nvfp4")
#: Elements per error sample at each notebook size (multiples of 8 heads x 128 dims).
SAMPLE_ELEMENTS = {"small": 1 << 14, "full": 1 << 18}


def staircase(fmt: str, points: int = 241) -> pl.DataFrame:
    """Input against decoded value over [-6, 6] with a block scale of exactly 1.

    Each input sits in its own block beside an anchor of 6.0 (the block's amax), so every block
    gets the scale that maps 6 to the top code: the curve is the E2M1 grid itself (0, 0.5, 1,
    1.5, 2, 3, 4, 6 and their negatives), as the quantizer produces it.
    """
    from tiered_kv.kernels.fp4 import BLOCK, dequantize, quantize

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
    """Relative RMSE per format on N(0,1) and Student-t(dof) KV-shaped samples, with bits/element."""
    from tiered_kv.kernels.fp4 import error_stats

    return pl.DataFrame(error_stats(seed=seed, n=n, dof=dof))


def error_chart(frame: pl.DataFrame) -> alt.Chart:
    long = frame.with_columns(
        (pl.col("format") + pl.when(pl.col("scale_rule") != "-").then(" " + pl.col("scale_rule")).otherwise(pl.lit("")))
        .alias("variant")
    ).unpivot(index=["variant", "bits_per_element"], on=["rel_rmse_gaussian", "rel_rmse_heavy_tailed"],
              variable_name="sample", value_name="rel_rmse")
    return alt.Chart(long).mark_bar().encode(
        alt.X("variant:N", title=None),
        alt.Y("rel_rmse:Q", title="relative RMSE (fraction)"),
        alt.Color("sample:N"),
        alt.XOffset("sample:N"),
        tooltip=["variant", "sample", alt.Tooltip("rel_rmse:Q", format=".4f"), "bits_per_element"],
    ).properties(width=320, height=240, title="round-trip error by format")


def bytes_frame() -> pl.DataFrame:
    """KV bytes per token for each architecture and precision (:func:`tiered_kv.arch.kv_table`)."""
    from tiered_kv.arch import kv_table

    return pl.DataFrame(kv_table()).select("arch", "kind", "precision", "bits_per_element", "bytes_per_token",
                                           "source", "note")


def bytes_chart(frame: pl.DataFrame) -> alt.Chart:
    return alt.Chart(frame.with_columns((pl.col("arch") + " · " + pl.col("precision")).alias("label"))).mark_bar().encode(
        alt.Y("label:N", sort="-x", title=None),
        alt.X("bytes_per_token:Q", scale=alt.Scale(type="log"), title="KV bytes per token (log)"),
        alt.Color("kind:N"),
        tooltip=["arch", "precision", alt.Tooltip("bytes_per_token:Q", format=",.1f"), "source"],
    ).properties(width=420, title="KV cache per token")


class FP4Dashboard:
    """Slider for the sample's tail heaviness (Student-t degrees of freedom) and its seed."""

    def __init__(self, size: str | None = None, dof: float = 3.0) -> None:
        from tiered_kv.viz import notebook_size

        self.n = SAMPLE_ELEMENTS[size or notebook_size()]
        self.dof_slider = widgets.FloatLogSlider(value=dof, base=10, min=0, max=math.log10(50), step=0.05,
                                                 description="Student-t dof (lower = heavier tails)",
                                                 continuous_update=False, style={"description_width": "initial"},
                                                 layout=widgets.Layout(width="520px"))
        self.seed_slider = widgets.IntSlider(value=0, min=0, max=20, description="seed", continuous_update=False)
        self.summary = widgets.HTML()
        self.chart_view = ChartView()
        for w in (self.dof_slider, self.seed_slider):
            w.observe(self.refresh, names="value")
        self.widget = widgets.VBox([self.dof_slider, self.seed_slider, self.summary, self.chart_view.output])
        self.frame: pl.DataFrame | None = None
        self.refresh()

    def refresh(self, _change=None) -> None:
        self.frame = error_frame(self.n, int(self.seed_slider.value), float(self.dof_slider.value))
        rows = [{"format": f"{r['format']} {r['scale_rule']}".replace(" -", ""),
                 "bits/element": f"{r['bits_per_element']:.3f}",
                 "rel. RMSE N(0,1)": f"{r['rel_rmse_gaussian']:.4f}",
                 "rel. RMSE heavy-tailed": f"{r['rel_rmse_heavy_tailed']:.4f}"}
                for r in self.frame.iter_rows(named=True)]
        self.summary.value = html_table(rows, css_class="tkv-fp4", cell_classes={"rel. RMSE heavy-tailed": "tkv-heavy"})
        self.chart_view.show(error_chart(self.frame))

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)
