"""The latency model beside the contention measurement, its record, and the record in words.

Per point, :func:`model_beside` runs the measured arrivals through the queue model
(:func:`~tiered_kv.sim.cluster.contention.model_point`), :func:`point_record` folds the repeats
into one ``points[]`` entry and :func:`summarize` compares. Kept apart from the runner
(:mod:`.engines`) so the comparison reads only arrays, never a live engine. The words for a record
(:func:`setup`, :func:`model_lines`, :func:`effect_lines`) are here too, so the benchmark's page
and figure 18 say the same thing the same way and read it from the JSON alone.
"""

from __future__ import annotations

import math

import numpy as np

from tiered_kv.sim.cluster import contention as C
from tiered_kv.sim.cluster import tail_stats as T

#: the model's sources in a point (``model_shared``: the streams on shared cores)
MODELS = {"model_shared": "queue model, streams on shared cores", "model": "queue model, a machine per stream"}
CLASSES = (("restore", "restores"), ("miss", "misses"))
POLICY = {"load": "always load", "own": "admission, own TTFT", "shared": "admission, shared cores"}
DIRECTION = {"increase": "raised", "cut": "cut", "mixed": "both ways (repeats disagree)", "even": "unchanged",
             "no_decision": "nothing recomputed"}


def rate_label(b: float | None) -> str:
    """'73.1 KiB/s'; None (a JSON's unlimited) and inf read 'unlimited'."""
    if b is None or math.isinf(b):
        return "unlimited"
    for unit, size in (("MiB/s", 2**20), ("KiB/s", 2**10)):
        if b >= size:
            return f"{b / size:.3g} {unit}"
    return f"{b:.3g} B/s"


def model_beside(work: dict, arrival: np.ndarray, *, bandwidth: float, policy: str, link: str,
                 bytes_per_token: float, fit: tuple[float, float, float], replay_tokens: int, block_size: int,
                 raw_read_bytes_per_s: float, cores: float) -> dict[str, dict]:
    """{``model_shared``, ``model``}: the queue model of one point, the streams on ``cores``
    shared cores and on a machine each. The link is the point's limit, or the raw read speed
    measured in the calibration when unlimited; write-backs share it only for a shared link."""
    model_bw = raw_read_bytes_per_s if math.isinf(bandwidth) else bandwidth
    times = C.request_times(work, fit=fit, replay_tokens=replay_tokens, bytes_per_token=bytes_per_token,
                            bandwidth_bytes_per_s=model_bw, block_size=block_size, write_back=link == "shared")
    streams = int(work["stream"].max()) + 1
    return {key: C.model_point(times, work, arrival, cores=cores if key == "model_shared" else streams,
                               policy=policy) for key in MODELS}


def repeat_record(m: dict, models: dict, work: dict, restore_s: np.ndarray, recompute_s: np.ndarray, *,
                  run_order: int, wall: float) -> dict:
    """One repeat of a point: its measured percentiles, compute slowdown (measured compute over
    the isolated fit, median over the requests), link traffic and agreement with each model."""
    est = np.where(m["recomputed"] | ~work["restore"], recompute_s, restore_s)
    return {"run_order": run_order, "wall_s": wall,
            "measured": T.class_percentiles(m["ttft_s"], work["restore"], m["recomputed"], interval=False),
            "compute_slowdown": float(np.median(m["compute_s"] / est)),
            "decisions_agree": {k: float(np.mean(m["recomputed"] == models[k]["recomputed"])) for k in MODELS},
            "link_bytes": m["link_bytes"], "written_bytes": m["written_bytes"], "link_window_s": m["link_window_s"],
            "link_throughput_bytes_per_s": m["link_throughput_bytes_per_s"],
            "dispatch_lateness_max_s": m["dispatch_lateness_max_s"]}


