"""The cluster model's record: the latency model's calibration, admission control's p99, routing
and pooling on the real trace, the disk token fraction, and a 14-day ``tiered-kv simulate`` run.

Nothing here is timed: every number is computed by the package (deterministic, seeded) into the
JSON, and the page (``PAGES``, record ``cluster``) is rendered from that JSON alone:

    tiered-kv bench cluster --json > /tmp/cluster.json     # minutes at the record size
    tiered-kv bench record cluster /tmp/cluster.json       # benchmarks/results/cluster.{json,md}

``--size small`` computes the same sections on small inputs (what the tests run); its page says
it is not the record. The cluster model's speed is timed by ``tiered-kv bench sim`` (key
``cluster``) and recorded on that page, not here.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import subprocess
import sys
from typing import Any

from tiered_kv.bench._pages import Page

NAME = "cluster"
HELP = "cluster model record: latency calibration, admission p99, routing/pooling, disk fraction, 14-day CLI run"

#: Inputs of every section per size. "record" is what the committed page shows: figure 10's quick
#: and full admission sweeps, figure 08's largest pool, figure 05 at both sizes, the 14-day CLI run.
SIZES = {
    "record": {
        "admission": [("quick", 120.0, [0.5, 1.0, 1.5, 2.0, 2.5]),
                      ("full", 600.0, [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 2.75, 3.0])],
        "routing_total_tokens": 20_000_000,
        "disk_fraction": [False, True],  # figure 05: full (mixed) and quick (ci)
        "cli": {"synth": "mixed", "days": 14},
    },
    "small": {
        "admission": [("small", 30.0, [0.5, 1.0, 2.5])],
        "routing_total_tokens": 2_000_000,
        "disk_fraction": [True],
        "cli": {"synth": "ci", "days": 1},
    },
}

#: Dense BF16 peak of one H800 (NVIDIA's H100 SXM figure, which the H800 shares): only to put the
#: calibrated machine FLOP/s in words.
H800_BF16_DENSE_FLOPS = 989.4e12

#: The 14-day CLI run's options besides the workload.
CLI_OPTIONS = ["--nodes", "10", "--routing", "cache-aware", "--host-capacity", "14GiB",
               "--shared-capacity", "1000000000", "--admission", "--json"]

COMMAND = "tiered-kv bench cluster --json"
#: The page's machine line when the JSON names none: nothing on it depends on the machine.
MACHINE = "not timed: every figure on this page is deterministic (seeded) and the same on any machine."


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", choices=sorted(SIZES), default="record",
                        help="inputs of every section (default record: minutes; small: what the tests run)")


# --- computing: every number comes from the package -----------------------------------------

def latency_section() -> dict:
    """The latency model's inputs, its calibration and the hit/miss rows (preset deepseek-v3)."""
    from tiered_kv.sim.cluster import latency as L

    cfg, fp4 = L.preset("deepseek-v3"), L.preset("deepseek-v3-fp4")
    n = L.CALIBRATION_TOKENS
    new = L.HIT_SCENARIO_NEW_TOKENS
    fa, fb = L.prefill_flops()

    def hit_parts(c) -> dict:
        parts = L.ttft_components(c, n, loaded=n - new)
        return {k: float(v) for k, v in parts.items()}

    old_r = cfg.with_(replay_tokens=1024)
    return {
        "preset": "deepseek-v3", "linear_flops_per_token": fa, "quadratic_flops_per_token2": fb,
        "machine_flops": L.calibrate_machine_flops(), "a_s_per_token": cfg.prefill_a_s_per_token,
        "b_s_per_token2": cfg.prefill_b_s_per_token2, "kv_bytes_per_token": cfg.kv_bytes_per_token,
        "read_bandwidth_bytes_per_s": cfg.read_bandwidth_bytes_per_s, "replay_tokens": cfg.replay_tokens,
        "calibration_tokens": n, "calibration_miss_s": L.CALIBRATION_MISS_S, "published_hit_s": L.PUBLISHED_HIT_S,
        "hit_new_tokens": new, "miss_s": float(L.miss_ttft(cfg, n)), "hit": hit_parts(cfg),
        "fp4_kv_bytes_per_token": fp4.kv_bytes_per_token, "fp4_hit": hit_parts(fp4),
        "machine_time_ratio": {str(t): float(L.hit_miss_compute_ratio(cfg, t)) for t in (8192, 32768, n)},
        "price_ratio": 1.0 / cfg.hit_price_ratio,
        "r1024_hit_s": float(L.hit_ttft(old_r, n)), "r1024_ratio": float(L.miss_ttft(old_r, n) / L.hit_ttft(old_r, n)),
    }


