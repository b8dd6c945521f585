#!/usr/bin/env python3
"""Write benchmarks/results/<area>.md (and <area>.json) from the JSON of one benchmark run.

    tiered-kv bench kernels --json > /tmp/kernels.json
    .venv/bin/python scripts/bench_record.py kernels /tmp/kernels.json "tiered-kv bench kernels --json" \\
        ["machine note"]
    .venv/bin/python scripts/summary_record.py && scripts/assemble_benchmarks.sh

Areas: kernels, store, peers, retention, widgets, synth (``tiered-kv bench <area> --json``), and
kernels_gpu (the JSON of ``tiered-kv bench kernels --json`` on a CUDA device).
The JSON is copied to benchmarks/results/<area>.json with a ``recorded`` entry (the command
and the machine note) that :mod:`summary_record` reads; the page shows every figure as the
median with its spread (min-max over the interleaved repeats, and how many), computed here
from the JSON. Nothing in a page is typed by hand.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"

#: The machine note used when none is given: how the runs recorded in December 2026 were made.
DEFAULT_MACHINE = ("the development machine, 2 CPU cores, no GPU. A model training job was running on "
                   "both cores at normal priority while this benchmark ran at idle priority (nice 19, "
                   "autogroup nice 19), so absolute times are pessimistic, by several times; the ratios "
                   "are against baselines measured in the same run, interleaved with it.")


def spread(values: list[float], fmt: Callable[[float], str]) -> str:
    """``median (min-max, n runs)`` of ``values``; just the value for a single run."""
    vals = [float(v) for v in values]
    if not vals:
        return "-"
    med = statistics.median(vals)
    if len(vals) == 1:
        return f"{fmt(med)} (1 run)"
    return f"{fmt(med)} ({fmt(min(vals))}-{fmt(max(vals))}, {len(vals)} runs)"


def span(values: list[float], fmt: Callable[[float], str]) -> str:
    """``min-max`` of ``values`` (the spread beside a median shown elsewhere)."""
    vals = [float(v) for v in values]
    return f"{fmt(min(vals))}-{fmt(max(vals))}" if len(vals) > 1 else "1 run"


def ms(x: float) -> str:
    return f"{1e3 * x:,.1f} ms" if x < 1 else f"{x:,.2f} s"


def sec(x: float) -> str:
    return f"{x:,.3f} s" if x < 10 else f"{x:,.1f} s"


def ratio(x: float) -> str:
    return f"{x:.3f}x" if x < 1 else f"{x:.2f}x" if x < 10 else f"{x:,.1f}x"


def _per_run_ratios(num: list[float], den: list[float]) -> list[float]:
    """num[i] / den[i] of paired runs (a baseline and the path timed beside it)."""
    return [a / b for a, b in zip(num, den, strict=False) if b > 0]


# ----------------------------------------------------------------------------------- kernels
def kernel_ratio(e: dict) -> float:
    """A path's ratio vs clone: the median of its per-call ratios, each call against the clone
    timed just before it (the JSON's ``ratio_vs_clone``, median GB/s over the median clone's, when
    the calls were not recorded). The paired median is the figure read: the clone's own time
    includes the page faults of its fresh output, which differ from call to call."""
    runs = e.get("ratio_vs_clone_all")
    return statistics.median(runs) if runs else e["ratio_vs_clone"]


def _ratio_cell(e: dict) -> str:
    if "ratio_vs_clone" not in e:
        return "-"
    return (f"**{ratio(kernel_ratio(e))}** (per call {span(e.get('ratio_vs_clone_all', []), ratio)}; "
            f"ratio of medians {ratio(e['ratio_vs_clone'])})")


def render_kernels(r: dict) -> str:
    lines = [f"Device `{r['device']}`, torch {r['torch']}, {r['threads']} thread(s), {r['dtype']} input "
             f"shaped {r['shape']} ({r['elements']:,} elements), clock: {r['clock']}. Each path is timed "
             "right after a clone of the same input; the ratio of each call is against the clone "
             "timed just before it. Bytes per element: "
             + "; ".join(f"{k}: {v}" for k, v in r["bytes_per_element_formulas"].items()) + ".",
             "",
             f"Clone alone (its own timing pass): {spread([r['clone']['bytes_per_element'] * r['elements'] / s / 1e9 for s in r['clone'].get('seconds_all', [r['clone']['seconds']])], lambda g: f'{g:.1f} GB/s')}.",
             "",
             "| format | op | path | seconds per call | GB/s (median) | ratio vs clone (median of paired calls) |",
             "|---|---|---|---|---:|---|"]
    for fmt, ops in r["fp4"].items():
        for op, paths in ops.items():
            for path, e in paths.items():
                lines.append(f"| {fmt} | {op} | {path} | {spread(e.get('seconds_all', [e['seconds']]), ms)} | "
                             f"{e['gbps']:.2f} | {_ratio_cell(e)} |")
    a = r["attention"]
    sh = a["shape"]
    for path, e in a.items():
        if isinstance(e, dict) and "gbps" in e:
            lines.append(f"| attention Tq {sh['Tq']}, Tk {sh['Tk']}, {sh['Hq']}/{sh['Hkv']} heads, D {sh['D']}, "
                         f"W {sh['window']} | forward | {path} | {spread(e.get('seconds_all', [e['seconds']]), ms)} | "
                         f"{e['gbps']:.2f} ({e['tflops'] * 1e3:.1f} GFLOP/s) | "
                         f"{_ratio_cell(e)} |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------- store
STORE_RATIOS = (("put / raw write", "raw_write", "put"), ("get warm / raw read", "raw_read_warm", "get_warm"),
                ("get warm / raw os.read", "raw_read_os_warm", "get_warm"),
                ("get cold / raw read", "raw_read_cold", "get_cold"))


def store_ratio_runs(size: dict, num: str, den: str) -> list[float]:
    """Per-repeat ratios raw / tier (above 1: the tier is faster) of one size case."""
    runs = size.get("seconds_all")
    if runs:
        return _per_run_ratios(runs[num], runs[den])
    return [size["seconds"][num] / size["seconds"][den]]


def render_store(r: dict) -> str:
    lines = [f"Prefix of {r['prefix_tokens']:,} tokens in {r['block_size']}-token chunks, {r['repeat']} repeats "
             f"(writes and warm reads interleaved with the raw baselines, order alternating per repeat), "
             f"io_threads {r['io_threads']}, file system under `{r['filesystem_dir']}`. Each cell is median raw "
             "time / median tier time (above 1: the tier is faster), with the "
             f"range of the repeats' own ratios. {r['notes']}.", "",
             "| size per token | chunk | " + " | ".join(n for n, _, _ in STORE_RATIOS)
             + " | get_prefix p50 / p99 by readers |",
             "|---|---|" + "---|" * len(STORE_RATIOS) + "---|"]
    for label, s in r["sizes"].items():
        lat = "; ".join(f"{n}: {d['p50_ms']:,.0f} / {d['p99_ms']:,.0f} ms ({d['samples']} reads)"
                        for n, d in s["get_prefix_latency_ms"].items())
        cells = " | ".join(f"**{ratio(s['seconds'][a] / s['seconds'][b])}** (repeats {span(store_ratio_runs(s, a, b), ratio)})"
                           for _, a, b in STORE_RATIOS)
        lines.append(f"| {label}: {s['kv_heads']} KV heads x {s['head_dim']}, {s['fmt']} = "
                     f"{s['bytes_per_token']:.0f} B | {s['chunk_bytes'] / 1e3:.1f} KB | {cells} | {lat} |")
    lines += ["", "Seconds per phase (median with range over the repeats):", "",
              "| size | phase | seconds | GB/s (median) |", "|---|---|---|---:|"]
    for label, s in r["sizes"].items():
        for k, v in s["seconds"].items():
            lines.append(f"| {label} | {k} | {spread(s.get('seconds_all', {}).get(k, [v]), sec)} | {s['GBps'][k]:.3f} |")
    naive = [(label, s["naive_zarr_array_per_chunk"]) for label, s in r["sizes"].items()
             if "naive_zarr_array_per_chunk" in s]
    if naive:
        lines += ["", "The layout this tier replaced, one Zarr array per chunk (one timed run each, against the "
                  "raw medians above):", "", "| size | put / raw write | get warm / raw read |", "|---|---:|---:|"]
        lines += [f"| {label} | {n['put_ratio_vs_raw']:.3f}x | {n['get_ratio_vs_raw']:.3f}x |" for label, n in naive]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------- peers
def render_peers(r: dict) -> str:
    lines = [f"Trace `{Path(r['trace']).name}` ({r['requests']:,} requests, {r['block_size']}-token blocks), "
             f"{r['points']} capacities log-spaced from {r['capacities_tokens'][0]:,.0f} to "
             f"{r['capacities_tokens'][-1]:,.0f} tokens. One-off costs left out of every timing: numba kernels "
             f"{sec(r['numba_warmup_seconds'])}. {r['note']}. Speed-up = peer median / tiered-kv median; the "
             "range is over the rounds' own ratios.", "",
             f"Every point identical on every peer and policy: **{r['identical']}** ({r['peers_run']} comparisons).",
             "", "| peer | policy | tiered-kv policy | identical (mismatches) | peer wall | tiered-kv wall | "
             "speed-up, wall | speed-up, CPU |", "|---|---|---|---|---|---|---|---|"]
    for peer in ("kvcache-simulator", "lmcache"):
        for pol, v in r.get(peer, {}).items():
            if not (isinstance(v, dict) and "identical" in v):
                continue
            pw, ow = v.get("peer_seconds_all", [v["peer_seconds"]]), v.get("ours_seconds_all", [v["ours_seconds"]])
            pc = v.get("peer_cpu_seconds_all", [v["peer_cpu_seconds"]])
            oc = v.get("ours_cpu_seconds_all", [v["ours_cpu_seconds"]])
            lines.append(f"| {peer} | {pol} | `{v['ours_policy']}` | {v['identical']} ({v['mismatches']}) | "
                         f"{spread(pw, sec)} | {spread(ow, sec)} | {ratio(v['speedup_vs_peer'])} "
                         f"(rounds {span(_per_run_ratios(pw, ow), ratio)}) | {ratio(v['cpu_speedup_vs_peer'])} "
                         f"(rounds {span(_per_run_ratios(pc, oc), ratio)}) |")
    for peer in ("kvcache-simulator", "lmcache", "libcachesim"):
        st = r.get(peer, {}).get("status")
        if st is not None and not st.get("available", True):
            lines.append(f"\n{peer}: not available here ({st.get('detail', '')}).")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------- retention
#: Issue 9's synthetic target is for a 14-day run of about 10 M block accesses: a smaller run
#: says nothing about it (a run within 5 % of the size counts).
RETENTION_SYNTH_ACCESSES = 10e6


def retention_met(r: dict, key: str) -> str:
    """'yes' / 'no' against the JSON's own verdict, or why it does not apply."""
    n = r[key]["block_accesses"]
    if key == "synthetic_14d" and n < 0.95 * RETENTION_SYNTH_ACCESSES:
        return f"not at the target's size ({n / 1e6:.1f} M of {RETENTION_SYNTH_ACCESSES / 1e6:g} M accesses)"
    return "yes" if r["meets_targets"][key] else "no"


