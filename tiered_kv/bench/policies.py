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
import math
import os
import statistics
import time
from pathlib import Path
from typing import Any

from tiered_kv import cli_args as _args
from tiered_kv.bench._pages import Page, Paired, Row, brief, clocked, met, recorded, traced, yes
from tiered_kv.rusage import cpu_seconds
from tiered_kv.units import DAY_S, format_bytes

NAME = "policies"
HELP = "replay time of every policy on the 14-day synthetic mixed workload (median of interleaved repeats)"

#: The policies timed, in the order of the first round.
POLICIES = ("lru", "ttl", "watermark", "belady", "fifo", "lfu", "arc", "slru", "2q", "s3fifo", "sieve", "gdsf",
            "class-lru", "belady-nobypass")
TTL_S = 3 * DAY_S


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="mixed", type=_args.synth_preset(),
                        help="synthetic workload preset (default mixed)")
    parser.add_argument("--days", type=float, default=14.0, help="simulated days (default 14)")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="factor on the preset's request rates (default 1.0: about 14 M block accesses)")
    parser.add_argument("--seed", type=int, default=0, help="workload seed (default 0)")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved timed rounds (default 3)")
    parser.add_argument("--capacity-fraction", type=float, default=0.1,
                        help="cache capacity as a fraction of the footprint (default 0.1)")
    parser.add_argument("--policies", default=",".join(POLICIES), help="comma-separated policies to time")


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


def timed_rounds(names: list[str], repeat: int, job, done=lambda name, out: None, clock=time.perf_counter,
                 cpu_clock=cpu_seconds) -> tuple[dict[str, list[float]], dict[str, list[float]], list[str]]:
    """Wall and CPU seconds of ``job(name)()`` for every name once per round, ``repeat`` rounds,
    the order rotated by one each round (so no policy always runs first, after the same neighbour,
    or at the same point of a drift in the machine's load), and the order they ran in. Only the
    call is timed: ``job(name)`` sets it up (builds the policy) before the clock starts, and
    ``done(name, what the call returned)`` runs after it stops."""
    wall: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    ran: list[str] = []
    for r in range(repeat):
        for name in names[r % len(names):] + names[: r % len(names)]:
            call = job(name)
            t0, c0 = clock(), cpu_clock()
            out = call()
            wall[name].append(clock() - t0)
            cpu[name].append(cpu_clock() - c0)
            done(name, out)
            ran.append(name)
    return wall, cpu, ran


def _replays(trace, names: list[str], cap: int, bpt: float, repeat: int) -> dict[str, dict]:
    """Every policy's replay of ``trace`` at ``cap`` tokens timed in interleaved rounds, with the
    hit rate and SSD wear of its first replay."""
    result: dict[str, dict] = {}
    inp = int(trace.input_length[trace.counted].sum())

    def job(name: str):
        pol = make(name, cap, bpt)
        return lambda: pol.run(trace)

    def keep(name: str, res) -> None:
        if name not in result:
            hit = int(trace.hit_tokens_from_blocks(res.hit_blocks)[trace.counted].sum())
            result[name] = {"token_hit_rate": hit / inp if inp else 0.0,
                            "ssd_bytes_written": float(res.extra.get("ssd_bytes_written", float("nan"))),
                            "drive_writes_per_day": float(res.extra.get("drive_writes_per_day", float("nan")))}

    wall, cpu, _ = timed_rounds(names, repeat, job, keep)
    per_policy = {}
    for name in names:
        w = _stats(wall[name])
        per_policy[name] = {**w, "cpu_median_s": statistics.median(cpu[name]), "cpu_runs_s": cpu[name],
                            "accesses_per_s": trace.n_accesses / w["median_s"] if w["median_s"] > 0 else None,
                            **result[name]}
    return per_policy


