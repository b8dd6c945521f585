"""Where to write, and when a short prompt is better recomputed than loaded.

Why: DeepSeek writes KV at "cache prefix units" (end of user input, end of output, detected common
prefixes, fixed intervals), not at every block. Each write-point strategy of
:mod:`tiered_kv.sim.retention.write_points` is replayed on the real conversation trace (unlimited
retention over its hour) and on the 14-day mixed workload (3 d agent / 7 d chatbot TTLs): token hit
rate, SSD bytes written per day, bytes stored. The notes add the prompt length below which
recomputing is as fast as loading from the SSD tier (:func:`tiered_kv.sim.cluster.latency.recompute_crossover_tokens`).
"""

from __future__ import annotations

import polars as pl

from tiered_kv.viz.report import FigureResult

NAME = "19_write_points"
TITLE = "Write points: token hit rate and SSD bytes written per strategy"


def build(quick: bool) -> FigureResult:
    import altair as alt

    from tiered_kv.sim.cluster import latency as L
    from tiered_kv.units import format_bytes
    from tiered_kv.viz.write_points import measured_crossover, strategies

    data = strategies("small" if quick else "full")[0].with_columns(
        pl.col("workload_brief").alias("workload"))  # the bars are labelled with the short names
    base = alt.Chart(data).encode(y=alt.Y("strategy:N", title=None), color=alt.Color("workload:N", title="workload"),
                                  yOffset="workload:N")
    chart = alt.hconcat(
        base.mark_bar().encode(x=alt.X("token_hit_rate:Q", title="token hit rate", axis=alt.Axis(format="%"))),
        base.mark_bar().encode(x=alt.X("bytes_written_per_day:Q", title="SSD bytes written per day")),
    ).properties(title=TITLE)
    presets = {p: L.preset(p) for p in L.PRESETS}
    cross = {p: L.recompute_crossover_tokens(cfg) for p, cfg in presets.items()}
    bf16, fp4 = presets["deepseek-v3"], presets["deepseek-v3-fp4"]
    lines = [f"{r['workload']}, {r['strategy']}: hit rate {r['token_hit_rate']:.2%}, written "
             f"{format_bytes(r['bytes_written_per_day'])}/day, stored on average {format_bytes(r['avg_stored_bytes'])}, "
             f"{r['units']:,} units" for r in data.iter_rows(named=True)]
    notes = (
        "Prefix units end at write points; a request hits the deepest stored unit that is a prefix of it; a "
        "unit without a stored parent holds its whole prefix again. " + "; ".join(lines) + ". "
        f"Short prompts (latency model, one idle machine, loading a prompt's whole KV plus the "
        f"{bf16.replay_tokens}-token bounded replay vs recomputing it): recomputing is as fast as loading below "
        f"{cross['deepseek-v3']:.0f} tokens at {bf16.read_bandwidth_bytes_per_s / 2**30:g} GiB/s with BF16 MLA KV "
        f"({bf16.kv_bytes_per_token:,.0f} B/token) and below {cross['deepseek-v3-fp4']:.0f} tokens with the "
        f"{fp4.kv_bytes_per_token:,.0f} B/token FP4 cache: up to R = {fp4.replay_tokens} tokens the replay is the "
        "whole prefill, so the crossover sits just above R. Measured (`tiered-kv bench ttft`, cold SSD hit against a miss; BENCHMARKS.md): "
        + measured_crossover()[1] + ".")
    return FigureResult(chart=chart, claims=[], data=data, notes=notes)
