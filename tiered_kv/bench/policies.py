"""Replay time of every policy on the 14-day synthetic mixed workload (the policy arena).

One replay per policy at one capacity (``--capacity-fraction`` of the workload's footprint,
whole blocks): ``lru``, ``ttl`` (a 3-day idle TTL under the same capacity), ``watermark``
(the capacity in bytes, high 0.95 / low 0.85), ``belady`` (MIN with bypass, next uses
included) and the zoo (``fifo``, ``lfu``, ``arc``, ``slru``, ``2q``, ``s3fifo``, ``sieve``,
``gdsf``, ``class-lru``, ``belady-nobypass``), each through its own ``run`` (hits and SSD wear).

Timing: ``--repeat`` rounds, interleaved (every policy once per round, the order rotated by
one each round so no policy always runs first or last), after one untimed warm-up round on a
small trace (numba compile or cache load); per policy the median, the spread (min-max) and
every run, wall and CPU seconds. The workload is generated and compiled once, timed apart.
``--scale`` scales the workload's request rates (1.0: the ``mixed`` preset's 14 M block
accesses); the output states the scale and the number of accesses measured.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from typing import Any

NAME = "policies"
HELP = "replay time of every policy on the 14-day synthetic mixed workload (median of interleaved repeats)"

#: The policies timed, in the order of the first round.
POLICIES = ("lru", "ttl", "watermark", "belady", "fifo", "lfu", "arc", "slru", "2q", "s3fifo", "sieve", "gdsf",
            "class-lru", "belady-nobypass")
TTL_S = 3 * 86_400.0


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="mixed", help="synthetic workload preset (default mixed)")
    parser.add_argument("--days", type=float, default=14.0, help="simulated days (default 14)")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="factor on the preset's request rates (default 1.0: about 14 M block accesses)")
    parser.add_argument("--seed", type=int, default=0, help="workload seed (default 0)")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved timed rounds (default 3)")
    parser.add_argument("--capacity-fraction", type=float, default=0.1,
                        help="cache capacity as a fraction of the footprint (default 0.1)")
    parser.add_argument("--policies", default=",".join(POLICIES), help="comma-separated policies to time")


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def make(name: str, capacity_tokens: int, bytes_per_token: float):
    """The policy object timed for ``name`` at ``capacity_tokens``."""
    from tiered_kv.sim.policies import get_policy

    if name == "ttl":
        return get_policy("ttl", default_ttl_seconds=TTL_S, capacity_tokens=capacity_tokens,
                          bytes_per_token=bytes_per_token)
    if name == "watermark":
        return get_policy("watermark", capacity_bytes=int(capacity_tokens * bytes_per_token), high=0.95, low=0.85,
                          bytes_per_token=bytes_per_token)
    return get_policy(name, capacity_tokens=capacity_tokens, bytes_per_token=bytes_per_token)


def _stats(xs: list[float]) -> dict:
    return {"median_s": statistics.median(xs), "min_s": min(xs), "max_s": max(xs), "runs_s": xs}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from tiered_kv.sim.policies import DEFAULT_BYTES_PER_TOKEN, policy_names
    from tiered_kv.sim.trace_replay import compile_trace
    from tiered_kv.sim.traces import random_trace
    from tiered_kv.sim.workload import synth

    names = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = sorted(set(names) - set(policy_names()))
    if unknown or not names:
        raise ValueError(f"--policies: unknown {unknown}; registered: {policy_names()}")
    if args.repeat < 1 or args.scale <= 0 or args.days <= 0 or not (0 < args.capacity_fraction <= 1):
        raise ValueError("policies: need --repeat >= 1, --scale > 0, --days > 0 and 0 < --capacity-fraction <= 1")
    bpt = float(DEFAULT_BYTES_PER_TOKEN)
    cpu0, load0 = _cpu(), os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    cfg = synth.PRESETS[args.preset]
    cfg = cfg.scaled(args.scale) if args.scale != 1.0 else cfg
    t0 = time.perf_counter()
    frame = synth.generate(cfg, args.days, args.seed)
    generate_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    trace = compile_trace(frame)
    compile_s = time.perf_counter() - t0
    del frame
    bs = trace.uniform_block_size
    cap = max(1, int(trace.n_unique * args.capacity_fraction)) * bs

    t0 = time.perf_counter()
    small = compile_trace(random_trace(0, 200))
    for name in names:  # warm-up: compile or load every kernel, untimed
        make(name, 8 * small.uniform_block_size, bpt).run(small)
    warmup_s = time.perf_counter() - t0

    wall: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    result: dict[str, dict] = {}
    inp = int(trace.input_length[trace.counted].sum())
    for r in range(args.repeat):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            pol = make(name, cap, bpt)
            t0, c0 = time.perf_counter(), _cpu()
            res = pol.run(trace)
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(_cpu() - c0)
            if name not in result:
                hit = int(trace.hit_tokens_from_blocks(res.hit_blocks)[trace.counted].sum())
                result[name] = {"token_hit_rate": hit / inp if inp else 0.0,
                                "ssd_bytes_written": float(res.extra.get("ssd_bytes_written", float("nan"))),
                                "drive_writes_per_day": float(res.extra.get("drive_writes_per_day", float("nan")))}
    per_policy = {}
    for name in names:
        w = _stats(wall[name])
        per_policy[name] = {**w, "cpu_median_s": statistics.median(cpu[name]), "cpu_runs_s": cpu[name],
                            "accesses_per_s": trace.n_accesses / w["median_s"] if w["median_s"] > 0 else None,
                            **result[name]}
    return {
        "workload": {"preset": args.preset, "days": args.days, "scale": args.scale, "seed": args.seed,
                     "requests": int(trace.n_requests), "block_accesses": int(trace.n_accesses),
                     "distinct_blocks": int(trace.n_unique), "block_size": bs, "classes": list(trace.class_names)},
        "capacity_tokens": cap, "capacity_fraction": args.capacity_fraction, "bytes_per_token": bpt,
        "ttl_seconds": TTL_S, "repeat": args.repeat,
        "timing": "per policy: median (min-max) of interleaved rounds, order rotated each round; wall and CPU seconds",
        "generate_s": generate_s, "compile_s": compile_s, "warmup_s": warmup_s,
        "policies": per_policy,
        "cpu_total_s": _cpu() - cpu0,
        "load_average_1m": {"start": load0, "end": os.getloadavg()[0] if hasattr(os, "getloadavg") else None},
    }
