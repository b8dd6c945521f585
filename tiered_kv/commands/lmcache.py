"""Convert between tiered-kv traces and LMCache lookup-hash JSONL logs.

export: write a trace as LMCache lookup-hash JSONL (complete chunks only, as a server logs
them), to run LMCache's own cache simulator on it:
  tiered-kv lmcache export --trace conversation lookup_hashes_conversation.jsonl
  python -m lmcache.tools.cache_simulator.simulator -i lookup_hashes_conversation.jsonl --cache-capacity-gib 1

import: read a live LMCache server's logs (files or folders of lookup_hashes_*.jsonl) into a
Parquet trace every tiered-kv command reads; replay it with --semantics lmcache to count as
LMCache does:
  tiered-kv lmcache import /var/log/lmcache/ --out lmcache_trace.parquet
  tiered-kv curves --trace lmcache_trace.parquet --semantics lmcache --json

Format and rules: tiered_kv/sim/peers/lmcache_io.py and docs/peers.md.
"""

from __future__ import annotations

import argparse

NAME = "lmcache"
HELP = "export a trace as LMCache lookup-hash JSONL, or import LMCache logs as a trace"


def register(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    exp = sub.add_parser("export", help="trace -> LMCache lookup-hash JSONL")
    exp.add_argument("--trace", required=True, metavar="PATH", help="trace file or shipped name (conversation, synthetic)")
    exp.add_argument("--format", default="auto", choices=["auto", "mooncake", "bailian", "generic"])
    exp.add_argument("--model-name", default="tiered-kv", help="model_name field of every event")
    exp.add_argument("--bytes-per-token", type=int, default=2,
                     help="KV bytes per token; sets shapes/dtypes, hence LMCache's bytes per chunk (default 2)")
    exp.add_argument("--epoch", type=float, default=0.0, metavar="SECONDS",
                     help="unix time of the trace's t=0 (LMCache logs carry unix timestamps)")
    exp.add_argument("out", metavar="OUT", help="output .jsonl (LMCache globs lookup_hashes_*.jsonl in folders)")
    imp = sub.add_parser("import", help="LMCache lookup-hash logs -> Parquet trace")
    imp.add_argument("logs", nargs="+", metavar="LOG", help="lookup_hashes_*.jsonl files or folders holding them")
    imp.add_argument("--model", default=None, help="keep only events of this model_name")
    imp.add_argument("--class", dest="traffic_class", default=None, help="traffic class (default: the model name)")
    imp.add_argument("--out", required=True, metavar="PATH", help="output .parquet trace")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tiered_kv.sim.peers import lmcache_io

    if args.action == "export":
        from tiered_kv.sim.traces import load_trace, resolve_trace_path

        df = load_trace(resolve_trace_path(args.trace), format=args.format)
        out = lmcache_io.write_lookup_jsonl(df, args.out, model_name=args.model_name,
                                            bytes_per_token=args.bytes_per_token, epoch_s=args.epoch)
        print(f"wrote {df.height:,} lookup events to {out}")
        return 0
    df = lmcache_io.read_lookup_logs(args.logs, model=args.model, traffic_class=args.traffic_class)
    out = Path(args.out)
    if out.suffix.lower() not in (".parquet", ".pq"):
        raise ValueError(f"--out: must end in .parquet, got {out.name}")
    out.parent.mkdir(parents=True, exist_ok=True)
    df.write_parquet(out)
    print(f"wrote {df.height:,} requests ({int(df['block_ids'].list.len().sum()):,} chunks) to {out}")
    return 0
