#!/usr/bin/env python3
"""Write benchmarks/results/policies.md from the JSON of two benchmark runs (issue 15).

Every number in the page comes from the JSON files, so the record and the runs cannot drift:

    tiered-kv bench policies --json > benchmarks/results/policies.json
    tiered-kv bench peers --skip kvcache-simulator,lmcache --json > benchmarks/results/policies_peers.json
    .venv/bin/python scripts/policy_record.py        # -> benchmarks/results/policies.md
    scripts/assemble_benchmarks.sh                   # -> BENCHMARKS.md

Either JSON may be missing (its section then says so); ``--policies-json`` / ``--peers-json``
name other files and ``--policies-command`` / ``--peers-command`` the commands that wrote them.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
POLICIES_COMMAND = "tiered-kv bench policies --json"
PEERS_COMMAND = "tiered-kv bench peers --skip kvcache-simulator,lmcache --json"
#: The issue's line for a numba kernel: a 14-day replay of the mixed workload within 30 s.
REPLAY_TARGET_S = 30.0


def _t(x: float) -> str:
    """Seconds, or milliseconds below one second."""
    return f"{x:.2f} s" if x >= 1 else f"{1e3 * x:.0f} ms"


def _runs(xs: list[float]) -> str:
    return ", ".join(_t(x) for x in xs)


def _bytes(n: float) -> str:
    if n is None or not math.isfinite(n):
        return "n/a"
    for unit, scale in (("PiB", 2.0**50), ("TiB", 2.0**40), ("GiB", 2.0**30), ("MiB", 2.0**20)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.3g} B"


def _g(x: float | None) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.3g}"


def _load(d: dict | None) -> str:
    if not d or d.get("start") is None:
        return "not available"
    return f"{d['start']:.1f} at the start, {d['end']:.1f} at the end"


def render_replays(r: dict | None, command: str) -> str:
    if r is None:
        return "## 14-day replay time per policy\n\nNo `tiered-kv bench policies --json` record yet.\n"
    w = r["workload"]
    full = w["scale"] == 1.0
    scale = ("the preset's own rates (full scale)" if full else
             f"**{w['scale']:g} of the preset's request rates** (not the full 14-day workload: the times below "
             f"are for {w['block_accesses']:,} accesses)")
    pols = r["policies"]
    rows = []
    for name, d in pols.items():
        spread = f"{_t(d['min_s'])}-{_t(d['max_s'])}"
        rate = d["accesses_per_s"]
        rows.append(f"| `{name}` | {_t(d['median_s'])} | {spread} | {_t(d['cpu_median_s'])} | "
                    f"{'n/a' if rate is None else f'{rate / 1e6:.1f}'} | {d['token_hit_rate']:.2%} | "
                    f"{_bytes(d['ssd_bytes_written'])} | {_g(d['drive_writes_per_day'])} | {_runs(d['runs_s'])} |")
    slowest = max(pols, key=lambda n: pols[n]["median_s"])
    total = sum(d["median_s"] for d in pols.values())
    worst = pols[slowest]["median_s"]
    met = "yes" if worst <= REPLAY_TARGET_S else "**no**"
    cap = r["capacity_tokens"]
    return f"""## 14-day replay time per policy

Written from the JSON of `{command}`.

Workload: the synthetic `{w['preset']}` preset ({' + '.join(w['classes'])}), {w['days']:g} days, seed {w['seed']},
at {scale}: {w['requests']:,} requests, {w['block_accesses']:,} block accesses of {w['block_size']}-token
blocks, {w['distinct_blocks']:,} distinct blocks. One replay per policy at one capacity:
{r['capacity_fraction']:g} of the footprint = {cap:,} tokens ({_bytes(cap * r['bytes_per_token'])} at
{r['bytes_per_token']:,.0f} B/token); `ttl` is a {r['ttl_seconds'] / 86400:g}-day idle TTL under that capacity,
`watermark` the same capacity in bytes (high 0.95, low 0.85). Each time is the policy's own `run`
(hits, SSD wear; `belady` includes its next-use pass): median of {r['repeat']} interleaved rounds (every
policy once per round, the order rotated by one each round), the spread min-max and every run;
generation {_t(r['generate_s'])}, compilation {_t(r['compile_s'])} and the numba warm-up
{_t(r['warmup_s'])} are outside every timing. Whole run: {r['cpu_total_s']:.0f} s of CPU. Load average
(1 minute): {_load(r.get('load_average_1m'))}, on the 2-core development machine shared with other
jobs (see the summary above), so absolute times are pessimistic.

