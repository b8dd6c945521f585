"""Window size and bounded replay: error, compute and attention mass (notebook 01).

:func:`measure` runs the model once: replay error over a grid of windows W and replay lengths R
(:func:`tiered_kv.bounded_replay_error.replay_error`) and the share of attention mass within each
distance; the sliders then pick grid points, and prefill compute is the closed form of
docs/semantics.md. Random weights say nothing about where attention looks, so the full size uses
the trained checkpoint; the small size (CI) runs the seeded ``tiny`` preset and says so in every
chart title.
"""

from __future__ import annotations

from dataclasses import dataclass

import altair as alt
import ipywidgets as widgets
import polars as pl

from tiered_kv.viz.style import dashed_lines
from tiered_kv.viz.widgets import Dashboard, html_table, log_slider, slider

#: Notebook sizes: (replay grid as ReplaySettings arguments, torch threads, context lengths of the loss
#: curve in bytes, bytes scored after each, starts they are scored at). None is the full size's source,
#: resolved in :func:`measure` so that importing the dashboard loads no torch: figure 09's grid
#: (``SETTINGS["full"]``: 64 held-out sequences) and :mod:`tiered_kv.evaluate`'s curve, so the
#: notebook and the figure agree.
SIZES = {
    "small": (dict(windows=(8, 16), replays=(2, 8, 32), samples=1, prefix=96, steps=8, block_size=32,
                   heldout_bytes=400_000), 1, (16, 64, 256, 1024), 64, 2),
    "full": (None, 2, None, None, 16),
}


@dataclass(frozen=True)
class ReplayMeasurements:
    description: str  # which model and data
    enc_layers: int
    dec_layers: int
    errors: pl.DataFrame  # window_tokens, replay_tokens, exact_bound_tokens, kl_nats, agreement
    locality: pl.DataFrame  # window_tokens, distance_tokens, attention_share, uniform_share
    context: pl.DataFrame | None = None  # context_bytes, nats_per_byte (tiered_kv.evaluate.context_curve)
    window: int = 0  # the model's own W

    def context_chart(self) -> alt.LayerChart:
        title = ["loss vs context (dashed: the model's window W)", f"({self.description})"]
        return context_chart(self.context, self.window, "context (bytes, log2)").properties(
            width=360, height=220, title=title)


def context_chart(curve: pl.DataFrame, window: int, x_title: str, *,
                  intervals: bool = False) -> alt.LayerChart:
    """Loss of the same held-out bytes against the context before them, the model's window W dashed
    (with ``intervals``, each point's 95% interval): does the model look back at all? Notebook 01 and
    figure 09."""
    x = alt.X("context_bytes:Q", scale=alt.Scale(type="log", base=2), title=x_title)
    y = alt.Y("nats_per_byte:Q", scale=alt.Scale(zero=False), title="loss of the same 256 bytes (nats/byte)")
    line = alt.Chart(curve).mark_line(point=True).encode(
        x=x, y=y, tooltip=["context_bytes", alt.Tooltip("nats_per_byte:Q", format=".3f")])
    if intervals:
        line += alt.Chart(curve).mark_rule().encode(x=x, y="ci95_low:Q", y2="ci95_high:Q")
    dashed = alt.Chart(pl.DataFrame({"w": [window]})).mark_rule(strokeDash=[4, 3], color="gray")
    return line + dashed.encode(x="w:Q")


