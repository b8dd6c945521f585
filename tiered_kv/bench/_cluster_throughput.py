"""Cluster-model throughput: a 14-day two-class synthetic run through 10 machines with 3 tiers.

Not a subcommand on its own (the leading underscore keeps it out of discovery): `tiered-kv bench
sim` calls :func:`run_cluster_bench` and reports it under ``"cluster"``. Target: at
least 10 million block accesses in 60 s or less. The baseline measured in the same run is the
part-1 single-policy LRU replay over the same compiled trace (one cache, no routing), so
``slowdown_vs_single_lru`` says what routing and the GPU and host tiers cost on top.
"""

from __future__ import annotations

import argparse
import resource
from typing import Any

from tiered_kv.bench._pages import clocked, traced


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster-days", type=float, default=14.0, help="synthetic days for the cluster run")
    parser.add_argument("--cluster-preset", default="mixed", help="synth preset for the cluster run")
    parser.add_argument("--no-cluster", action="store_true", help="skip the cluster-model run (about a minute)")


def _peak_rss_bytes() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def run_cluster_bench(args: argparse.Namespace | None = None) -> dict[str, Any]:
    """Generate, compile and replay the workload; time each stage; report throughput and memory."""
    from tiered_kv.sim.cluster import V3_KV_BYTES_PER_TOKEN, ClusterConfig, simulate_cluster
    from tiered_kv.sim.policies import LRU
    from tiered_kv.sim.trace_replay import compile_trace
    from tiered_kv.sim.workload.synth import generate

    days = float(getattr(args, "cluster_days", 14.0) or 14.0)
    preset = getattr(args, "cluster_preset", "mixed") or "mixed"
    trace, gen_s, compile_s = traced(lambda: generate(preset, days, 0))
    cfg = ClusterConfig(nodes=10, routing="cache-aware", gpu_capacity_tokens=2_000_000,
                        host_capacity_bytes=int(200 * 1024 * V3_KV_BYTES_PER_TOKEN), ssd_capacity_tokens=2_000_000_000)
    # JIT warm-up on a small slice (compiles, or loads numba's on-disk cache)
    _, jit_s = clocked(lambda: simulate_cluster(compile_trace(generate("ci", 0.05, 0)), cfg))
    res, cluster_s = clocked(simulate_cluster, trace, cfg)
    _, single_s = clocked(lambda: LRU(capacity_tokens=cfg.ssd_capacity_tokens).run(trace))
    s = res.summary()
    return {
        "workload": f"synth {preset}, {days:g} days, seed 0",
        "requests": trace.n_requests, "block_accesses": trace.n_accesses, "unique_blocks": trace.n_unique,
        "config": {"nodes": cfg.nodes, "routing": cfg.routing, "gpu_capacity_tokens": cfg.gpu_capacity_tokens,
                   "host_capacity_bytes": cfg.host_capacity_bytes, "ssd_capacity_tokens": cfg.ssd_capacity_tokens},
        "generate_s": gen_s, "compile_trace_s": compile_s, "jit_warmup_s": jit_s,
        "cluster_s": cluster_s, "cluster_accesses_per_s": trace.n_accesses / cluster_s,
        "single_lru_s": single_s, "slowdown_vs_single_lru": cluster_s / single_s,
        "peak_rss_bytes": _peak_rss_bytes(),
        "token_hit_rate": s["token_hit_rate"], "disk_token_fraction": s["disk_token_fraction"],
        "meets_target": {"block_accesses_ge_10M": trace.n_accesses >= 10_000_000, "cluster_s_le_60": cluster_s <= 60},
    }