def point_record(repeats: list[dict], pooled_ttft: np.ndarray, pooled_recomputed: np.ndarray, models: dict,
                 work: dict, arrival: np.ndarray, *, bandwidth: float, load: float, rate: float, policy: str,
                 break_even: float, mean_link: float, raw: list | None = None) -> dict:
    """One ``points[]`` entry from its repeats (:func:`repeat_record`): ``measured`` holds the
    medians over the repeats with ``*_spread`` [min, max]; ``pooled`` the percentiles of every
    repeat's requests together with 90% order-statistic intervals; ``model_shared`` and ``model``
    the queue model (deterministic: the same arrivals every repeat)."""
    restore = np.tile(work["restore"], len(repeats))
    slow = [r["compute_slowdown"] for r in repeats]
    thr = [r["link_throughput_bytes_per_s"] for r in repeats if not math.isnan(r["link_throughput_bytes_per_s"])]
    point = {
        "bandwidth_bytes_per_s": None if math.isinf(bandwidth) else bandwidth, "bandwidth": rate_label(bandwidth),
        "bandwidth_over_break_even": bandwidth / break_even if math.isfinite(break_even) else None,
        "load": load, "rate_per_s": rate, "policy": policy, "admission": policy != "load",
        "offered_link_utilisation": rate * mean_link / bandwidth if math.isfinite(bandwidth) else 0.0,
        "repeats": repeats, "run_order": [r["run_order"] for r in repeats],
        "measured": T.over_repeats([r["measured"] for r in repeats]),
        "pooled": T.class_percentiles(pooled_ttft, restore, pooled_recomputed),
        **{k: T.class_percentiles(models[k]["ttft_s"], work["restore"], models[k]["recomputed"],
                                  interval=False) for k in MODELS},
        "compute_slowdown": float(np.median(slow)), "compute_slowdown_spread": [float(min(slow)), float(max(slow))],
        "link_throughput_bytes_per_s": float(np.median(thr)) if thr else math.nan,
        "dispatch_lateness_max_s": max(r["dispatch_lateness_max_s"] for r in repeats),
        "wall_s": sum(r["wall_s"] for r in repeats),
    }
    if raw is not None:
        point["requests"] = raw
    return point


def raw_requests(m: dict, models: dict, work: dict, arrival: np.ndarray) -> list[dict]:
    """Every request of one repeat (``--raw``)."""
    return [{"request": i, "class": "restore" if work["restore"][i] else "miss", "prompt_tokens": int(work["n"][i]),
             "arrival_s": float(arrival[i]), "ready_s": float(m["ready_s"][i]), "start_s": float(m["start_s"][i]),
             "ttft_ms": float(m["ttft_s"][i] * 1e3), "compute_ms": float(m["compute_s"][i] * 1e3),
             "recomputed": bool(m["recomputed"][i]),
             **{f"{k}_ttft_ms": float(models[k]["ttft_s"][i] * 1e3) for k in MODELS},
             **{f"{k}_recomputed": bool(models[k]["recomputed"][i]) for k in MODELS}}
            for i in range(len(arrival))]


def _inside(value: float, lo, hi) -> bool:
    return (lo is None or value >= lo) and (hi is None or value <= hi)


def model_fit(points: list[dict]) -> dict:
    """Per model and class: model over measured (median over repeats) p50 and p99, median and
    range over the points; and in how many (point, class) cells the model's p99 lies inside the
    measured spread over repeats, and inside the pooled 90% interval."""
    out = {}
    for src in MODELS:
        d: dict = {}
        for cls in T.CLASSES:
            c: dict = {}
            for q in ("p50", "p99"):
                r = [p[src][cls][f"{q}_ms"] / p["measured"][cls][f"{q}_ms"] for p in points
                     if p["measured"][cls].get(f"{q}_ms")]
                if r:
                    c[q] = {"median": float(np.median(r)), "min": float(np.min(r)), "max": float(np.max(r))}
            cells = [p for p in points if p["measured"][cls].get("p99_ms")]
            c["cells"] = len(cells)
            c["p99_inside_spread"] = sum(_inside(p[src][cls]["p99_ms"], *p["measured"][cls]["p99_ms_spread"])
                                         for p in cells)
            c["p99_inside_ci90"] = sum(_inside(p[src][cls]["p99_ms"], *p["pooled"][cls]["p99_ms_ci90"]) for p in cells)
            d[cls] = c
        out[src] = d
    return out


def admission_effects(points: list[dict]) -> list[dict]:
    """Each admission policy beside always loading at the same (bandwidth, load): per class, the
    p99 ratio paired by repeat (median, spread), the models' ratios, the recomputed fractions,
    and the direction ('cut', 'increase', 'mixed'; 'unchanged' when nothing was recomputed)."""
    keyed = {(p["bandwidth"], p["load"], p["policy"]): p for p in points}
    rows = []
    for (bw, ld, pol), p in keyed.items():
        base = keyed.get((bw, ld, "load"))
        if pol == "load" or base is None:
            continue
        row: dict = {"bandwidth": bw, "bandwidth_bytes_per_s": p["bandwidth_bytes_per_s"], "load": ld, "policy": pol,
                     "recomputed_measured": p["measured"]["restore"].get("recomputed_fraction", 0.0),
                     "recomputed_model_shared": p["model_shared"]["restore"].get("recomputed_fraction", 0.0)}
        changed = max(p["measured"]["restore"].get("recomputed_fraction_spread", [0.0, 0.0])[1],
                      row["recomputed_model_shared"]) > 0
        for cls in T.CLASSES:
            ratios = T.paired_ratios([r["measured"] for r in p["repeats"]], [r["measured"] for r in base["repeats"]],
                                     cls)
            row[cls] = {"measured": ratios, "direction": T.direction(ratios, changed=changed),
                        **{src: (p[src][cls]["p99_ms"] / base[src][cls]["p99_ms"]
                                 if p[src][cls].get("p99_ms") and base[src][cls].get("p99_ms") else None)
                           for src in MODELS}}
        rows.append(row)
    return rows


