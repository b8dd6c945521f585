"""The page of ``tiered-kv bench contention`` (benchmarks/results/contention.md) and its summary row.

Rendered from the run's JSON alone, so it can be re-rendered without running anything; the words
it shares with figure 18 (the setup, the models' fit, admission's effects) come from
:mod:`tiered_kv.measure.contention.report`. The JSON carries repeats (medians with their spread,
pooled percentiles with order-statistic intervals), two queue models and admission ratios paired
by repeat; the page shows all of them, and lists where admission raised p99 as well as where it
cut it.
"""

from __future__ import annotations

import math

from tiered_kv.bench._pages import Page, Row, head, recorded
from tiered_kv.measure.contention.report import (
    CLASSES,
    DIRECTION,
    POLICY,
    effect_lines,
    model_lines,
    rate_label,
    setup,
)

COMMAND = "tiered-kv bench contention --json"


def _ms(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:,.0f}"


def _spread(d: dict, key: str, fmt=_ms) -> str:
    lo, hi = d.get(f"{key}_spread", [None, None])
    return f"{fmt(d.get(key))} ({fmt(lo)}-{fmt(hi)})"


def _ci(d: dict) -> str:
    lo, hi = d.get("p99_ms_ci90", [None, None])
    if lo is None and hi is None:
        return "-"
    if hi is None:
        return f"{_ms(lo)} to above the largest, {_ms(d.get('max_ms'))}"
    return f"{_ms(lo) if lo is not None else 'below the smallest'}-{_ms(hi)}"


def _where(p: dict) -> str:
    bw = p["bandwidth"]
    if p.get("bandwidth_over_break_even") is not None:
        bw += f" ({p['bandwidth_over_break_even']:.2g}x)"
    return f"| {bw} | {p['load']:g} ({p['rate_per_s']:.2g}/s) | {POLICY[p['policy']]} "


def _tail_rows(r: dict) -> list[str]:
    rows = []
    for p in r["points"]:
        for cls, _ in CLASSES:
            m, pooled, sh, own = p["measured"][cls], p["pooled"][cls], p["model_shared"][cls], p["model"][cls]
            if not m.get("count"):
                continue
            rec = (f"{_spread(m, 'recomputed_fraction', lambda x: f'{x:.0%}')} / {sh['recomputed_fraction']:.0%}"
                   if cls == "restore" else "-")
            rows.append(_where(p) + f"| {cls} ({m['count']}) | {_spread(m, 'p50_ms')} | {_spread(m, 'p99_ms')} "
                        f"| {_ms(pooled['p99_ms'])} ({_ci(pooled)}) | {_ms(sh['p99_ms'])} | {_ms(own['p99_ms'])} "
                        f"| {rec} |")
    return rows


def _machine_rows(r: dict) -> list[str]:
    rows = []
    for p in r["points"]:
        thr, limit = p["link_throughput_bytes_per_s"], p["bandwidth_bytes_per_s"]
        ok = thr is not None and not math.isnan(thr)
        share = f" ({thr / limit:.0%})" if limit and ok else ""
        agree = sorted(rep["decisions_agree"]["model_shared"] for rep in p["repeats"])
        rows.append(_where(p) + f"| {p['offered_link_utilisation']:.2f} | {rate_label(thr) if ok else '-'}{share} "
                    f"| {_spread(p, 'compute_slowdown', lambda x: f'{x:.2f}')} | {agree[len(agree) // 2]:.0%} "
                    f"| {p['dispatch_lateness_max_s'] * 1e3:,.0f} | {p['wall_s']:.1f} "
                    f"| {', '.join(str(k) for k in p['run_order'])} |")
    return rows


def tally(r: dict, policy: str, cls: str = "restore") -> dict[str, int]:
    """How many (bandwidth, load) points each direction holds for ``policy``'s ``cls`` p99."""
    out: dict[str, int] = {}
    for row in r["summary"]["admission"]:
        if row["policy"] == policy:
            k = row[cls]["direction"]
            out[k] = out.get(k, 0) + 1
    return out


