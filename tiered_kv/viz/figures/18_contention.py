"""p99 TTFT under contention for one store link and shared compute: measured, modelled, and what
admission does, both ways.

Why: DeepSeek's global KV pool is shared, so restores wait for each other's reads and for the
writes of misses; when should admission control recompute a prompt although its prefix is cached?
``tiered-kv bench contention`` (its ``--help`` tells the scenario and the ``own`` and ``shared``
admission policies) measures it with N engine streams on one rate-limited link. Recomputing is not
free when the streams share cores, so the queue model beside it
(:mod:`tiered_kv.sim.cluster.shared_compute`) puts the streams on shared cores. Top: p99 TTFT
against the link's bandwidth, measured (median over repeats, bars: spread) beside the model.
Bottom: each policy's p99 over always loading's, paired repeat by repeat; above 1 admission hurt,
below 1 it helped.

Data: the recorded run (``benchmarks/results/contention.json``) when it exists; else a live run.
"""

from __future__ import annotations

import json

import polars as pl

from tiered_kv import REPO_ROOT
from tiered_kv.measure.contention.report import MODELS, POLICY, effect_lines, model_lines, setup
from tiered_kv.viz.report import FigureResult

NAME = "18_contention"
TITLE = "p99 TTFT under contention for one store link and shared compute; admission's effect, both ways"
RECORDED = REPO_ROOT / "benchmarks" / "results" / "contention.json"
CLASS_NAMES = {"restore": "restores (prefix cached: read it)", "miss": "misses (compute, write blocks)"}
#: (sorted so that the measurement is the solid line)
SOURCE_NAMES = {"measured": "engine, measured (median of repeats; bars: spread)",
                "model_shared": MODELS["model_shared"]}


def _live(quick: bool) -> dict:
    from tiered_kv.measure import load_model
    from tiered_kv.measure.contention import measure_contention
    from tiered_kv.sim.cluster.contention import ContentionScenario

    if quick:
        model, source = load_model("tiny")  # random weights: no tiny checkpoint is committed
        sc = ContentionScenario(streams=2, requests=16, median_tokens=128, max_tokens=1024, block_size=32,
                                suffix_tokens=8)
        return measure_contention(sc, model=model, model_source=source, loads=(0.5,), calibration=4,
                                  calibration_repeats=1, repeats=2, progress=False)
    model, source = load_model("small")
    return measure_contention(ContentionScenario(streams=4, requests=32), model=model, model_source=source,
                              repeats=3, progress=False)


def result(quick: bool) -> tuple[dict, str]:
    """(the benchmark's JSON, where it came from)."""
    if RECORDED.is_file():
        return json.loads(RECORDED.read_text()), "the recorded run in benchmarks/results/contention.json"
    return _live(quick), "a live run (its setup below)"


def _where(p: dict) -> dict:
    return {"bandwidth_kib_s": p["bandwidth_bytes_per_s"] / 1024,
            "load_name": f"load {p['load']:g} of compute capacity ({p['rate_per_s']:.2g} req/s)"}


def frame(res: dict) -> pl.DataFrame:
    """One row per (point, class, source): bandwidth (KiB/s), load, policy, p99 TTFT (s) and the
    measured spread over repeats (lo, hi; the model has none)."""
    rows = []
    for p in res["points"]:
        if p["bandwidth_bytes_per_s"] is None:  # unlimited: no place on a bandwidth axis
            continue
        for src, src_name in SOURCE_NAMES.items():
            for cls in ("restore", "miss"):
                d = p.get(src, {}).get(cls, {})
                if not d.get("count"):
                    continue
                lo, hi = d.get("p99_ms_spread", [None, None])
                rows.append({**_where(p), "policy": POLICY[p["policy"]], "source": src_name,
                             "class": CLASS_NAMES[cls], "ttft_p99_s": d["p99_ms"] / 1e3,
                             "lo_s": None if lo is None else lo / 1e3, "hi_s": None if hi is None else hi / 1e3,
                             "recomputed_fraction": d.get("recomputed_fraction", 0.0),
                             "compute_slowdown": p["compute_slowdown"]})
    return pl.DataFrame(rows)