def run(args: argparse.Namespace) -> dict[str, Any]:
    from tiered_kv.sim.policies import policy_names
    from tiered_kv.sim.trace_replay import compile_trace
    from tiered_kv.sim.traces import random_trace
    from tiered_kv.sim.workload import synth
    from tiered_kv.units import DEFAULT_BYTES_PER_TOKEN

    names = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = sorted(set(names) - set(policy_names()))
    if unknown or not names:
        raise ValueError(f"--policies: unknown {unknown}; registered: {policy_names()}")
    if args.repeat < 1 or args.scale <= 0 or args.days <= 0 or not (0 < args.capacity_fraction <= 1):
        raise ValueError("policies: need --repeat >= 1, --scale > 0, --days > 0 and 0 < --capacity-fraction <= 1")
    bpt = float(DEFAULT_BYTES_PER_TOKEN)
    cpu0, load0 = cpu_seconds(), os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    cfg = synth.PRESETS[args.preset]
    cfg = cfg.scaled(args.scale) if args.scale != 1.0 else cfg
    trace, generate_s, compile_s = traced(lambda: synth.generate(cfg, args.days, args.seed))
    bs = trace.uniform_block_size
    cap = max(1, int(trace.n_unique * args.capacity_fraction)) * bs

    def warm_up() -> None:  # compile or load every kernel, untimed
        small = compile_trace(random_trace(0, 200))
        for name in names:
            make(name, 8 * small.uniform_block_size, bpt).run(small)

    _, warmup_s = clocked(warm_up)

    per_policy = _replays(trace, names, cap, bpt, args.repeat)
    return {
        "workload": {"preset": args.preset, "days": args.days, "scale": args.scale, "seed": args.seed,
                     "requests": int(trace.n_requests), "block_accesses": int(trace.n_accesses),
                     "distinct_blocks": int(trace.n_unique), "block_size": bs, "classes": list(trace.class_names)},
        "capacity_tokens": cap, "capacity_fraction": args.capacity_fraction, "bytes_per_token": bpt,
        "ttl_seconds": TTL_S, "repeat": args.repeat,
        "timing": "per policy: median (min-max) of interleaved rounds, order rotated each round; wall and CPU seconds",
        "generate_s": generate_s, "compile_s": compile_s, "warmup_s": warmup_s,
        "policies": per_policy,
        "cpu_total_s": cpu_seconds() - cpu0,
        "load_average_1m": {"start": load0, "end": os.getloadavg()[0] if hasattr(os, "getloadavg") else None},
    }


# ------------------------------------------------------------------------------------ the record
COMMAND = "tiered-kv bench policies --json"
PEERS_COMMAND = "tiered-kv bench peers --skip kvcache-simulator,lmcache --json"
#: The line for a numba kernel: a 14-day replay of the mixed workload within 30 s.
REPLAY_TARGET_S = 30.0


def _t(x: float) -> str:
    """Seconds, or milliseconds below one second."""
    return f"{x:.2f} s" if x >= 1 else f"{1e3 * x:.0f} ms"


def _runs(xs: list[float]) -> str:
    return ", ".join(_t(x) for x in xs)


def _g(x: float | None) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.3g}"


def _load(d: dict | None) -> str:
    if not d or d.get("start") is None:
        return "not available"
    return f"{d['start']:.1f} at the start, {d['end']:.1f} at the end"


def _replay_rows(pols: dict) -> str:
    rows = []
    for name, d in pols.items():
        rate = d["accesses_per_s"]
        rows.append(f"| `{name}` | {_t(d['median_s'])} | {_t(d['min_s'])}-{_t(d['max_s'])} | {_t(d['cpu_median_s'])} | "
                    f"{'n/a' if rate is None else f'{rate / 1e6:.1f}'} | {d['token_hit_rate']:.2%} | "
                    f"{format_bytes(d['ssd_bytes_written'])} | {_g(d['drive_writes_per_day'])} | {_runs(d['runs_s'])} |")
    return "\n".join(rows)


def render_replays(r: dict | None) -> str:
    """The replay-time section from the JSON of ``tiered-kv bench policies --json`` (None: none yet)."""
    if r is None:
        return "## 14-day replay time per policy\n\nNo `tiered-kv bench policies --json` record yet.\n"
    w, pols, cap = r["workload"], r["policies"], r["capacity_tokens"]
    scale = ("the preset's own rates (full scale)" if w["scale"] == 1.0 else
             f"**{w['scale']:g} of the preset's request rates** (not the full 14-day workload: the times below "
             f"are for {w['block_accesses']:,} accesses)")
    slowest = max(pols, key=lambda n: pols[n]["median_s"])
    worst = pols[slowest]["median_s"]
    command, note = recorded(r, COMMAND)
    return f"""## 14-day replay time per policy

Written from the JSON of `{command}`.

Machine: {note}

Workload: the synthetic `{w['preset']}` preset ({' + '.join(w['classes'])}), {w['days']:g} days, seed {w['seed']},
at {scale}: {w['requests']:,} requests, {w['block_accesses']:,} block accesses of {w['block_size']}-token
blocks, {w['distinct_blocks']:,} distinct blocks. One replay per policy at one capacity:
{r['capacity_fraction']:g} of the footprint = {cap:,} tokens ({format_bytes(cap * r['bytes_per_token'])} at
{r['bytes_per_token']:,.0f} B/token); `ttl` is a {r['ttl_seconds'] / DAY_S:g}-day idle TTL under that capacity,
`watermark` the same capacity in bytes (high 0.95, low 0.85). Each time is the policy's own `run`
(hits, SSD wear; `belady` includes its next-use pass): median of {r['repeat']} interleaved rounds (every
policy once per round, the order rotated by one each round), the spread min-max and every run;
generation {_t(r['generate_s'])}, compilation {_t(r['compile_s'])} and the numba warm-up
{_t(r['warmup_s'])} are outside every timing. Whole run: {r['cpu_total_s']:.0f} s of CPU. Load average
(1 minute): {_load(r.get('load_average_1m'))} (the machine: its note above, when the run gave one).

| policy | replay (median) | spread | CPU (median) | M accesses/s | token hit rate | SSD written | drive writes/day | every run |
|---|---:|---:|---:|---:|---:|---:|---:|---|
{_replay_rows(pols)}

Slowest: `{slowest}` at {_t(worst)} (the line for a kernel: a 14-day replay within
{REPLAY_TARGET_S:.0f} s: {met(worst <= REPLAY_TARGET_S)}); all {len(pols)} policies one after the other: \
{_t(sum(d["median_s"] for d in pols.values()))}.
"""


