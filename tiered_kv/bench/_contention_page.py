"""The page of ``tiered-kv bench contention`` (benchmarks/results/contention.md) and its summary row.

Rendered from the run's JSON alone; kept apart from the runner and the latency model beside it
(:mod:`.contention`, :mod:`._contention_report`) so the page can be re-rendered without either.
"""

from __future__ import annotations

import math

from tiered_kv.bench._pages import Page, Row

COMMAND = "tiered-kv bench contention --json"

CLASSES = (("restore", "restores"), ("miss", "misses"))


def _ms(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:,.0f}"


def _with_ci(d: dict, q: int) -> str:
    lo, hi = d.get(f"p{q}_ms_ci90", [None, None])
    return f"{_ms(d.get(f'p{q}_ms'))} ({_ms(lo)}-{_ms(hi)})"


def _rate(b) -> str:
    if b is None:
        return "unlimited"
    for unit, size in (("MiB/s", 2**20), ("KiB/s", 2**10)):
        if b >= size:
            return f"{b / size:,.3g} {unit}"
    return f"{b:,.3g} B/s"


def _policy(adm: bool) -> str:
    return "admission" if adm else "always load"


def render_record(r: dict) -> str:
    """The contention page from the JSON of one ``tiered-kv bench contention --json`` run."""
    command, note = r.get("recorded", {}).get("command", COMMAND), r.get("recorded", {}).get("machine", "")
    sc, cal, s = r["scenario"], r["calibration"], r["summary"]
    rows, link_rows = [], []
    for p in r["points"]:
        bw = _rate(p["bandwidth_bytes_per_s"])
        if p.get("bandwidth_over_break_even") is not None:
            bw += f" ({p['bandwidth_over_break_even']:.2g}x)"
        where = f"| {bw} | {p['load']:g} ({p['rate_per_s']:.2g}/s) | {_policy(p['admission'])} "
        for cls, _ in CLASSES:
            m, mo, ms = p["measured"][cls], p["model"][cls], p["model_slowed"][cls]
            if not m.get("count"):
                continue
            rec = (f"{m['recomputed_fraction']:.0%} / {mo['recomputed_fraction']:.0%}" if cls == "restore" else "-")
            rows.append(where + f"| {cls} ({m['count']}) | {_with_ci(m, 50)} | {_with_ci(m, 99)} | {_ms(mo['p50_ms'])} "
                        f"| {_ms(mo['p99_ms'])} | {_ms(ms['p99_ms'])} | {rec} |")
        thr = p["link_throughput_bytes_per_s"]
        limit = p["bandwidth_bytes_per_s"]
        share = f"{thr / limit:.0%}" if limit and thr and not math.isnan(thr) else "-"
        link_rows.append(where + f"| {p['offered_link_utilisation']:.2f} | {_rate(thr) if thr and not math.isnan(thr) else '-'} "
                         f"({share}) | {p['compute_slowdown']:.2f} | {p['decisions_agree']:.0%} | "
                         f"{p['dispatch_lateness_max_s'] * 1e3:,.0f} | {p['wall_s']:.1f} | {p.get('run_order', '-')} |")
    ratio_lines = []
    for src, name in (("model_over_measured", "latency model (isolated compute fit)"),
                      ("model_slowed_over_measured", "latency model, compute x the point's measured slowdown")):
        for cls, plural in CLASSES:
            d = s[src].get(cls, {})
            if "p99" in d:
                ratio_lines.append(f"- {name}, {plural}: p50 {d['p50']['median']:.2f} "
                                   f"({d['p50']['min']:.2f}-{d['p50']['max']:.2f}), p99 {d['p99']['median']:.2f} "
                                   f"({d['p99']['min']:.2f}-{d['p99']['max']:.2f})")
    inside = {"model": 0, "model_slowed": 0}
    cells = 0
    for p in r["points"]:
        for cls, _ in CLASSES:
            lo, hi = p["measured"][cls].get("p99_ms_ci90", [None, None])
            if lo is None:
                continue
            cells += 1
            for src in inside:
                inside[src] += lo <= p[src][cls]["p99_ms"] <= hi
    ratio_lines.append(f"- p99 inside the measured 90% interval: {inside['model']} of {cells} (point, class) cells "
                       f"for the model, {inside['model_slowed']} of {cells} for the model x slowdown")
    adm_lines = []
    keyed = {(p["bandwidth"], p["load"], p["admission"]): p for p in r["points"]}
    for row in s["admission_p99_ratio"]:
        on, off = keyed.get((row["bandwidth"], row["load"], True)), keyed.get((row["bandwidth"], row["load"], False))
        parts = []
        for cls, plural in CLASSES:
            if f"{cls}_measured" not in row or f"{cls}_model" not in row:
                continue
            text = f"{plural} measured x{row[f'{cls}_measured']:.2f}, model x{row[f'{cls}_model']:.2f}"
            if on and off and off["model_slowed"][cls].get("p99_ms"):
                text += f", model x slowdown x{on['model_slowed'][cls]['p99_ms'] / off['model_slowed'][cls]['p99_ms']:.2f}"
            parts.append(text)
        slowdown = (f" (compute slowdown {off['compute_slowdown']:.2f} without, {on['compute_slowdown']:.2f} with)"
                    if on and off else "")
        adm_lines.append(f"- {row['bandwidth']}, load {row['load']:g}{slowdown}: " + "; ".join(parts))
    classes = "; ".join(f"{plural}: measured {cal['classes'][cls]['measured_median_ms']:,.0f} ms, fitted "
                        f"{cal['classes'][cls]['fitted_median_ms']:,.0f} ms" for cls, plural in CLASSES
                        if cls in cal["classes"])
    lengths = r["lengths"]
    la0, la1 = r["load_average_start"], r["load_average_end"]
    slow = sorted(p["compute_slowdown"] for p in r["points"])
    return f"""# Tail latency under contention: restores and misses sharing one store link

Written by `tiered-kv bench record contention` from `benchmarks/results/contention.json`, the JSON of one run of:

```bash
{command}
```

{note + chr(10) + chr(10) if note else ""}Load average (1/5/15 min) {la0[0]:.1f}/{la0[1]:.1f}/{la0[2]:.1f} at the start and
{la1[0]:.1f}/{la1[1]:.1f}/{la1[2]:.1f} at the end, {r['cpus']} CPU(s), {r['torch_threads']} torch thread(s);
the whole run took {r['wall_s']:.0f} s. The points' compute ran at {slow[0]:.2f}-{slow[-1]:.2f}x the
calibration (median {slow[len(slow) // 2]:.2f}x; *compute slowdown* in the second table).

Model `{r['model']}` ({r['preset']} preset, {r['params']:,} parameters, W={r['window_tokens']},
R={r['replay_tokens']}), {r['fmt']} global KV in {r['block_size_tokens']}-token chunks of {r['chunk_bytes']:,.0f} B
({r['kv_bytes_per_token']:.1f} B/token). {sc['streams']} streams (engine threads, each with its own host tier)
share one SSD tier on a local directory behind a `{r['link']}` link token bucket. {sc['requests']} requests per
point, {lengths['restores']} of them restores (their blocks seeded on the store; a {sc['suffix_tokens']}-token
suffix, so they read, replay R tokens and write nothing) and {sc['requests'] - lengths['restores']} misses (compute
everything, write their blocks behind the first token); lognormal prompt lengths (median {sc['median_tokens']},
sigma {sc['sigma']}, seed {sc['seed']}: median {lengths['median']:,.0f}, p90 {lengths['p90']:,.0f}, max
{lengths['max']:,} tokens; the same in every point and every run with this seed); seeded Poisson arrivals dealt
round robin to the streams.

Calibration (isolated prefills, unlimited link, {cal['repeats']} repeat(s) of {len(cal['requests'])} requests,
median): compute = c + a*x_a + b*x_b with c = {cal['fixed_s'] * 1e3:.3g} ms per prefill, a = {cal['a_s_per_token']:.3g}
s/token, b = {cal['b_s_per_token2']:.3g} s/token^2 (the latency model's miss and restore formulas,
`prefill_fixed_s` = c), median error of the fit
{cal['median_abs_rel_error']:.0%} ({classes}); raw read speed {_rate(cal['raw_read_bytes_per_s'])}.
Break-even link bandwidth (a median restore's read alone takes as long as the compute it saves):
{_rate(r['break_even_bandwidth_bytes_per_s'])}. Load is a fraction of compute capacity:
load x {r['compute_capacity']} / mean isolated compute requests per second.

Each cell is TTFT in ms; measured cells give the 90% bootstrap interval of the percentile in
parentheses (over the point's requests of that class: with few requests p99 is close to the
maximum). "Model" is `latency.simulate_queue` on the same arrivals, streams and lengths with the
isolated compute fit; "model x slowdown" multiplies that fit by the point's measured compute
slowdown (second table), which takes out the CPU contention the model does not have.

| link (x break-even) | load (rate) | policy | class (requests) | measured p50 | measured p99 | model p50 | model p99 | model x slowdown p99 | restores recomputed (measured / model) |
|---|---:|---|---|---:|---:|---:|---:|---:|---:|
{chr(10).join(rows)}

The link and the CPUs at each point: offered link utilisation (bytes the requests move / limit),
measured link throughput over the link's busy window (and its share of the limit), measured
compute over the isolated fit, the share of requests whose admission decision the model made the
same way, the dispatcher's worst lateness, the point's wall time and when it ran (the pairs run in
a seeded shuffled order, so a drift of the machine's load does not follow the bandwidth or load).

| link (x break-even) | load (rate) | policy | offered link utilisation | link throughput (of limit) | compute slowdown | same decisions | dispatch lateness (ms) | wall (s) | ran |
|---|---:|---|---:|---:|---:|---:|---:|---:|---:|
{chr(10).join(link_rows)}

Model over measured, median (range) over the points:
{chr(10).join(ratio_lines)}

What admission did to p99 (with / without, at the same link and load; the two points ran one
after the other, so a change of the machine's load between them shows as a different compute
slowdown):
{chr(10).join(adm_lines) or "- (no run with both)"}
"""


def _summary(c: dict) -> tuple[str, str]:
    m = c["summary"]["model_over_measured"]
    return ("model / measured, median over the points: restore p50 " + _x(m["restore"]["p50"]["median"])
            + f", p99 {_x(m['restore']['p99']['median'])}; miss p50 {_x(m['miss']['p50']['median'])}, "
            f"p99 {_x(m['miss']['p99']['median'])}"), "side by side (see section)"


def _x(v: float) -> str:
    return f"{v:.3f}x" if v < 1 else f"{v:.2f}x" if v < 10 else f"{v:.1f}x"


PAGES = (Page("contention", render_record, COMMAND),)
SUMMARY = (Row("p50/p99 TTFT of restores and misses sharing one store link, measured beside the latency model",
               ("contention",), lambda *_: "measured and modelled side by side (issue 16)", _summary),)
