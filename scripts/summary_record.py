#!/usr/bin/env python3
"""Write benchmarks/SUMMARY.md (the head of BENCHMARKS.md) from every benchmark's JSON.

    .venv/bin/python scripts/summary_record.py          # -> benchmarks/SUMMARY.md
    scripts/assemble_benchmarks.sh                      # -> BENCHMARKS.md

Each row of the table: the area, the command that wrote its JSON (the ``recorded`` entry that
scripts/bench_record.py stores, else the command the area's own record script names), the
measured figure computed here from ``benchmarks/results/<area>.json`` (medians; the spread is in
the area's section), the target and whether it is met. Targets are goals from the issues, not
measurements, so they are constants below with the issue they come from; where a JSON carries
its own targets (sim, retention, widgets) those are used. A JSON that is missing gives a row
saying so. Nothing in the page is typed by hand.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_record import kernel_ratio, retention_met  # noqa: E402  (one definition of those figures)

RESULTS = ROOT / "benchmarks" / "results"
SUMMARY = ROOT / "benchmarks" / "SUMMARY.md"

#: Targets (goals set by the issues; not measurements).
KERNEL_CPU_RATIO = 0.25        # issue 2: CPU FP4 paths at least a quarter of clone bandwidth
KERNEL_GPU_TBPS = 3.5          # issue 2: H200 FP4 quantize/dequantize, ~75 % of 4.8 TB/s
STORE_RATIO = 0.8              # issue 3: SSD tier put/get within 0.8x of raw file I/O
TTFT_SPEEDUP_32K = 10.0        # issue 4: SSD hit at least 10x faster than a miss at 32K tokens
FLOPS_RATIO = 0.55             # issue 4: bounded-replay prefill FLOPs / decoder-only baseline
POLICY_REPLAY_S = 30.0         # issue 15: a 14-day replay of the mixed workload per policy
DAY_REPLAY_S = 30 * 60.0       # issue 16: a DeepSeek-scale day replayed within 30 minutes
DAY_RSS_BYTES = 12 * 2**30     # issue 16: ... in under 12 GiB
CLUSTER_TARGET = ">= 10 M accesses in <= 60 s"  # issue 6: the 14-day cluster run (sim.json's meets_target)

#: Commands of the areas whose record scripts do not store them in the JSON.
COMMANDS = {
    "sim": "tiered-kv bench sim --json",
    "sim_cli": "tiered-kv bench sim --json --no-cluster --scales 1 --cli-repeat 5",
    "ttft": "tiered-kv bench ttft --json --repeats 5",
    "contention": "tiered-kv bench contention --json",
    "policies": "tiered-kv bench policies --json",
    "policies_peers": "tiered-kv bench peers --skip kvcache-simulator,lmcache --json",
    "deepseek_day": "tiered-kv day generate ROOT --workers 1; "
                    "tiered-kv day replay ROOT --record benchmarks/results/deepseek_day.json",
}

HEADER = """# tiered-kv benchmarks

