"""TTFT against prompt length for a hit and a miss, from the latency model, beside a measurement.

Why: the case for an SSD KV tier is that loading a long prefix is far cheaper than recomputing
it. The model (:mod:`tiered_kv.sim.cluster.latency`) prices a miss as a*n + b*n^2 machine-seconds from
DeepSeek-V3's FLOPs, with one machine FLOP/s calibrated so that a 128K miss takes 13 s; a hit
loads the prefix's KV at 3FS-class read bandwidth and replays R tokens. The hit time is not
tuned. The right panel is TTFT measured on this machine with the trained small model and the
real tiers (:func:`tiered_kv.measure.ttft.measure_ttft`): a CPU and a tiny model, so absolute
milliseconds differ; the hit/miss gap is the comparable part.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from tiered_kv.viz.report import Claim, FigureResult, claim_value

NAME = "02_ttft"
TITLE = "TTFT vs prompt length: hit vs miss (model) and measured on this machine"

MISS = "miss (recompute)"
#: One colour per case in both panels, in the order miss (red wherever it is drawn), the model's
#: BF16 and FP4 hits, then the measured hits of :data:`MEASURED_CASES`.
CASE_COLORS = ("#d62728", "#1f77b4", "#17becf", "#2ca02c", "#98df8a", "#9467bd")
#: The measured cases of :func:`tiered_kv.measure.ttft.measure_ttft`, named as in the model panel.
MEASURED_CASES = {"miss": MISS, "ssd_cold_hit": "SSD hit, page cache dropped (replay)",
                  "ssd_warm_hit": "SSD hit, page cache warm (replay)", "ssd_host_hit": "SSD + host hit (no replay)"}


def _model_frame() -> pl.DataFrame:
    from tiered_kv.sim.cluster import latency as L

    n = np.unique(np.round(np.geomspace(1024, 131072, 29)))
    bf16, fp4 = L.preset("deepseek-v3"), L.preset("deepseek-v3-fp4")
    rows = []
    for case, values in ((MISS, L.miss_ttft(bf16, n)),
                         (f"hit, BF16 MLA KV ({bf16.kv_bytes_per_token:,.0f} B/token)", L.hit_ttft(bf16, n)),
                         (f"hit, FP4 KV ({fp4.kv_bytes_per_token:,.0f} B/token)", L.hit_ttft(fp4, n))):
        rows += [{"prompt_tokens": int(a), "ttft_s": float(b), "case": case} for a, b in zip(n, values, strict=True)]
    return pl.DataFrame(rows)


def _measured(quick: bool) -> tuple[pl.DataFrame | None, str]:
    if quick:  # loading the model and the tiers alone takes longer than a quick build may
        return None, "not measured in quick mode (run `tiered-kv reproduce` or `tiered-kv bench ttft`)"
    try:
        from tiered_kv.measure.ttft import measure_ttft

        lengths = (1024, 4096, 16384, 32768)
        df = measure_ttft(lengths, progress=False)
        return df.select("length_tokens", "case", "ttft_ms"), f"measured at {list(lengths)} tokens"
    except Exception as exc:  # noqa: BLE001 - the model panel stands alone; say why this one is missing
        return None, f"measurement unavailable here ({type(exc).__name__}: {exc})"


def build(quick: bool) -> FigureResult:
    from tiered_kv.sim.cluster import latency as L

    model = _model_frame()
    cfg = L.preset()
    k128 = L.CALIBRATION_TOKENS
    miss, hit = float(L.miss_ttft(cfg, k128)), float(L.hit_ttft(cfg, k128))
    fp4 = L.preset("deepseek-v3-fp4")
    hit_fp4 = float(L.hit_ttft(fp4, k128))
    measured, how = _measured(quick)
    chart, data = _chart(model, measured)
    notes = (f"Model: TTFT = load + prefill of the uncached suffix + replay of R tokens (no queueing here). "
             f"With FP4 KV ({fp4.kv_bytes_per_token:,.0f} B/token) the 128K hit falls to {hit_fp4:.3f} s: the load "
             f"({float(L.load_seconds(cfg, k128 - 512)):.3f} s in BF16) nearly vanishes; what remains is the suffix prefill and the replay. "
             f"Right panel: {how}; an SSD hit replays R tokens, an SSD + host hit finds the window state; one "
             "repeat on a CPU shared with other jobs, so single bars can be off by a large factor "
             "(`tiered-kv bench ttft --repeats 5` for medians).")
    return FigureResult(chart=chart, claims=_claims(miss, hit, hit_fp4), data=data, notes=notes)


def _chart(model: pl.DataFrame, measured: pl.DataFrame | None):
    """(chart, data): the model's TTFT lines, and beside them the measured bars when there are any."""
    import altair as alt

    if measured is not None:
        measured = measured.with_columns(pl.col("case").replace(MEASURED_CASES))
    cases = list(dict.fromkeys([*model["case"], *([] if measured is None else measured["case"])]))
    colors = dict(zip(dict.fromkeys([*model["case"], *MEASURED_CASES.values()]), CASE_COLORS, strict=True))
    scale = alt.Scale(domain=cases, range=[colors[c] for c in cases])
    left = alt.Chart(model).mark_line(point=True).encode(
        x=alt.X("prompt_tokens:Q", scale=alt.Scale(type="log", base=2), title="prompt length (tokens, log)"),
        y=alt.Y("ttft_s:Q", scale=alt.Scale(type="log"), title="TTFT (seconds, log)"),
        color=alt.Color("case:N", title=None, scale=scale,
                        legend=alt.Legend(orient="bottom", columns=1, labelLimit=400)),
        tooltip=["prompt_tokens", alt.Tooltip("ttft_s:Q", format=".3f"), "case"],
    ).properties(width=380, height=300, title="latency model (DeepSeek-V3, one machine, idle)")
    if measured is None:
        return left.properties(title=TITLE), model.with_columns(pl.lit("model").alias("source"))
    right = alt.Chart(measured).mark_bar().encode(
        x=alt.X("case:N", title=None, sort=list(scale.domain), axis=alt.Axis(labels=False, ticks=False)),
        y=alt.Y("ttft_ms:Q", title="TTFT (milliseconds)"),
        color=alt.Color("case:N", scale=scale, legend=None),
        column=alt.Column("length_tokens:O", title="prompt tokens"),
        tooltip=["case", "length_tokens", alt.Tooltip("ttft_ms:Q", format=".1f")],
    ).properties(width=80, height=300, title="measured: trained small model, CPU (colours as on the left)")
    chart = alt.hconcat(left, right).resolve_scale(color="shared").properties(title=TITLE)
    data = pl.concat([model.with_columns(pl.lit("model").alias("source")),
                      measured.rename({"length_tokens": "prompt_tokens"})
                      .with_columns((pl.col("ttft_ms") / 1e3).alias("ttft_s"), pl.lit("measured").alias("source"))
                      .select("prompt_tokens", "ttft_s", "case", "source")
                      .with_columns(pl.col("prompt_tokens").cast(pl.Int64))], how="vertical_relaxed")
    return chart, data


