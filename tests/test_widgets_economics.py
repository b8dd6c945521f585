"""The retention-economics dashboard: sliders move the numbers as the sim predicts, and every
number shown is what tiered_kv.sim.retention returns for the same inputs."""

from __future__ import annotations

import numpy as np
import pytest

from tiered_kv.sim import retention as R
from tiered_kv.viz.economics_dashboard import (
    EconomicsDashboard,
    economics_view,
    summary_line,
    synthetic_analysis,
)

DAY = R.DAY_S


@pytest.fixture(scope="module")
def analysis():
    """The ``ci`` preset for 2 days (two classes, chatbot and agent); no precomputed grid."""
    from tiered_kv.sim.workload.synth import generate
    from tiered_kv.viz.economics_dashboard import build_analysis

    return build_analysis(generate("ci", 2.0, 0), precompute=False)


def test_lower_chatbot_ttl_never_raises_chatbot_hit_rate(analysis):
    dash = EconomicsDashboard(analysis)
    slider = dash.ttl_sliders["chatbot"]
    agent_before = dash.view["classes"]["agent"]["token_hit_rate"]
    shown = []
    for t in np.geomspace(10 ** slider.max, 10 ** slider.min, 12):  # log slider: exponents
        slider.value = float(t)
        shown.append(dash.view["classes"]["chatbot"]["token_hit_rate"])
    assert all(b <= a for a, b in zip(shown, shown[1:], strict=False)), shown
    assert shown[-1] < shown[0]
    assert dash.view["classes"]["agent"]["token_hit_rate"] == agent_before  # other class held
    assert dash.chart_view.redraws >= 12
    assert "chosen TTLs" in dash.summary.value


def test_optimum_never_loses_to_best_shared_ttl(analysis):
    ttls = analysis.default_ttl_days
    for cap in analysis.capacity_grid[::10]:
        v = economics_view(analysis, float(cap), ttls)
        assert v["optimal"]["hit_tokens"] >= v["shared"]["hit_tokens"]
        assert v["optimal"]["avg_bytes"] <= cap * (1 + 1e-9)
        assert v["shared"]["avg_bytes"] <= cap * (1 + 1e-9)
        assert v["frontier"]["token_hit_rate"] >= v["optimal"]["token_hit_rate"] - 1e-12


def test_view_numbers_equal_sim_retention(analysis):
    m = analysis.model
    names = analysis.class_names
    cap = float(analysis.capacity_grid[60])
    ttls = {"chatbot": 0.4, "agent": 0.15}
    v = economics_view(analysis, cap, ttls)
    t = np.array([ttls[n] for n in names]) * DAY
    hits, cost = m.evaluate_separable(t)
    for c, n in enumerate(names):
        row = v["classes"][n]
        assert row["hit_tokens"] == float(m.hits(c, t[c]))
        assert row["token_hit_rate"] == pytest.approx(float(hits[c]) / m.input_tokens[c], rel=1e-12)
        assert row["avg_bytes"] == pytest.approx(float(m.cost(c, t[c])) / analysis.span_s, rel=1e-12)
    total = m.input_tokens.sum()
    assert v["chosen"]["token_hit_rate"] == pytest.approx(hits.sum() / total, rel=1e-12)
    opt, sh = R.optimal_ttls(m, cap), R.best_shared_ttl(m, cap)
    assert v["optimal"]["hit_tokens"] == opt.hit_tokens
    assert v["optimal"]["ttl_days"] == {n: opt.ttl_s[c] / DAY for c, n in enumerate(names)}
    assert v["shared"]["hit_tokens"] == sh.hit_tokens
    assert v["shared"]["ttl_days"] == sh.ttl_s[0] / DAY
    assert v["frontier"]["token_hit_rate"] == pytest.approx(float(analysis.frontier.at(cap * analysis.span_s)) / total)
    line = summary_line(v)
    assert f"{v['optimal']['token_hit_rate']:.2%}" in line and f"{v['shared']['token_hit_rate']:.2%}" in line


def test_slider_capacity_reads_the_precomputed_optimum(analysis):
    dash = EconomicsDashboard(analysis)
    dash.capacity_slider.value = float(analysis.capacity_grid[30])
    assert dash.view["capacity_bytes"] == float(analysis.capacity_grid[30])
    assert dash.view["optimal"]["hit_tokens"] == R.optimal_ttls(analysis.model, analysis.capacity_grid[30]).hit_tokens


def test_view_rejects_a_wrong_number_of_ttls(analysis):
    with pytest.raises(ValueError, match="one TTL per class"):
        economics_view(analysis, float(analysis.capacity_grid[0]), [1.0])


def test_synthetic_analysis_small_size_builds():
    a = synthetic_analysis("small", days=1.0)
    assert set(a.class_names) == {"chatbot", "agent"}
    assert len(a._optimal) == len(a.capacity_grid)  # every slider capacity precomputed
