"""p99 TTFT of restores and misses sharing one store link: measured with the engine, and modelled.

Why: DeepSeek's global KV pool is shared, so restores wait for each other's reads and for the
writes of misses; a reader asked when admission control should recompute a prompt although its
prefix is cached. ``tiered-kv bench contention`` (:mod:`tiered_kv.bench.contention`) runs N
engine streams against one SSD tier whose link is a token bucket, with a fixed lognormal mix of
restores and misses, at several link bandwidths and loads, with and without admission
(recompute when the queued read time plus the restore's compute exceeds the recompute
estimate); the latency model (:mod:`tiered_kv.sim.cluster.latency`, compute fitted to the same
engine's isolated prefills) predicts every point with the same arrivals. Solid: measured;
dashed: the model; dotted: the model with its compute times the point's measured compute
slowdown (the streams share this machine's CPUs; the model gives each its own machine).

Data: the recorded run (``benchmarks/results/contention.json``, BENCHMARKS.md) in quick mode when
it exists, else a tiny live run (tiny preset, random weights); in full mode a live run with the
trained small checkpoint.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl

from tiered_kv.viz.report import FigureResult
from tiered_kv.viz.style import dashed_lines

NAME = "18_contention"
TITLE = "p99 TTFT under contention for one store link: restores and misses, measured vs latency model"
RECORDED = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "contention.json"
CLASS_NAMES = {"restore": "restores (prefix cached: read it)", "miss": "misses (compute, write blocks)"}
#: (sorted so that the measurement is the solid line)
SOURCE_NAMES = {"measured": "engine, measured on this machine", "model": "latency model (isolated compute fit)",
                "model_slowed": "latency model, compute x measured slowdown"}
POLICY_NAMES = {False: "always load", True: "admission: recompute when sooner"}


def _live(quick: bool) -> dict:
    from tiered_kv.bench.contention import load_model, measure_contention
    from tiered_kv.sim.cluster.contention import ContentionScenario

    if quick:
        import torch

        from tiered_kv.model import EncoderDecoder, preset

        torch.manual_seed(0)
        model, source = EncoderDecoder(preset("tiny")).eval(), "random weights (tiny preset)"
        sc = ContentionScenario(streams=2, requests=16, median_tokens=128, max_tokens=1024, block_size=32,
                                suffix_tokens=8)
        return measure_contention(sc, model=model, model_source=source, loads=(0.5,), calibration=4,
                                  calibration_repeats=1, progress=False)
    model, source = load_model("small")
    sc = ContentionScenario(streams=4, requests=32)
    return measure_contention(sc, model=model, model_source=source, progress=False)


def result(quick: bool) -> tuple[dict, str]:
    """(the benchmark's JSON, where it came from)."""
    if quick and RECORDED.is_file():
        return json.loads(RECORDED.read_text()), "the recorded run in benchmarks/results/contention.json"
    return _live(quick), ("a tiny live run (tiny preset, random weights, 2 streams, 16 requests)" if quick
                          else "a live run with the trained small checkpoint (4 streams, 32 requests)")


def frame(res: dict) -> pl.DataFrame:
    """One row per (point, class, source): bandwidth (KiB/s), load, policy, p50/p99 TTFT (s)."""
    rows = []
    for p in res["points"]:
        if p["bandwidth_bytes_per_s"] is None:  # unlimited: no place on a bandwidth axis
            continue
        for src in SOURCE_NAMES:
            for cls in ("restore", "miss"):
                d = p.get(src, {}).get(cls, {})
                if not d.get("count"):
                    continue
                rows.append({"bandwidth_kib_s": p["bandwidth_bytes_per_s"] / 1024, "load": p["load"],
                             "load_name": f"load {p['load']:g} of compute capacity ({p['rate_per_s']:.2g} req/s)",
                             "policy": POLICY_NAMES[bool(p["admission"])], "source": SOURCE_NAMES[src],
                             "class": CLASS_NAMES[cls], "ttft_p50_s": d["p50_ms"] / 1e3,
                             "ttft_p99_s": d["p99_ms"] / 1e3, "recomputed_fraction": d["recomputed_fraction"],
                             "compute_slowdown": p["compute_slowdown"]})
    return pl.DataFrame(rows)


def chart(data: pl.DataFrame):
    import altair as alt

    layer = dashed_lines(
        data,
        x=alt.X("bandwidth_kib_s:Q", scale=alt.Scale(type="log"), title="link bandwidth limit (KiB/s, log)"),
        y=alt.Y("ttft_p99_s:Q", scale=alt.Scale(type="log"), title="p99 TTFT (seconds, log)"),
        color=alt.Color("policy:N", title="policy", legend=alt.Legend(orient="bottom", labelLimit=400)),
        dash="source:N", dash_title="source", dash_legend_kwargs={"orient": "bottom", "labelLimit": 400},
        tooltip=[alt.Tooltip("bandwidth_kib_s:Q", format=".3g", title="bandwidth (KiB/s)"), "load", "policy",
                 "class", "source", alt.Tooltip("ttft_p50_s:Q", format=".3f", title="p50 TTFT (s)"),
                 alt.Tooltip("ttft_p99_s:Q", format=".3f", title="p99 TTFT (s)"),
                 alt.Tooltip("recomputed_fraction:Q", format=".0%", title="restores recomputed"),
                 alt.Tooltip("compute_slowdown:Q", format=".2f", title="measured compute / isolated fit")],
    ).properties(width=250, height=200)
    return layer.facet(row=alt.Row("load_name:N", title=None),
                       column=alt.Column("class:N", title="requests", sort=list(CLASS_NAMES.values()))
                       ).properties(title=TITLE)


def notes_for(res: dict, how: str) -> str:
    sc = res["scenario"]
    cal = res["calibration"]
    s = res["summary"]
    ratio = s["model_over_measured"]
    parts = [f"Data: {how}. Model {res['model']} ({res['params']:,} parameters, R={res['replay_tokens']}); "
             f"{sc['streams']} streams, {sc['requests']} requests per point ({res['lengths']['restores']} restores), "
             f"lognormal prompts (median {sc['median_tokens']} tokens, sigma {sc['sigma']}, seed {sc['seed']}: "
             f"median {res['lengths']['median']:.0f}, max {res['lengths']['max']}), {res['block_size_tokens']}-token "
             f"chunks of {res['chunk_bytes']:,.0f} B ({res['kv_bytes_per_token']:.1f} B/token), link "
             f"'{res['link']}'. Compute fit on isolated prefills: c={cal.get('fixed_s', 0.0):.3g} s per prefill, "
             f"a={cal['a_s_per_token']:.3g} s/token, "
             f"b={cal['b_s_per_token2']:.3g} s/token^2 (median error {cal['median_abs_rel_error']:.0%}); "
             f"break-even bandwidth {res['break_even_bandwidth_bytes_per_s'] / 1024:.3g} KiB/s."]
    slowed = s.get("model_slowed_over_measured", {})
    for cls, plural in (("restore", "restores"), ("miss", "misses")):
        r = ratio.get(cls, {}).get("p99")
        if r:
            text = f"Model/measured p99 for {plural}: median {r['median']:.2f} (range {r['min']:.2f}-{r['max']:.2f})"
            r2 = slowed.get(cls, {}).get("p99")
            if r2:
                text += (f"; with the point's measured compute (dotted) {r2['median']:.2f} "
                         f"({r2['min']:.2f}-{r2['max']:.2f})")
            parts.append(text + ".")
    slow = [p["compute_slowdown"] for p in res["points"]]
    parts.append(f"Measured compute was {min(slow):.1f}-{max(slow):.1f}x the isolated fit: the streams share "
                 f"{res['cpus']} CPU(s) (load average {res['load_average_start'][0]:.1f} at the start), where the "
                 "model gives each stream a machine of its own.")
    cut = [r for r in s["admission_p99_ratio"] if r.get("restore_measured", math.inf) < 0.9]
    if cut:
        parts.append("Admission cut the measured restore p99 at " + ", ".join(
            f"{r['bandwidth']}, load {r['load']:g} (x{r['restore_measured']:.2f}; model x{r.get('restore_model', math.nan):.2f})"
            for r in cut) + ".")
    else:
        parts.append("Admission cut no measured restore p99 by 10% or more here.")
    return " ".join(parts)


def build(quick: bool) -> FigureResult:
    res, how = result(quick)
    data = frame(res)
    return FigureResult(chart=chart(data), claims=[], data=data, notes=notes_for(res, how))
