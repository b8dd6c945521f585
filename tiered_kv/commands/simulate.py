"""Replay a request trace through one retention policy and report token hit rates.

Replay semantics (docs/semantics.md): requests in timestamp order (stable for ties); a request's hit
tokens are min(p * block_size, input_length), p its leading blocks present at lookup; then every
block of the request is touched or inserted in order. --semantics switches to the counting rules
of kvcache.ai's or LMCache's simulators (see tiered_kv/sim/peers/semantics.py).

Examples:
  tiered-kv simulate --trace data/traces/mooncake/conversation_trace.jsonl --policy lru --capacity 2000000
  tiered-kv simulate --trace conversation --policy ttl --ttl chatbot=10m --json
  tiered-kv simulate --trace conversation --policy watermark --capacity 1TiB --high 0.9 --low 0.8
"""

from __future__ import annotations

import argparse
from typing import Any

NAME = "simulate"
HELP = "replay a trace through any registered retention policy (lru, ttl, belady, the zoo) and report hit rates"
#: run() leaves nothing to flush or close, so the process may skip teardown (tiered_kv.cli.main).
FAST_EXIT = True
#: Library parameters fed by a flag of another name, for error messages (tiered_kv.cli).
PARAMETER_FLAGS = {"preset": "--synth"}


def register(parser: argparse.ArgumentParser) -> None:
    from tiered_kv import cli_args as _args
    from tiered_kv.commands._common import add_trace_arguments

    add_trace_arguments(parser, required=False)  # --synth may replace --trace (cluster model)
    parser.add_argument("--policy", default="lru", metavar="POLICY", type=_args.policy_name(),
                        action=_args.lazy_help(_policy_help))
    parser.add_argument("--capacity", default=None, metavar="TOKENS|BYTES", type=_args.capacity(),
                        help="cache size: tokens (2000000) or bytes with a unit (64GiB); "
                             "default unlimited (watermark needs one)")
    parser.add_argument("--ttl", action="append", default=[], metavar="[CLASS=]DURATION",
                        help="TTL for the ttl policy, e.g. chatbot=7d, agent=3d,chatbot=7d or 10m for every class; repeatable")
    parser.add_argument("--high", type=_args.fraction(), default=0.95,
                        help="watermark: evict when usage passes this fraction, in (0, 1] (default 0.95)")
    parser.add_argument("--low", type=_args.fraction(), default=0.85,
                        help="watermark: evict down to this fraction, in (0, --high] (default 0.85)")
    parser.add_argument("--warmup", type=_args.fraction(low_open=False, high_open=True), default=None,
                        metavar="FRACTION",
                        help="override the semantics' warm-up fraction (requests replayed, not counted)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    # Cluster options (--nodes, --routing, --synth, ...): their run path branches off in run().
    from tiered_kv.commands._cluster_options import add_arguments as add_cluster_arguments

    add_cluster_arguments(parser)


def _policy_help() -> str:
    from tiered_kv.sim.policies import policy_names

    return (f"a registered policy: {', '.join(policy_names())} (default: lru; under --semantics "
            "kvcache-ai, lru and belady run as lru-trie and belady-trie; docs/policies.md)")


def simulate_single(args: argparse.Namespace) -> dict[str, Any]:
    """The single-cache replay: trace + policy -> the JSON fields of docs/semantics.md."""
    from tiered_kv.commands._common import build_policy, load_compiled
    from tiered_kv.sim.trace_replay import replay
    from tiered_kv.units import DEFAULT_BYTES_PER_TOKEN

    trace, sem = load_compiled(args)
    policy = build_policy(args, sem)
    if args.ttl:  # policy ttl (build_policy refuses --ttl elsewhere); a trace without classes is all 'default'
        from tiered_kv.cli_args import check_ttl_classes

        check_ttl_classes(policy.ttl_seconds, trace.class_names)
    result = replay(trace, policy).to_dict()
    bpt = args.bytes_per_token or DEFAULT_BYTES_PER_TOKEN
    cap = getattr(policy, "capacity_tokens", None)
    if cap is None and getattr(policy, "capacity_bytes", None):
        cap = int(policy.capacity_bytes // bpt)
    result.update({
        "trace": str(args.trace), "semantics": sem.name, "policy_config": _config(policy),
        "capacity_tokens": cap, "capacity_bytes": None if cap is None else int(cap * bpt),
        "bytes_per_token": bpt, "block_size": trace.uniform_block_size,
        "warmup_fraction": float(1 - trace.counted.mean()),
    })
    return result


def _config(policy: Any) -> dict[str, Any]:
    from dataclasses import fields, is_dataclass

    if not is_dataclass(policy):
        return {"name": getattr(policy, "name", type(policy).__name__)}
    return {"name": policy.name, **{f.name: getattr(policy, f.name) for f in fields(policy)}}


def print_result(result: dict[str, Any]) -> None:
    from tiered_kv.units import format_bytes

    cap = result.get("capacity_tokens")
    cap_text = "unlimited" if cap is None else f"{cap:,} tokens ({format_bytes(result['capacity_bytes'])})"
    print(f"trace      {result['trace']}  (semantics: {result['semantics']})")
    print(f"policy     {result['policy']}  capacity {cap_text}")
    for key in ("ttl_seconds", "evictions", "expirations"):
        if key in result:
            print(f"{key:<10} {result[key]}")
    print()
    print(f"{'class':<14} {'requests':>9} {'input tokens':>15} {'hit tokens':>15} {'hit rate':>9}")
    rows = list(result["by_class"].items()) + [("all", result)]
    for name, r in rows:
        print(f"{name:<14} {r['requests']:>9,} {r['input_tokens']:>15,} {r['hit_tokens']:>15,} "
              f"{r['token_hit_rate']:>9.2%}")
    if result.get("ssd_bytes_written") is not None:
        per_hit, dwpd = result.get("bytes_written_per_hit_byte"), result.get("drive_writes_per_day")
        print(f"\nSSD writes {format_bytes(result['ssd_bytes_written'])}: "
              f"{'-' if per_hit is None else f'{per_hit:.3g}'} bytes per hit byte, "
              f"{'-' if dwpd is None else f'{dwpd:.3g}'} drive writes per day "
              f"(over {result['simulated_days'] * 24:.3g} simulated hours)")
    ret = result.get("effective_retention_s")
    if ret:
        print("\neffective retention (idle age at eviction, seconds)")
        for name, q in ret.items():
            if q["evictions"]:
                print(f"  {name:<12} evictions {q['evictions']:>9,}  p10 {q['p10_s']:.0f}  "
                      f"p50 {q['p50_s']:.0f}  p90 {q['p90_s']:.0f}")


def run(args: argparse.Namespace) -> int:
    from tiered_kv.commands import _cluster_options
    from tiered_kv.commands._common import to_json

    if _cluster_options.is_cluster(args):  # the cluster + latency model answers (commands/_cluster_options.py)
        result = _cluster_options.run_cluster(args)
    elif not args.trace:
        raise ValueError("--trace PATH is required (or --synth PRESET with the cluster options)")
    else:
        result = simulate_single(args)
    if args.json:
        print(to_json(result))
    elif "cluster" in result:
        _cluster_options.print_cluster(result)
    else:
        print_result(result)
    return 0
