"""Price of a million input tokens against the cache hit rate, and where the 50x gap comes from.

Why: DeepSeek prices a cache hit at 1/50 of a miss. Left: the price per million input tokens as
a function of the token hit rate, with a hit at ``hit_price_ratio`` = 1/50 of a miss
(:func:`tiered_kv.sim.cluster.latency.cost_per_mtok`, miss price = 1), with the hit rates this workbench
measures marked on it (the real Mooncake trace with an unlimited shared pool; one day of the
synthetic mix through the cluster model). Right: the machine time a miss costs over the machine
time of a hit of the same prompt (prefill of the new block plus replay of R tokens; the load is
I/O, not GPU time), from the latency model: the physical basis of a 50x price gap. The ratio
does not depend on the calibrated machine FLOP/s (it cancels), only on DeepSeek-V3's FLOPs per
token and per token pair and on R.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from tiered_kv.viz.report import Claim, FigureResult, claim_value

NAME = "06_cost"
TITLE = "Price per million input tokens vs hit rate (hit = 1/50 of a miss), and the machine-time gap"
#: The label of the dashed line at 50 on the right panel.
PRICE_GAP_LABEL = "50x: DeepSeek's price gap (miss / hit)"


def build(quick: bool) -> FigureResult:
    import altair as alt

    from tiered_kv.sim.cluster import latency as L

    cfg = L.preset()
    points = _hit_rates(quick)
    left, curve, marks = _price_panel(cfg, points)
    right, ratio = _gap_panel(cfg)
    chart = alt.hconcat(left, right).properties(title=TITLE)
    k128 = L.CALIBRATION_TOKENS
    r128 = float(L.hit_miss_compute_ratio(cfg, k128))
    r8 = float(L.hit_miss_compute_ratio(cfg, 8192))
    claims = [Claim("a cache hit costs 50x less than a miss (a price) vs miss/hit machine time at 128K",
                    "DeepSeek API pricing", 50.0, r128, "x",
                    f"proxy: a machine-time ratio set beside a price ratio; miss/hit machine time of a 128K "
                    f"prompt (last {L.HIT_SCENARIO_NEW_TOKENS} tokens new, R={cfg.replay_tokens} replayed), "
                    f"DeepSeek-V3 FLOPs; it grows with length: {r8:.1f}x at 8K, {r128:.1f}x at 128K",
                    kind="proxy",
                    provenance=claim_value("machine_time_ratio", latency_preset="deepseek-v3", tokens=k128))]
    notes = ("Price line: miss price x (1 - hit_rate x (1 - 1/50)). Marked: "
             + "; ".join(f"{w} hit rate {h:.1%} -> {float(L.cost_per_mtok(cfg, h, 1.0)):.3f}" for w, h in points)
             + f". The machine-time gap grows with prompt length (attention is quadratic): "
             f"{r8:.1f}x at 8K, {r128:.1f}x at 128K; a 50x price gap "
             "matches long prompts, while short ones are priced above their compute saving.")
    data = pl.concat([curve.with_columns(pl.lit("price curve").alias("series")),
                      marks.select("token_hit_rate", "cost_per_mtok", pl.col("workload").alias("series")),
                      ratio.with_columns(pl.lit("miss/hit machine time").alias("series"))], how="diagonal_relaxed")
    return FigureResult(chart=chart, claims=claims, data=data, notes=notes)


def _hit_rates(quick: bool) -> list[tuple[str, float]]:
    """(workload, token hit rate): the Mooncake conversation trace, and figure 05's day 2 when it runs."""
    from tiered_kv.sim.cluster import ClusterConfig, simulate_cluster, summarize
    from tiered_kv.sim.cluster.disk_day import disk_day
    from tiered_kv.sim.trace_replay import compile_trace
    from tiered_kv.sim.traces import load_trace, shipped_trace

    real = simulate_cluster(compile_trace(load_trace(shipped_trace("conversation"))),
                            ClusterConfig(nodes=10, routing="random")).summary()
    points = [("Mooncake conversation, unlimited shared pool", real["token_hit_rate"])]
    try:
        _, _, _, day2 = disk_day(quick)
        points.append(("synthetic mix, day 2 (figure 05)", summarize(day2)["token_hit_rate"]))
    except Exception:  # noqa: BLE001 - the real-trace point stands alone
        pass
    return points


def _price_panel(cfg, points: list[tuple[str, float]]):
    """(chart, curve, marks): price per million input tokens against the hit rate, workloads marked."""
    import altair as alt

    from tiered_kv.sim.cluster import latency as L

    rates = np.linspace(0.0, 1.0, 51)
    curve = pl.DataFrame({"token_hit_rate": rates,
                          "cost_per_mtok": L.cost_per_mtok(cfg, rates * 1e6, np.full_like(rates, 1e6))})
    marks = pl.DataFrame({"workload": [p[0] for p in points], "token_hit_rate": [p[1] for p in points]}).with_columns(
        pl.Series("cost_per_mtok", [float(L.cost_per_mtok(cfg, h, 1.0)) for _, h in points]))
    left = (alt.Chart(curve).mark_line().encode(
        x=alt.X("token_hit_rate:Q", title="token hit rate (fraction)", axis=alt.Axis(format="%")),
        y=alt.Y("cost_per_mtok:Q", title="price per million input tokens (miss price = 1)"))
        + alt.Chart(marks).mark_point(size=90, filled=True).encode(
            x="token_hit_rate:Q", y="cost_per_mtok:Q",
            color=alt.Color("workload:N", legend=alt.Legend(orient="bottom", columns=1, labelLimit=400)),
            tooltip=["workload", alt.Tooltip("token_hit_rate:Q", format=".1%"),
                     alt.Tooltip("cost_per_mtok:Q", format=".3f")])
    ).properties(width=340, height=280, title="price vs hit rate (hit at 1/50 of a miss)")
    return left, curve, marks


def _gap_panel(cfg):
    """(chart, ratio): miss/hit machine time against prompt length, beside the 50x price gap."""
    import altair as alt

    from tiered_kv.sim.cluster import latency as L

    n = np.unique(np.round(np.geomspace(2048, 131072, 25)))
    ratio = pl.DataFrame({"prompt_tokens": n.astype(np.int64),
                          "miss_over_hit_machine_time": L.hit_miss_compute_ratio(cfg, n)})
    right = (alt.Chart(ratio).mark_line(point=True).encode(
        x=alt.X("prompt_tokens:Q", scale=alt.Scale(type="log", base=2), title="prompt length (tokens, log)"),
        y=alt.Y("miss_over_hit_machine_time:Q", title="miss / hit machine time (x)"))
        + alt.Chart(pl.DataFrame({"y": [50.0]})).mark_rule(strokeDash=[6, 4]).encode(y="y:Q")
        + alt.Chart(pl.DataFrame({"y": [50.0], "x": [float(n[0])], "label": [PRICE_GAP_LABEL]})).mark_text(
            align="left", baseline="bottom", dx=4, dy=-3, fontSize=11).encode(x="x:Q", y="y:Q", text="label:N")
    ).properties(width=340, height=280, title="machine-time gap, DeepSeek-V3 latency model")
    return right, ratio