def summary_cells(c: dict) -> tuple[str, str]:
    """(figure, met?) of the summary row: the shared-cores model's p99 beside measured, and the
    directions admission moved restore p99."""
    m = c["summary"]["model_over_measured"]["model_shared"]
    text = (f"shared-cores model / measured p99 (median over points): restores x{m['restore']['p99']['median']:.2f}, "
            f"misses x{m['miss']['p99']['median']:.2f}; {c['repeats']} repeats")
    for pol in c.get("policies", []):
        if pol != "load":
            t = tally(c, pol)
            text += f"; {POLICY[pol]}: restore p99 " + ", ".join(f"{DIRECTION[k]} at {v}" for k, v in sorted(t.items()))
    return text, "side by side, both directions shown (see section)"


def render_record(r: dict) -> str:
    """The contention page from the JSON of one ``tiered-kv bench contention --json`` run."""
    command, note = recorded(r, COMMAND)
    la0, la1 = r["load_average_start"], r["load_average_end"]
    slow = sorted(p["compute_slowdown"] for p in r["points"])
    return head("Tail latency under contention: restores and misses sharing one store link and the cores",
                "contention", command) + f"""
{note + chr(10) + chr(10) if note else ""}Load average (1/5/15 min) {la0[0]:.1f}/{la0[1]:.1f}/{la0[2]:.1f} at the start and
{la1[0]:.1f}/{la1[1]:.1f}/{la1[2]:.1f} at the end, {r['cpus']} CPU(s), {r['torch_threads']} torch thread(s);
the whole run took {r['wall_s']:.0f} s. Every point ran {r['repeats']} times, in interleaved rounds (each round
its own shuffled order, a pair's policies back to back). The points' compute ran at
{slow[0]:.2f}-{slow[-1]:.2f}x the calibration (median {slow[len(slow) // 2]:.2f}x; *compute slowdown* below).

{setup(r)}
Policies: *always load*; *admission, own TTFT* recomputes a restore when that alone finishes sooner
than queueing on the link; *admission, shared cores* also counts the sharing of the cores and
charges the delay its extra work puts on the other busy streams. Both read the measured queue
state at arrival (the link's token-bucket debt, each engine's unfinished requests, the busy engines).

TTFT in ms. Measured p50 and p99: the median over the repeats (min-max over them). Pooled p99:
every repeat's requests together, with its 90% order-statistic interval ("to above the
largest": too few requests to bound it from above; a p99 needs about 300). The models run the same arrivals, streams, lengths and
policy; "shared cores" puts the streams on the machine's cores (processor sharing),
"a machine each" is the per-machine latency model.

| link (x break-even) | load (rate) | policy | class (requests) | measured p50 | measured p99 | pooled p99 (90% interval) | model p99, shared cores | model p99, a machine each | restores recomputed (measured / shared-cores model) |
|---|---:|---|---|---:|---:|---:|---:|---:|---:|
{chr(10).join(_tail_rows(r))}

The link and the CPUs at each point: offered link utilisation (bytes the requests move / limit),
measured link throughput over the link's busy window (median over repeats, and its share of the
limit), measured compute over the isolated fit (median and range over repeats), the share of
requests whose admission decision the shared-cores model made the same way (median over
repeats), the dispatcher's worst lateness, the point's wall time over all repeats, and when its
repeats ran.

| link (x break-even) | load (rate) | policy | offered link utilisation | link throughput (of limit) | compute slowdown | same decisions | dispatch lateness (ms) | wall (s) | ran |
|---|---:|---|---:|---:|---:|---:|---:|---:|---:|
{chr(10).join(_machine_rows(r))}

Model over measured (measured: the median over repeats), median (range) over the points:
{chr(10).join(model_lines(r))}

What admission did to p99, against always loading at the same link and load, paired repeat by
repeat (the policies of a pair ran back to back): median ratio (range, pairs), beside the models'
ratios. "Nothing recomputed": the policy changed no decision there, so a ratio away from 1 is the
noise between runs, not the policy.
{chr(10).join(effect_lines(r)) or "- (no admission policy ran)"}
"""


PAGES = (Page("contention", render_record, COMMAND),)
SUMMARY = (Row("p50/p99 TTFT of restores and misses sharing one store link and the cores, measured (repeats) "
               "beside the queue model; admission both ways", ("contention",),
               lambda *_: "measured and modelled side by side; admission's increases and cuts listed", summary_cells),)
