"""Convert between tiered-kv traces and LMCache lookup-hash JSONL logs.

export: write a trace as LMCache lookup-hash JSONL (complete chunks only, as a server logs
them), to run LMCache's own cache simulator on it:
  tiered-kv lmcache export --trace conversation lookup_hashes_conversation.jsonl
  python -m lmcache.tools.cache_simulator.simulator -i lookup_hashes_conversation.jsonl --cache-capacity-gib 1

import: read a live LMCache server's logs (files or folders of lookup_hashes_*.jsonl) into a
Parquet trace every tiered-kv command reads; replay it with --semantics lmcache to count as
LMCache does. Logs whose events list one more hash than seq_len // chunk_size (a hash for the
partial last chunk, as LMCache's converter writes in its "all" mode) are accepted: LMCache
stores complete chunks only, so that hash can never hit; it is dropped (the tail's tokens stay
in input_length, as misses) and the number dropped is reported:
  tiered-kv lmcache import /var/log/lmcache/ --out lmcache_trace.parquet
  tiered-kv curves --trace lmcache_trace.parquet --semantics lmcache --json

Format and rules: tiered_kv/sim/peers/lmcache_io.py and docs/peers.md.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path

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
    from tiered_kv.sim.peers import lmcache_io

    if args.action == "export":
        from tiered_kv.sim.traces import load_trace, resolve_trace_path

        if args.bytes_per_token < 1:
            raise ValueError(f"--bytes-per-token: must be an integer >= 1, got {args.bytes_per_token}")
        df = load_trace(resolve_trace_path(args.trace), format=args.format)
        out = _atomic(Path(args.out), lambda tmp: lmcache_io.write_lookup_jsonl(
            df, tmp, model_name=args.model_name, bytes_per_token=args.bytes_per_token, epoch_s=args.epoch))
        print(f"wrote {df.height:,} lookup events to {out}")
        return 0
    out = Path(args.out)
    if out.suffix.lower() not in (".parquet", ".pq"):
        raise ValueError(f"--out: must end in .parquet, got {out.name}")
    df, dropped = _read_logs(args.logs, model=args.model, traffic_class=args.traffic_class)
    _atomic(out, df.write_parquet)
    if dropped:
        print(f"dropped {dropped:,} partial-last-chunk hashes (LMCache stores complete chunks only; "
              "those tokens count as misses)", file=sys.stderr)
    print(f"wrote {df.height:,} requests ({int(df['block_ids'].list.len().sum()):,} chunks) to {out}")
    return 0


def _atomic(out: Path, write) -> Path:
    """Run ``write(tmp)`` on a temporary name next to ``out``, then rename it to ``out``: a
    failure leaves no (empty or half-written) output file."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


_PARTIAL = re.compile(r"field 'chunk_hashes' has (\d+) hashes; seq_len (\d+) // chunk_size (\d+) = (\d+)$")


def _read_logs(logs: list[str], **kw):
    """``read_lookup_logs``; logs with a hash for the partial last chunk are read again with
    that hash dropped from every such event (see the module docstring). Returns (frame, dropped)."""
    from tiered_kv.sim.peers import lmcache_io

    try:
        return lmcache_io.read_lookup_logs_counted(logs, **kw)
    except ValueError as exc:
        m = _PARTIAL.search(str(exc))
        if not m:
            raise
        n, seq_len, cs, full = (int(g) for g in m.groups())
        if n != full + 1 or seq_len % cs == 0:
            raise ValueError(f"{exc} (only one extra hash, for a partial last chunk, is accepted)") from None
    files = lmcache_io._log_files(logs)  # a bad frame is then named by its file, not its folder
    return lmcache_io.read_lookup_logs_counted(files, drop_partial_hash=True, **kw)
