"""Bounded-replay error vs window W and replay length R, and FP4 error of the global KV.

Why: on a host-tier miss the engine rebuilds the sliding-window caches by replaying only the
last R tokens. Replay through L layers of window W is exact only once R >= L*(W-1)+1 (1,534
tokens for the small preset at W=512); below that it is an approximation whose size depends
on where a *trained* model's attention actually looks. We measure it on the trained
checkpoint over held-out stdlib text: KL(exact || replayed) and next-token agreement over the
first decode steps after the prefix, for W in {128, 256, 512} and R from 16 up to each W's exact
bound, on 64 held-out sequences with 95% intervals; beside each R, the prefill-FLOPs ratio at
32K tokens it costs. The FP4 panel compares the global KV in fp32 and through each FP4 format
(exact windows), and the claims check the kernels' relative RMSE on N(0,1) against the values
expected for the formats. The context panel (:func:`tiered_kv.evaluate.context_curve`) shows
whether the model uses context beyond its window at all: without that, no replay error means
anything. Settings are :data:`tiered_kv.bounded_replay_error.SETTINGS`, shared with notebook 01.
"""

from __future__ import annotations

import polars as pl

from tiered_kv.keys import FORMATS
from tiered_kv.viz.report import Claim, FigureResult, claim_value

NAME = "09_replay_and_fp4_error"
TITLE = "Bounded-replay and FP4 error on the trained small model (held-out text)"

_EXPECTED_RMSE = {"mxfp4": 0.115, "nvfp4": 0.095}
_N = 1 << 16  # N(0,1) elements of the FP4 claims (tiered_kv.kernels.fp4_error.error_stats)


def kv_rmse(model, sequences, formats=FORMATS, block_size: int = 64) -> pl.DataFrame:
    """Relative RMSE of the model's own global KV through each FP4 format."""
    import torch

    from tiered_kv.engine import fp4_roundtrip, namespace_for

    rows = []
    with torch.no_grad():
        kvs = [model.encode(s, 0)[0] for s in sequences]
    for fmt in formats:
        ns = namespace_for(model, fmt=fmt, block_size=block_size)
        err = sum(float((fp4_roundtrip(kv, ns) - kv).pow(2).sum()) for kv in kvs)
        ref = sum(float(kv.pow(2).sum()) for kv in kvs)
        rows.append({"format": fmt, "rel_rmse_model_kv": (err / ref) ** 0.5})
    return pl.DataFrame(rows)


def _eval_note(path) -> str:
    """The checkpoint's targets as ``tiered-kv eval --json`` measured them (``NAME.eval.json``)."""
    import json

    ev_path = path.with_suffix(".eval.json")
    if not ev_path.exists():
        return ""
    ev = json.loads(ev_path.read_text())
    lo, hi = ev["long_context_gain_ci95"]
    note = (f"Its eval ({ev_path.name}, `tiered-kv eval --json`): held-out loss {ev['heldout_nats_per_byte']:.3f} "
            f"nats/byte (target <= 1.3); long-context gain {ev['long_context_gain_nats']:.3f} nats/byte "
            f"[{lo:.3f}, {hi:.3f}] ({ev['short_context_bytes']} vs {ev['full_context_bytes']:,} bytes of context "
            f"before the last {ev['target_bytes']} of {ev['samples']} windows; target >= 0.08). ")
    d = ev.get("gain_decomposition")
    if d:
        rows = {r["variant"]: r for r in d["variants"]}
        swapped, mx = rows["far global KV swapped"], rows.get("mxfp4 round trip")
        note += (f"Context path: earlier bytes reach the output only through the global KV (cross-attention) and "
                 f"the window caches, no copy head, so the KL numbers here measure damage to what the model reads "
                 f"its context through. Swapping the far global KV for another window's moves the gain to "
                 f"{swapped['gain_nats']:.3f} [{swapped['ci95'][0]:.3f}, {swapped['ci95'][1]:.3f}] (full-context "
                 f"loss {swapped['full_context_nats_per_byte']:.3f} against {rows['as served']['full_context_nats_per_byte']:.3f})"
                 + (f"; an MXFP4 round trip of it to {mx['gain_nats']:.3f} [{mx['ci95'][0]:.3f}, {mx['ci95'][1]:.3f}]"
                    if mx else "") + ". ")
    return note