def render_retention(r: dict) -> str:
    lines = [f"Trace `{r['trace']}` (load and compile {sec(r['load_and_compile_trace_s'])}, numba warm-up "
             f"{sec(r['jit_warmup_s'])}, neither inside a timing). Curves + frontier and the per-TTL event-replay "
             "baseline are timed in interleaved rounds; medians with the range over the rounds. Peak RSS "
             f"{r['peak_rss_gib']:.2f} GiB.", "",
             "| trace | block accesses | TTLs per class | curves + frontier | target | met? | whole analysis (1 run) "
             "| baseline replay per TTL | baseline, all TTLs | speed-up vs replays |",
             "|---|---:|---:|---|---:|---|---:|---|---:|---|"]
    for key in ("conversation", "synthetic_14d"):
        if key not in r:
            continue
        m = r[key]
        base_note = (f"{m['baseline_replays_timed']} timed, x {m['ttl_points_per_class']}"
                     if m["baseline_extrapolated"] else f"all {m['baseline_replays_timed']} timed")
        name = f"{key} ({m['preset']}, rate x {m['rate_factor']:.3g})" if "preset" in m else key
        lines.append(f"| {name} | "
                     f"{m['block_accesses']:,} | {m['ttl_points_per_class']} | "
                     f"{spread(m.get('curves_frontier_s_all', [m['curves_frontier_s']]), sec)} | "
                     f"{r['targets_s'][key]:g} s | {retention_met(r, key)} | "
                     f"{sec(m['analysis_s'])} | "
                     f"{spread(m.get('baseline_replay_per_ttl_s_all', [m['baseline_replay_per_ttl_s']]), sec)} | "
                     f"{sec(m['baseline_all_ttls_s'])} ({base_note}) | "
                     f"{ratio(m['speedup_vs_replays'])} (rounds {span(m.get('speedup_vs_replays_all', []), ratio)}) |")
    if "synthetic_14d" in r:
        m = r["synthetic_14d"]
        lines += ["", f"Synthetic run, outside the timings: generation {sec(m['generate_s'])}, trace compile "
                  f"{sec(m['compile_trace_s'])}."]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------- widgets
