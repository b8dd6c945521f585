"""Steady-state LRU curves of the synthetic classes against their targets (issue 14).

Agent: hour 12 of the ``agent`` preset (seed 0, default semantics, 512-token blocks) within
0.05 of Mooncake FAST'25 Fig. 9 Tool&Agent at the six capacities (a calibration). Chatbot: hour
12 of the ``chatbot`` preset within 0.03 of the real conversation trace at the same capacities.
"""

from __future__ import annotations

import importlib

import numpy as np
import polars as pl
import pytest

from tiered_kv.sim.curves import lru_curve
from tiered_kv.sim.trace_replay import compile_trace
from tiered_kv.sim.workload import AGENT, CURVE_CAPACITIES, FIG9_TOOL_AGENT, PRESETS, hour_slice

CAPS = np.array(CURVE_CAPACITIES)


def _curve(df: pl.DataFrame) -> np.ndarray:
    return lru_curve(compile_trace(df), CAPS).token_hit_rate


def test_agent_curve_within_005_of_fig9():
    got = _curve(hour_slice("agent", "agent", hour=12, seed=0))
    published = np.array([v for _, v in FIG9_TOOL_AGENT])
    assert np.all(np.abs(got - published) <= 0.05), np.round(got, 3)


def test_chatbot_curve_within_003_of_the_real_trace():
    from tiered_kv.sim.traces import load_trace, shipped_trace

    real = _curve(load_trace(shipped_trace("conversation"), traffic_class="chatbot"))
    got = _curve(hour_slice("chatbot", "chatbot", hour=12, seed=0))
    assert np.all(np.abs(got - real) <= 0.03), (np.round(got, 3), np.round(real, 3))


def test_agent_calls_share_fixed_prefixes_and_come_in_bursts():
    df = hour_slice(PRESETS["agent"].scaled(1 / 20), "agent", hour=12, seed=1)
    calls = df.filter(pl.col("turn") == 0)
    # every request opens with the class system prompt; the few fixed prefixes follow it
    bs = 512
    n_shared = (AGENT.system_prompt_tokens + int(AGENT.prefix_tokens_median * 0.8)) // bs
    heads = calls.filter(pl.col("input_length") >= n_shared * bs)["block_ids"].list.head(n_shared)
    distinct = heads.list.last().n_unique()
    assert distinct <= AGENT.n_prefixes + heads.len() // 3  # few shared prefixes (+ loops' own)
    # bursts: requests at one instant share their prefix and nothing after it
    same_time = df.group_by("timestamp_s").agg(pl.len().alias("n")).filter(pl.col("n") > 1)
    assert same_time.height > 50
    # the fixed catalogue does not shrink with the traffic
    assert PRESETS["mixed"].only("agent").classes[0].n_prefixes == AGENT.n_prefixes


def test_figure_13_marks_the_agent_curve_a_calibration(monkeypatch):
    fig = importlib.import_module("tiered_kv.viz.figures.13_agent_curve")
    pub = np.array([v for _, v in FIG9_TOOL_AGENT])
    fake = pl.concat([pl.DataFrame({"series": s, "capacity_tokens": CAPS, "token_hit_rate": v})
                      for s, v in [("agent, synthetic", pub + 0.01), ("agent, published", pub),
                                   ("chatbot, synthetic", pub / 2), ("chatbot, real trace", pub / 2 + 0.01)]])
    monkeypatch.setattr(fig, "curve_table", lambda *a, **k: fake)
    res = fig.build(quick=True)
    assert len(res.claims) == 6 and all(c.calibrated for c in res.claims)
    assert [c.published for c in res.claims] == pub.tolist()
    assert "largest difference 0.010" in res.notes
    res.chart.to_dict()


@pytest.mark.parametrize("field", ["call_fraction", "call_burst_mean", "call_suffix_tokens_median"])
def test_call_settings_are_checked(field):
    from dataclasses import replace

    with pytest.raises(ValueError, match=rf"agent\.{field}: must be in"):
        replace(AGENT, **{field: -1.0})
