"""The disk-share day: two days of the two-class workload through the cluster model, day 2 kept.

Why a module: DeepSeek's "56% of input tokens came from disk" is read three ways from the same
run (figure 05's hourly curve, figure 06's cost panel, the cluster record's table), so the run is
defined once here, below the figures and the benchmarks, and cached per size. The setup: a day
of warm-up then a day measured; 10 machines, cache-aware routing, a GPU tier holding only
in-flight KV (no cross-request GPU hits, as in DeepSeek's design), host window tiers, and one
shared SSD pool large enough to keep the day (retention is not the limit; figure 03 is about TTLs).
"""

from __future__ import annotations

from functools import lru_cache

import polars as pl

from tiered_kv.units import DAY_S

#: DeepSeek's reported share of input tokens served from its disk cache over a day.
PUBLISHED_DISK_FRACTION = 0.56


@lru_cache(maxsize=2)
def disk_day(quick: bool):
    """(synth preset, cluster config, cluster result, day-2 requests) of the ``ci`` or ``mixed`` preset."""
    from tiered_kv.sim.cluster import ClusterConfig, simulate_cluster
    from tiered_kv.sim.trace_replay import compile_trace
    from tiered_kv.sim.workload.synth import generate

    preset = "ci" if quick else "mixed"
    trace = compile_trace(generate(preset, 2.0, 0))
    cfg = ClusterConfig(nodes=10, routing="cache-aware", gpu_capacity_tokens=0, host_capacity_bytes=64 * 2**30)
    res = simulate_cluster(trace, cfg)
    return preset, cfg, res, res.requests.filter(pl.col("timestamp_s") >= DAY_S)