Every figure below is written by `scripts/summary_record.py` from a benchmark's JSON in
`benchmarks/results/`, next to the command that produced it; the sections after the summary
are the full records, one per area (`benchmarks/results/*.md`, each written from the same JSON
by its record script, with medians and their spread), assembled by
`scripts/assemble_benchmarks.sh`. Machine: the project's development machine ({cores} CPU
cores as the store benchmark recorded them, no GPU). {rerun} Earlier runs shared the cores
with other engineers' jobs. Either way absolute times are pessimistic and vary between runs;
the ratios are against baselines measured in the same run and are what to read. Each section
states the conditions of its own run.
"""

GPU_PENDING = """
**GPU figures are pending.** No GPU was lent to the sessions that wrote these. On an H200,
`bash benchmarks/gpu_check.sh` runs the CUDA kernel tests and `tiered-kv bench kernels` and
writes one results file; its figures (target: FP4 quantize/dequantize >= {tbps} TB/s, about
{share:.0%} of the {peak:g} TB/s roofline) go here once `scripts/bench_record.py kernels_gpu`
has recorded its JSON as `benchmarks/results/kernels_gpu.json`.
"""


def header(results: Path) -> str:
    """The prose head: the machine as the JSONs recorded it, and which areas bench_record.py re-ran."""
    from tiered_kv.bench.kernels import PEAK_GBPS

    store_json = results / "store.json"
    cores = json.loads(store_json.read_text()).get("cpu_count", "?") if store_json.exists() else "?"
    rerun = sorted(p.stem for p in results.glob("*.json") if "recorded" in json.loads(p.read_text()))
    text = (f"The areas {', '.join(rerun)} were re-run and recorded by `scripts/bench_record.py` with "
            "the machine note each section shows (some quiet, some at idle priority beside a model "
            "training job: each section says which).") if rerun else ""
    head = HEADER.format(cores=cores, rerun=text)
    if not (results / "kernels_gpu.json").exists():
        peak = PEAK_GBPS["H200"] / 1e3
        head += GPU_PENDING.format(tbps=KERNEL_GPU_TBPS, share=KERNEL_GPU_TBPS / peak, peak=peak)
    return head


@dataclass(frozen=True)
class Row:
    """One line of the table: where its JSON is and how to read its figure."""

    area: str
    files: tuple[str, ...]          # JSON stems under benchmarks/results, the first names the command
    target: str
    figure: Callable[..., tuple[str, str]]  # (measured, met?) from the loaded JSONs


def _x(v: float) -> str:
    return f"{v:.3f}x" if v < 1 else f"{v:.2f}x" if v < 10 else f"{v:.1f}x"


def _s(v: float) -> str:
    return f"{v * 1e3:.0f} ms" if v < 1 else f"{v:.2f} s" if v < 100 else f"{v:,.0f} s"


def _yes(ok: bool) -> str:
    return "yes" if ok else "no"


def kernels_cpu(k: dict) -> tuple[str, str]:
    parts, met = [], []
    for op in ("dequantize", "quantize"):
        cells = []
        for fmt, ops in k["fp4"].items():
            path = "numba" if "numba" in ops[op] else next(iter(ops[op]))
            r = kernel_ratio(ops[op][path])
            cells.append(f"{fmt.upper()} {_x(r)}")
            met.append(f"{fmt.upper()} {op} {_yes(r >= KERNEL_CPU_RATIO)}")
        parts.append(f"{op} " + ", ".join(cells))
    ref = [kernel_ratio(ops[op]["torch"]) for ops in k["fp4"].values() for op in ops if "torch" in ops[op]]
    tail = f" ({path} path; torch reference {_x(min(ref))}-{_x(max(ref))})" if ref else ""
    return "; ".join(parts) + " of clone bandwidth (median of paired calls)" + tail, "; ".join(met)


def kernels_gpu(k: dict) -> tuple[str, str]:
    gb = {f"{fmt.upper()} {op}": ops[op]["triton"]["gbps"] for fmt, ops in k["fp4"].items() for op in ops
          if "triton" in ops[op]}
    return (", ".join(f"{n} {v / 1e3:.2f} TB/s" for n, v in gb.items()) + f" on {k['device']}",
            "; ".join(f"{n} {_yes(v / 1e3 >= KERNEL_GPU_TBPS)}" for n, v in gb.items()))


def store(s: dict) -> tuple[str, str]:
    parts, met = [], []
    for _label, c in s["sizes"].items():
        bpt = f"{c['bytes_per_token']:.0f} B/token"
        vals = {"put": c["put_ratio_vs_raw"], "warm get": c["get_ratio_vs_raw"],
                "cold get": c["get_cold_ratio_vs_raw"]}
        parts.append(f"{bpt}: " + ", ".join(f"{n} {_x(v)}" for n, v in vals.items()))
        met.append(f"{bpt}: " + ", ".join(f"{n} {_yes(v >= STORE_RATIO)}" for n, v in vals.items()))
    return "; ".join(parts) + " (medians, raw time / tier time)", "; ".join(met)


def sim(d: dict) -> tuple[str, str]:
    c, cl = d["conversation"], d["cluster"]
    m = (f"LRU+TTL curves {_s(c['curves_s'])}; Belady one capacity {_s(c['belady_one_capacity_s'])}; "
         f"LRU replay {c['lru_replay_accesses_per_s'] / 1e6:.1f} M accesses/s; 14-day cluster "
         f"({cl['block_accesses'] / 1e6:.1f} M accesses) {_s(cl['cluster_s'])}")
    keys = ("curves_s", "belady_one_capacity_s", "lru_replay_accesses_per_s")
    met = [_yes(d["meets_targets"][k]) for k in keys] + [_yes(all(cl["meets_target"].values()))]
    return m, "; ".join(met)


def sim_cli(d: dict) -> tuple[str, str]:
    return (f"warm {_s(d['cli_warm_s'])}, cold {_s(d['cli_cold_s'])}",
            f"warm {_yes(d['meets_targets']['cli_warm_s'])}; cold {_yes(d['meets_targets']['cli_cold_s'])}")


def ttft(t: dict) -> tuple[str, str]:
    n = max(t["lengths"], key=int)
    cold, warm, host = (t[f"speedup_{k}_vs_miss"][n] for k in ("ssd_hit", "ssd_warm_hit", "ssd_host_hit"))
    return (f"at {int(n):,} tokens: cold SSD hit {_x(cold)}, warm {_x(warm)}, SSD+host {_x(host)} faster than a miss",
            _yes(cold >= TTFT_SPEEDUP_32K))


def flops(t: dict) -> tuple[str, str]:
    r = t["prefill_flops_ratio"]
    return f"{r:.3f}", _yes(r <= FLOPS_RATIO)


def contention(c: dict) -> tuple[str, str]:
    m = c["summary"]["model_over_measured"]
    return ("model / measured, median over the points: restore p50 " + _x(m["restore"]["p50"]["median"])
            + f", p99 {_x(m['restore']['p99']['median'])}; miss p50 {_x(m['miss']['p50']['median'])}, "
            f"p99 {_x(m['miss']['p99']['median'])}"), "side by side (see section)"


def peers(p: dict) -> tuple[str, str]:
    recs = [(peer, pol, v) for peer in ("kvcache-simulator", "lmcache") for pol, v in p.get(peer, {}).items()
            if isinstance(v, dict) and "speedup_vs_peer" in v]
    sp = [f"{pol} vs {peer} {_x(v['speedup_vs_peer'])} wall / {_x(v['cpu_speedup_vs_peer'])} CPU"
          for peer, pol, v in recs]
    met = [f"identical {_yes(bool(p['identical']))}"] + [
        f"{pol} vs {peer} faster {_yes(v['speedup_vs_peer'] > 1)} wall, {_yes(v['cpu_speedup_vs_peer'] > 1)} CPU"
        for peer, pol, v in recs]
    return (f"identical hit tokens at all {p['points']} capacities: {p['identical']}; speed-up (medians) "
            + ", ".join(sp)), "; ".join(met)


def policies(p: dict, pp: dict) -> tuple[str, str]:
    slowest = max(p["policies"], key=lambda k: p["policies"][k]["median_s"])
    worst = p["policies"][slowest]["median_s"]
    return (f"slowest 14-day replay {slowest} {_s(worst)} (median) of {len(p['policies'])} policies; "
            f"libCacheSim identical: {pp['identical']}"), _yes(worst <= POLICY_REPLAY_S and bool(pp["identical"]))


def retention(r: dict) -> tuple[str, str]:
    parts, met = [], []
    for key, name in (("conversation", "conversation"), ("synthetic_14d", "14-day synthetic")):
        if key in r:
            m = r[key]
            parts.append(f"{name} ({m['block_accesses'] / 1e6:.2f} M accesses) {_s(m['curves_frontier_s'])}")
            met.append(f"{name} {retention_met(r, key)}")
    return "; ".join(parts) + " (median)", "; ".join(met)


def retention_target(r: dict) -> str:
    return "; ".join(f"< {v:g} s" for k, v in r["targets_s"].items() if k in r)


def widgets(w: dict) -> tuple[str, str]:
    return (f"p50 {w['move']['p50_ms']:.0f} ms, p95 {w['move']['p95_ms']:.0f} ms "
            f"({_x(w['speedup_view_evaluate_vs_replays'])} faster than replays)"), _yes(w["meets_target_p95"])


def synth(s: dict) -> tuple[str, str]:
    g = s["generate"]
    m = (f"{g['block_accesses'] / 1e6:.1f} M block accesses in {_s(g['seconds'])} (median of "
         f"{len(g['seconds_all'])})")
    cal = s.get("calibration")
    if not cal:
        return m, "-"
    seeds = ", ".join(str(p["seed"]) for p in cal["reports"])
    out = [f"{r['traffic_class']} {r['metric']} (seed {p['seed']}: {r['achieved']:.4g}, target {r['target']:.4g})"
           for p in cal["reports"] for r in p["rows"] if not r["within"]]
    met = "yes" if cal["all_within"] else "no: outside " + ", ".join(out)
    return m + f"; calibration {'(reduced) ' if cal['quick'] else ''}seeds {seeds}", met


def day(d: dict) -> tuple[str, str]:
    rss = d["replay_peak_rss_bytes"]
    return (f"{d['input_tokens'] / 1e9:.0f} B input tokens, {d['generated']['accesses'] / 1e9:.2f} B block "
            f"accesses: replay {_s(d['replay_s'])}, peak RSS {rss / 2**30:.1f} GiB"), \
        _yes(d["replay_s"] < DAY_REPLAY_S and rss < DAY_RSS_BYTES)


ROWS = (
    Row("FP4 kernels, CPU", ("kernels",), f">= {KERNEL_CPU_RATIO}x clone (issue 2)", kernels_cpu),
    Row("FP4 kernels, H200", ("kernels_gpu",), f">= {KERNEL_GPU_TBPS} TB/s (issue 2)", kernels_gpu),
    Row("SSD tier put / get vs raw files", ("store",), f">= {STORE_RATIO}x raw (issue 3)", store),
    Row("LRU + TTL curves, Belady at one capacity, replay throughput (conversation trace); 14-day cluster run",
        ("sim",), "", sim),
    Row("CLI start-up, whole `curves` / `simulate` processes, warm and cold numba cache", ("sim_cli",), "", sim_cli),
    Row("TTFT, SSD hit vs miss (medians of interleaved repeats)", ("ttft",),
        f">= {TTFT_SPEEDUP_32K:g}x at 32K (issue 4)", ttft),
    Row("prefill FLOPs, bounded replay / decoder-only baseline at 32K", ("ttft",), f"<= {FLOPS_RATIO} (issue 4)",
        flops),
    Row("p50/p99 TTFT of restores and misses sharing one store link, measured beside the latency model",
        ("contention",), "measured and modelled side by side (issue 16)", contention),
    Row("parity with kvcache-simulator (lru, optimal, fifo) and LMCache (lru)", ("peers",),
        "identical, faster (issue 8)", peers),
    Row("policy zoo: 14-day replay per policy; libCacheSim side by side", ("policies", "policies_peers"),
        f"<= {POLICY_REPLAY_S:g} s per replay; identical hits (issue 15)", policies),
    Row("retention curves + oracle frontier", ("retention",), "", retention),
    Row("dashboard slider redraw, real trace", ("widgets",), "", widgets),
    Row("synthetic 14-day workload generation and calibration", ("synth",),
        "every calibration statistic within tolerance (issue 14)", synth),
    Row("a DeepSeek-scale day, sharded Parquet, replayed through LRU and per-class TTL", ("deepseek_day",),
        f"replay < {DAY_REPLAY_S / 60:g} min, < {DAY_RSS_BYTES / 2**30:g} GiB (issue 16)", day),
)


def _target(row: Row, data: list[dict]) -> str:
    """The row's target; for JSONs that carry their own targets, read from them."""
    d = data[0]
    if row.figure is sim:
        t = d["targets"]
        return (f"<= {t['curves_s']:g} s; <= {t['belady_one_capacity_s']:g} s; >= "
                f"{t['lru_replay_accesses_per_s'] / 1e6:g} M/s; {CLUSTER_TARGET} (issues 5, 6)")
    if row.figure is sim_cli:
        return f"<= {d['targets']['cli_warm_s']:g} s warm, <= {d['targets']['cli_cold_s']:g} s cold (issue 13)"
    if row.figure is retention:
        return retention_target(d) + " (issue 9)"
    if row.figure is widgets:
        return f"p95 < {d['target_ms']:g} ms (issue 7)"
    return row.target


