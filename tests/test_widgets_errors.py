"""Dashboards under the cases a workshop found: a chart past altair's row limit, an exception in
a widget callback, slider readouts for people, and a checkbox label that did not fit."""

from __future__ import annotations

import ipywidgets as widgets
import pytest

from tiered_kv.viz.widgets import attach_readout, control, error_box, guard, log_slider, watch


def _rows(spec: dict) -> int:
    """Rows of every data source of a vega-lite spec (inline values and named datasets)."""
    n = sum(len(v) for v in spec.get("datasets", {}).values())

    def walk(node):
        nonlocal n
        if isinstance(node, dict):
            if isinstance(node.get("data"), dict) and isinstance(node["data"].get("values"), list):
                n += len(node["data"]["values"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk({k: v for k, v in spec.items() if k != "datasets"})
    return n


def test_ttft_dashboard_charts_a_busy_run_without_max_rows_error():
    """At 2.53 requests/s per machine (full size: 16 machines, 300 s) the run has 12,187 requests;
    the CDF was drawn from one row each and raised MaxRowsError inside the callback."""
    from tiered_kv.viz.ttft import CDF_POINTS, TTFTDashboard

    dash = TTFTDashboard(size="full")
    before = dash.chart_view.redraws
    dash.rate.value = 2.53
    assert dash.view.ttft.height > 5000  # the case: more requests than altair takes
    assert dash.errors.value == "" and dash.chart_view.redraws == before + 1
    assert _rows(dash.chart_view.spec) < 5000
    cdf = dash.chart_view.spec["hconcat"][1]
    assert cdf["mark"]["type"] == "line"
    # the quantiles are the distribution: the median of the chart is the table's p50
    from tiered_kv.viz.ttft import ttft_cdf

    frame = ttft_cdf(dash.view.ttft)
    assert frame.height == 2 * (CDF_POINTS + 1)
    p50 = dash.view.percentiles.filter(dash.view.percentiles["class"] == "restore")["p50_s"][0]
    mid = frame.filter((frame["class"] == "restore") & (frame["fraction"] == 0.5))["ttft_s"][0]
    assert mid == pytest.approx(p50, rel=1e-9)


def test_an_exception_in_a_callback_shows_in_the_dashboard(monkeypatch):
    from tiered_kv.viz import ttft
    from tiered_kv.viz.ttft import TTFTDashboard, TTFTSetting

    dash = TTFTDashboard(setting=TTFTSetting(machines=2, duration_s=20.0))
    redraws = dash.chart_view.redraws

    def broken(_setting):
        raise RuntimeError("queue model exploded")

    monkeypatch.setattr(ttft, "evaluate", broken)
    dash.rate.value = 1.0  # must not raise into the comm handler, must not be silent either
    assert "queue model exploded" in dash.errors.value and "RuntimeError" in dash.errors.value
    assert "tkv-error" in dash.errors.value and dash.errors.last_error is not None
    assert dash.chart_view.redraws == redraws
    monkeypatch.undo()
    dash.rate.value = 0.8  # the next good redraw clears it
    assert dash.errors.value == "" and dash.chart_view.redraws == redraws + 1


@pytest.mark.parametrize("make", ["fp4", "replay", "retention", "economics", "gallery"])
def test_every_dashboard_shows_its_callback_errors(make, monkeypatch):
    dash, control_, module, name = _dashboard(make)
    errors = dash.errors
    assert errors in dash.widget.children

    def broken(*_a, **_k):
        raise ValueError(f"{make} broke")

    monkeypatch.setattr(module, name, broken)
    _move(control_)
    assert f"{make} broke" in errors.value


def _dashboard(kind: str):
    """(dashboard, one of its controls, module, function its refresh calls) at the smallest size."""
    import numpy as np
    import polars as pl

    if kind == "fp4":
        from tiered_kv.viz import fp4

        d = fp4.FP4Dashboard(size="small")
        return d, d.seed_slider, fp4, "error_frame"
    if kind == "replay":
        from tiered_kv.viz import bounded_replay

        errors = pl.DataFrame({"window_tokens": [8, 8], "replay_tokens": [2, 32], "exact_bound_tokens": [15, 15],
                               "kl_nats": [0.5, 0.0], "agreement": [0.8, 1.0]})
        loc = pl.DataFrame({"window_tokens": [8], "distance_tokens": [4], "attention_share": [0.6],
                            "uniform_share": [0.5]})
        d = bounded_replay.ReplayDashboard(bounded_replay.ReplayMeasurements("fake", 3, 3, errors, loc))
        return d, d.replay, bounded_replay, "compute_frame"
    if kind == "retention":
        from tiered_kv.sim.retention import settings as R
        from tiered_kv.viz import retention as RD

        rng = np.random.default_rng(0)
        frame = pl.DataFrame([{"request_id": i, "timestamp_s": float(i), "input_length": 8,
                               "block_ids": [0, int(rng.integers(1, 9))], "block_size": 4,
                               "traffic_class": "chatbot"} for i in range(60)])
        d = RD.RetentionDashboard(R.build_table(frame))
        return d, d.ttl_sliders["chatbot"], RD, "evaluate"
    if kind == "economics":
        from tiered_kv.sim.workload.synth import generate
        from tiered_kv.viz import economics_dashboard as E

        d = E.EconomicsDashboard(E.build_analysis(generate("ci", 0.5, 0), precompute=False))
        return d, d.ttl_sliders["chatbot"], E, "economics_view"
    from tiered_kv.viz import gallery

    g = gallery.Gallery(quick=True, eager=False)
    g.figure = lambda name: (_ for _ in ()).throw(ValueError("gallery broke"))
    return g, g.picker, gallery, "claims_html"


def _move(w) -> None:
    if isinstance(w, widgets.Dropdown):
        w.value = w.options[-1][1] if w.value != w.options[-1][1] else w.options[0][1]
    elif isinstance(w, widgets.SelectionSlider):
        w.value = w.options[0] if w.value != w.options[0] else w.options[-1]
    elif isinstance(w, widgets.FloatLogSlider):
        w.value = 10 ** w.min if w.value != 10 ** w.min else 10 ** w.max
    else:
        w.value = w.min if w.value != w.min else w.max


def test_guard_passes_results_and_watch_wires_every_control():
    errors = error_box()
    assert guard(lambda x: x * 2, errors)(21) == 42 and errors.value == ""
    a, b = widgets.IntSlider(), widgets.IntSlider()
    seen = []
    watch([a, b], lambda change: seen.append(change["new"]), errors)
    a.value, b.value = 3, 4
    assert seen == [3, 4]


@pytest.mark.parametrize("unit,value,shown,typed,after", [
    ("seconds", 2.59e5, "3 d", "20", 20.0),  # was "2.59e+5 s"; the browser test types "20"
    ("seconds", 1040.0, "17 m 20 s", "2 h", 7200.0),
    ("days", 2.99769, "3 d", "1 d 12 h", 1.5),  # was "2.99769d"; a bare number means days here
    ("bytes", 2.73e12, "2.48 TiB", "1TiB", 2.0**40),  # was "2.73e+12"
    ("tokens", 4.5e6, "4.5M tokens", "8M", 8e6),
])
def test_slider_readouts_speak_units_and_read_them_back(unit, value, shown, typed, after):
    s = log_slider("x", value, 1.0, 1e13, steps=10_000, unit=unit)
    box = s.readout_box
    assert s.readout is False and box.value == shown
    assert isinstance(control(s), widgets.HBox) and control(s).children == (s, box)
    box.value = typed
    assert s.value == pytest.approx(after, rel=2e-3)
    box.value = "twelve parsecs"  # not a value: the slider stays, the box says why in its tooltip
    assert s.value == pytest.approx(after, rel=2e-3) and box.tooltip and box.value != "twelve parsecs"
    box.value = "1e99"  # clamped to the slider's range
    assert s.value == pytest.approx(1e13, rel=1e-3)


def test_attach_readout_rejects_an_unknown_unit():
    with pytest.raises(ValueError, match="unit"):
        attach_readout(widgets.FloatSlider(), "parsecs")


def test_dashboards_show_durations_bytes_and_tokens_for_people():
    from tiered_kv.sim.workload.synth import generate
    from tiered_kv.viz import economics_dashboard as E

    d = E.EconomicsDashboard(E.build_analysis(generate("ci", 0.5, 0), precompute=False))
    texts = [d.capacity_slider.readout_box.value] + [s.readout_box.value for s in d.ttl_sliders.values()]
    assert texts[0].endswith("iB") and all(t.endswith((" d", " h", " m", " s")) for t in texts[1:])
    assert "e+" not in " ".join(texts) and "e+" not in d.summary.value


def test_ttft_checkbox_label_fits():
    """The admission checkbox's label was cut to 'admission: recompute whe...' (300 px default)."""
    from tiered_kv.viz.ttft import TTFTDashboard, TTFTSetting

    box = TTFTDashboard(setting=TTFTSetting(machines=2, duration_s=20.0)).admission
    assert box.indent is False and box.layout.width == "480px"
    assert len(box.description) * 8 < 480  # about 8 px a character at JupyterLab's font size
