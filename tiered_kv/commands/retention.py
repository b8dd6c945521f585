"""Retention economics of a trace: what each extra day of retention buys per traffic class,
how far TTLs are from the offline-optimal use of the same storage, and which per-class TTLs
give the most hits for an SSD capacity.

Storage is counted in byte-seconds (shown as byte-days): a chunk kept for a day costs its bytes
for a day; dividing by the trace's span gives the average stored bytes, i.e. an SSD capacity.
Chunk bytes are bytes per token (default DeepSeek-V3 MLA in MXFP4, scales included) times the
block size. Without --capacity the capacity is what DeepSeek's 3-day agent / 7-day chatbot pair
stores on average (on traces shorter than 7 days: a shared TTL of a tenth of the span).

Examples:
  tiered-kv retention --trace conversation
  tiered-kv retention --synth mixed --days 14 --capacity 2TiB
  tiered-kv retention --synth ci --days 14 --json
"""

from __future__ import annotations

import argparse

NAME = "retention"
#: Library parameters fed by a flag of another name, for error messages (tiered_kv.cli).
PARAMETER_FLAGS = {"preset": "--synth"}
HELP = "hit rate vs stored byte-days per class, oracle frontier, best per-class TTLs for a capacity"


def register(parser: argparse.ArgumentParser) -> None:
    from tiered_kv import cli_args as _args

    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace", metavar="PATH", help="trace file, or a shipped trace name (conversation)")
    src.add_argument("--synth", metavar="PRESET", type=_args.synth_preset(),
                     help="synthetic workload preset (tiered_kv.sim.workload.synth: chatbot, agent, mixed, ci)")
    parser.add_argument("--days", default=None, metavar="D", type=_args.synth_days(),
                        help="days of synthetic traffic, in (0, 3650] (with --synth; e.g. 14 or 36h; default 14)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic workload (default 0)")
    parser.add_argument("--format", default="auto", choices=["auto", "mooncake", "bailian", "generic"],
                        help="trace format (default: detected from the file)")
    parser.add_argument("--class", dest="traffic_class", default=None, metavar="CLASS",
                        help="traffic class for every request of --trace (default: from the file)")
    parser.add_argument("--capacity", default=None, metavar="BYTES", type=_args.size_bytes(zero=False),
                        help="SSD capacity as average stored bytes, e.g. 100PiB or 2TiB "
                             "(default: what the 3d/7d pair stores)")
    parser.add_argument("--bytes-per-token", type=_args.positive_float("KV bytes per token"), default=None,
                        metavar="B",
                        help="KV bytes per token (default: DeepSeek-V3 MLA in MXFP4, 18,666 B)")
    parser.add_argument("--ttl-points", type=_args.int_at_least(2, "TTLs"), default=64, help="TTLs per class curve (default 64)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")


def run(args: argparse.Namespace) -> int:
    from tiered_kv.commands._common import load_trace_or_synth, to_json
    from tiered_kv.sim.retention.report import RetentionConfig, analyze
    from tiered_kv.units import parse_bytes

    cap = None if args.capacity is None else float(parse_bytes(args.capacity, name="--capacity"))
    trace, _, days = load_trace_or_synth(args)
    result = analyze(trace, capacity_bytes=cap, bytes_per_token=args.bytes_per_token,
                     config=RetentionConfig(ttl_points=args.ttl_points))
    label = str(args.trace) if days is None else f"synth {args.synth}, {days:g} days, seed {args.seed}"
    out = {"source": label, **result.to_dict()}
    if args.json:
        print(to_json(out))
        return 0
    print_report(out)
    return 0


def print_report(s: dict) -> None:
    """Human-readable tables: curves (a few TTLs), frontier, policies at the capacity, watermark."""
    from tiered_kv.units import format_bytes, format_duration

    print(f"{s['source']}: {s['requests']:,} requests, {s['block_accesses']:,} block accesses over "
          f"{format_duration(s['span_s'])}; chunk {format_bytes(s['chunk_bytes'])} "
          f"({s['bytes_per_token']:,.0f} B/token x {s['block_size']} tokens)")
    print(f"capacity {format_bytes(s['capacity_bytes'])} average stored ({s['capacity_from']})\n")
    print(f"{'class':>8} {'TTL':>10} {'hit rate':>9} {'byte-days':>12} {'avg stored':>11} {'peak stored':>12}")
    for c in s["classes"]:
        rows = [r for r in s["curves"] if r["class"] == c and r["ttl_s"] > 0]
        step = max(len(rows) // 10, 1)
        for r in rows[::step] + ([rows[-1]] if (len(rows) - 1) % step else []):
            print(f"{c:>8} {format_duration(r['ttl_s']):>10} {r['token_hit_rate']:>9.2%} "
                  f"{format_bytes(r['byte_days']) + '-d':>12} {format_bytes(r['avg_bytes']):>11} "
                  f"{format_bytes(r['peak_bytes']):>12}")
    print(f"\noracle frontier (all classes): {'avg stored':>11} {'hit rate':>9}")
    fr = [r for r in s["frontier"] if r["class"] == "all"]
    for r in fr[:: max(len(fr) // 8, 1)] + [fr[-1]]:
        print(f"{'':>30} {format_bytes(r['avg_bytes']):>11} {r['token_hit_rate']:>9.2%}")
    print(f"\nat {format_bytes(s['capacity_bytes'])}:")
    print(f"{'policy':>8} {'class':>8} {'TTL':>10} {'hit rate':>9} {'avg stored':>11} {'peak stored':>12}")
    for r in s["policies"]:
        ttl = "" if r["ttl_s"] is None else format_duration(r["ttl_s"])
        print(f"{r['policy']:>8} {r['class']:>8} {ttl:>10} {r['token_hit_rate']:>9.2%} "
              f"{format_bytes(r['avg_bytes']):>11} {format_bytes(r['peak_bytes']):>12}")
    print(f"oracle frontier {s['frontier_token_hit_rate']:.2%}; the optimal per-class TTLs are "
          f"{s['oracle_gap_points']:.2f} points below it; the best shared TTL loses {s['shared_loss_points']:.2f} "
          "points to them")
    opt = ", ".join(f"{c} {format_duration(t)}" for c, t in s["optimal_at_pair_storage_ttl_s"].items())
    print(f"3d/7d pair: {s['pair_token_hit_rate']:.2%} with {format_bytes(s['pair_avg_bytes'])} average stored; "
          f"per-class TTLs {opt} give {s['optimal_at_pair_storage_token_hit_rate']:.2%} with the same bytes "
          f"({s['pair_loss_points']:.2f} points lost by the pair), the oracle "
          f"{s['frontier_at_pair_storage_token_hit_rate']:.2%}")
    wm = s["watermark"]
    eff = ", ".join(f"{c} p50 {format_duration(v['p50_s'])}" for c, v in wm["effective_retention_s"].items()
                    if v["p50_s"] is not None) or "no evictions"
    print(f"watermark LRU ({wm['high']:.0%}/{wm['low']:.0%} of the capacity): hit rate {wm['token_hit_rate']:.2%}; "
          f"effective retention {eff}")
    if s["cross_class_tokens"]:
        print(f"note: {s['cross_class_tokens']:,} reusable tokens depend on chunks another class touched last; "
              "per-class curves approximate them, the policy rows are exact")