def build(quick: bool) -> FigureResult:
    from tiered_kv.bounded_replay_error import (
        SETTINGS,
        attention_locality,
        load_heldout,
        measure,
        near_exact_replay,
    )
    from tiered_kv.evaluate import CONTEXTS, context_curve
    from tiered_kv.kernels.fp4_error import error_stats
    from tiered_kv.model import default_checkpoint, load_checkpoint
    from tiered_kv.viz import torch_threads

    path = default_checkpoint("small")
    if not path.exists():
        raise FileNotFoundError(f"{path}: run `tiered-kv train --preset small` first")
    s = SETTINGS["quick" if quick else "full"]
    flops_n = 1024 if quick else 32768
    contexts = (64, 512, 2048) if quick else CONTEXTS
    with torch_threads(2):
        model, meta = load_checkpoint(path)
        rep, fp4, seqs = measure(model, s, flops_length=flops_n)
        fp4 = fp4.join(kv_rmse(model, seqs[:8]), on="format")
        loc = attention_locality(model, [q[:1024] for q in seqs[:2 if quick else 4]])
        stats = {r["format"]: r["rel_rmse_gaussian"] for r in error_stats(seed=0, n=_N)
                 if r["scale_rule"] in ("floor", "-")}
        curve = pl.DataFrame(context_curve(model, load_heldout(s.heldout_bytes), contexts, n=2 if quick else 16))
    curve = curve.with_columns(pl.col("ci95").list.get(0).alias("ci95_low"),
                               pl.col("ci95").list.get(1).alias("ci95_high")).drop("ci95")

    chart = _chart(rep, fp4, curve, s.windows, model.cfg.window, flops_n)
    w_model = model.cfg.window
    r_model = model.cfg.replay
    at = rep.filter((pl.col("window_tokens") == w_model) & (pl.col("replay_tokens") == r_model))
    near = near_exact_replay(rep, w_model)
    notes = (_checkpoint_note(path, meta) + _eval_note(path) + _replay_note(s, at, near, w_model, r_model, flops_n)
             + _context_note(curve, loc, fp4) + (" Quick mode: fewer W, R, contexts and samples." if quick else ""))
    data = {"replay": rep, "fp4": fp4, "attention_locality": pl.DataFrame([loc]), "context_curve": curve}
    return FigureResult(chart=chart, claims=_claims(stats), data=data, notes=notes)


def _chart(rep: pl.DataFrame, fp4: pl.DataFrame, curve: pl.DataFrame, windows, model_window: int, flops_n: int):
    """Replay KL and agreement vs R, the context curve, and the two FP4 bars."""
    import altair as alt

    from tiered_kv.viz.bounded_replay import context_chart

    plot = rep.with_columns(pl.col("kl_nats").clip(lower_bound=1e-9).alias("kl_nats_plot"),
                            pl.col("kl_ci95_low").clip(lower_bound=1e-9).alias("kl_lo_plot"),
                            pl.col("kl_ci95_high").clip(lower_bound=1e-9).alias("kl_hi_plot"))
    x = alt.X("replay_tokens:Q", scale=alt.Scale(type="log", base=2), title="replay length R (tokens, log2)")
    color = alt.Color("window_tokens:N", title="window W (tokens)", scale=alt.Scale(scheme="category10"),
                      sort=list(windows))
    base = alt.Chart(plot).encode(
        x=x, color=color,
        tooltip=["window_tokens", "replay_tokens", "exact_bound_tokens", alt.Tooltip("kl_nats:Q", format=".2e"),
                 alt.Tooltip("kl_ci95_high:Q", format=".2e", title="KL upper 95%"),
                 alt.Tooltip("agreement:Q", format=".1%"),
                 alt.Tooltip("prefill_flops_ratio:Q", format=".3f", title=f"prefill FLOPs ratio at {flops_n:,}")])
    kl = (base.mark_line(point=True).encode(
        y=alt.Y("kl_nats_plot:Q", scale=alt.Scale(type="log"), title="KL(exact || replayed), nats/step (log)",
                axis=alt.Axis(format=".0e")))
          + base.mark_rule().encode(y="kl_lo_plot:Q", y2="kl_hi_plot:Q")
          ).properties(width=300, height=230, title="Replay error vs R (95% intervals)")
    agree = (base.mark_line(point=True).encode(
        y=alt.Y("agreement:Q", scale=alt.Scale(zero=False), axis=alt.Axis(format="%"),
                title="next-token agreement (argmax)"))
        + base.mark_rule().encode(y="agreement_ci95_low:Q", y2="agreement_ci95_high:Q")
    ).properties(width=300, height=230, title="Replay: next-token agreement")
    context = context_chart(curve, model_window, "context before the 256 scored bytes (bytes, log2)",
                            intervals=True).properties(
        width=300, height=230, title=f"Does it use context? (dashed: W={model_window})")
    return alt.vconcat(alt.hconcat(kl, agree), alt.hconcat(context, _fp4_panel(fp4))).properties(title=TITLE)


