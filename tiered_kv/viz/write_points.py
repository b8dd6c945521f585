"""Where to write to the SSD tier, and when a short prompt is better recomputed than loaded
(figure 19, notebooks 03 and 04).

Why it is asked: figure 19's docstring. :func:`strategies` replays each write-point
strategy of :mod:`tiered_kv.sim.retention.write_points`; the crossover functions draw the prompt
length below which recomputing is as fast as loading from the latency model
(:func:`tiered_kv.sim.cluster.latency.recompute_crossover_tokens`), and :func:`measured_crossover`
reads the CPU engine's measurement. Nothing here computes a hit or a latency.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import polars as pl

from tiered_kv.measure.crossover import measured_crossover  # noqa: F401 - figure 19, notebook 04 read it here

GIB = float(1 << 30)

#: Synthetic workload per notebook size: (preset, days). Small is figure 19's quick mode.
SIZES = {"small": ("ci", 3.0), "full": ("mixed", 14.0)}

#: SSD-tier read bandwidths (GiB/s) of :func:`crossover_table`; 40 GiB/s is the presets' 3FS figure.
BANDWIDTHS_GIB_S = (5.0, 10.0, 20.0, 40.0, 80.0)


@lru_cache(maxsize=2)
def strategies(size: str | None = None) -> tuple[pl.DataFrame, str]:
    """(:func:`~tiered_kv.sim.retention.write_points.compare_strategies` rows with a ``workload`` column,
    a line naming the workloads): the synthetic workload of :data:`SIZES` (seed 0, 3 d agent / 7 d
    chatbot TTLs) and at full size the shipped conversation trace (one hour, unlimited retention)."""
    from tiered_kv.sim.retention.gaps import default_bytes_per_token
    from tiered_kv.sim.retention.report import pair_ttls
    from tiered_kv.sim.retention.write_points import compare_strategies
    from tiered_kv.sim.trace_replay import compile_trace
    from tiered_kv.sim.workload import generate
    from tiered_kv.viz import notebook_size

    size = notebook_size(size)
    bpt = default_bytes_per_token()
    preset, days = SIZES[size]
    df = generate(preset, days, 0)
    trace = compile_trace(df)
    name, span, ttls = f"synthetic '{preset}'", f"{days:g} d", "3 d / 7 d TTLs"
    parts = [_named(compare_strategies(trace, ttl_by_class=pair_ttls(trace.class_names), bytes_per_token=bpt),
                    name, span, ttls)]
    line = f"{name} ({span}, {ttls}): seed 0, {df.height:,} requests"
    if size == "full":
        from tiered_kv.sim.traces import load_trace, shipped_trace

        real = compile_trace(load_trace(shipped_trace("conversation")))
        parts.insert(0, _named(compare_strategies(real, bytes_per_token=bpt), "conversation trace", "1 h",
                               "unlimited retention"))
        line = "conversation trace (1 h); " + line
    return pl.concat(parts, how="diagonal"), f"{line}; {bpt:,.0f} B/token"


def _named(frame: pl.DataFrame, name: str, span: str, retention: str) -> pl.DataFrame:
    """``workload`` names the workload, its span and its retention; ``workload_brief`` only the first two."""
    return frame.with_columns(pl.lit(f"{name} ({span}, {retention})").alias("workload"),
                              pl.lit(f"{name} ({span})").alias("workload_brief"))


def strategy_table(data: pl.DataFrame) -> pl.DataFrame:
    """Per workload and strategy: token hit rate, share of accesses that are write points, SSD
    GiB written per day, average and final GiB stored, units written; the last column is the
    write volume relative to ``every-block`` on the same workload."""
    out = data.select(
        "workload", "strategy", "token_hit_rate", "write_point_share",
        (pl.col("bytes_written_per_day") / GIB).alias("written_gib_per_day"),
        (pl.col("avg_stored_bytes") / GIB).alias("avg_stored_gib"),
        (pl.col("stored_bytes_end") / GIB).alias("stored_gib_end"), "units")
    every = pl.col("written_gib_per_day").filter(pl.col("strategy") == "every-block").first()
    return out.with_columns((pl.col("written_gib_per_day") / every).over("workload").alias("written_vs_every_block"))


def strategy_chart(data: pl.DataFrame):
    """Bars per strategy and workload: token hit rate, SSD GiB written per day, average GiB stored."""
    import altair as alt

    table = strategy_table(data)
    base = alt.Chart(table).encode(y=alt.Y("strategy:N", title=None), color=alt.Color("workload:N", title="workload"),
                                   yOffset="workload:N").properties(width=180, height=130)
    tip = ["workload", "strategy", alt.Tooltip("token_hit_rate:Q", format=".2%"),
           alt.Tooltip("written_gib_per_day:Q", format=",.1f"), alt.Tooltip("avg_stored_gib:Q", format=",.1f")]
    return alt.hconcat(
        base.mark_bar().encode(x=alt.X("token_hit_rate:Q", title="token hit rate (% of input tokens)",
                                       axis=alt.Axis(format="%")), tooltip=tip),
        base.mark_bar().encode(x=alt.X("written_gib_per_day:Q", title="SSD written (GiB/day)"), tooltip=tip),
        base.mark_bar().encode(x=alt.X("avg_stored_gib:Q", title="stored on average (GiB)"), tooltip=tip),
    )


def crossover_table(bandwidths_gib_s=BANDWIDTHS_GIB_S) -> pl.DataFrame:
    """(preset, kv_bytes_per_token, bandwidth_gib_s, crossover_tokens): the prompt length below which
    recomputing is as fast as loading the whole prompt's KV (plus the bounded replay) from the SSD
    tier, per latency preset and read bandwidth (GiB/s), on one idle machine."""
    from tiered_kv.sim.cluster import latency as L

    rows = []
    for name in L.PRESETS:
        cfg = L.preset(name)
        rows += [{"preset": name, "kv_bytes_per_token": cfg.kv_bytes_per_token, "bandwidth_gib_s": float(bw),
                  "crossover_tokens": L.recompute_crossover_tokens(cfg.with_(read_bandwidth_bytes_per_s=bw * GIB))}
                 for bw in bandwidths_gib_s]
    return pl.DataFrame(rows)


def crossover_curves(max_tokens: int = 1024, points: int = 64) -> pl.DataFrame:
    """(preset, prompt_tokens, path, ttft_ms): TTFT of recomputing a prompt against loading its whole
    KV from the SSD tier and replaying R tokens, per preset at its bandwidth, 1 to ``max_tokens`` tokens."""
    from tiered_kv.sim.cluster import latency as L

    n = np.unique(np.geomspace(1, max_tokens, points).round())
    parts = []
    for name in L.PRESETS:
        cfg = L.preset(name)
        recompute = L.prefill_seconds(cfg, 0.0, n) + cfg.prefill_fixed_s
        load = L.load_seconds(cfg, n) + L.replay_seconds(cfg, n) + cfg.prefill_fixed_s
        parts += [pl.DataFrame({"preset": name, "prompt_tokens": n, "path": path, "ttft_ms": 1e3 * t})
                  for path, t in (("recompute", recompute), ("load from SSD + replay", load))]
    return pl.concat(parts)


def crossover_chart(max_tokens: int = 1024):
    """TTFT (ms) against prompt length (tokens, log scales): recompute vs load from the SSD tier, one
    panel per latency preset, a dashed rule at the preset's crossover."""
    import altair as alt

    from tiered_kv.sim.cluster import latency as L

    curves = crossover_curves(max_tokens)
    panels = []
    for name in L.PRESETS:
        cross = pl.DataFrame({"crossover_tokens": [L.recompute_crossover_tokens(L.preset(name))]})
        lines = alt.Chart(curves.filter(pl.col("preset") == name)).mark_line().encode(
            x=alt.X("prompt_tokens:Q", title="prompt length (tokens)",
                   scale=alt.Scale(type="log", domain=[1, max_tokens], nice=False)),
            y=alt.Y("ttft_ms:Q", title="TTFT on an idle machine (ms)", scale=alt.Scale(type="log")),
            color=alt.Color("path:N", title=None),
            tooltip=["path", alt.Tooltip("prompt_tokens:Q", format=",.0f"), alt.Tooltip("ttft_ms:Q", format=".3f")])
        rule = alt.Chart(cross).mark_rule(strokeDash=[4, 3], color="gray").encode(
            x="crossover_tokens:Q", tooltip=[alt.Tooltip("crossover_tokens:Q", title="crossover (tokens)", format=",.1f")])
        panels.append(alt.layer(lines, rule).properties(width=260, height=180, title=name))
    return alt.hconcat(*panels)
