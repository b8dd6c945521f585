"""Replay a request trace through one retention policy and report token hit rates.

Replay semantics (DESIGN.md): requests in timestamp order (stable for ties); a request's hit
tokens are min(p * block_size, input_length), p its leading blocks present at lookup; then every
block of the request is touched or inserted in order. --semantics switches to the counting rules
of kvcache.ai's or LMCache's simulators (see tiered_kv/sim/semantics.py).

Examples:
  tiered-kv simulate --trace data/traces/mooncake/conversation_trace.jsonl --policy lru --capacity 2000000
  tiered-kv simulate --trace conversation --policy ttl --ttl chatbot=10m --json
  tiered-kv simulate --trace conversation --policy watermark --capacity 1TiB --high 0.9 --low 0.8
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

NAME = "simulate"
HELP = "replay a trace through a retention policy (lru, ttl, watermark, belady) and report hit rates"


def add_trace_arguments(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    """--trace/--format/--class/--semantics, shared with `tiered-kv curves`."""
    parser.add_argument("--trace", required=required, metavar="PATH",
                        help="trace file (Mooncake/Bailian JSONL, generic JSONL/CSV/Parquet), or the name "
                             "of a shipped trace: conversation, synthetic")
    parser.add_argument("--format", default="auto", choices=["auto", "mooncake", "bailian", "generic"],
                        help="trace format (default: detected from the file)")
    parser.add_argument("--class", dest="traffic_class", default=None, metavar="CLASS",
                        help="traffic class for every request of the trace (default: from the file; "
                             "the Mooncake conversation trace is 'chatbot')")
    parser.add_argument("--semantics", default="tiered-kv", choices=["tiered-kv", "kvcache-ai", "lmcache"],
                        help="counting rules: tiered-kv (DESIGN.md), kvcache-ai (file order, last 50%% "
                             "counted, trie-leaf LRU), lmcache (complete chunks, no clamp)")
    parser.add_argument("--bytes-per-token", type=float, default=None, metavar="B",
                        help="KV bytes per token, to read capacities given in bytes (default: "
                             "DeepSeek-V3 MLA bf16, 70,272 B)")


def register(parser: argparse.ArgumentParser) -> None:
    add_trace_arguments(parser, required=False)  # --synth may replace --trace (cluster model)
    parser.add_argument("--policy", default="lru", metavar="POLICY",
                        help="lru, ttl, watermark or belady (default: lru); kvcache.ai's trie variants "
                             "lru-trie, belady-trie, fifo-trie when tiered_kv.sim.trie_lru provides them")
    parser.add_argument("--capacity", default=None, metavar="TOKENS|BYTES",
                        help="cache size: tokens (2000000) or bytes with a unit (64GiB); "
                             "default unlimited (watermark needs one)")
    parser.add_argument("--ttl", action="append", default=[], metavar="[CLASS=]DURATION",
                        help="TTL for the ttl policy, e.g. chatbot=7d or 10m for every class; repeatable")
    parser.add_argument("--high", type=float, default=0.95, help="watermark: evict when usage passes this fraction")
    parser.add_argument("--low", type=float, default=0.85, help="watermark: evict down to this fraction")
    parser.add_argument("--warmup", type=float, default=None, metavar="FRACTION",
                        help="override the semantics' warm-up fraction (requests replayed, not counted)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    # Cluster options (--nodes, --routing, --synth, ...): their run path branches off in run().
    from tiered_kv.commands._cluster import add_arguments as add_cluster_arguments

    add_cluster_arguments(parser)


def resolve_trace_path(text: str):
    from pathlib import Path

    from tiered_kv.sim.traces import _SHIPPED, shipped_trace

    return shipped_trace(text) if text in _SHIPPED and not Path(text).exists() else Path(text)


def load_compiled(args: argparse.Namespace):
    """(frame, compiled trace, semantics) for the trace options of ``args``."""
    from dataclasses import replace

    from tiered_kv.sim.replay import compile_trace
    from tiered_kv.sim.semantics import get_semantics
    from tiered_kv.sim.traces import load_trace

    sem = get_semantics(args.semantics)
    options = sem.options
    if getattr(args, "warmup", None) is not None:
        options = replace(options, warmup_fraction=float(args.warmup))
    df = load_trace(resolve_trace_path(args.trace), format=args.format, traffic_class=args.traffic_class)
    return df, compile_trace(df, options), sem


def parse_ttls(values: list[str]) -> tuple[dict[str, float], float]:
    """``["chatbot=7d", "1h"]`` -> ({"chatbot": 604800.0}, 3600.0); the bare one is the default."""
    from tiered_kv.units import parse_duration

    per_class, default = {}, math.inf
    for v in values:
        if "=" in v:
            cls, dur = v.split("=", 1)
            if not cls:
                raise ValueError(f"--ttl: empty class name in {v!r}; use CLASS=DURATION")
            per_class[cls] = parse_duration(dur, name=f"--ttl {cls}")
        else:
            default = parse_duration(v, name="--ttl")
    return per_class, default


def build_policy(args: argparse.Namespace, sem) -> Any:
    """The policy object for --policy/--capacity/--ttl/--high/--low under semantics ``sem``."""
    from tiered_kv.sim.policies import DEFAULT_BYTES_PER_TOKEN, capacity_tokens_from, get_policy, policy_names

    bpt = args.bytes_per_token or DEFAULT_BYTES_PER_TOKEN
    cap = capacity_tokens_from(args.capacity, bytes_per_token=bpt, name="--capacity")
    name = args.policy
    variant = {"lru": sem.lru_policy, "belady": sem.belady_policy}.get(name)
    if variant and variant in policy_names():
        name = variant  # e.g. kvcache-ai: lru-trie, belady-trie
    if name == "ttl":
        if not args.ttl:
            raise ValueError("--policy ttl: give --ttl DURATION or --ttl CLASS=DURATION")
        per_class, default = parse_ttls(args.ttl)
        return get_policy("ttl", ttl_seconds=per_class, default_ttl_seconds=default, capacity_tokens=cap)
    if args.ttl:
        raise ValueError(f"--ttl: only for --policy ttl, not {args.policy}")
    if name == "watermark":
        if cap is None:
            raise ValueError("--policy watermark: needs --capacity (tokens or bytes)")
        return get_policy("watermark", capacity_bytes=int(cap * bpt), high=args.high, low=args.low,
                          bytes_per_token=bpt)
    return get_policy(name, capacity_tokens=cap)


def simulate_single(args: argparse.Namespace) -> dict[str, Any]:
    """The single-cache replay: trace + policy -> the JSON fields of DESIGN.md."""
    from tiered_kv.sim.policies import DEFAULT_BYTES_PER_TOKEN, policy_names
    from tiered_kv.sim.replay import replay

    df, trace, sem = load_compiled(args)
    variant = {"lru": sem.lru_policy, "belady": sem.belady_policy}.get(args.policy)
    if variant and variant != args.policy and variant not in policy_names():
        trie = _trie_totals(args, trace, sem)
        if trie is not None:
            return trie
    policy = build_policy(args, sem)
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


def trie_functions(policy: str):
    """kvcache.ai's trie curve function for ``lru`` or ``belady`` (tiered_kv.sim.trie_lru), or None."""
    try:
        from tiered_kv.sim import trie_lru
    except ImportError:
        return None
    fn = getattr(trie_lru, "lru_trie_curve" if policy == "lru" else "optimal_trie_curve", None)
    return fn if fn is not None and hasattr(trie_lru, "build_trie") else None