def _hit_inputs(c, kv: str) -> str:
    """The inputs of a hit's TTFT under latency config ``c`` (``kv``: its KV format), in words."""
    from tiered_kv.sim.cluster import latency as L

    return (f"suffix prefill and replay priced with the machine FLOP/s fitted to the 13 s miss "
            f"(a={c.prefill_a_s_per_token:.3g} s/token, b={c.prefill_b_s_per_token2:.3g} s/token^2); "
            f"{kv} KV, {c.kv_bytes_per_token:,.0f} B/token at {c.read_bandwidth_bytes_per_s / 2**30:g} GiB/s; "
            f"R={c.replay_tokens}; last {L.HIT_SCENARIO_NEW_TOKENS} tokens new")


def _claims(miss: float, hit: float, hit_fp4: float) -> list[Claim]:
    """DeepSeek's 128K miss and hit TTFTs against the latency model's."""
    from tiered_kv.sim.cluster import latency as L

    cfg, fp4, k128 = L.preset(), L.preset("deepseek-v3-fp4"), L.CALIBRATION_TOKENS
    return [
        Claim("TTFT of a 128K-token miss", "DeepSeek (tiered KV cache)", L.CALIBRATION_MISS_S, miss, "s",
              "machine FLOP/s fitted to this point; a, b from DeepSeek-V3 FLOPs", kind="calibration",
              provenance=claim_value("ttft_seconds", case="miss", latency_preset="deepseek-v3", tokens=k128)),
        Claim("TTFT of a 128K-token hit, BF16 KV", "DeepSeek (tiered KV cache)", L.PUBLISHED_HIT_S, hit, "s",
              _hit_inputs(cfg, "BF16 MLA") + " (DeepSeek's SSD tier holds FP4: next row)",
              kind="reproduction",  # nothing here was tuned on the 0.5 s (the FLOP/s was tuned on the miss)
              provenance=claim_value("ttft_seconds", case="hit", latency_preset="deepseek-v3", tokens=k128)),
        Claim("TTFT of a 128K-token hit, FP4 KV", "DeepSeek (tiered KV cache)", L.PUBLISHED_HIT_S, hit_fp4, "s",
              _hit_inputs(fp4, "FP4"),
              kind="reproduction",  # as the BF16 row, with DeepSeek's 890 B/token
              provenance=claim_value("ttft_seconds", case="hit", latency_preset="deepseek-v3-fp4", tokens=k128)),
        Claim("miss/hit TTFT at 128K, BF16 KV", "DeepSeek (tiered KV cache)",
              L.CALIBRATION_MISS_S / L.PUBLISHED_HIT_S, miss / hit, "x",
              f"numerator: the calibrated 13 s miss, equal to the published one by construction; denominator: "
              f"the BF16 hit above ({_hit_inputs(cfg, 'BF16 MLA')}), so this row restates that one",
              kind="calibration",  # its numerator is the number the machine FLOP/s was fitted to
              provenance=claim_value("miss_over_hit_ttft", latency_preset="deepseek-v3", tokens=k128)),
    ]