| policy | replay (median) | spread | CPU (median) | M accesses/s | token hit rate | SSD written | drive writes/day | every run |
|---|---:|---:|---:|---:|---:|---:|---:|---|
{chr(10).join(rows)}

Slowest: `{slowest}` at {_t(worst)} (the issue's line for a kernel: a 14-day replay within
{REPLAY_TARGET_S:.0f} s: {met}); all {len(pols)} policies one after the other: {_t(total)}.
"""


def render_peers(r: dict | None, command: str) -> str:
    lcs = (r or {}).get("libcachesim")
    if not lcs:
        return "## libCacheSim side by side\n\nNo libcachesim section in a `tiered-kv bench peers --json` record yet.\n"
    status = lcs["status"]
    if not status["available"]:
        return f"## libCacheSim side by side\n\nlibCacheSim did not run: {status['detail']}.\n"
    pairs = {k: v for k, v in lcs.items() if isinstance(v, dict) and "identical" in v}
    rows = []
    for name, d in pairs.items():
        rows.append(f"| {name} | `{d['ours_policy']}` | {'yes' if d['identical'] else '**no**'} | "
                    f"{_t(d['peer_seconds'])} ({_runs(d['peer_seconds_all'])}) | "
                    f"{_t(d['ours_seconds'])} ({_runs(d['ours_seconds_all'])}) | "
                    f"{d['speedup_vs_peer']:.1f}x | {d['cpu_speedup_vs_peer']:.1f}x |")
    caps = lcs["capacities_blocks"]
    ratios = sorted(d["speedup_vs_peer"] for d in pairs.values())
    same = sum(d["identical"] for d in pairs.values())
    return f"""## libCacheSim side by side

Written from the libcachesim section of the JSON of `{command}` (trace `{Path(r['trace']).name}`,
{r['requests']:,} requests). libCacheSim {status['detail']} (PyPI `libcachesim`) and the zoo replay the same
block-level trace ({lcs['block_accesses']:,} accesses, each a request for one unit-size object) at
{len(caps)} capacities from {caps[0]:,} to {caps[-1]:,} blocks; {lcs['timing']}, {lcs['repeat']} rounds. A side's
time is its whole curve: libCacheSim's `process_trace` over its `oracleGeneral` binary trace (written
once, untimed) at every capacity; the zoo's kernel at every capacity (its first load untimed).
Speed-up = libCacheSim median / tiered-kv median (wall; CPU beside it).

| libCacheSim | tiered-kv | identical hits | libCacheSim (median, every run) | tiered-kv (median, every run) | speed-up | CPU speed-up |
|---|---|---|---:|---:|---:|---:|
{chr(10).join(rows)}

Identical hit counts at every capacity for {same} of {len(pairs)} policies; speed-ups
{ratios[0]:.1f}x to {ratios[-1]:.1f}x (median {ratios[len(ratios) // 2]:.1f}x). Where the definitions differ
(Belady's bypass, SLRU's segment rounding) docs/policies.md says how they are made to agree.
"""


def render(policies: dict | None, peers: dict | None, policies_command: str = POLICIES_COMMAND,
           peers_command: str = PEERS_COMMAND) -> str:
    return ("# Policy arena: replay time of every policy, and libCacheSim side by side (issue 15)\n\n"
            "Written by `scripts/policy_record.py` from `benchmarks/results/policies.json` and "
            "`benchmarks/results/policies_peers.json`; nothing here is typed by hand.\n\n"
            + render_replays(policies, policies_command) + "\n" + render_peers(peers, peers_command))


def _read(path: str) -> dict | None:
    p = Path(path)
    return json.loads(p.read_text()) if p.is_file() and p.stat().st_size else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policies-json", default=str(RESULTS / "policies.json"))
    parser.add_argument("--peers-json", default=str(RESULTS / "policies_peers.json"))
    parser.add_argument("--policies-command", default=POLICIES_COMMAND)
    parser.add_argument("--peers-command", default=PEERS_COMMAND)
    parser.add_argument("--out", default=str(RESULTS / "policies.md"))
    args = parser.parse_args(argv)
    text = render(_read(args.policies_json), _read(args.peers_json), args.policies_command, args.peers_command)
    Path(args.out).write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
