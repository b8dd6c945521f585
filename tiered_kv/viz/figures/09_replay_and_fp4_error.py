"""Bounded-replay error vs window W and replay length R, and FP4 error of the global KV.

Why: on a host-tier miss the engine rebuilds the sliding-window caches by replaying only the
last R tokens. Replay through L layers of window W is exact only once R >= L*(W-1)+1 (1,534
tokens for the small preset at W=512); below that it is an approximation whose size depends
on where a *trained* model's attention actually looks. We measure it on the trained
checkpoint over held-out stdlib text: KL(exact || replayed) and next-token agreement over the
first decode steps after the prefix, for W in {128, 256, 512} and R in {16..256}. The FP4
panel compares the global KV in fp32 and through each FP4 format (exact windows), and the
claims check the kernels' relative RMSE on N(0,1) against the values expected for the formats.
"""

from __future__ import annotations

import polars as pl

from tiered_kv.viz.report import Claim, FigureResult

NAME = "09_replay_and_fp4_error"
TITLE = "Bounded-replay and FP4 error on the trained small model (held-out text)"

_EXPECTED_RMSE = {"mxfp4": 0.115, "nvfp4": 0.095}


def _settings(quick: bool) -> dict:
    if quick:
        return {"windows": (128, 512), "replays": (16, 128), "samples": 1, "prefix": 576, "steps": 8,
                "heldout_bytes": 400_000}
    return {"windows": (128, 256, 512), "replays": (16, 32, 64, 128, 256), "samples": 6, "prefix": 1024,
            "steps": 32, "heldout_bytes": None}


def kv_rmse(model, sequences, formats=("mxfp4", "nvfp4"), block_size: int = 64) -> pl.DataFrame:
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


def build(quick: bool) -> FigureResult:
    import torch

    s = _settings(quick)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small tensors: one thread is faster, and much faster on shared cores
    try:
        return _build(s, quick)
    finally:
        torch.set_num_threads(threads)