def trie_trace(trace):
    """A compiled trace as kvcache.ai's prefix trie (warm-up = the uncounted leading requests)."""
    import numpy as np

    from tiered_kv.sim import trie_lru

    warmup = int(np.argmax(trace.counted)) if trace.counted.any() else trace.n_requests
    return trie_lru.build_trie(trace.blocks, trace.offsets, trace.tokens, warmup)


def _trie_totals(args: argparse.Namespace, trace, sem) -> dict[str, Any] | None:
    """kvcache.ai's trie policies report totals only: no per-class split unless the trace has one
    class. None when the trie module does not provide the policy."""
    from tiered_kv.sim.policies import DEFAULT_BYTES_PER_TOKEN, capacity_tokens_from

    fn = trie_functions(args.policy)
    if fn is None:
        return None
    bpt = args.bytes_per_token or DEFAULT_BYTES_PER_TOKEN
    cap = capacity_tokens_from(args.capacity, bytes_per_token=bpt, name="--capacity")
    bs = trace.uniform_block_size
    blocks = trace.n_unique + 1 if cap is None else cap // bs
    hit = int(fn(trie_trace(trace), [int(blocks)])[0])
    inp = int(trace.input_length[trace.counted].sum())
    row = {"requests": int(trace.counted.sum()), "input_tokens": inp, "hit_tokens": hit,
           "token_hit_rate": hit / inp if inp else 0.0}
    by_class = {trace.class_names[0]: dict(row)} if len(trace.class_names) == 1 else {}
    return {"policy": "lru-trie" if args.policy == "lru" else "belady-trie", **row, "by_class": by_class,
            "trace": str(args.trace), "semantics": sem.name, "capacity_tokens": cap,
            "capacity_bytes": None if cap is None else int(cap * bpt), "bytes_per_token": bpt,
            "block_size": bs, "warmup_fraction": float(1 - trace.counted.mean())}


def jsonable(value: Any) -> Any:
    """Strict JSON: infinite or NaN floats become null, numpy scalars and arrays plain Python."""
    import numpy as np

    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


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
    ret = result.get("effective_retention_s")
    if ret:
        print("\neffective retention (idle age at eviction, seconds)")
        for name, q in ret.items():
            if q["evictions"]:
                print(f"  {name:<12} evictions {q['evictions']:>9,}  p10 {q['p10_s']:.0f}  "
                      f"p50 {q['p50_s']:.0f}  p90 {q['p90_s']:.0f}")


def run(args: argparse.Namespace) -> int:
    from tiered_kv.commands import _cluster

    if _cluster.is_cluster(args):  # the cluster + latency model answers (tiered_kv/commands/_cluster.py)
        result = _cluster.run_cluster(args)
    elif not args.trace:
        raise ValueError("--trace PATH is required (or --synth PRESET with the cluster options)")
    else:
        result = simulate_single(args)
    if args.json:
        print(json.dumps(jsonable(result), indent=2, default=str, allow_nan=False))
    elif "cluster" in result:
        _cluster.print_cluster(result)
    else:
        print_result(result)
    return 0
