#!/usr/bin/env python3
"""Write benchmarks/results/sim.md from the JSON of `tiered-kv bench sim --json` (every number from it).

    tiered-kv bench sim --json > /tmp/sim.json
    .venv/bin/python scripts/sim_record.py /tmp/sim.json "machine note"   # -> sim.md, sim.json
    scripts/assemble_benchmarks.sh                                       # -> BENCHMARKS.md

The JSON is copied to benchmarks/results/sim.json. Times are medians of the benchmark's
``--repeat`` runs, every run in brackets; the design notes at the end are prose (no figures).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
COMMAND = "tiered-kv bench sim --json"

RATIONALE = """## What was chosen and why
- **numba** (`cache=True`) for the sequential loops: the event replay (per-class LRU lists with
  exact TTL expiry and watermark eviction in one kernel), the Fenwick-tree stack distances and the
  Belady heap. Each decision depends on the state the previous one left, so numpy cannot
  vectorise them, and a plain Python loop over them is far slower.
- **Compiled ahead of time** (`tiered_kv/sim/aot.py`): the kernels `curves` and `simulate` run
  are also built into a C extension by `numba.pycc` at install (`scripts/setup_env.sh`), used
  when it is fresh (a hash of the kernels' sources) and the arguments match its signature
  exactly, so those commands start without importing numba or compiling anything; any other call
  goes to numba as before, with the same bits (`tests/test_aot_kernels.py`).
- **One pass per curve**: a block is a leading hit iff the running maximum of its request's
  stack distances (LRU) or reuse times (TTL) is within the capacity or TTL, so a sorted array and
  a cumulative sum of token weights answer all points (proof in `tiered_kv/sim/curves.py`).
  The evaluation buckets each access under the first threshold it fits (binary search over the
  k points) and sums the buckets with one bincount: O(n log k) instead of sorting all n keys.
- **Belady**: lazy-deletion max-heap keyed by (next use, depth); blocks at their last use are only
  counted, never heaped (they are always the first to go, and which one goes cannot change a later
  hit).
- Per-class TTLs: one LRU list per class with a global touch counter instead of an expiry heap,
  with the same expiry predicate as the brute-force replay (`now - last_touch > ttl`), so there
  are no float rounding differences between a heap and the lookup check.
"""


def _s(x: float) -> str:
    return f"{x:.3f} s" if x < 1 else f"{x:.2f} s"


def _runs(r: dict, name: str) -> str:
    runs = r.get("runs_s", {}).get(name)
    return f" ({', '.join(f'{x:.3f}' for x in runs)})" if runs and len(runs) > 1 else ""


def _met(ok: bool) -> str:
    return "yes" if ok else "**no**"


def render(r: dict, note: str) -> str:
    c, t, m = r["conversation"], r["targets"], r["meets_targets"]
    lines = [
        "# Simulator benchmark (`tiered-kv bench sim`)",
        "",
        f"Written by `scripts/sim_record.py` from `benchmarks/results/sim.json`, the JSON of one run of "
        f"`{COMMAND}` (trace `{r['trace']}`, Belady and replay at {r['capacity_tokens']:,} tokens, "
        f"median of {r['repeat']} timed runs after a warm-up call; every run in brackets, seconds). {note}",
        "",
        f"## Conversation trace ({c['requests']:,} requests, {c['block_accesses']:,} block accesses, "
        f"{c['unique_blocks']:,} distinct blocks)",
        "",
        "| measurement | result | target | met? |",
        "|---|---|---|---|",
        f"| LRU curve ({c['lru_capacities']} capacities) + TTL curve ({c['ttl_points']} TTLs), one pass each | "
        f"{_s(c['curves_s'])}{_runs(c, 'curves_s')} | <= {t['curves_s']:g} s | {_met(m['curves_s'])} |",
        f"| the same {c['lru_capacities'] + c['ttl_points']} points as one event replay each (baseline, one run) | "
        f"{_s(c['per_point_replay_s'])} | | |",
        f"| one-pass speed-up over per-point replay | {c['curves_speedup_vs_per_point']:.0f}x | | |",
        f"| Belady (MIN with bypass) at one capacity, next-use included | {_s(c['belady_one_capacity_s'])}"
        f"{_runs(c, 'belady_one_capacity_s')} | <= {t['belady_one_capacity_s']:g} s | {_met(m['belady_one_capacity_s'])} |",
        f"| Belady curve at the same capacities, one stack pass | {_s(c['belady_curve_s'])}{_runs(c, 'belady_curve_s')} | | |",
        f"| LRU event replay throughput | {c['lru_replay_accesses_per_s'] / 1e6:.1f} M block accesses/s "
        f"({_s(c['lru_replay_s'])}{_runs(c, 'lru_replay_s')}) | >= {t['lru_replay_accesses_per_s'] / 1e6:g} M/s | "
        f"{_met(m['lru_replay_accesses_per_s'])} |",
        f"| numba JIT warm-up (every kernel's first call; loads the on-disk cache when filled) | "
        f"{_s(r['jit_warmup_s'])} | reported, not timed | |",
        f"| trace load (polars JSONL) / compile to flat arrays | {_s(r['load_trace_s'])} / {_s(r['compile_trace_s'])} | | |",
        "",
        "## Scaling (copies of the trace shifted in time and in block ids, so they share nothing)",
        "",
        "| trace | block accesses | LRU+TTL curves | Belady, one capacity | Belady curve | LRU replay | replay throughput |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for k, v in r["scaling"].items():
        lines.append(f"| {k} | {v['block_accesses']:,} | {_s(v['curves_s'])} | {_s(v['belady_one_capacity_s'])} | "
                     f"{_s(v['belady_curve_s'])} | {_s(v['lru_replay_s'])} | {v['lru_replay_accesses_per_s'] / 1e6:.1f} M/s |")
    if "cluster" in r:
        cl = r["cluster"]
        cfg = cl["config"]
        ok = cl["meets_target"]
        lines += [
            "",
            "## Cluster model: a 14-day two-class run (`cluster` key)",
            "",
            f"{cl['workload']}: {cl['requests']:,} requests, {cl['block_accesses']:,} block accesses "
            f"({cl['unique_blocks']:,} distinct) through {cfg['nodes']} machines ({cfg['routing']} routing) with "
            f"GPU, host and SSD tiers. Generate {_s(cl['generate_s'])}, compile {_s(cl['compile_trace_s'])}, "
            f"JIT warm-up {_s(cl['jit_warmup_s'])}; the cluster replay **{_s(cl['cluster_s'])}** "
            f"({cl['cluster_accesses_per_s'] / 1e6:.1f} M accesses/s; target >= 10 M accesses in <= 60 s: "
            f"{_met(ok['block_accesses_ge_10M'] and ok['cluster_s_le_60'])}), {cl['slowdown_vs_single_lru']:.1f}x one "
            f"single-cache LRU replay of the same trace ({_s(cl['single_lru_s'])}, the baseline in the same run); "
            f"peak RSS {cl['peak_rss_bytes'] / 2**30:.2f} GiB; token hit rate {cl['token_hit_rate']:.1%}, "
            f"{cl['disk_token_fraction']:.1%} of input tokens from the SSD tier.",
        ]
    if "cli" in r:
        cli = r["cli"]
        lines += ["", f"CLI start-up in the same run (whole processes, median of {cli['repeat']}): `curves` "
                  f"{_s(cli['curves']['warm_s'])} warm / {_s(cli['curves']['cold_s'])} cold, `simulate` "
                  f"{_s(cli['simulate']['warm_s'])} / {_s(cli['simulate']['cold_s'])} (the quiet record with every "
                  "run is the CLI start-up section, `scripts/sim_cli_record.py`)."]
    return "\n".join(lines) + "\n\n" + RATIONALE


def main(argv: list[str]) -> int:
    src = Path(argv[1]) if len(argv) > 1 else RESULTS / "sim.json"
    note = argv[2] if len(argv) > 2 else ""
    r = json.loads(src.read_text())
    dest = RESULTS / "sim.json"
    if src.resolve() != dest.resolve():
        shutil.copyfile(src, dest)
    out = RESULTS / "sim.md"
    out.write_text(render(r, note))
    print(f"wrote {out} and {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
