"""The cluster options of ``tiered-kv simulate`` (not a subcommand: the underscore hides it).

Any of them switches ``simulate`` to the cluster model (:mod:`tiered_kv.sim.cluster.model`) and
its latency model (:mod:`tiered_kv.sim.cluster.latency`); ``--capacity`` then sizes per-machine
SSD caches, ``--shared-capacity`` one pool (where ``--policy`` runs).
"""

from __future__ import annotations

import argparse
import math
from typing import Any

CLUSTER_FLAGS = ("nodes", "routing", "shared_capacity", "gpu_capacity", "host_capacity", "synth", "admission")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tiered_kv import cli_args as _args

    g = parser.add_argument_group("cluster model (any of these switches to it)")
    g.add_argument("--nodes", type=_args.int_at_least(1, "machines"), default=None, metavar="N",
                   help="machines, >= 1 (default 1 in cluster mode)")
    g.add_argument("--routing", default=None, choices=["random", "round-robin", "cache-aware"],
                   help="request routing (default random)")
    g.add_argument("--shared-capacity", default=None, metavar="TOKENS|BYTES", type=_args.capacity(),
                   help="one SSD pool shared by all machines (default: unlimited when --capacity is not given); "
                        "with --capacity instead, each machine has its own SSD cache of that size")
    g.add_argument("--gpu-capacity", default=None, metavar="TOKENS|BYTES", type=_args.capacity(), help="per-machine GPU prefix tier (default 0)")
    g.add_argument("--host-capacity", default=None, metavar="BYTES", type=_args.size_bytes(),
                   help="per-machine host window tier (default 0: every hit replays R tokens)")
    g.add_argument("--synth", default=None, metavar="PRESET", type=_args.synth_preset(),
                   help="synthetic workload preset instead of --trace (chatbot, agent, mixed, ci)")
    g.add_argument("--days", default=None, metavar="DURATION", type=_args.synth_days(),
                   help="length of the synthetic workload, in (0, 3650] days (e.g. 14 or 14d; default 1)")
    g.add_argument("--seed", type=int, default=0, help="seed of the synthetic workload and of random routing")
    g.add_argument("--admission", action="store_true",
                   help="TTFT model: recompute instead of loading when loading would be slower")


def is_cluster(args: argparse.Namespace) -> bool:
    return any(getattr(args, f, None) not in (None, False) for f in CLUSTER_FLAGS)


def run_cluster(args: argparse.Namespace) -> dict[str, Any]:
    from tiered_kv.commands._common import build_policy, load_trace_or_synth
    from tiered_kv.sim.cluster import ClusterConfig, cluster_run
    from tiered_kv.sim.policies import capacity_tokens_from
    from tiered_kv.units import DEFAULT_BYTES_PER_TOKEN, parse_bytes

    bpt = args.bytes_per_token or DEFAULT_BYTES_PER_TOKEN
    trace, sem, days = load_trace_or_synth(args, default_days=1.0)
    source = str(args.trace) if days is None else f"synth {args.synth} ({days:g} days)"

    def tokens(value, name):
        cap = capacity_tokens_from(value, bytes_per_token=bpt, name=name)
        return math.inf if cap is None else cap

    if args.capacity is not None and args.shared_capacity is not None:
        raise ValueError("--capacity (per-machine SSD caches) and --shared-capacity (one pool): give one")
    per_machine = args.capacity is not None
    policy = None
    if per_machine:
        if args.policy != "lru":
            raise ValueError(f"--policy {args.policy}: per-machine SSD caches (--capacity) are LRU; "
                             "use --shared-capacity for the part-1 policies")
        ssd_cap = tokens(args.capacity, "--capacity")
    else:
        ssd_cap = tokens(args.shared_capacity, "--shared-capacity")
        if args.policy != "lru":
            shared_args = argparse.Namespace(**{**vars(args), "capacity": args.shared_capacity})
            policy = build_policy(shared_args, sem)
    cfg = ClusterConfig(
        nodes=args.nodes or 1, routing=args.routing or "random",
        gpu_capacity_tokens=0 if args.gpu_capacity is None else tokens(args.gpu_capacity, "--gpu-capacity"),
        host_capacity_bytes=parse_bytes(args.host_capacity or 0, name="--host-capacity"),
        ssd="per-machine" if per_machine else "shared", ssd_capacity_tokens=ssd_cap,
        kv_bytes_per_token=bpt, seed=args.seed)
    res, summary = cluster_run(trace, cfg, ssd_policy=policy, admission=args.admission)
    out: dict[str, Any] = {"trace": source, "semantics": sem.name, **summary}
    out["cluster"] = {"nodes": cfg.nodes, "routing": cfg.routing, "ssd": cfg.ssd,
                      "ssd_capacity_tokens": cfg.ssd_capacity_tokens, "gpu_capacity_tokens": cfg.gpu_capacity_tokens,
                      "host_capacity_bytes": cfg.host_capacity_bytes, "replay_tokens": cfg.replay_tokens,
                      "bytes_per_token": bpt, "admission": bool(args.admission),
                      "latency_model": "deepseek-v3 (tiered_kv.sim.cluster.latency)"}
    out.update({k: v for k, v in res.extra.items() if k not in out})
    out["workload"] = {"requests": trace.n_requests, "block_accesses": trace.n_accesses, "unique_blocks": trace.n_unique}
    span = float(trace.timestamps[-1] - trace.timestamps[0])
    from tiered_kv.units import DAY_S, HOUR_S

    bin_s = DAY_S if span > 2 * DAY_S else HOUR_S  # days for multi-day runs, else hours
    out["over_time_bin_s"] = bin_s
    out["over_time"] = res.over_time(bin_s).to_dicts()
    return out


def print_cluster(r: dict[str, Any]) -> None:
    c = r["cluster"]
    print(f"trace      {r['trace']}  (semantics: {r['semantics']})")
    print(f"cluster    {c['nodes']} machines, routing {c['routing']}, SSD {c['ssd']} "
          f"({r.get('ssd_policy', 'lru')}), admission {'on' if c['admission'] else 'off'}")
    print()
    print(f"{'class':<10} {'requests':>9} {'hit rate':>9} {'GPU':>7} {'SSD':>7} {'window':>7}")
    for name, s in list(r["by_class"].items()) + [("all", r)]:
        print(f"{name:<10} {s['requests']:>9,} {s['token_hit_rate']:>9.2%} {s['gpu_token_hit_rate']:>7.2%} "
              f"{s['disk_token_fraction']:>7.2%} {s['window_hit_rate']:>7.2%}")
    print()
    print(f"TTFT p50 {r['ttft_p50_s']:.3f} s  p90 {r['ttft_p90_s']:.3f} s  p99 {r['ttft_p99_s']:.3f} s")
    print(f"cost per million input tokens {r['cost_per_mtok']:.3f} (miss = 1, hit = 1/50)")
    ret = r.get("effective_retention")
    if ret and any(v["evictions"] for v in ret.values()):
        print("effective retention under one LRU watermark (idle age at eviction, s):")
        for name, q in ret.items():
            if q["evictions"]:
                print(f"  {name:<10} evictions {q['evictions']:>9,}  p50 {q['idle_at_eviction_p50_s']:.0f}  "
                      f"p90 {q['idle_at_eviction_p90_s']:.0f}")
