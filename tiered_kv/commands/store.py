"""Inspect and maintain an SSD-tier store (a directory or bucket filled by SSDTier.put).

  tiered-kv store stats PATH             chunks, bytes, tokens, by class and namespace, ages
  tiered-kv store verify PATH            read every chunk, check its CRC32C; remove broken ones
  tiered-kv store gc PATH --dry-run      what TTLs and the watermarks would remove now
  tiered-kv store gc PATH --ttl agent=3d --ttl chatbot=7d --capacity 100GiB
  tiered-kv store gc s3://bucket/kv --part 1/2   GC instance 1 of 2 (each owns half the keys)

PATH is a store directory or an object-store URL (s3://bucket/prefix; endpoint and credentials
from the environment: AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION).
Chunks carry their own headers, so no namespace or model is needed. Times are the wall clock;
``--now`` evaluates retention at another moment (a Unix timestamp, or +DURATION from now).

Exit status: 0 done (verify: nothing wrong); 1 verify found problems (repaired unless
--no-repair); 2 bad input, or PATH is not an SSD-tier store.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

NAME = "store"
HELP = "stats, verify and gc of an SSD-tier store directory"
#: RetentionPolicy.make's parameters, named in its errors, and the flags that feed them (tiered_kv.cli).
PARAMETER_FLAGS = {"capacity_bytes": "--capacity", "high_watermark": "--high", "low_watermark": "--low"}


def register(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, help_ in (("stats", "summarize chunks, bytes, classes and ages"),
                        ("verify", "check every chunk's checksum and remove broken ones"),
                        ("gc", "apply TTLs and the capacity watermarks")):
        p = sub.add_parser(name, help=help_, description=help_)
        p.add_argument("path", metavar="PATH", help="store directory or URL (s3://bucket/prefix)")
        p.add_argument("--json", action="store_true", help="print one JSON object")
        p.add_argument("--no-progress", action="store_true", help="no progress bar")
        if name == "verify":
            p.add_argument("--no-repair", action="store_true", help="report only; remove nothing")
        if name in ("gc", "stats"):
            p.add_argument("--capacity", default=None,
                           help="store capacity in bytes (e.g. 100GiB; a bare number is bytes, where simulate's "
                                "--capacity counts tokens); default unlimited")
        if name == "gc":
            p.add_argument("--dry-run", action="store_true", help="report what would be removed; remove nothing")
            p.add_argument("--ttl", action="append", default=[], metavar="[CLASS=]DURATION",
                           help="TTL from last access, per class (agent=3d) or for every other class (7d); repeatable")
            p.add_argument("--high", type=float, default=0.9, help="high watermark (fraction of capacity)")
            p.add_argument("--low", type=float, default=0.8, help="low watermark (fraction of capacity)")
            p.add_argument("--now", default=None, help="evaluate at this Unix time, or +DURATION from now")
            p.add_argument("--partial-grace", default="5m",
                           help="remove .partial writes older than this (default 5m)")
            p.add_argument("--part", default=None, metavar="I/N",
                           help="act as GC instance I of N: delete only in that share of the 16 key shards")


def _now(value: str | None) -> float:
    from tiered_kv.units import parse_duration

    if value is None:
        return time.time()
    if value.startswith("+"):
        return time.time() + parse_duration(value[1:], name="--now")
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"--now: must be a Unix timestamp or +DURATION (e.g. +3d), got {value!r}") from None


def _print(report: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report, indent=2, default=str))
        return
    from tiered_kv.units import format_bytes

    for key, value in report.items():
        if isinstance(value, dict):
            print(f"{key}:")
            for k, v in value.items():
                print(f"  {k:<34} {json.dumps(v, default=str) if isinstance(v, dict) else v}")
        elif isinstance(value, list):
            print(f"{key:<36} {len(value)}")
            for item in value[:20]:
                print(f"  {item}")
        elif isinstance(value, int) and "bytes" in key:
            print(f"{key:<36} {value} ({format_bytes(value)})")
        else:
            print(f"{key:<36} {value}")


def _open(path_arg: str):
    """The store at PATH (a directory or URL) as a backend, or a one-line error if it is not an
    SSD-tier store."""
    from tiered_kv.tiers.ssd import layout, open_backend

    where = path_arg
    if "://" not in path_arg or path_arg.startswith("file://"):
        where = str(Path(path_arg.removeprefix("file://")).expanduser())
        if not Path(where).is_dir():
            raise FileNotFoundError(f"PATH: no store directory at {where}")
    backend = open_backend(where)
    if not layout.is_store(backend):
        raise ValueError(f"PATH: {where} is not an SSD-tier store (no zarr.json with tiered_kv layout "
                         "attributes and no chunks/); nothing to do")
    return backend


def run(args: argparse.Namespace) -> int:
    from tiered_kv.tiers.ssd import RetentionPolicy, store_gc, store_stats, store_verify
    from tiered_kv.tiers.ssd.retention import parse_part
    from tiered_kv.units import parse_duration

    progress = not args.no_progress and not args.json
    policy = None
    if args.action == "stats" and args.capacity:
        policy = RetentionPolicy.make(args.capacity)
    elif args.action == "gc":  # check every flag before touching the store
        policy = RetentionPolicy.make(args.capacity, args.high, args.low, args.ttl)
        grace = parse_duration(args.partial_grace, name="--partial-grace")
        now = _now(args.now)
        part = parse_part(args.part)
    backend = _open(args.path)
    if args.action == "stats":
        report = store_stats(backend, now=time.time(), policy=policy, progress=progress)
    elif args.action == "verify":
        report = store_verify(backend, repair=not args.no_repair, progress=progress)
    else:
        report = store_gc(backend, policy, now=now, dry_run=args.dry_run, progress=progress,
                          partial_grace=grace, part=part)
    backend.close()
    _print(report, args.json)
    return 1 if args.action == "verify" and report["problems"] else 0