def admission_section(settings) -> list[dict]:
    """Figure 10's table (:func:`tiered_kv.sim.cluster.latency.admission_table`) per setting."""
    from dataclasses import asdict

    from tiered_kv.sim.cluster import latency as L

    cfg = L.preset()
    out = []
    for mode, duration, rates in settings:
        mixes = [L.MixConfig(rate_per_machine_s=r, duration_s=duration, seed=0) for r in rates]
        out.append({"mode": mode, "duration_s": duration, "rates": list(rates),
                    "mix": {k: v for k, v in asdict(mixes[0]).items() if k not in ("rate_per_machine_s", "duration_s")},
                    "read_bandwidth_bytes_per_s": cfg.read_bandwidth_bytes_per_s,
                    "rows": L.admission_table(cfg, mixes)})
    return out


def routing_section(total_tokens: int) -> dict:
    """Figure 08 at one total SSD size (:func:`~tiered_kv.sim.cluster.pooling.pool_vs_split`), an unlimited pool beside it."""
    from tiered_kv.sim.cluster import ClusterConfig
    from tiered_kv.sim.cluster.pooling import pool_vs_split
    from tiered_kv.sim.trace_replay import compile_trace
    from tiered_kv.sim.traces import load_trace, shipped_trace

    trace = compile_trace(load_trace(shipped_trace("conversation")))
    rows = [{k: v for k, v in r.items() if k != "total_ssd_tokens"}
            for r in pool_vs_split([total_tokens], nodes=10, unlimited=True, trace=trace)]
    return {"trace": "conversation", "requests": trace.n_requests, "nodes": 10, "total_tokens": total_tokens,
            "load_slack": ClusterConfig().load_slack, "rows": rows}


def disk_fraction_section(quick: bool) -> dict:
    """Figure 05's run (:func:`~tiered_kv.sim.cluster.disk_day.disk_day`): day 2, totals and per class."""
    from tiered_kv.sim.cluster import summarize
    from tiered_kv.sim.cluster.disk_day import PUBLISHED_DISK_FRACTION, disk_day

    preset, cfg, _, day2 = disk_day(quick)
    total = summarize(day2)
    return {"quick": quick, "preset": preset, "nodes": cfg.nodes, "routing": cfg.routing,
            "requests": total["requests"], "disk_token_fraction": total["disk_token_fraction"],
            "by_class": {k: v["disk_token_fraction"] for k, v in total["by_class"].items()},
            "published": PUBLISHED_DISK_FRACTION}