def command(stem: str, d: dict) -> str:
    """The command that wrote ``d``: recorded in the JSON by bench_record.py, else the known one."""
    rec = d.get("recorded", {}).get("command")
    return rec or COMMANDS.get(stem, f"(no command recorded for {stem}.json)")


def render(results: Path = RESULTS) -> str:
    """SUMMARY.md's text from the JSONs under ``results``."""
    lines = ["| area | command | measured | target | met? |", "|---|---|---|---|---|"]
    for row in ROWS:
        paths = [results / f"{stem}.json" for stem in row.files]
        missing = [p.name for p in paths if not p.exists()]
        if missing:
            if row.figure is kernels_gpu:
                lines.append(f"| {row.area} | `bash benchmarks/gpu_check.sh` | pending (no GPU result) | "
                             f"{row.target} | pending |")
                continue
            lines.append(f"| {row.area} | - | no result ({', '.join(missing)} missing) | {row.target} | - |")
            continue
        data = [json.loads(p.read_text()) for p in paths]
        measured, met = row.figure(*data)
        cmd = "; ".join(dict.fromkeys(command(s, d) for s, d in zip(row.files, data, strict=True)))
        cmd = " / ".join(f"`{c.strip()}`" for c in cmd.split("; "))
        lines.append(f"| {row.area} | {cmd} | {measured} | {_target(row, data)} | {met} |")
    return header(results) + "\n## Summary against the targets in the issues\n\n" + "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    results = Path(argv[0]) if argv else RESULTS
    out = Path(argv[1]) if len(argv) > 1 else SUMMARY
    out.write_text(render(results))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

