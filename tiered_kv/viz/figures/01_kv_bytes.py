"""KV-cache bytes per token by architecture and precision (log scale), from parameters.

Why: the whole tiered design rests on the per-token size of what is cached. A GQA model of
DeepSeek-LLM-67B's shape needs 389,120 B/token in bf16; MLA cuts it ~6x and ~6-bit storage
another 2.7x (DeepSeek-V2's 93.3%); one shared global K/V in FP4 (YOCO-style, this project)
brings it to tens or hundreds of bytes, which is what makes an SSD tier of prefixes
affordable. Every bar but DeepSeek's published 890 B/token is computed by :mod:`tiered_kv.arch`.
"""

from __future__ import annotations

import polars as pl

from tiered_kv.viz.report import Claim, FigureResult, claim_value

NAME = "01_kv_bytes"
TITLE = "KV cache bytes per token, by architecture and precision (log scale)"


def build(quick: bool) -> FigureResult:
    from tiered_kv.arch import kv_table

    data = pl.DataFrame(kv_table()).with_columns(
        (pl.col("arch") + " · " + pl.col("precision")).alias("label"))
    notes = ("Bytes/token = 2·layers·kv_heads·head_dim·bits/8 (GQA), layers·(512+64)·bits/8 (MLA), "
             "2·kv_heads·head_dim·bits/8 for one shared global K/V (YOCO-style; window caches are a "
             "per-sequence constant, not per token). FP4 bits from tiered_kv.keys.bytes_per_element "
             "(MXFP4 4.25, NVFP4 4.5). YOCO-3B's 8 global KV heads are an assumption (not in its paper's "
             "table). The 890 B/token bar is DeepSeek's published number, not derived here.")
    return FigureResult(chart=_chart(data), claims=_claims(), data=data, notes=notes)


def _chart(data: pl.DataFrame):
    """One bar per architecture and precision on a log axis, each labelled with its bytes."""
    import altair as alt

    chart = alt.Chart(data).mark_bar().encode(
        y=alt.Y("label:N", sort=alt.EncodingSortField("bytes_per_token", order="descending"), title=None,
                axis=alt.Axis(labelLimit=320)),
        x=alt.X("bytes_per_token:Q", scale=alt.Scale(type="log", domain=[10, 1e6]),
                title="KV bytes per token (log scale)", axis=alt.Axis(format="~s")),
        x2=alt.datum(10),
        color=alt.Color("kind:N", title="KV layout"),
        tooltip=["arch", "precision", alt.Tooltip("bytes_per_token:Q", format=",.1f"), "elements_per_token",
                 "source", "note"],
    )
    text = alt.Chart(data).mark_text(align="left", dx=3, fontSize=10).encode(
        y=alt.Y("label:N", sort=alt.EncodingSortField("bytes_per_token", order="descending")),
        x="bytes_per_token:Q", text=alt.Text("bytes_per_token:Q", format=",.0f"))
    return (chart + text).properties(width=520, height=22 * data.height, title=TITLE)


def _claims() -> list[Claim]:
    """The 67B cache, DeepSeek's 437x and DeepSeek-V2's 93.3%: checks of published arithmetic."""
    from tiered_kv import arch as A

    r = A.ratios()
    b67 = A.DEEPSEEK_67B.bytes_per_token(16)
    return [
        Claim(claim="DeepSeek-LLM-67B KV cache in bf16 (GQA)", source="DeepSeek LLM (arXiv:2401.02954) shape",
              published=389_120, reproduced=b67, unit="bytes/token",
              inputs="2 x 95 layers x 8 KV heads x 128 dims x 2 bytes: arithmetic on the published shape",
              kind="check",  # the published shape times bytes per element: checks the formula, nothing measured
              provenance=claim_value("kv_bytes_per_token", arch="DEEPSEEK_67B", bits=16)),
        Claim(claim="KV reduction of DeepSeek's 890 B/token cache vs 67B", source="DeepSeek tiered KV cache",
              published=437, reproduced=r["ratio_67b_vs_890"], unit="x",
              inputs=f"{b67:,.0f} computed / {A.REFERENCE_CACHE_BYTES_PER_TOKEN:g} B/token typed in from "
                     "DeepSeek's account: a check of DeepSeek's arithmetic, not a reproduction of 890",
              kind="check",
              provenance=claim_value("kv_ratio_to_reference", arch="DEEPSEEK_67B", bits=16,
                                     reference_bytes_per_token=A.REFERENCE_CACHE_BYTES_PER_TOKEN)),
        Claim(claim="DeepSeek-V2 KV cache reduction vs DeepSeek 67B", source="DeepSeek-V2 (arXiv:2405.04434)",
              published=0.933, reproduced=r["deepseek_v2_reduction_vs_67b"], unit="fraction",
              inputs=f"MLA 60 x (512+64) elements at {A.DEEPSEEK_MLA_BITS:g} bits = "
                     f"{A.DEEPSEEK_V2.bytes_per_token(A.DEEPSEEK_MLA_BITS):,.0f} B vs {b67:,.0f} B; "
                     "every input is DeepSeek-V2's own (layers, ranks, ~6 bits), so this checks its arithmetic",
              kind="check",  # the paper's own inputs through the paper's own formula
              provenance=claim_value("kv_reduction", arch="DEEPSEEK_V2", bits=A.DEEPSEEK_MLA_BITS,
                                     vs_arch="DEEPSEEK_67B", vs_bits=16)),
    ]