def summarize(points: list[dict]) -> dict:
    """``model_over_measured`` (:func:`model_fit`) and ``admission`` (:func:`admission_effects`)."""
    return {"model_over_measured": model_fit(points), "admission": admission_effects(points)}


# ---------------------------------------------------------------------------------- in words

def setup(r: dict) -> str:
    """The model, the scenario and the calibration, in words."""
    sc, cal, lengths = r["scenario"], r["calibration"], r["lengths"]
    classes = "; ".join(f"{plural}: measured {cal['classes'][cls]['measured_median_ms']:,.0f} ms, fitted "
                        f"{cal['classes'][cls]['fitted_median_ms']:,.0f} ms" for cls, plural in CLASSES
                        if cls in cal["classes"])
    return f"""Model `{r['model']}` ({r['preset']} preset, {r['params']:,} parameters, W={r['window_tokens']},
R={r['replay_tokens']}), {r['fmt']} global KV in {r['block_size_tokens']}-token chunks of {r['chunk_bytes']:,.0f} B
({r['kv_bytes_per_token']:.1f} B/token). {sc['streams']} streams (engine threads, each with its own host tier)
share one SSD tier on a local directory behind a `{r['link']}` link token bucket, and this machine's
{r['compute_capacity']} core(s). {sc['requests']} requests per point, {lengths['restores']} of them restores (their
blocks seeded on the store; a {sc['suffix_tokens']}-token suffix, so they read, replay R tokens and write nothing)
and {sc['requests'] - lengths['restores']} misses (compute everything, write their blocks behind the first token);
lognormal prompt lengths (median {sc['median_tokens']}, sigma {sc['sigma']}, seed {sc['seed']}: median
{lengths['median']:,.0f}, p90 {lengths['p90']:,.0f}, max {lengths['max']:,} tokens); seeded Poisson arrivals dealt
round robin to the streams.

Calibration (isolated prefills, unlimited link, {cal['repeats']} repeat(s) of {len(cal['requests'])} requests,
median): compute = c + a*x_a + b*x_b with c = {cal['fixed_s'] * 1e3:.3g} ms per prefill, a = {cal['a_s_per_token']:.3g}
s/token, b = {cal['b_s_per_token2']:.3g} s/token^2, median error of the fit
{cal['median_abs_rel_error']:.0%} ({classes}); raw read speed {rate_label(cal['raw_read_bytes_per_s'])}.
Break-even link bandwidth (a median restore's read alone takes as long as the compute it saves):
{rate_label(r['break_even_bandwidth_bytes_per_s'])}. Load is a fraction of compute capacity:
load x {r['compute_capacity']} / mean isolated compute requests per second.
"""


def model_lines(r: dict) -> list[str]:
    """Per model and class: its p50 and p99 over the measured ones, and how often inside the spread."""
    lines = []
    for src, name in MODELS.items():
        for cls, plural in CLASSES:
            d = r["summary"]["model_over_measured"][src].get(cls, {})
            if "p99" in d:
                lines.append(f"- {name}, {plural}: p50 x{d['p50']['median']:.2f} ({d['p50']['min']:.2f}-"
                             f"{d['p50']['max']:.2f}), p99 x{d['p99']['median']:.2f} ({d['p99']['min']:.2f}-"
                             f"{d['p99']['max']:.2f}); p99 inside the measured spread over repeats at "
                             f"{d['p99_inside_spread']} of {d['cells']} points, inside the pooled 90% interval "
                             f"at {d['p99_inside_ci90']}")
    return lines


def effect_lines(r: dict) -> list[str]:
    """Per admission point: what it did to each class's p99 against always loading, paired by repeat."""
    lines = []
    for row in r["summary"]["admission"]:
        parts = []
        for cls, plural in CLASSES:
            d = row[cls]
            if d["measured"] is None:
                continue
            m = d["measured"]
            models = ", ".join(f"{'shared-cores' if src == 'model_shared' else 'per-machine'} model x{d[src]:.2f}"
                               for src in MODELS if d.get(src))
            parts.append(f"{plural} {DIRECTION[d['direction']]}: x{m['median']:.2f} ({m['min']:.2f}-{m['max']:.2f}, "
                         f"{len(m['ratios'])} pairs; {models})")
        lines.append(f"- {POLICY[row['policy']]}, {row['bandwidth']}, load {row['load']:g} (recomputed "
                     f"{row['recomputed_measured']:.0%} measured, {row['recomputed_model_shared']:.0%} shared-cores "
                     f"model): " + "; ".join(parts))
    return lines