def render_widgets(r: dict) -> str:
    def row(name: str, d: dict) -> str:
        return f"| {name} | {d['p50_ms']:,.1f} | {d['p95_ms']:,.1f} | {d['max_ms']:,.1f} | {d['n']} |"

    return "\n".join([
        f"Trace `{r['trace']}` ({r['requests']:,} requests, {r['block_lookups']:,} block lookups, "
        f"{r['table_rows']:,} table rows). One-time table build {sec(r['build_s'])} (numba warm-up "
        f"{sec(r['jit_warmup_s'])}, not in it). A move = setting a slider's value from Python: evaluate, "
        "summary table, chart spec handed to the widget (the browser's render is not included).", "",
        "| measurement | p50 (ms) | p95 (ms) | max (ms) | samples |", "|---|---:|---:|---:|---:|",
        row("slider move, end to end in the kernel", r["move"]),
        row("evaluate only", r["evaluate"]),
        row("baseline: one event replay (the point only)", r["baseline_one_replay"]),
        row(f"baseline: the whole view by event replays ({r['view_points']} points)", r["baseline_view_by_replays"]),
        "",
        f"Target: a move under {r['target_ms']:g} ms at p95: **{'met' if r['meets_target_p95'] else 'not met'}** "
        f"(p95 {r['move']['p95_ms']:,.1f} ms). The view by table is "
        f"{ratio(r['speedup_view_evaluate_vs_replays'])} faster than by replays (p50 over p50)."])