def measure(size: str | None = None) -> ReplayMeasurements:
    """Run the model over the grid of this size once (minutes at full size, seconds at small)."""
    from tiered_kv import bounded_replay_error as rq
    from tiered_kv.evaluate import CONTEXTS, TARGET_BYTES, context_curve
    from tiered_kv.model import default_checkpoint
    from tiered_kv.viz import notebook_size, torch_threads
    from tiered_kv.viz.tour import notebook_model

    size = notebook_size(size)
    grid, threads, contexts, target, n = SIZES[size]
    s = rq.SETTINGS["full"] if grid is None else rq.ReplaySettings(**grid)
    contexts, target = contexts or CONTEXTS, target or TARGET_BYTES
    with torch_threads(threads):
        model, meta = notebook_model(size)
        desc = "tiny preset, random weights (untrained; CI size)" if meta is None else \
            f"trained {default_checkpoint('small').name}"
        stream = rq.load_heldout(max_bytes=s.heldout_bytes)
        seqs = rq.sample_sequences(stream, s.samples, s.prefix + s.steps, seed=0)
        errors = rq.replay_error(model, seqs, windows=s.windows, replays=s.replays, steps=s.steps, prefix=s.prefix,
                                 block_size=s.block_size, progress=True).fill_nan(None)
        # (one sequence at small size has no interval: null, not NaN, so charts serialize as JSON)
        rows = []
        probe = [seqs[0][:s.prefix]]  # attention mass: one held-out prefix, every layer and head
        for w in s.windows:
            m = model.with_settings(window=w)
            for d in sorted({max(1, w // 8), max(1, w // 4), max(1, w // 2)}):
                loc = rq.attention_locality(m, probe, recent=d)
                rows.append({"window_tokens": w, "distance_tokens": d, "attention_share": loc["overall_share"],
                             "uniform_share": loc["uniform_share"]})
        curve = pl.DataFrame(context_curve(model, stream, contexts, target=target, n=n)).drop("ci95")
        return ReplayMeasurements(desc, model.cfg.enc_layers, model.cfg.dec_layers, errors, pl.DataFrame(rows),
                                  curve, model.cfg.window)


def compute_frame(enc_layers: int, dec_layers: int, prompt_tokens: int, replay_tokens: int) -> pl.DataFrame:
    """Layer-tokens of one prefill: decoder-only-style baseline against bounded replay."""
    n, r = prompt_tokens, min(replay_tokens, prompt_tokens)
    return pl.DataFrame({
        "prefill": ["baseline: all layers over N", "bounded replay: decoder over R"],
        "layer_tokens": [(enc_layers + dec_layers) * n, enc_layers * n + dec_layers * r],
    })


class ReplayDashboard(Dashboard):
    """Sliders: window W and replay R (grid points), prompt length N (for compute)."""

    def __init__(self, measurements: ReplayMeasurements) -> None:
        self.m = measurements
        windows = sorted(set(measurements.errors["window_tokens"].to_list()))
        replays = sorted(set(measurements.errors["replay_tokens"].to_list()))
        self.window = slider(widgets.SelectionSlider, "window W (tokens)", options=windows, value=windows[-1],
                             width=None)
        self.replay = slider(widgets.SelectionSlider, "replay R (tokens)", options=replays,
                             value=replays[len(replays) // 2], width=None)
        self.prompt = log_slider("prompt N (tokens)", 32768, 1024, 131072, unit="tokens")
        self.assemble((self.window, self.replay, self.prompt))

    def refresh(self, _change=None) -> None:
        w, r, n = int(self.window.value), int(self.replay.value), int(self.prompt.value)
        errs = self.m.errors.filter(pl.col("window_tokens") == w)
        # Each W's grid stops at its exact bound (a longer replay is the same as the bound).
        below = errs.filter(pl.col("replay_tokens") <= r).sort("replay_tokens")
        row = (below if below.height else errs.sort("replay_tokens")).row(-1 if below.height else 0, named=True)
        compute = compute_frame(self.m.enc_layers, self.m.dec_layers, n, r)
        saving = 1 - compute["layer_tokens"][1] / compute["layer_tokens"][0]
        self.point = {"window": w, "replay": r, "kl_nats": row["kl_nats"], "agreement": row["agreement"],
                      "exact_bound": row["exact_bound_tokens"], "compute_saving": saving}
        self.summary.value = html_table([{
            "W": w, "R": r, "exact when R ≥": row["exact_bound_tokens"],
            "KL(exact‖replayed) nats": f"{row['kl_nats']:.3g}", "top-1 agreement": f"{row['agreement']:.1%}",
            "prefill compute saved": f"{saving:.1%}",
        }], css_class="tkv-replay", cell_classes={"KL(exact‖replayed) nats": "tkv-kl"})
        title = f"({self.m.description})"
        kl = (alt.Chart(errs).mark_line(point=True).encode(
            alt.X("replay_tokens:Q", scale=alt.Scale(type="log"), title="replay R (tokens)"),
            alt.Y("kl_nats:Q", title="KL exact‖replayed (nats)"))
            + alt.Chart(pl.DataFrame({"replay_tokens": [r]})).mark_rule(color="red").encode(x="replay_tokens:Q")
        ).properties(width=260, height=200, title=["replay error at W", title])
        loc = self.m.locality.filter(pl.col("window_tokens") == w)
        long = loc.unpivot(index=["distance_tokens"], on=["attention_share", "uniform_share"],
                           variable_name="attention", value_name="share").with_columns(
            pl.col("attention").replace({"attention_share": "model", "uniform_share": "uniform over W"}))
        mass = dashed_lines(
            long, x=alt.X("distance_tokens:Q", title="most recent positions (tokens)"),
            y=alt.Y("share:Q", title="share of attention mass", scale=alt.Scale(domain=[0, 1])),
            dash="attention:N", dash_title="attention", dash_legend_kwargs={"orient": "bottom"},
        ).properties(width=260, height=200, title=["attention mass within distance", title])
        comp = alt.Chart(compute).mark_bar().encode(
            alt.X("layer_tokens:Q", title="layer-tokens of one prefill"), alt.Y("prefill:N", title=None),
        ).properties(width=260, height=200, title="prefill compute")
        self.chart_view.show(alt.hconcat(kl, mass, comp))
