"""Figures a person can read: one colour per case across panels, line-style legends drawn as
lines, names instead of column names, labelled reference lines, and claim values that show
their difference."""

from __future__ import annotations

import importlib
import json

import polars as pl
import pytest

from tiered_kv.viz.report import Claim, claims_table, format_claim


def _figure(name: str):
    return importlib.import_module(f"tiered_kv.viz.figures.{name}")


def _walk(node):
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from _walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v)


def _encodings(spec: dict, channel: str) -> list[dict]:
    return [n["encoding"][channel] for n in _walk(spec) if isinstance(n.get("encoding"), dict)
            and channel in n["encoding"]]


def test_report_values_show_their_difference():
    """REPORT.md printed '437 x | 437 x | 0.213 x (+0.0%)'."""
    c = Claim("KV reduction", "DeepSeek", published=437.0, reproduced=437.213, unit="x", inputs="389,120 / 890", kind="check")
    assert format_claim(c) == ("437.0 x", "437.2 x", "+0.213 x (+0.049%)")
    assert "| 437.0 x | 437.2 x | +0.213 x (+0.049%) |" in claims_table([c])
    same = Claim("miss TTFT", "DeepSeek", published=13.0, reproduced=13.0, unit="s", inputs="fit", kind="calibration")
    assert format_claim(same)[:2] == ("13.0 s", "13.0 s")
    frac = Claim("disk share", "DeepSeek", published=0.56, reproduced=0.5432, unit="fraction", inputs="sim", kind="proxy")
    assert format_claim(frac) == ("56.0%", "54.3%", "-1.7 points (-3.0%)")
    big = Claim("bytes", "paper", published=70_272.0, reproduced=70_272.0, unit="bytes/token", inputs="arch", kind="check")
    assert format_claim(big)[0] == "70,272 bytes/token"


def test_figure_02_gives_each_case_one_colour_in_both_panels(monkeypatch):
    """A miss was red in the model panel and an SSD + host hit red in the measured one."""
    fig = _figure("02_ttft")
    measured = pl.DataFrame({"length_tokens": [1024] * 4, "case": ["miss", "ssd_cold_hit", "ssd_warm_hit", "ssd_host_hit"],
                             "ttft_ms": [90.0, 30.0, 25.0, 20.0]})
    monkeypatch.setattr(fig, "_measured", lambda quick: (measured, "fake measurement"))
    spec = fig.build(quick=True).chart.to_dict()
    assert spec["resolve"]["scale"]["color"] == "shared"
    scales = [e["scale"] for e in _encodings(spec, "color")]
    assert len(scales) == 2 and scales[0] == scales[1]
    colour = dict(zip(scales[0]["domain"], scales[0]["range"], strict=True))
    assert len(set(colour.values())) == len(colour), "two cases share a colour"
    assert colour[fig.MISS] == "#d62728"  # the model's miss and the measured miss are one case
    assert "miss" not in colour and "ssd_host_hit" not in colour  # measured cases carry the same names
    assert set(fig.MEASURED_CASES.values()) >= {"SSD + host hit (no replay)"}


def _pool_rows(shared_same: bool) -> pl.DataFrame:
    rows = []
    for total in (5_000_000, 20_000_000):
        for k, routing in enumerate(("random", "round-robin", "cache-aware")):
            for ssd in ("shared pool", "per-machine caches"):
                rate = 0.37 if ssd == "shared pool" else 0.2 + 0.05 * k
                if ssd == "shared pool" and not shared_same:
                    rate += 0.01 * k
                rows.append({"total_ssd_tokens": total, "routing": routing, "ssd": ssd, "token_hit_rate": rate,
                             "machine_load_imbalance": 1.0})
    return pl.DataFrame(rows)


def test_figure_08_draws_coinciding_shared_pool_lines_once_and_says_so():
    """Three identical shared-pool lines lay on each other; two of their legend entries showed nothing."""
    fig = _figure("08_shared_pool")
    drawn = fig.series_frame(_pool_rows(shared_same=True))
    series = set(drawn["series"])
    assert "shared pool, any routing (identical)" in series
    assert not any(s.startswith("shared pool, random") for s in series)
    assert drawn.filter(pl.col("ssd") == "shared pool").height == 2  # one line: one row per capacity
    assert {s for s in series if s.startswith("per-machine")} == {
        "per-machine, random", "per-machine, round-robin", "per-machine, cache-aware"}
    apart = fig.series_frame(_pool_rows(shared_same=False))
    assert {"shared pool, random", "shared pool, cache-aware"} <= set(apart["series"])


def test_line_style_legends_are_drawn_as_dashed_strokes():
    """08 and 10 showed identical black dots as their line-style legend (the points of
    mark_line(point=True) take over the legend); 01's attention-mass chart showed none."""
    import inspect

    import vl_convert as vlc

    from tiered_kv.viz import bounded_replay
    from tiered_kv.viz.style import dashed_lines

    frame = pl.DataFrame({"x": [1, 2, 3] * 2, "y": [1, 2, 3, 2, 3, 4], "s": ["p50"] * 3 + ["p99"] * 3})
    svg = vlc.vegalite_to_svg(dashed_lines(frame, x="x:Q", y="y:Q", dash="s:N", dash_title="pct").to_dict())
    legend = svg[svg.index("role-legend"):]
    assert legend.count("stroke-dasharray") >= 1 and "p50" in legend and "p99" in legend
    assert "<circle" not in legend
    for source in (inspect.getsource(_figure("08_shared_pool")), inspect.getsource(_figure("10_p99_admission")),
                   inspect.getsource(bounded_replay.ReplayDashboard.refresh)):
        assert "dashed_lines(" in source and "StrokeDash(" not in source  # dashes only through the helper


@pytest.mark.slow
def test_figure_10_names_what_it_draws():
    fig = _figure("10_p99_admission")
    spec = fig.build(quick=True).chart.to_dict()
    text = json.dumps(spec)
    assert "ttft_p50_s" not in text and "ttft_p99_s" not in text  # raw column names
    assert "median (p50)" in text and '"p99"' in text
    dash = _encodings(spec, "strokeDash")[0]
    assert dash["legend"]["title"] == "TTFT percentile" and dash["legend"]["symbolType"] == "stroke"


def test_figure_06_labels_its_dashed_50x_line():
    import json

    fig = _figure("06_cost")
    spec = json.dumps(fig.build(quick=True).chart.to_dict())
    assert fig.PRICE_GAP_LABEL in spec and '"type": "text"' in spec
    assert "50x" in fig.PRICE_GAP_LABEL


def test_figure_16_policy_arena_is_bounded_by_belady_and_says_who_wins():
    fig = importlib.import_module("tiered_kv.viz.figures.16_policy_arena")
    res = fig.build(quick=True)
    data = res.data
    bound = data.filter(pl.col("admission") == "bound").select("capacity_tokens", pl.col("token_hit_rate").alias("b"))
    j = data.filter(pl.col("admission") != "bound").join(bound, on="capacity_tokens")
    assert j.height and (j["token_hit_rate"] <= j["b"] + 1e-12).all()
    assert set(data["admission"]) == {"all", "second-sighting", "bound"}
    for phrase in ("Best policy by capacity", "below Belady", "second sighting", "writes x"):
        assert phrase in res.notes
    assert len(res.chart.to_dict()["hconcat"]) == 2
