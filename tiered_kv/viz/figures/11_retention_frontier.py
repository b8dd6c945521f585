"""Token hit rate against stored byte-days, per traffic class: idle-TTL curves against the
offline-optimal retention frontier, with DeepSeek's 3-day and 7-day TTLs and the effective
retention of one watermark LRU marked, on the 14-day synthetic workload.

Why: a TTL pays for every chunk for T after each access, reused or not; the oracle keeps a chunk
only over the intervals that end in a reuse, cheapest per hit token first
(:mod:`tiered_kv.sim.retention`, with the proof). The horizontal distance between the two curves
is the storage a TTL spends on chunks that never come back; the markers show where 3 d and 7 d
sit on each class's curve, and where a single watermark LRU on the 3d/7d pair's average
capacity lands each class (its median idle age at eviction, read off that class's TTL curve).
Every value is computed from the generated trace; nothing is typed in.
"""

from __future__ import annotations

import math

import polars as pl

from tiered_kv.units import DAY_S, DEEPSEEK_TTL_DAYS
from tiered_kv.viz.report import FigureResult
from tiered_kv.viz.style import binary_unit

NAME = "11_retention_frontier"
TITLE = "Hit rate vs storage per class: TTL curves against the oracle frontier (14-day synthetic)"


def build_data(preset: str, days: float, seed: int):
    """(curves+frontier frame, markers frame, analysis, name of the storage column) for one synthetic run."""
    from tiered_kv.sim.retention.report import RetentionConfig, analyze
    from tiered_kv.sim.trace_replay import compile_trace
    from tiered_kv.sim.workload.synth import generate

    trace = compile_trace(generate(preset, days, seed))
    res = analyze(trace, config=RetentionConfig(ttl_points=48, frontier_points=48, samples=64))
    cur = res.curves.filter(pl.col("ttl_s") > 0)
    fr = res.frontier.filter((pl.col("class") != "all") & (pl.col("byte_days") > 0))
    unit, scale = binary_unit(float(max(cur["byte_days"].max(), fr["byte_days"].max())), smallest="MiB")
    col = f"storage_{unit}_days"
    lines = pl.concat([
        cur.select("class", pl.lit("idle TTL").alias("policy"), (pl.col("byte_days") / scale).alias(col),
                   "token_hit_rate", (pl.col("ttl_s") / DAY_S).alias("ttl_days")),
        fr.select("class", pl.lit("oracle frontier").alias("policy"), (pl.col("byte_days") / scale).alias(col),
                  "token_hit_rate", pl.lit(None, dtype=pl.Float64).alias("ttl_days")),
    ])
    # markers: 3 d and 7 d on every class's TTL curve, and the watermark's effective retention
    model = res.model
    marks = []
    wm = res.summary["watermark"]["effective_retention_s"]
    for c, name in enumerate(trace.class_names):
        inp = max(int(model.input_tokens[c]), 1)
        points = [(f"{d:g} d", d * DAY_S) for d in DEEPSEEK_TTL_DAYS.values()]
        if wm[name]["p50_s"] is not None:
            points.append(("watermark", float(wm[name]["p50_s"])))
        for label, t in points:
            marks.append({"class": name, "label": label, "ttl_days": t / DAY_S,
                          col: float(model.cost(c, t)) / DAY_S / scale,
                          "token_hit_rate": float(model.hits(c, t)) / inp})
    return lines, pl.DataFrame(marks), res, col


def build(quick: bool) -> FigureResult:
    import altair as alt

    preset, days, seed = ("ci", 14.0, 0) if quick else ("mixed", 14.0, 0)
    lines, marks, res, col = build_data(preset, days, seed)
    s = res.summary
    unit = col.split("_")[1]
    charts = []
    for name in sorted(set(lines["class"].to_list()), reverse=True):  # chatbot, agent
        ln, mk = lines.filter(pl.col("class") == name), marks.filter(pl.col("class") == name)
        fr = ln.filter(pl.col("policy") == "oracle frontier")
        top = float(fr["token_hit_rate"].max())
        lo = float(fr.filter(pl.col("token_hit_rate") >= 0.05 * top)[col].min())  # hide the near-zero tail
        x = alt.X(f"{col}:Q", title=f"stored {unit}-days (log scale)",
                  scale=alt.Scale(type="log", domain=[max(lo, 1e-9), float(ln[col].max())], nice=False))
        y = alt.Y("token_hit_rate:Q", title="token hit rate", axis=alt.Axis(format="%"))
        curve = alt.Chart(ln).mark_line(clip=True).encode(
            x=x, y=y, strokeDash=alt.StrokeDash("policy:N", title="retention"),
            color=alt.Color("policy:N", scale=alt.Scale(range=["#1f77b4", "#d62728"]), title="retention"),
            tooltip=["policy", alt.Tooltip(f"{col}:Q", format=".3g"), alt.Tooltip("token_hit_rate:Q", format=".2%"),
                     alt.Tooltip("ttl_days:Q", format=".3f")])
        dots = alt.Chart(mk).mark_point(filled=True, size=60, color="black", clip=True).encode(
            x=x, y=y, shape=alt.Shape("label:N", title="marked"),
            tooltip=["label", alt.Tooltip("ttl_days:Q", format=".2f"), alt.Tooltip("token_hit_rate:Q", format=".2%")])
        layers = [curve, dots]
        for label, dy in (("3 d", 14), ("7 d", -10), ("watermark", -24)):  # markers sit close: stack labels
            sel = mk.filter(pl.col("label") == label)
            if sel.height:
                layers.append(alt.Chart(sel).mark_text(align="right", dx=-4, dy=dy, fontSize=10).encode(
                    x=x, y=y, text="label:N"))
        charts.append(alt.layer(*layers).properties(width=300, height=260, title=name))
    chart = alt.hconcat(*charts).resolve_scale(x="independent", y="independent").properties(title=TITLE)
    opt = ", ".join(f"{c} {t / DAY_S:.2f} d" for c, t in s["optimal_ttl_s"].items())
    notes = (f"Synthetic workload '{preset}', {days:g} days, seed {seed}: {s['requests']:,} requests, "
             f"{s['block_accesses']:,} block accesses; chunk {s['chunk_bytes'] / 2**20:.2f} MiB "
             f"({s['bytes_per_token']:,.0f} B/token, DeepSeek-V3 MLA in MXFP4, x {s['block_size']} tokens). "
             f"At the 3d/7d pair's average storage ({s['capacity_bytes'] / 2**40:.2f} TiB): pair "
             f"{s['pair_token_hit_rate']:.2%}, best shared TTL ({s['shared_ttl_s'] / DAY_S:.2f} d) "
             f"{s['shared_token_hit_rate']:.2%}, optimal per-class TTLs ({opt}) {s['optimal_token_hit_rate']:.2%}, "
             f"oracle frontier {s['frontier_token_hit_rate']:.2%}, watermark LRU {s['watermark']['token_hit_rate']:.2%}. "
             "Storage counts each chunk for min(gap, T) after every access and T after its last one "
             "(byte-days; over the 14-day span this is the steady-state average). The oracle keeps only "
             "reused intervals, so it reaches the infinite-cache hit rate at a fraction of the storage."
             + (" Quick mode: 1/200 of the Mooncake rates." if quick else ""))
    if not math.isfinite(s["frontier_token_hit_rate"]):
        raise ValueError("figure 11: frontier hit rate is not finite")
    data = pl.concat([lines, marks.with_columns(pl.lit("marker").alias("policy"))], how="diagonal_relaxed")
    return FigureResult(chart=chart, claims=[], data=data, notes=notes)

