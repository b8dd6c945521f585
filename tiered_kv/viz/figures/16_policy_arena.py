"""Policy arena: hit rate against capacity per eviction policy with the Belady bound, and the wear frontier.

Why: LRU is not the only choice (LMCache, vLLM, Dynamo and libCacheSim offer FIFO, LFU, ARC,
SLRU, 2Q, S3-FIFO, SIEVE, cost-aware GDSF), and an SSD tier pays for every block it writes.
Each policy of the zoo (tiered_kv/sim/policies, docs/policies.md) is replayed at every capacity
on the real Mooncake conversation trace with prefix semantics, under admit-all and
admit-on-second-sighting (a counting Bloom filter, as TinyLFU's doorkeeper and Dynamo's KVBM);
Belady (MIN with bypass) is the offline bound. Left: token hit rate vs capacity. Right: drive
writes per day (TiB written per day per TiB of capacity) against hit rate: the wear frontier.
No published number is reproduced here, so the figure has no claim rows.
"""

from __future__ import annotations

from tiered_kv.units import DEFAULT_BYTES_PER_TOKEN
from tiered_kv.viz.report import FigureResult
from tiered_kv.viz.style import capacity_curves

NAME = "16_policy_arena"
TITLE = "Policy arena: token hit rate vs capacity, and SSD writes/day vs hit rate (conversation trace)"


def build(quick: bool) -> FigureResult:
    from tiered_kv.sim.curves import default_capacities
    from tiered_kv.viz import policy_arena as A

    trace = A.load("conversation")
    data = A.arena_table(trace, default_capacities(trace, 6 if quick else 24))
    return FigureResult(chart=_chart(data), claims=[], data=data, notes=_notes(trace, data))


def _chart(data):
    """Hit rate against capacity per policy (Belady dashed), beside writes/day against hit rate."""
    import altair as alt
    import polars as pl

    from tiered_kv.viz import policy_arena as A

    order = [A.BOUND, *A.POLICIES]
    color = alt.Color("policy:N", title="policy", sort=order)
    curve = capacity_curves(
        data.filter(pl.col("admission") != "second-sighting"), y_title="token hit rate (admit all)",
        color=color,
        dashed=A.BOUND, point_size=16,
    ).properties(width=420, height=300, title="hit rate vs capacity (dashed: Belady bound)")
    wear = A.wear_points(data.filter(pl.col("admission") != "bound"))
    frontier = alt.Chart(wear).mark_point(filled=True, size=40, opacity=0.8).encode(
        x=alt.X("token_hit_rate:Q", title="token hit rate", axis=alt.Axis(format="%")),
        y=alt.Y("drive_writes_per_day:Q", scale=alt.Scale(type="log"),
                title="SSD drive writes per day (log scale)"),
        color=color,
        shape=alt.Shape("admission:N", title="admission", sort=list(A.ADMISSIONS)),
        tooltip=["policy", "admission", alt.Tooltip("capacity_tokens:Q", format=","),
                 alt.Tooltip("token_hit_rate:Q", format=".2%"),
                 alt.Tooltip("drive_writes_per_day:Q", format=".3s"),
                 alt.Tooltip("bytes_written_per_hit_byte:Q", format=".3s")],
    ).properties(width=420, height=300, title="wear frontier: writes/day vs hit rate, every capacity")
    return alt.hconcat(curve, frontier).properties(title=TITLE)


def _notes(trace, data) -> str:
    """The trace, the best policy at each capacity, the distance to Belady and second sighting, in words."""
    from tiered_kv.units import format_bytes
    from tiered_kv.viz import policy_arena as A

    s = A.summary(data)
    win_txt = "; ".join(f"{format_bytes(w['capacity_bytes'])}: {', '.join(w['winners'])} ({w['token_hit_rate']:.1%})"
                        for w in s["wins"] if w["token_hit_rate"] > 0)
    dist = sorted(s["distance"], key=lambda d: d["mean_gap"])
    dist_txt = ", ".join(f"{d['policy']} {d['mean_gap']:.1%} (max {d['max_gap']:.1%})" for d in dist)
    ss_txt = "; ".join(f"{t['policy']} writes x{t['written_ratio']:.2f}, hit rate {t['mean_hit_change']:+.1%} "
                       f"on average ({t['min_hit_change']:+.1%} to {t['max_hit_change']:+.1%})"
                       for t in s["second_sighting"])
    return (
        f"Mooncake conversation trace: {trace.n_requests:,} requests, {trace.n_accesses:,} accesses of "
        f"{trace.uniform_block_size}-token blocks; {data['capacity_tokens'].n_unique()} log-spaced capacities "
        f"from one block to the footprint; bytes at {DEFAULT_BYTES_PER_TOKEN:,} B/token (DeepSeek-V3 MLA, bf16); "
        "lru and Belady from "
        "one pass, every other policy replayed per capacity (tiered-kv curves --policy). "
        f"Best policy by capacity (admit all; ties listed): {win_txt}. "
        f"Mean (max) distance below Belady over the capacities: {dist_txt}. "
        f"Admit on second sighting vs admit all (bytes written summed over the capacities; hit-rate change per "
        f"capacity): {ss_txt}. Drive writes per day = bytes written per simulated day / capacity bytes; the "
        "trace spans one hour, so small caches churn at huge rates: read the frontier for its ordering, not "
        "as a drive rating."
    )