# ----------------------------------------------------------------------------------- synth
def _calib_value(v: float) -> str:
    return f"{v:.4f}" if abs(v) < 10 else f"{v:,.0f}"


def render_synth(r: dict) -> str:
    g = r["generate"]
    lines = [f"`generate(PRESETS['{r['preset']}'], {r['days']:g} days, seed)` for seeds {r['seeds']}, "
             f"{r['repeat']} round(s) through the seeds:", "",
             "| seconds per trace | block accesses (median) | requests (median) | accesses/s | peak RSS |",
             "|---|---:|---:|---|---:|",
             f"| {spread(g['seconds_all'], sec)} | {g['block_accesses']:,.0f} | {g['requests']:,.0f} | "
             f"{spread([c['accesses_per_s'] for c in g['calls']], lambda x: f'{x / 1e6:.2f} M')} | "
             f"{g['peak_rss_mib']:,.0f} MiB |"]
    cal = r.get("calibration")
    if cal:
        reps = cal["reports"]
        took = ", ".join(f"seed {p['seed']} in {sec(p['seconds'])}" for p in reps)
        lines += ["", f"Calibration table ({'reduced sizes' if cal['quick'] else 'full size'}; "
                  f"`calibration_report(seed)`, {took}):",
                  "", "| class | metric | target | tolerance | " + " | ".join(f"seed {p['seed']}" for p in reps)
                  + " | within (all seeds) | source |", "|" + "---|" * (6 + len(reps))]
        for i, row in enumerate(reps[0]["rows"]):
            tol = (f"±{row['tolerance']:.0%}" if row["tolerance_kind"] == "relative"
                   else f"±{_calib_value(row['tolerance'])}")
            vals = " | ".join(_calib_value(p["rows"][i]["achieved"]) for p in reps)
            ok = all(p["rows"][i]["within"] for p in reps)
            lines.append(f"| {row['traffic_class']} | {row['metric']} | {_calib_value(row['target'])} | {tol} | "
                         f"{vals} | {'yes' if ok else 'NO'} | {row['source']} |")
        lines += ["", f"Every statistic within its tolerance on every seed: **{cal['all_within']}**."]
    return "\n".join(lines)


