"""What several subcommands share: the trace options, loading a compiled trace, building a policy.

``simulate``, ``curves``, ``retention``, ``day`` and the cluster options (``_cluster_options.py``)
import these; this module imports no subcommand (the underscore keeps it out of the CLI).
"""

from __future__ import annotations

import argparse
import math
from typing import Any


def add_trace_arguments(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    """--trace/--format/--class/--semantics/--bytes-per-token of `simulate` and `curves`."""
    parser.add_argument("--trace", required=required, metavar="PATH",
                        help="trace file (Mooncake/Bailian JSONL, generic JSONL/CSV/Parquet), or the name "
                             "of a shipped trace: conversation, synthetic")
    parser.add_argument("--format", default="auto", choices=["auto", "mooncake", "bailian", "generic"],
                        help="trace format (default: detected from the file)")
    parser.add_argument("--class", dest="traffic_class", default=None, metavar="CLASS",
                        help="traffic class for every request of the trace (default: from the file; "
                             "the Mooncake conversation trace is 'chatbot')")
    parser.add_argument("--semantics", default="tiered-kv", choices=["tiered-kv", "kvcache-ai", "lmcache"],
                        help="counting rules: tiered-kv (docs/semantics.md), kvcache-ai (file order, last 50%% "
                             "counted, trie-leaf LRU), lmcache (complete chunks, no clamp)")
    from tiered_kv.cli_args import positive_float

    parser.add_argument("--bytes-per-token", type=positive_float("KV bytes per token"), default=None, metavar="B",
                        help="KV bytes per token, to read capacities given in bytes (default: "
                             "DeepSeek-V3 MLA bf16, 70,272 B)")


def load_compiled(args: argparse.Namespace):
    """(compiled trace, semantics) for the trace options of ``args``.

    The compiled trace comes from :mod:`tiered_kv.sim.trace_cache` when an earlier run stored
    it (the same file, arguments and code), so a second run does not read the file again. A
    typed ``--days`` is refused here, for every command that reads a trace file: it is the length
    of a ``--synth`` workload (so each command's ``--days`` defaults to None).
    """
    if getattr(args, "days", None) is not None:
        raise ValueError("--days: only with --synth (a trace file has its own span)")
    from dataclasses import replace

    from tiered_kv.sim.peers.semantics import get_semantics
    from tiered_kv.sim.trace_cache import load_compiled_trace
    from tiered_kv.sim.traces import resolve_trace_path

    sem = get_semantics(getattr(args, "semantics", "tiered-kv"))
    options = sem.options
    if getattr(args, "warmup", None) is not None:
        options = replace(options, warmup_fraction=float(args.warmup))
    trace = load_compiled_trace(resolve_trace_path(args.trace), format=args.format,
                                traffic_class=args.traffic_class, options=options)
    return trace, sem


def load_trace_or_synth(args: argparse.Namespace, default_days: float = 14.0) -> tuple[Any, Any, float | None]:
    """(compiled trace, semantics, days) for --trace (days None) or --synth PRESET --days D --seed S
    (``--days`` not given: ``default_days``, the command's own), compiled under ``--semantics``
    (default tiered-kv)."""
    if args.synth and args.trace:
        raise ValueError("give either --trace or --synth, not both")
    if not args.synth:
        if not args.trace:
            raise ValueError("--trace PATH (or --synth PRESET --days D) is required")
        return (*load_compiled(args), None)
    from tiered_kv.sim.peers.semantics import get_semantics
    from tiered_kv.sim.trace_replay import compile_trace
    from tiered_kv.sim.workload.synth import generate

    days = default_days if args.days is None else float(args.days)  # days (tiered_kv.cli_args.synth_days)
    sem = get_semantics(getattr(args, "semantics", "tiered-kv"))
    return compile_trace(generate(args.synth, days, args.seed), sem.options), sem, days


def build_policy(args: argparse.Namespace, sem) -> Any:
    """The policy object for --policy/--capacity/--ttl/--high/--low under semantics ``sem``."""
    from tiered_kv.sim.policies import capacity_tokens_from, get_policy, policy_names
    from tiered_kv.sim.policies.collectors import COLLECTORS
    from tiered_kv.units import DEFAULT_BYTES_PER_TOKEN

    bpt = args.bytes_per_token or DEFAULT_BYTES_PER_TOKEN
    cap = capacity_tokens_from(args.capacity, bytes_per_token=bpt, name="--capacity")
    name = args.policy
    variant = {"lru": sem.lru_policy, "belady": sem.belady_policy}.get(name)
    if variant and variant in policy_names():
        name = variant  # e.g. kvcache-ai: lru-trie, belady-trie
    if name == "ttl":
        if not args.ttl:
            raise ValueError("--policy ttl: give --ttl DURATION or --ttl CLASS=DURATION")
        from tiered_kv.units import parse_ttl

        per_class, default = parse_ttl(args.ttl, name="--ttl")
        return get_policy("ttl", ttl_seconds=per_class, default_ttl_seconds=math.inf if default is None else default,
                          capacity_tokens=cap, bytes_per_token=bpt)
    if args.ttl:
        raise ValueError(f"--ttl: only for --policy ttl, not {args.policy}")
    if name == "watermark" or name in COLLECTORS:  # sized in bytes, under --high/--low
        if cap is None:
            raise ValueError(f"--policy {name}: needs --capacity (tokens or bytes)")
        from tiered_kv.cli_args import check_watermarks

        check_watermarks(args.high, args.low)
        return get_policy(name, capacity_bytes=int(cap * bpt), high=args.high, low=args.low,
                          bytes_per_token=bpt)
    if name in ("lru", "belady"):  # the KV format of their SSD wear figures
        return get_policy(name, capacity_tokens=cap, bytes_per_token=bpt)
    return get_policy(name, capacity_tokens=cap)


def to_json(value: Any) -> str:
    """``value`` as strict, indented JSON text (:func:`jsonable`; other objects as ``str``)."""
    import json

    return json.dumps(jsonable(value), indent=2, default=str, allow_nan=False)


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
