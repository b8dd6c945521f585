"""Simulator speed on the real Mooncake conversation trace.

- curves: the full LRU curve (100 capacities) plus the TTL curve (100 TTLs) in one pass each,
  against the baseline measured in the same run: one event replay per point (the same numba
  kernel the policies use), so the ratio is the gain of the one-pass method alone;
- Belady (MIN with bypass) at one capacity, next-use computation included;
- event replay throughput of one policy (LRU) in block accesses per second;
- scaling: the same measurements on 1x, 4x and 16x the trace, built by concatenating copies
  shifted in time (by the trace's span) and in block ids (so copies share nothing);
- the Belady curve at the same 100 capacities, one stack pass (``belady_curve_s``);
- CLI start-up: whole ``tiered-kv curves`` / ``simulate`` processes, warm and with an empty numba
  cache (``cli_warm_s``, ``cli_cold_s``; :mod:`tiered_kv.bench._cli_startup`).

Times are the median of ``--repeat`` runs after a warm-up call, with every run kept beside it
(``runs_s``: the spread); the numba JIT warm-up (compile or load from the on-disk cache) is
measured separately and reported, never inside a timing.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

NAME = "sim"
HELP = "simulator speed: one-pass curves vs per-point replay, Belady, replay throughput, scaling"


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace", default="conversation", help="trace path or shipped name (default: conversation)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per measurement (the median is reported, every run kept)")
    parser.add_argument("--scales", default="1,4,16", help="trace multiples for the scaling table (default 1,4,16)")
    parser.add_argument("--capacity", type=int, default=1_000_000, help="capacity in tokens for Belady and replay")
    from tiered_kv.bench._cli_startup import add_arguments as add_cli_arguments  # start-up (issue 13)
    from tiered_kv.bench._cluster_throughput import add_arguments as add_cluster_arguments  # cluster model

    add_cluster_arguments(parser)
    add_cli_arguments(parser)


def median_of(fn, repeat: int, runs: dict[str, list[float]] | None = None, name: str = "") -> float:
    """Median seconds of ``repeat`` calls of ``fn``; with ``runs``, every run is kept under ``name``."""
    times = []
    for _ in range(max(repeat, 1)):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    if runs is not None:
        runs[name] = times
    return float(np.median(times))


def concat_shifted(trace, copies: int):
    """``copies`` back-to-back copies of a compiled trace, shifted in time and in block ids."""
    from tiered_kv.sim.trace_replay import CompiledTrace, ReplayOptions

    if copies == 1:
        return trace
    span = float(np.ptp(trace.timestamps)) + 1.0
    n, m, u = trace.n_requests, trace.n_accesses, trace.n_unique
    rep = lambda a: np.tile(a, copies)  # noqa: E731
    shift_req = np.repeat(np.arange(copies), n)
    shift_acc = np.repeat(np.arange(copies), m)
    lengths = np.tile(np.diff(trace.offsets), copies)
    offsets = np.zeros(n * copies + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    keys = (np.tile(trace.block_keys, copies) + np.repeat(np.arange(copies, dtype=np.uint64),
                                                         u) * np.uint64(2**40)).astype(np.uint64)
    t = CompiledTrace(
        request_id=rep(trace.request_id) + shift_req * n, timestamps=rep(trace.timestamps) + shift_req * span,
        input_length=rep(trace.input_length), block_size=rep(trace.block_size),
        class_codes=rep(trace.class_codes), class_names=trace.class_names, offsets=offsets,
        blocks=(rep(trace.blocks) + shift_acc * u).astype(np.int32), depth=rep(trace.depth),
        tokens=rep(trace.tokens), chunk_tokens=rep(trace.chunk_tokens), block_keys=keys,
        counted=np.ones(n * copies, dtype=bool))
    return t.with_options(ReplayOptions())


def measure(trace, capacity: int, repeat: int, baseline: bool) -> dict[str, Any]:
    from tiered_kv.sim import curves as C
    from tiered_kv.sim.policies import LRU, TTL, Belady

    caps = C.default_capacities(trace, 100)
    ttls = C.default_ttls(trace, 100)

    def curves():
        C.lru_curve(trace, caps)
        C.ttl_curve(trace, ttls)

    runs: dict[str, list[float]] = {}
    out: dict[str, Any] = {
        "requests": trace.n_requests, "block_accesses": trace.n_accesses, "unique_blocks": trace.n_unique,
        "lru_capacities": int(len(caps)), "ttl_points": int(len(ttls)),
        "curves_s": median_of(curves, repeat, runs, "curves_s"),
    }
    if baseline:
        def per_point():
            for c in caps:
                LRU(capacity_tokens=int(c)).run(trace)
            for t in ttls:
                TTL(default_ttl_seconds=float(t)).run(trace)
        out["per_point_replay_s"] = median_of(per_point, 1, runs, "per_point_replay_s")
        out["curves_speedup_vs_per_point"] = out["per_point_replay_s"] / out["curves_s"]
    out["belady_one_capacity_s"] = median_of(lambda: Belady(capacity_tokens=capacity).run(trace), repeat, runs,
                                             "belady_one_capacity_s")
    out["belady_curve_s"] = median_of(lambda: C.belady_curve(trace, caps), repeat, runs, "belady_curve_s")
    lru_s = median_of(lambda: LRU(capacity_tokens=capacity).run(trace), repeat, runs, "lru_replay_s")
    out["lru_replay_s"] = lru_s
    out["lru_replay_accesses_per_s"] = trace.n_accesses / lru_s
    out["runs_s"] = runs
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from tqdm import tqdm

    from tiered_kv.sim import curves as C
    from tiered_kv.sim.policies import LRU, TTL, Belady
    from tiered_kv.sim.trace_replay import compile_trace
    from tiered_kv.sim.traces import load_trace, resolve_trace_path

    scales = [int(s) for s in str(args.scales).split(",") if s.strip()]
    if not scales or min(scales) < 1:
        raise ValueError("--scales: comma-separated multiples >= 1, e.g. 1,4,16")
    t0 = time.perf_counter()
    df = load_trace(resolve_trace_path(args.trace))
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    trace = compile_trace(df)
    compile_s = time.perf_counter() - t0
    # JIT warm-up: first call of every kernel (compiles, or loads numba's on-disk cache)
    t0 = time.perf_counter()
    C.lru_curve(trace, [512])
    C.ttl_curve(trace, [1.0])
    LRU(capacity_tokens=512).run(trace)
    TTL(default_ttl_seconds=1.0).run(trace)
    Belady(capacity_tokens=512).run(trace)
    C.belady_curve(trace, [512])
    jit_s = time.perf_counter() - t0
    result: dict[str, Any] = {
        "trace": str(args.trace), "load_trace_s": load_s, "compile_trace_s": compile_s,
        "jit_warmup_s": jit_s, "capacity_tokens": args.capacity, "repeat": args.repeat,
        "targets": {"curves_s": 1.0, "belady_one_capacity_s": 2.0, "lru_replay_accesses_per_s": 2e6},
    }
    scaling = {}
    for s in tqdm(scales, desc="scales", unit="x", delay=2):
        scaling[f"{s}x"] = measure(concat_shifted(trace, s), args.capacity, args.repeat, baseline=(s == 1))
    result["conversation"] = scaling.get("1x") or next(iter(scaling.values()))
    result["scaling"] = {k: {f: v[f] for f in ("block_accesses", "curves_s", "belady_one_capacity_s", "belady_curve_s",
                                               "lru_replay_s", "lru_replay_accesses_per_s", "runs_s")}
                         for k, v in scaling.items()}
    base = result["conversation"]
    result["meets_targets"] = {
        "curves_s": base["curves_s"] <= 1.0,
        "belady_one_capacity_s": base["belady_one_capacity_s"] <= 2.0,
        "lru_replay_accesses_per_s": base["lru_replay_accesses_per_s"] >= 2e6,
    }
    if args.cli_repeat > 0:  # whole-process start-up of curves and simulate (tiered_kv/bench/_cli_startup.py)
        from tiered_kv.bench._cli_startup import TARGETS, run_cli_bench

        result.update(run_cli_bench(args.trace, args.cli_repeat))
        result["targets"].update(TARGETS)
        result["meets_targets"].update(result["cli"]["meets_targets"])
    if not args.no_cluster:  # the cluster model's 14-day run (tiered_kv/bench/_cluster_throughput.py)
        from tiered_kv.bench._cluster_throughput import run_cluster_bench

        result["cluster"] = run_cluster_bench(args)
    return result