def _fp4_panel(fp4: pl.DataFrame):
    """KL per decode step and global-KV error of each FP4 format, side by side."""
    import altair as alt

    def fp4_bar(field: str, title: str, fmt: str):
        return alt.Chart(fp4).mark_bar().encode(
            x=alt.X("format:N", title="FP4 format of the global KV", axis=alt.Axis(labelAngle=0)),
            y=alt.Y(f"{field}:Q", title=title, axis=alt.Axis(format=fmt.replace("3f", "2f"))),
            color=alt.Color("format:N", legend=None),
            tooltip=["format", alt.Tooltip(f"{field}:Q", format=fmt)],
        ).properties(width=190, height=200)

    return alt.hconcat(
        fp4_bar("kl_nats", "KL(fp32 KV || FP4 KV), nats/step", ".2e").properties(title="FP4: KL per decode step"),
        fp4_bar("rel_rmse_model_kv", "relative RMSE of the model's global KV", ".3f").properties(
            title="FP4: global-KV error"),
    ).resolve_scale(color="independent")


def _claims(stats: dict) -> list[Claim]:
    """The kernels' relative RMSE on N(0,1) for each FP4 format against its expected value."""
    return [Claim(claim=f"{fmt.upper()} relative RMSE on N(0,1) (kernels, spec scale rule)",
                  source="expected for E2M1 with OCP MX v1.0 (32-block E8M0) / NVFP4 (16-block E4M3) scales",
                  published=_EXPECTED_RMSE[fmt], reproduced=stats[fmt], unit="fraction",
                  inputs="tiered_kv.kernels.fp4_error.error_stats, 65,536 N(0,1) elements, seed 0",
                  kind="check",
                  provenance=claim_value("fp4_error_stat", fmt=fmt, statistic="rel_rmse_gaussian", n=_N, seed=0,
                                         scale_rule="floor"))
            for fmt in _EXPECTED_RMSE]


def _checkpoint_note(path, meta: dict) -> str:
    corpus = meta.get("corpus", {})
    return (f"Checkpoint {path.name} (held-out loss {meta.get('final_heldout_loss_nats', float('nan')):.3f} "
            f"nats/byte; corpus: Python {corpus.get('python', '?')} stdlib, {corpus.get('files', '?')} files). ")


def _replay_note(s, at: pl.DataFrame, near, w_model: int, r_model: int, flops_n: int) -> str:
    """The replay settings, the error at the model's own (W, R), and where replay gets near-exact."""
    from tiered_kv.bounded_replay_error import NEAR_EXACT_KL

    return (f"{s.samples} held-out sequences, prefix {s.prefix} tokens, {s.steps} teacher-forced decode steps; "
            "global KV through MXFP4 in both runs; intervals are 95% over sequences. "
            + (f"At the model's W={w_model}, R={r_model}: KL {float(at['kl_nats'][0]):.3g} nats "
               f"[{float(at['kl_ci95_low'][0]):.3g}, {float(at['kl_ci95_high'][0]):.3g}], agreement "
               f"{float(at['agreement'][0]):.1%}, prefill FLOPs ratio at {flops_n:,} tokens "
               f"{float(at['prefill_flops_ratio'][0]):.3f}. " if at.height else "")
            + (f"Near-exact (KL upper 95% bound < {NEAR_EXACT_KL:g} nats/step) from R={near['replay_tokens']} "
               f"(KL {near['kl_nats']:.2g}), FLOPs ratio {near['prefill_flops_ratio']:.3f}; exact bound "
               f"R={near['exact_bound_tokens']}. " if near else
               f"No R below the exact bound is near-exact (KL < {NEAR_EXACT_KL:g}). "))


def _context_note(curve: pl.DataFrame, loc: dict, fp4: pl.DataFrame) -> str:
    """The context curve, the attention locality and the FP4 rows, in words."""
    by_ctx = {r["context_bytes"]: r["nats_per_byte"] for r in curve.iter_rows(named=True)}
    return ("Context: the same 256 held-out bytes cost "
            + ", ".join(f"{by_ctx[c]:.3f}" for c in sorted(by_ctx)) + " nats/byte after "
            + ", ".join(f"{c:,}" for c in sorted(by_ctx)) + " bytes of context. "
            + f"Share of sliding-window attention mass on the most recent {loc['recent_tokens']} of "
            f"W={loc['window_tokens']} positions: {loc['overall_share']:.1%} (encoder {loc['encoder_share']:.1%}, "
            f"decoder {loc['decoder_share']:.1%}; uniform would be {loc['uniform_share']:.0%}). FP4 vs fp32 "
            "global KV (exact windows): " + ", ".join(
                f"{r['format']} KL {r['kl_nats']:.2e} [{r['kl_ci95_low']:.2e}, {r['kl_ci95_high']:.2e}], agreement "
                f"{r['agreement']:.1%}, KV rel. RMSE {r['rel_rmse_model_kv']:.3f}" for r in fp4.iter_rows(named=True))
            + ".")
