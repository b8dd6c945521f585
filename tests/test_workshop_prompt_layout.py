"""Notebook 06's prompt-layout exercise: the dashboard, the bisection behind its answer, the answer key."""

import math

import pytest

from tiered_kv.sim.traces import insert_volatile_block, random_trace
from tiered_kv.sim.workload import infinite_hit_rate
from tiered_kv.viz import prompt_layout as P
from tiered_kv.viz.workshop import EXERCISES, check_answer, expected

AGENT = "agent, synthetic"


@pytest.mark.parametrize("seed", range(4))
def test_smallest_block_equals_a_linear_scan_on_a_random_trace(seed):
    df = random_trace(seed, 80)
    block = int(df["block_size"][0])
    none = infinite_hit_rate(df)

    def rate(k):
        return infinite_hit_rate(insert_volatile_block(df, k * block, 1.0))

    rates = [rate(k) for k in range(13)]
    assert all(b >= a - 1e-12 for a, b in zip(rates, rates[1:], strict=False))  # monotone in the depth
    for share in (0.0, 0.3, 0.5, 0.9, 1.0):
        scan = next((k for k, r in enumerate(rates) if r >= share * none), math.inf)
        assert P.smallest_block(rate, share * none, 12) == scan
    assert P.smallest_block(lambda k: 0.0, 0.5, 12) == math.inf
    with pytest.raises(ValueError, match="max_blocks"):
        P.smallest_block(rate, 0.5, -1)


def test_the_answer_key_is_the_shallowest_depth_that_keeps_half():
    assert "volatile-depth-half" in {e.id for e in EXERCISES}
    want = expected("volatile-depth-half", "small")
    block = P.block_tokens(AGENT, quick=True)
    assert want > 0 and want % block == 0
    half = P.depth_rates(-1, quick=True)[AGENT] / 2
    # independently of the bisection: the rate at the answer reaches half, one block above does not
    assert P.depth_rates(want, quick=True)[AGENT] >= half > P.depth_rates(want - block, quick=True)[AGENT]
    assert P.keep_depth(AGENT, 0.5, quick=True) == want
    assert check_answer("volatile-depth-half", want, "small").correct
    assert check_answer("volatile-depth-half", f"{want * 1.2:.0f}", "small").correct  # within 25%
    assert not check_answer("volatile-depth-half", want / 2, "small").correct
    assert not check_answer("volatile-depth-half", None, "small").correct
    with pytest.raises(ValueError, match="share"):
        P.keep_depth(AGENT, 1.5)
    with pytest.raises(ValueError, match="series"):
        P.block_tokens("nope")


def test_dashboard_moves_with_its_slider():
    d = P.PromptLayoutDashboard("small", depth_tokens=0)
    rates = d.view["rates"]
    assert set(rates["series"]) == set(P.SERIES)
    assert (rates["line at depth"] == 0).all()  # a line on top kills every hit
    assert set(d.view["curve"]["depth_tokens"]) == {float(x) for x in P.CURVE_DEPTHS}
    d.depth.value = 4096
    assert d.errors.value == ""
    at = dict(zip(d.view["rates"]["series"], d.view["rates"]["line at depth"], strict=True))
    assert at == P.depth_rates(4096, quick=True)
    assert (d.view["rates"]["line at depth"] <= d.view["rates"]["no line"] + 1e-12).all()
    assert d.chart_view.redraws == 2 and "4,096" in str(d.chart_view.spec.get("title"))
    assert "agent, synthetic" in d.summary.value
