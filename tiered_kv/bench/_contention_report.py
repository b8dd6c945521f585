"""The latency model beside the measurement, and the report of ``tiered-kv bench contention``.

For each measured point, :func:`model_beside` runs the same arrivals, streams, lengths and
decision rule through the latency model twice: with the isolated compute fit (``model``) and
with that fit times the point's measured compute slowdown (``model_slowed``, which takes the
streams' CPU sharing out of the comparison and leaves the link and the queues).
:func:`point_record` is one ``points[]`` entry of the JSON, and :func:`summarize` the ratios of
model over measured and what admission did to each class's p99. Kept apart from the runner
(:mod:`._contention_engines`) so the comparison reads only arrays, never a live engine.
"""

from __future__ import annotations

import math

import numpy as np

from tiered_kv.sim.cluster import contention as C


def _bandwidth_label(b: float) -> str:
    if math.isinf(b):
        return "unlimited"
    for unit, size in (("MiB/s", 2**20), ("KiB/s", 2**10)):
        if b >= size:
            return f"{b / size:.3g} {unit}"
    return f"{b:.3g} B/s"



def model_beside(measured: dict, work: dict, arrival: np.ndarray, *, bandwidth: float, admission: bool, link: str,
                 bytes_per_token: float, fit: tuple[float, float, float], replay_tokens: int,
                 raw_read_bytes_per_s: float, restore_s: np.ndarray,
                 recompute_s: np.ndarray) -> tuple[dict, dict, float]:
    """(model, model_slowed, compute_slowdown) for one measured point (:func:`run_point`'s dict).

    The model's link is the point's limit, or the raw read speed measured in the calibration
    when unlimited; ``write_back`` (misses' writes on the same queue) only for a shared link.
    ``compute_slowdown``: measured compute over the isolated fit, median over the requests.
    """
    c, a, b = fit
    model_bw = raw_read_bytes_per_s if math.isinf(bandwidth) else bandwidth
    cfg = C.latency_config(bytes_per_token=bytes_per_token, bandwidth_bytes_per_s=model_bw, c=c, a=a, b=b,
                           replay_tokens=replay_tokens, write_back=link == "shared")
    mod = C.model_point(cfg, work, arrival, admission=admission)
    est = np.where(measured["recomputed"] | ~work["restore"], recompute_s, restore_s)
    slowdown = float(np.median(measured["compute_s"] / est))
    slowed = C.model_point(cfg.with_(prefill_fixed_s=c * slowdown, prefill_a_s_per_token=a * slowdown,
                                     prefill_b_s_per_token2=b * slowdown), work, arrival, admission=admission)
    return mod, slowed, slowdown


def point_record(m: dict, mod: dict, slowed: dict, slowdown: float, work: dict, arrival: np.ndarray, *,
                 run_order: int, bandwidth: float, load: float, rate: float, admission: bool, break_even: float,
                 mean_link: float, wall: float, raw: bool) -> dict:
    """One ``points[]`` entry: the measured per-class percentiles beside the model's, the link's
    traffic, and with ``raw`` every request (``mean_link``: bytes read or written per request)."""
    point = {
        "run_order": run_order,
        "bandwidth_bytes_per_s": None if math.isinf(bandwidth) else bandwidth, "bandwidth": _bandwidth_label(bandwidth),
        "bandwidth_over_break_even": bandwidth / break_even if math.isfinite(break_even) else None,
        "load": load, "rate_per_s": rate, "admission": admission,
        "offered_link_utilisation": rate * mean_link / bandwidth if math.isfinite(bandwidth) else 0.0,
        "measured": C.class_percentiles(m["ttft_s"], work["restore"], m["recomputed"]),
        "model": C.class_percentiles(mod["ttft_s"], work["restore"], mod["recomputed"]),
        "model_slowed": C.class_percentiles(slowed["ttft_s"], work["restore"], slowed["recomputed"],
                                            interval=False),
        "decisions_agree": float(np.mean(m["recomputed"] == mod["recomputed"])),
        "link_bytes": m["link_bytes"], "written_bytes": m["written_bytes"],
        "link_window_s": m["link_window_s"], "link_throughput_bytes_per_s": m["link_throughput_bytes_per_s"],
        "compute_slowdown": slowdown,
        "dispatch_lateness_max_s": m["dispatch_lateness_max_s"], "wall_s": wall,
    }
    if raw:
        point["requests"] = [
            {"request": i, "class": "restore" if work["restore"][i] else "miss", "prompt_tokens": int(work["n"][i]),
             "arrival_s": float(arrival[i]), "ready_s": float(m["ready_s"][i]),
             "start_s": float(m["start_s"][i]), "ttft_ms": float(m["ttft_s"][i] * 1e3),
             "compute_ms": float(m["compute_s"][i] * 1e3), "recomputed": bool(m["recomputed"][i]),
             "model_ttft_ms": float(mod["ttft_s"][i] * 1e3), "model_recomputed": bool(mod["recomputed"][i])}
            for i in range(len(arrival))]
    return point


def summarize(points: list[dict]) -> dict:
    """Model over measured p50 and p99 per class (median and range over points; ``model``: the
    isolated compute fit, ``model_slowed``: that fit times each point's measured compute
    slowdown), and what admission did to each class's p99 at each (bandwidth, load)."""
    out: dict = {"model_over_measured": {}, "model_slowed_over_measured": {}, "admission_p99_ratio": []}
    for src in ("model", "model_slowed"):
        for cls in C.CLASSES:
            d = {}
            for q in ("p50", "p99"):
                r = [p[src][cls][f"{q}_ms"] / p["measured"][cls][f"{q}_ms"] for p in points
                     if p["measured"][cls].get(f"{q}_ms")]
                if r:
                    d[q] = {"median": float(np.median(r)), "min": float(np.min(r)), "max": float(np.max(r))}
            out[f"{src}_over_measured"][cls] = d
    keyed = {(p["bandwidth"], p["load"], p["admission"]): p for p in points}
    for (bw, ld, adm), p in keyed.items():
        other = keyed.get((bw, ld, False))
        if not adm or other is None:
            continue
        row = {"bandwidth": bw, "load": ld}
        for cls in C.CLASSES:
            for src in ("measured", "model"):
                on, off = p[src][cls].get("p99_ms"), other[src][cls].get("p99_ms")
                if on and off:
                    row[f"{cls}_{src}"] = on / off
        out["admission_p99_ratio"].append(row)
    return out