def _libcachesim_speedup(d: dict, key: str = "seconds") -> Paired:
    """libCacheSim / tiered-kv of each interleaved round, median and range."""
    return Paired.between(d[f"peer_{key}_all"], d[f"ours_{key}_all"])


def _peer_rows(pairs: dict) -> str:
    rows = []
    for name, d in pairs.items():
        cpu = (_libcachesim_speedup(d, "cpu_seconds").text(lambda x: f"{x:.1f}x") if "peer_cpu_seconds_all" in d
               else f"{d['cpu_speedup_vs_peer']:.1f}x")
        rows.append(f"| {name} | `{d['ours_policy']}` | {met(d['identical'])} | "
                    f"{_t(d['peer_seconds'])} ({_runs(d['peer_seconds_all'])}) | "
                    f"{_t(d['ours_seconds'])} ({_runs(d['ours_seconds_all'])}) | "
                    f"{_libcachesim_speedup(d).text(lambda x: f'{x:.1f}x')} | {cpu} |")
    return "\n".join(rows)


def render_peers(r: dict | None) -> str:
    """The libCacheSim section from the JSON of ``tiered-kv bench peers --json`` (None: none yet)."""
    lcs = (r or {}).get("libcachesim")
    if not lcs:
        return "## libCacheSim side by side\n\nNo libcachesim section in a `tiered-kv bench peers --json` record yet.\n"
    status = lcs["status"]
    if not status["available"]:
        return f"## libCacheSim side by side\n\nlibCacheSim did not run: {status['detail']}.\n"
    pairs = {k: v for k, v in lcs.items() if isinstance(v, dict) and "identical" in v}
    caps = lcs["capacities_blocks"]
    ratios = sorted(_libcachesim_speedup(d).median for d in pairs.values())
    same = sum(d["identical"] for d in pairs.values())
    return f"""## libCacheSim side by side

Written from the libcachesim section of the JSON of `{recorded(r, PEERS_COMMAND)[0]}` (trace `{Path(r['trace']).name}`,
{r['requests']:,} requests). libCacheSim {status['detail']} (PyPI `libcachesim`) and the zoo replay the same
block-level trace ({lcs['block_accesses']:,} accesses, each a request for one unit-size object) at
{len(caps)} capacities from {caps[0]:,} to {caps[-1]:,} blocks; {lcs['timing']}, {lcs['repeat']} rounds. A side's
time is its whole curve: libCacheSim's `process_trace` over its `oracleGeneral` binary trace (written
once, untimed) at every capacity; the zoo's kernel at every capacity (its first load untimed).
Speed-up = libCacheSim time / tiered-kv time of each round, the median of those ratios with their
range (wall; CPU beside it).

| libCacheSim | tiered-kv | identical hits | libCacheSim (median, every run) | tiered-kv (median, every run) | speed-up | CPU speed-up |
|---|---|---|---:|---:|---:|---:|
{_peer_rows(pairs)}

Identical hit counts at every capacity for {same} of {len(pairs)} policies; median speed-ups
{ratios[0]:.1f}x to {ratios[-1]:.1f}x (median over the policies {statistics.median(ratios):.1f}x). Where the
definitions differ (Belady's bypass, SLRU's segment rounding) docs/policies.md says how they are made to agree.
"""


def render_record(policies: dict | None, peers: dict | None) -> str:
    """The policy arena page from the two JSONs (either may be missing)."""
    return ("# Policy arena: replay time of every policy, and libCacheSim side by side\n\n"
            "Written by `tiered-kv bench record policies` from `benchmarks/results/policies.json` and "
            "`benchmarks/results/policies_peers.json`; nothing here is typed by hand.\n\n"
            + render_replays(policies) + "\n" + render_peers(peers))


def _summary(p: dict, pp: dict) -> tuple[str, str]:
    slowest = max(p["policies"], key=lambda k: p["policies"][k]["median_s"])
    worst = p["policies"][slowest]["median_s"]
    return (f"slowest 14-day replay {slowest} {brief(worst)} (median) of {len(p['policies'])} policies; "
            f"libCacheSim identical: {pp['identical']}"), yes(worst <= REPLAY_TARGET_S and bool(pp["identical"]))


PAGES = (Page("policies", render_record, COMMAND, extra=("policies_peers",)),)
SUMMARY = (Row("policy zoo: 14-day replay per policy; libCacheSim side by side", ("policies", "policies_peers"),
               lambda *_: f"<= {REPLAY_TARGET_S:g} s per replay; identical hits (issue 15)", _summary),)