TITLES = {"kernels": "FP4 kernels (`tiered-kv bench kernels`)",
          "kernels_gpu": "FP4 kernels on the GPU (`bash benchmarks/gpu_check.sh`: `tiered-kv bench kernels`)",
          "store": "SSD tier put / get_prefix vs raw files (`tiered-kv bench store`)",
          "peers": "Parity and speed against the public simulators (`tiered-kv bench peers`)",
          "retention": "Retention curves + oracle frontier speed (`tiered-kv bench retention`)",
          "widgets": "Retention dashboard slider redraw (`tiered-kv bench widgets`)",
          "synth": "Synthetic multi-day workload: generation speed and calibration (`tiered-kv bench synth`)"}
RENDER: dict[str, Callable[[dict], str]] = {
    "kernels": render_kernels, "kernels_gpu": render_kernels, "store": render_store, "peers": render_peers, "retention": render_retention,
    "widgets": render_widgets, "synth": render_synth}


def render(area: str, r: dict) -> str:
    """The whole page of ``area`` from its recorded JSON (with its ``recorded`` entry)."""
    rec = r.get("recorded") or {}
    return f"""# {TITLES[area]}

Written by `scripts/bench_record.py` from `benchmarks/results/{area}.json`, the JSON of one run of:

```bash
{rec.get('command', '(command not recorded)')}
```

Machine: {rec.get('machine', DEFAULT_MACHINE)}

{RENDER[area](r)}
"""


def record(area: str, src: Path, command: str, machine: str = DEFAULT_MACHINE,
           results: Path = RESULTS) -> Path:
    """Copy ``src`` to ``results/<area>.json`` with the command and machine note, write the page."""
    if area not in RENDER:
        raise SystemExit(f"bench_record: unknown area {area!r}; choose from {', '.join(RENDER)}")
    try:
        r = json.loads(Path(src).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise SystemExit(f"bench_record: cannot read the benchmark JSON {src}: {e}") from e
    r["recorded"] = {"command": command, "machine": machine}
    results.mkdir(parents=True, exist_ok=True)
    (results / f"{area}.json").write_text(json.dumps(r, indent=1) + "\n")
    page = results / f"{area}.md"
    page.write_text(render(area, r))
    return page


def main(argv: list[str]) -> int:
    if len(argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        return 2
    print(f"wrote {record(argv[0], Path(argv[1]), argv[2], *argv[3:])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