def cli_section(synth: str, days: float) -> dict:
    """``tiered-kv simulate`` as a user runs it (a process; its --json answer, its workload's size included)."""
    argv = ["simulate", "--synth", synth, "--days", f"{days:g}", *CLI_OPTIONS]
    done = subprocess.run([sys.executable, "-m", "tiered_kv.cli", *argv], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"tiered-kv {' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    r = json.loads(done.stdout)
    keep = ("requests", "token_hit_rate", "window_hit_rate", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s",
            "cost_per_mtok", "evictions_ssd", "recomputed_by_admission", "effective_retention", "workload")
    return {"command": "tiered-kv " + " ".join(argv), **{k: r[k] for k in keep},
            "by_class": {k: v["token_hit_rate"] for k, v in r["by_class"].items()}}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every section at ``--size`` (a key of :data:`SIZES`): the JSON the page is rendered from."""
    s = SIZES[args.size]
    return {"size": args.size, "latency": latency_section(), "admission": admission_section(s["admission"]),
            "routing": routing_section(s["routing_total_tokens"]),
            "disk_fraction": [disk_fraction_section(q) for q in s["disk_fraction"]],
            "cli": cli_section(s["cli"]["synth"], s["cli"]["days"])}


# --- rendering: the page from the JSON alone -------------------------------------------------

def _pct(x: float) -> str:
    return f"{x:.1%}"


def _s(x: float) -> str:
    return f"{x:.1f} s"


def _e(x: float) -> str:
    """``7.4e10``, ``1.83e-5``: three significant digits at most, exponent without padding."""
    mant, exp = f"{x:.3g}".split("e") if "e" in f"{x:.3g}" else (f"{x:.3g}", "0")
    return f"{mant}e{int(exp)}" if exp != "0" else mant


def _gib(b: float) -> str:
    return f"{b / 2**30:g} GiB/s"


def _p99(rows: list[dict], rate: float, admission: bool, cls: str) -> float:
    return next(r["ttft_p99_s"] for r in rows
                if r["rate_per_machine_s"] == rate and r["admission"] == admission and r["class"] == cls)


def admission_lines(a: dict) -> tuple[str, str]:
    """(one sentence on the highest load, a table of every load) for one admission setting."""
    rows, rates = a["rows"], a["rates"]
    top = max(rates)
    same = lambda r: math.isclose(_p99(rows, r, True, "all"), _p99(rows, r, False, "all"), rel_tol=1e-9)
    low = max(itertools.takewhile(same, sorted(rates)), default=0.0)  # the loads up to which admission changes nothing
    sentence = (f"{a['mode'].capitalize()} mode ({a['duration_s']:g} s per point, up to {top:g} requests/s/machine): "
                f"p99 TTFT (all requests) {_s(_p99(rows, top, False, 'all'))} always loading vs "
                f"{_s(_p99(rows, top, True, 'all'))} with admission; misses' p99 "
                f"{_s(_p99(rows, top, False, 'miss'))} -> {_s(_p99(rows, top, True, 'miss'))} (recomputed restores "
                "take compute). " + (f"At low load (<= {low:g} requests/s/machine) the two are equal."
                                     if low else "Admission changes the p99 at every load of this sweep."))
    table = ["| requests/s/machine | p99 all, always load | p99 all, admission | p99 misses, always load "
             "| p99 misses, admission | restores recomputed |", "|---:|---:|---:|---:|---:|---:|"]
    for r in rates:
        rec = next(x for x in rows if x["rate_per_machine_s"] == r and x["admission"] and x["class"] == "restore")
        table.append(f"| {r:g} | {_s(_p99(rows, r, False, 'all'))} | {_s(_p99(rows, r, True, 'all'))} | "
                     f"{_s(_p99(rows, r, False, 'miss'))} | {_s(_p99(rows, r, True, 'miss'))} | "
                     f"{_pct(rec['recomputed_fraction'])} |")
    return sentence, "\n".join(table)


def _latency(lat: dict) -> str:
    hit, fp4 = lat["hit"], lat["fp4_hit"]
    ratio = lat["miss_s"] / hit["ttft_s"]
    below = 1 - hit["ttft_s"] / lat["published_hit_s"]
    mt = lat["machine_time_ratio"]
    k = lat["calibration_tokens"] // 1024
    return f"""| quantity | value | where it comes from | kind |
|---|---|---|---|
| linear prefill FLOPs | {_e(lat['linear_flops_per_token'])} FLOP/token | 2 x 37B active parameters (DeepSeek-V3) | input |
| quadratic prefill FLOPs | {_e(lat['quadratic_flops_per_token2'])} FLOP/token^2 | 2 x 128 heads x (192 + 128) x 61 layers / 2 (causal) | input |
| machine FLOP/s | {lat['machine_flops'] / 1e15:.3g} PFLOP/s | fitted so a {k}K miss = {lat['calibration_miss_s']:g} s (about 8 H800 at ~{lat['machine_flops'] / (8 * H800_BF16_DENSE_FLOPS):.0%} of dense BF16 peak) | **calibrated** |
| a, b | {_e(lat['a_s_per_token'])} s/token, {_e(lat['b_s_per_token2'])} s/token^2 | FLOPs / machine FLOP/s | derived |
| KV bytes/token | {lat['kv_bytes_per_token']:,.0f} B | 61 x (512 + 64) x 2 B (V3 MLA, BF16) | input |
| read bandwidth | {_gib(lat['read_bandwidth_bytes_per_s'])} | 3FS README, peak KVCache client read throughput | input |
| replay R | {lat['replay_tokens']} tokens | DeepSeek's bounded replay length | input |
| {k}K miss | {lat['miss_s']:.2f} s | published {lat['calibration_miss_s']:g} s | calibration |
| {k}K hit (last {lat['hit_new_tokens']} tokens new, window replayed) | {hit['ttft_s']:.3f} s = load {hit['load_s']:.3f} + suffix {hit['prefill_s']:.3f} + replay {hit['replay_s']:.3f} | published ~{lat['published_hit_s']:g} s (ours {abs(below):.0%} {'lower' if below > 0 else 'higher'}: no scheduling/decode/network overheads modelled) | reproduction (not tuned) |
| miss / hit at {k}K | {ratio:.1f}x | published "up to 26x" | reproduction ({'overshoots' if ratio > 26 else 'undershoots'}) |
| {k}K hit with FP4 KV ({lat['fp4_kv_bytes_per_token']:,.0f} B/token) | {fp4['ttft_s']:.3f} s (load {1e3 * fp4['load_s']:.1f} ms) | | model |
| miss / hit machine time (no I/O) | {mt['8192']:.1f}x at 8K, {mt['32768']:.1f}x at 32K, {mt[str(lat['calibration_tokens'])]:.0f}x at {k}K | published price gap {lat['price_ratio']:g}x | proxy (price is not machine time) |

The hit number depends on the R and "last block new" choices: with R = 1,024 instead of DeepSeek's
{lat['replay_tokens']} tokens the model gives {lat['r1024_hit_s']:.3f} s ({lat['r1024_ratio']:.1f}x). REPORT.md shows the
difference from the published numbers instead of tuning R to match them."""


def _routing(rt: dict) -> str:
    def rate(routing, ssd, unlimited=False):
        return next(r["token_hit_rate"] for r in rt["rows"] if r["routing"] == routing and r["ssd"] == ssd
                    and (r["ssd_capacity_tokens"] is None) == unlimited)

    routings = list(dict.fromkeys(r["routing"] for r in rt["rows"]))

    def shared(unlimited: bool, alike: str) -> str:  # one figure when every routing gives it, else each
        vals = [rate(x, "shared", unlimited) for x in routings]
        return alike.format(_pct(vals[0])) if max(vals) - min(vals) <= 1e-12 else \
            ", ".join(f"{_pct(v)} ({x})" for x, v in zip(routings, vals, strict=True))

    per = ", ".join(f"{_pct(rate(x, 'per-machine'))} ({x}{', load bound %gx mean' % (1 + rt['load_slack']) if x == 'cache-aware' else ''})"
                    for x in routings)
    return (f"Mooncake {rt['trace']} trace ({rt['requests']:,} requests), {rt['nodes']} machines, SSD only, total "
            f"{rt['total_tokens'] / 1e6:g}M tokens: shared pool " + shared(False, "{} token hit rate under every routing")
            + f"; per-machine caches of {rt['total_tokens'] / rt['nodes'] / 1e6:g}M tokens each {per}. Unlimited "
            "shared pool: " + shared(True, "{} (Mooncake's infinite-cache ratio), identical for all routings") + ".")


def _disk(parts: list[dict]) -> str:
    first = parts[0]
    classes = ", ".join(f"{k} {_pct(v)}" for k, v in first["by_class"].items())
    quick = [p for p in parts[1:] if p["quick"]]
    extra = f"; quick mode with the `{quick[0]['preset']}` preset: {_pct(quick[0]['disk_token_fraction'])}" if quick else ""
    return (f"Day 2 of a 2-day synthetic run, {first['nodes']} machines, {first['routing']}, GPU tier in-flight only, "
            f"unlimited shared pool: {_pct(first['disk_token_fraction'])} of input tokens served from SSD "
            f"(`{first['preset']}` preset, {first['requests']:,} requests; {classes}{extra}) against DeepSeek's "
            f"published {first['published']:.0%}. Not calibrated on it.")


def _cli(c: dict) -> str:
    by = ", ".join(f"{k} {_pct(v)}" for k, v in c["by_class"].items())
    ret = c["effective_retention"]
    ev = " and ".join(f"{q['evictions']:,} {k}" for k, q in ret.items())
    idle = [(k, q) for k, q in ret.items() if q["evictions"]]
    idle_text = "; ".join(f"{k} {q['idle_at_eviction_p50_s'] / 1e3:.1f}k / {q['idle_at_eviction_p90_s'] / 1e3:.1f}k s"
                          for k, q in idle)
    near = ""
    if len(idle) == 2:
        a, b = (q["idle_at_eviction_p50_s"] for _, q in idle)
        near = (" (one LRU watermark gives both classes nearly the same effective retention; figure 14 shows "
                "what gives them different ones)" if abs(a - b) <= 0.1 * max(a, b) else
                " (the classes leave the pool at different idle times)")
    return (f"`{c['command'].removesuffix(' --json')}`: token hit rate {_pct(c['token_hit_rate'])} ({by}), all from "
            f"SSD (no GPU tier), window-state hits {_pct(c['window_hit_rate'])} of hit requests; TTFT p50 "
            f"{c['ttft_p50_s']:.3f} s, p90 {c['ttft_p90_s']:.3f} s, p99 {c['ttft_p99_s']:.3f} s; cost "
            f"{c['cost_per_mtok']:.3f} per Mtok (miss = 1); {ev} block evictions"
            + (f", idle age at eviction p50 / p90: {idle_text}{near}" if idle else "") + ".")


def render_record(r: dict) -> str:
    """The cluster sections from the JSON of one ``tiered-kv bench cluster --json`` run."""
    a0 = r["admission"][0]
    mix = a0["mix"]
    adm = [admission_lines(a) for a in r["admission"]]
    w = r["cli"]["workload"]
    small = "" if r["size"] == "record" else f"\n\n**Size `{r['size']}`: small inputs, not the record.**"
    return f"""Every number below is computed by the package, written to the JSON and rendered from it;
`tests/test_cluster_record.py` re-runs the computation at a small size and checks the page
against it. The cluster model's speed (its 14-day replay) is timed by
`tiered-kv bench sim` (key `cluster`) and recorded on that page.{small}

## Latency model calibration (`tiered_kv/sim/cluster/latency.py`, preset `{r['latency']['preset']}`)

Values from `L.preset()`, `L.miss_ttft`, `L.hit_ttft`, `L.ttft_components` and
`L.hit_miss_compute_ratio` (also the claims of figure 02 in `tiered-kv reproduce`).

{_latency(r['latency'])}

## Admission control (figure 10, `L.admission_table`)

{mix['machines']} machines sharing one {_gib(a0['read_bandwidth_bytes_per_s'])} FIFO read queue, {mix['hit_fraction']:.0%} restores
({mix['cached_fraction']:.0%} cached), misses writing back, lognormal prompts (median {mix['median_tokens'] // 1024}K), seed {mix['seed']}.
`tests/test_latency.py` asserts admission never raises the overall p99 on a 5-load x 2-seed grid.

""" + "\n\n".join(f"{sentence}\n\n{table}" for sentence, table in adm) + f"""

## Routing and pooling on the real trace (figure 08)

{_routing(r['routing'])}

## Disk token fraction (figure 05)

{_disk(r['disk_fraction'])}

## CLI, {r['cli']['command'].split('--days ')[1].split()[0]} days

{_cli(r['cli'])} The workload: {w['requests']:,} requests, {w['block_accesses']:,} block accesses,
{w['unique_blocks']:,} distinct blocks."""


PAGES = (Page("cluster", render_record, COMMAND, title="Cluster model, TTFT and cost (`tiered-kv bench cluster`)",
              machine=MACHINE),)
