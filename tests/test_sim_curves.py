"""One-pass curves equal event replays; LRU monotone; Belady bounds every policy."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiered_kv.sim import curves as C
from tiered_kv.sim.policies import get_policy
from tiered_kv.sim.trace_replay import ReplayOptions, compile_trace, replay
from tiered_kv.sim.traces import SCHEMA, load_trace, random_trace, shipped_trace


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), warm=st.sampled_from([0.0, 0.3]))
def test_lru_and_ttl_curves_equal_event_replays(seed, warm):
    opts = ReplayOptions(warmup_fraction=warm)
    tr = compile_trace(random_trace(seed, n_requests=40), opts)
    caps = np.array([0, 4, 8, 20, 36, 80, 400, math.inf])
    lru = C.lru_curve(tr, caps)
    for c, h in zip(caps, lru.hit_tokens, strict=True):
        r = replay(tr, get_policy("lru", capacity_tokens=None if math.isinf(c) else int(c)))
        assert h == r.hit_tokens
        assert {k: int(v[list(caps).index(c)]) for k, v in lru.by_class_hit_tokens.items()} == \
            {k: v["hit_tokens"] for k, v in r.by_class.items()}
    ttls = np.array([0.0, 1.0, 3.0, 7.5, 20.0, math.inf])
    ttl = C.ttl_curve(tr, ttls)
    for t, h in zip(ttls, ttl.hit_tokens, strict=True):
        assert h == replay(tr, get_policy("ttl", default_ttl_seconds=float(t))).hit_tokens
    assert C.infinite_bound(tr).hit_tokens[0] == replay(tr, get_policy("lru")).hit_tokens


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6))
def test_lru_curve_is_non_decreasing_and_bounded(seed):
    tr = compile_trace(random_trace(seed, n_requests=50))
    curve = C.lru_curve(tr, np.arange(0, 400, 4))
    assert np.all(np.diff(curve.hit_tokens) >= 0)
    assert curve.hit_tokens[-1] <= C.infinite_bound(tr).hit_tokens[0]
    assert np.all(np.diff(C.ttl_curve(tr, np.arange(0, 60)).hit_tokens) >= 0)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), cap=st.integers(0, 30), ttl=st.integers(0, 20))
def test_belady_bounds_lru_ttl_and_is_bounded_by_infinite(seed, cap, ttl):
    df = random_trace(seed, n_requests=40)
    unclamped = ReplayOptions(clamp_to_input=False)
    for opts in (ReplayOptions(), unclamped):
        tr = compile_trace(df, opts)
        bel = replay(tr, get_policy("belady", capacity_tokens=cap * 4))
        lru = replay(tr, get_policy("lru", capacity_tokens=cap * 4))
        ttl_r = replay(tr, get_policy("ttl", default_ttl_seconds=float(ttl), capacity_tokens=cap * 4))
        inf = replay(tr, get_policy("lru"))
        # in blocks the bound is exact for any weights (see curves.py); in tokens when unclamped
        assert bel.hit_blocks_per_request.sum() >= lru.hit_blocks_per_request.sum()
        assert bel.hit_blocks_per_request.sum() >= ttl_r.hit_blocks_per_request.sum()
        assert bel.hit_blocks_per_request.sum() <= inf.hit_blocks_per_request.sum()
        if opts is unclamped:
            assert lru.hit_tokens <= bel.hit_tokens <= inf.hit_tokens
            assert ttl_r.hit_tokens <= bel.hit_tokens


def test_belady_curve_equals_policy_replays():
    tr = compile_trace(random_trace(5, n_requests=60))
    caps = np.array([0, 8, 40, math.inf])
    curve = C.belady_curve(tr, caps)
    for c, h in zip(caps, curve.hit_tokens, strict=True):
        assert h == replay(tr, get_policy("belady", capacity_tokens=None if math.isinf(c) else int(c))).hit_tokens


OPTIONS = [ReplayOptions(), ReplayOptions(warmup_fraction=0.3, clamp_to_input=False),
           ReplayOptions(full_blocks_only=True, order="file")]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), opts=st.sampled_from(OPTIONS), n=st.integers(1, 60))
def test_belady_one_pass_equals_one_replay_per_capacity(seed, opts, n):
    """The stack pass gives every capacity what a Belady replay at that capacity gives, per class."""
    tr = compile_trace(random_trace(seed, n_requests=n, max_blocks=7, alphabet=3), opts)
    caps = np.array([0, 4, 8, 12, 20, 40, 64, 100, 400, math.inf])
    curve = C.belady_curve(tr, caps)
    for j, c in enumerate(caps):
        r = replay(tr, get_policy("belady", capacity_tokens=None if math.isinf(c) else int(c)))
        assert curve.hit_tokens[j] == r.hit_tokens
        assert {k: int(v[j]) for k, v in curve.by_class_hit_tokens.items()} == \
            {k: v["hit_tokens"] for k, v in r.by_class.items()}


def test_belady_curve_replays_each_capacity_when_ids_are_not_chained():
    from tiered_kv.sim.policies.belady import belady_stack

    rng = np.random.default_rng(0)
    ids = [[int(x) for x in rng.integers(0, 6, int(rng.integers(1, 5)))] for _ in range(40)]
    ids = [list(dict.fromkeys(r)) for r in ids]  # per-block content ids: one id behind many parents
    n = len(ids)
    df = pl.DataFrame({"request_id": range(n), "timestamp_s": [float(i) for i in range(n)],
                       "input_length": [4 * len(r) for r in ids], "output_length": [0] * n, "block_ids": ids,
                       "block_size": [4] * n, "traffic_class": ["chatbot"] * n, "session_id": [None] * n,
                       "turn": [None] * n}, schema=SCHEMA)
    tr = compile_trace(df)
    assert belady_stack(tr, [4]) is None
    caps = np.array([0, 8, 40, math.inf])
    for c, h in zip(caps, C.belady_curve(tr, caps).hit_tokens, strict=True):
        assert h == replay(tr, get_policy("belady", capacity_tokens=None if math.isinf(c) else int(c))).hit_tokens


@pytest.fixture(scope="module")
def conversation():
    return compile_trace(load_trace(shipped_trace("conversation")))


def test_real_trace_curves_equal_replays_at_sampled_points(conversation):
    caps = C.default_capacities(conversation)
    assert len(caps) == 100
    lru = C.lru_curve(conversation, caps)
    for i in (0, 40, 75, 99):
        assert lru.hit_tokens[i] == replay(conversation, get_policy("lru", capacity_tokens=int(caps[i]))).hit_tokens
    ttls = C.default_ttls(conversation)
    ttl = C.ttl_curve(conversation, ttls)
    for i in (10, 60, 99):
        assert ttl.hit_tokens[i] == replay(conversation, get_policy("ttl", default_ttl_seconds=float(ttls[i]))).hit_tokens
    for c in caps[[20, 60]]:  # the proof's lemma, checked at every lookup of the real trace
        assert get_policy("belady", capacity_tokens=int(c)).run(conversation).extra["prefix_closed"]
    bel = C.belady_curve(conversation, caps[[20, 60]])
    assert np.all(bel.hit_tokens >= lru.hit_tokens[[20, 60]])
    assert np.all(bel.hit_tokens <= C.infinite_bound(conversation).hit_tokens[0])


def test_figure_07_data_is_computed_and_ordered():
    import importlib

    fig = importlib.import_module("tiered_kv.viz.figures.07_capacity_curves")
    data, info = fig.curve_frame("conversation", belady_points=3)
    lru = dict(data.filter(data["policy"] == "LRU").select("capacity_tokens", "token_hit_rate").iter_rows())
    bel = data.filter(data["policy"] == "Belady (upper bound)")
    assert bel.height == 3
    for cap, rate in bel.select("capacity_tokens", "token_hit_rate").iter_rows():
        assert lru[cap] <= rate <= info["infinite"] + 1e-12