def effect_frame(res: dict) -> pl.DataFrame:
    """One row per (admission policy, point, class, source): p99 with the policy over always
    loading, paired by repeat for the measurement (median, spread) and the model's ratio."""
    rows = []
    for row in res["summary"]["admission"]:
        if row["bandwidth_bytes_per_s"] is None:
            continue
        where = {"bandwidth_kib_s": row["bandwidth_bytes_per_s"] / 1024, "policy": POLICY[row["policy"]],
                 "recomputed": row["recomputed_measured"]}
        load = next(p for p in res["points"] if p["bandwidth"] == row["bandwidth"] and p["load"] == row["load"])
        where["load_name"] = _where(load)["load_name"]
        for cls in ("restore", "miss"):
            d = row[cls]
            if d["measured"] is not None:
                rows.append({**where, "class": CLASS_NAMES[cls], "source": SOURCE_NAMES["measured"],
                             "ratio": d["measured"]["median"], "lo": d["measured"]["min"], "hi": d["measured"]["max"],
                             "direction": d["direction"]})
            if d.get("model_shared"):
                rows.append({**where, "class": CLASS_NAMES[cls], "source": SOURCE_NAMES["model_shared"],
                             "ratio": d["model_shared"], "lo": None, "hi": None, "direction": "model"})
    return pl.DataFrame(rows)


def _panel(data: pl.DataFrame, y: str, y_title: str, lo: str, hi: str, reference: float | None = None):
    import altair as alt

    from tiered_kv.viz.style import dash_legend

    x = alt.X("bandwidth_kib_s:Q", scale=alt.Scale(type="log"), title="link bandwidth limit (KiB/s, log)")
    color = alt.Color("policy:N", title="policy", sort=list(POLICY.values()),
                      legend=alt.Legend(orient="bottom", labelLimit=400))
    tooltip = ["policy", "class", "source", alt.Tooltip(f"{y}:Q", format=".3g"), alt.Tooltip(f"{lo}:Q", format=".3g"),
               alt.Tooltip(f"{hi}:Q", format=".3g")]
    base = alt.Chart().encode(x=x, color=color)
    yy = alt.Y(f"{y}:Q", scale=alt.Scale(type="log"), title=y_title)
    lines = base.mark_line().encode(y=yy, strokeDash=alt.StrokeDash("source:N", sort=list(SOURCE_NAMES.values()),
                                                                   legend=dash_legend("source", orient="bottom",
                                                                                      labelLimit=400)),
                                    tooltip=tooltip)
    points = base.mark_point(filled=True, size=30).encode(
        y=yy, tooltip=tooltip, shape=alt.Shape("source:N", sort=list(SOURCE_NAMES.values()), legend=None))
    bars = base.mark_rule().encode(y=alt.Y(f"{lo}:Q"), y2=f"{hi}:Q").transform_filter(f"isValid(datum.{lo})")
    layers = [lines, points, bars]
    if reference is not None:
        layers.append(alt.Chart().mark_rule(color="#444", strokeDash=[2, 2]).encode(
            y=alt.datum(reference)))
    return alt.layer(*layers, data=data).properties(width=230, height=170).facet(
        row=alt.Row("load_name:N", title=None), column=alt.Column("class:N", title="requests",
                                                                   sort=list(CLASS_NAMES.values())))


def chart(data: pl.DataFrame, effect: pl.DataFrame):
    import altair as alt

    top = _panel(data, "ttft_p99_s", "p99 TTFT (seconds, log)", "lo_s", "hi_s")
    panels = [top]
    if effect.height:
        panels.append(_panel(effect, "ratio", "p99 with admission / always load", "lo", "hi",
                             reference=1.0))
    return alt.vconcat(*panels).resolve_scale(color="shared", strokeDash="shared").properties(title=TITLE)


def notes_for(res: dict, how: str) -> str:
    """Where the data came from and the machine, then the page's setup, models' fit and admission's effects."""
    slow = [p["compute_slowdown"] for p in res["points"]]
    la0, la1 = res["load_average_start"], res["load_average_end"]
    machine = res.get("recorded", {}).get("machine")
    head = (f"Data: {how}. The machine: {res['cpus']} CPU(s), load average {la0[0]:.1f} at the start and "
            f"{la1[0]:.1f} at the end; measured compute ran at {min(slow):.1f}-{max(slow):.1f}x the isolated fit "
            "(median of each point's repeats)." + (f" Recorded: {machine}" if machine else ""))
    return "\n".join([head, "", setup(res), "Model over measured (median over repeats), median (range) over the "
                      "points:", *model_lines(res), "", "What admission did to p99 against always loading, paired "
                      "by repeat:", *effect_lines(res)])


def build(quick: bool) -> FigureResult:
    res, how = result(quick)
    data, effect = frame(res), effect_frame(res)
    return FigureResult(chart=chart(data, effect), claims=[], data=data, notes=notes_for(res, how))