def _build(s: dict, quick: bool) -> FigureResult:
    import altair as alt

    from tiered_kv.kernels.fp4 import error_stats
    from tiered_kv.model import default_checkpoint, load_checkpoint
    from tiered_kv.replay_quality import (
        attention_locality,
        fp4_error,
        load_heldout,
        replay_error,
        sample_sequences,
    )

    path = default_checkpoint("small")
    if not path.exists():
        raise FileNotFoundError(f"{path}: run `tiered-kv train --preset small` first")
    model, meta = load_checkpoint(path)
    seqs = sample_sequences(load_heldout(s["heldout_bytes"]), s["samples"], s["prefix"] + s["steps"], seed=0)
    rep = replay_error(model, seqs, windows=s["windows"], replays=s["replays"], steps=s["steps"],
                       prefix=s["prefix"])
    fp4 = fp4_error(model, seqs, steps=s["steps"], prefix=s["prefix"]).join(kv_rmse(model, seqs), on="format")
    loc = attention_locality(model, [q[: s["prefix"]] for q in seqs])
    stats = {r["format"]: r["rel_rmse_gaussian"] for r in error_stats(n=1 << 16) if r["scale_rule"] in ("floor", "-")}

    plot = rep.with_columns(pl.col("kl_nats").clip(lower_bound=1e-9).alias("kl_nats_plot"))
    base = alt.Chart(plot).encode(
        x=alt.X("replay_tokens:Q", scale=alt.Scale(type="log", base=2), title="replay length R (tokens, log2)",
                axis=alt.Axis(values=list(s["replays"]))),
        color=alt.Color("window_tokens:N", title="window W (tokens)", scale=alt.Scale(scheme="category10"),
                        sort=list(s["windows"])),
        tooltip=["window_tokens", "replay_tokens", "exact_bound_tokens", alt.Tooltip("kl_nats:Q", format=".2e"),
                 alt.Tooltip("agreement:Q", format=".1%")])
    kl = base.mark_line(point=True).encode(
        y=alt.Y("kl_nats_plot:Q", scale=alt.Scale(type="log"), title="KL(exact || replayed), nats/step (log)",
                axis=alt.Axis(format=".0e")),
    ).properties(width=300, height=230, title="Replay error vs R")
    agree = base.mark_line(point=True).encode(
        y=alt.Y("agreement:Q", scale=alt.Scale(zero=False), axis=alt.Axis(format="%"),
                title="next-token agreement (argmax)"),
    ).properties(width=300, height=230, title="Replay: next-token agreement")

    def fp4_bar(field: str, title: str, fmt: str):
        return alt.Chart(fp4).mark_bar().encode(
            x=alt.X("format:N", title="FP4 format of the global KV", axis=alt.Axis(labelAngle=0)),
            y=alt.Y(f"{field}:Q", title=title, axis=alt.Axis(format=fmt.replace("3f", "2f"))),
            color=alt.Color("format:N", legend=None),
            tooltip=["format", alt.Tooltip(f"{field}:Q", format=fmt)],
        ).properties(width=190, height=200)

    fp4_panel = alt.hconcat(
        fp4_bar("kl_nats", "KL(fp32 KV || FP4 KV), nats/step", ".2e").properties(title="FP4: KL per decode step"),
        fp4_bar("rel_rmse_model_kv", "relative RMSE of the model's global KV", ".3f").properties(
            title="FP4: global-KV error"),
    ).resolve_scale(color="independent")
    chart = alt.vconcat(alt.hconcat(kl, agree), fp4_panel).properties(title=TITLE)

    claims = [Claim(claim=f"{fmt.upper()} relative RMSE on N(0,1) (kernels, spec scale rule)",
                    source="expected for E2M1 with OCP MX v1.0 (32-block E8M0) / NVFP4 (16-block E4M3) scales",
                    published=_EXPECTED_RMSE[fmt], reproduced=stats[fmt], unit="fraction",
                    inputs="tiered_kv.kernels.fp4.error_stats, 65,536 N(0,1) elements, seed 0")
              for fmt in ("mxfp4", "nvfp4")]
    worst = rep.sort("kl_nats", descending=True).row(0, named=True)
    r128 = rep.filter((pl.col("window_tokens") == max(s["windows"])) & (pl.col("replay_tokens") == 64))
    corpus = meta.get("corpus", {})
    notes = (f"Checkpoint {path.name} (held-out loss {meta.get('final_heldout_loss_nats', float('nan')):.3f} "
             f"nats/byte; corpus: Python {corpus.get('python', '?')} stdlib, {corpus.get('files', '?')} files). "
             f"{s['samples']} held-out sequence(s), prefix {s['prefix']} tokens, {s['steps']} teacher-forced "
             f"decode steps; global KV through MXFP4 in both runs. Largest replay error: W={worst['window_tokens']}, "
             f"R={worst['replay_tokens']}: KL {worst['kl_nats']:.3g} nats, agreement {worst['agreement']:.1%}"
             + (f"; W={max(s['windows'])}, R=64: KL {float(r128['kl_nats'][0]):.3g} nats, agreement "
                f"{float(r128['agreement'][0]):.1%}" if r128.height else "")
             + f". Share of sliding-window attention mass on the most recent {loc['recent_tokens']} of "
             f"W={loc['window_tokens']} positions: {loc['overall_share']:.1%} (encoder {loc['encoder_share']:.1%}, "
             f"decoder {loc['decoder_share']:.1%}; uniform would be {loc['uniform_share']:.0%}). FP4 vs fp32 "
             "global KV (exact windows): " + ", ".join(
                 f"{r['format']} KL {r['kl_nats']:.2e}, agreement {r['agreement']:.1%}, KV rel. RMSE "
                 f"{r['rel_rmse_model_kv']:.3f}" for r in fp4.iter_rows(named=True))
             + "." + (" Quick mode: fewer W, R and samples." if quick else ""))
    data = {"replay": rep, "fp4": fp4, "attention_locality": pl.DataFrame([loc])}
    return FigureResult(chart=chart, claims=claims, data=data, notes=notes)
