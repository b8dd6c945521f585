"""Retention questions: one watermark under four collectors, and write points (brute-force references)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tiered_kv.sim.policies import TTL
from tiered_kv.sim.retention import one_watermark as G
from tiered_kv.sim.retention import write_points as W
from tiered_kv.sim.trace_replay import compile_trace
from tiered_kv.sim.traces import random_trace


def _brute_gc(trace, mech, cap, param, high=0.95, low=0.85):
    """Dict-based reference: per-class LRU lists, victims chosen among the heads."""
    last, cls, born, order = {}, {}, {}, []  # order: blocks from least to most recent
    hits, evs = [], []
    k = len(trace.class_names)
    for r in range(trace.n_requests):
        now, c = trace.timestamps[r], int(trace.class_codes[r])
        blocks = trace.blocks[trace.offsets[r]:trace.offsets[r + 1]].tolist()
        p = 0
        while p < len(blocks) and blocks[p] in last:
            p += 1
        hits.append(p)
        for b in blocks:
            if b in last:
                order.remove(b)
            else:
                born[b] = now
            last[b], cls[b] = now, c
            order.append(b)
            used = [sum(1 for x in order if cls[x] == j) for j in range(k)]
            if mech == "quotas":
                if used[c] > high * cap * param[c]:
                    while used[c] > low * cap * param[c]:
                        v = next(x for x in order if cls[x] == c)
                        order.remove(v)
                        evs.append((c, now - last.pop(v)))
                        used[c] -= 1
                continue
            if sum(used) <= high * cap:
                continue
            while sum(used) > low * cap:
                heads = [next(x for x in order if cls[x] == j) for j in range(k) if used[j]]

                def score(h, now=now):
                    idle = now - last[h]
                    if mech == "lru":
                        return idle
                    return idle * param[cls[h]] if mech == "weighted" else -(last[h] + param[cls[h]])
                v = max(heads, key=score)  # first max, as the kernel (class order)
                order.remove(v)
                used[cls[v]] -= 1
                evs.append((cls[v], now - last.pop(v)))
    return np.array(hits), evs


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize(("mech", "param"), [("lru", None), ("weighted", [1.0, 2.5]),
                                              ("ttl-priority", [3.0, 10.0]), ("quotas", [0.5, 0.5])])
def test_gc_kernel_equals_a_brute_force_replay(seed, mech, param):
    trace = compile_trace(random_trace(seed, 60, max_blocks=5, alphabet=2, max_gap_s=3))
    run = G.run_gc(trace, mech, 8.0, bytes_per_token=0.25, param=param)  # 4-token blocks: 1 byte a chunk
    hits, evs = _brute_gc(trace, mech, 8.0, param)
    assert np.array_equal(run.hit_blocks, hits)
    assert [(int(c), float(i)) for c, i in zip(run.evicted_class, run.idle_s, strict=True)] == evs
    assert np.all(run.age_s >= run.idle_s)


@pytest.mark.parametrize(("policy", "mech", "key"), [("gc-lru", "lru", None), ("gc-weighted", "weighted", "weights"),
                                                     ("gc-ttl-priority", "ttl-priority", "ttl_seconds"),
                                                     ("gc-quotas", "quotas", "shares")])
def test_registered_collectors_replay_as_the_brute_force(policy, mech, key):
    from tiered_kv.sim.policies import get_policy
    from tiered_kv.sim.trace_replay import replay

    trace = compile_trace(random_trace(7, 80, max_blocks=5, alphabet=2, max_gap_s=3))
    param = {"weights": [1.0, 2.5], "ttl_seconds": [3.0, 10.0], "shares": [0.6, 0.4]}.get(key)
    extra = {} if key is None else {key: dict(zip(trace.class_names, param, strict=True))}
    pol = get_policy(policy, capacity_bytes=10.0, bytes_per_token=0.25, **extra)  # 4-token blocks: 1 byte each
    res = replay(trace, pol)
    hits, evs = _brute_gc(trace, mech, 10.0, param)
    assert np.array_equal(res.hit_blocks_per_request, hits)
    assert res.extra["evictions"] == len(evs) > 0
    for code, name in enumerate(trace.class_names):
        assert res.extra["effective_retention_s"][name]["evictions"] == sum(1 for c, _ in evs if c == code)


def test_collector_parameters_are_checked():
    from tiered_kv.sim.policies import get_policy

    trace = compile_trace(random_trace(1, 20))
    with pytest.raises(ValueError, match="gc-quotas shares: must sum to at most 1"):
        get_policy("gc-quotas", capacity_bytes=8.0, shares={"chatbot": 0.7, "agent": 0.7}).run(trace)
    with pytest.raises(ValueError, match=r"gc-weighted weights: classes \['api'\] are not in the trace"):
        get_policy("gc-weighted", capacity_bytes=8.0, weights={"api": 2.0}).run(trace)
    with pytest.raises(ValueError, match="gc-lru high/low"):
        get_policy("gc-lru", capacity_bytes=8.0, high=0.5, low=0.9)


def test_one_watermark_study_on_a_small_mixed_run():
    from tiered_kv.sim.workload import generate

    trace = compile_trace(generate("ci", 10.0, seed=1))
    res = G.one_watermark_study(trace, ttl_s={"chatbot": 2 * 86_400.0, "agent": 86_400.0})
    s = res["summary"]
    assert set(s["mechanism"]) == set(G.MECHANISMS)
    assert res["weights"]["agent"] == pytest.approx(2.0)
    rates = res["totals"]["token_hit_rate"].to_numpy()
    assert np.all(rates <= res["frontier_token_hit_rate"] + 1e-9)

    def p50(m, c):
        return s.filter((s["mechanism"] == m) & (s["traffic_class"] == c))["idle_p50_s"][0]

    # one LRU: both classes leave at about the same idle time; TTL priority separates them
    assert abs(p50("lru", "agent") - p50("lru", "chatbot")) < 0.2 * p50("lru", "chatbot")
    assert p50("ttl-priority", "chatbot") - p50("ttl-priority", "agent") > 0.5 * 86_400
    # a TTL table that misses a class of the trace is one clear error, not a KeyError
    with pytest.raises(ValueError, match=r"ttl_s: no TTL for the trace's classes \['agent'\]"):
        G.one_watermark_study(trace, ttl_s={"chatbot": 86_400.0})
    with pytest.raises(ValueError, match=r"ttl_s: no TTL for the trace's classes \['agent', 'chatbot'\]"):
        G.one_watermark_study(trace, ttl_s={})


def _brute_units(trace, wp, ttl):
    units = {}  # block -> [last, bytes, parent, cls]
    seen, hits, written = set(), [], 0.0
    for r in range(trace.n_requests):
        now, c = trace.timestamps[r], int(trace.class_codes[r])
        lo, hi = trace.offsets[r], trace.offsets[r + 1]
        deepest = lo - 1
        for i in range(lo, hi):
            b = int(trace.blocks[i])
            if b not in seen:
                break
            if b in units and now - units[b][0] <= ttl[units[b][3]]:
                deepest = i
        hits.append(deepest - lo + 1)
        if deepest >= lo:
            u = int(trace.blocks[deepest])
            while u >= 0:
                units[u][0], units[u][3] = now, c
                u = units[u][2]
        prev = deepest
        for i in range(lo, hi):
            b = int(trace.blocks[i])
            seen.add(b)
            if i > deepest and wp[i]:
                size = float(trace.chunk_tokens[prev + 1:i + 1].sum())
                units[b] = [now, size, int(trace.blocks[prev]) if prev >= lo else -1, c]
                written += size
                prev = i
    return np.array(hits), written


@pytest.mark.parametrize("strategy", W.STRATEGIES)
@pytest.mark.parametrize("seed", [0, 4])
def test_unit_store_equals_a_brute_force_replay(strategy, seed):
    trace = compile_trace(random_trace(seed, 70, block_size=4, max_blocks=6, alphabet=2))
    wp = W.write_points(trace, strategy, 8 if strategy == "turn-ends+interval" else None)
    ttl = np.array([6.0, 20.0])
    out = W.replay_write_points(trace, wp, ttl)
    hits, written = _brute_units(trace, wp, ttl)
    assert np.array_equal(out["hit_blocks"], hits)
    assert out["bytes_written"] == pytest.approx(written)


def test_every_block_is_the_default_ttl_replay():
    trace = compile_trace(random_trace(9, 120))
    for ttl in (math.inf, 4.0):
        out = W.replay_write_points(trace, W.write_points(trace, "every-block"), np.full(2, ttl))
        ref = TTL(ttl_seconds={"*": ttl}).run(trace)
        assert np.array_equal(out["hit_blocks"], ref.hit_blocks)


def test_write_points_per_strategy():
    trace = compile_trace(random_trace(3, 50, block_size=4, max_blocks=8))
    ends = W.write_points(trace, "turn-ends")
    last = trace.offsets[1:] - 1
    assert ends[last].all()
    common = W.write_points(trace, "common-prefixes")
    assert np.all(common >= ends) and common.sum() > ends.sum()
    interval = W.write_points(trace, "turn-ends+interval", every_tokens=8)
    assert np.all(interval[(trace.depth % 2) == 1])
    with pytest.raises(ValueError, match="every_tokens"):
        W.write_points(trace, "turn-ends+interval", every_tokens=6)
    with pytest.raises(ValueError, match="strategy"):
        W.write_points(trace, "sometimes")
    rows = W.compare_strategies(trace, every_tokens=8)
    assert rows["token_hit_rate"][0] == rows["token_hit_rate"].max()  # every block hits most


def test_recompute_crossover_from_the_latency_model():
    from tiered_kv.sim.cluster import latency as L

    cfg = L.preset()
    n = L.recompute_crossover_tokens(cfg)
    assert cfg.replay_tokens < n < 1024
    # at the crossover, loading (transfer + bounded replay) costs what recomputing does
    load = L.load_seconds(cfg, n) + L.replay_seconds(cfg, n)
    assert float(load) == pytest.approx(float(L.prefill_seconds(cfg, 0.0, n)), rel=1e-6)
    assert L.recompute_crossover_tokens(L.preset("deepseek-v3-fp4")) < n  # smaller KV loads faster
    slow = cfg.with_(read_bandwidth_bytes_per_s=cfg.read_bandwidth_bytes_per_s / 20)
    assert L.recompute_crossover_tokens(slow) > n
    assert L.measured_crossover_tokens([100, 200, 400], [10, 30, 90], [20, 20, 20]) == pytest.approx(
        math.exp(math.log(100) + math.log(2) * 0.5))
    assert L.measured_crossover_tokens([100, 200], [5, 6], [20, 20]) == math.inf
