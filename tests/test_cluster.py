"""The cluster model against plain replays written here, and its routing claims on the real trace."""

from collections import OrderedDict

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiered_kv.sim.cluster import ClusterConfig, simulate_cluster
from tiered_kv.sim.trace_replay import compile_trace
from tiered_kv.sim.traces import load_trace, shipped_trace


@pytest.fixture(scope="module")
def real():
    return compile_trace(load_trace(shipped_trace("conversation")))


def brute_lru_hits(offsets, blocks, tokens, capacity_blocks, machine_of=None, parts=1):
    """Per-request hit tokens of per-machine LRU caches (a plain OrderedDict replay)."""
    caches = [OrderedDict() for _ in range(parts)]
    hits = np.zeros(len(offsets) - 1, dtype=np.int64)
    for r in range(len(offsets) - 1):
        cache = caches[0 if machine_of is None else machine_of[r]]
        ids = blocks[offsets[r]:offsets[r + 1]]
        p = 0
        while p < len(ids) and ids[p] in cache:
            p += 1
        hits[r] = tokens[offsets[r]:offsets[r] + p].sum()
        for b in ids:
            if b in cache:
                cache.move_to_end(b)
            else:
                if capacity_blocks == 0:
                    continue
                if len(cache) >= capacity_blocks:
                    cache.popitem(last=False)
                cache[b] = True
    return hits


def hit_tokens(res) -> np.ndarray:
    return (res.requests["gpu_tokens"] + res.requests["ssd_tokens"]).to_numpy()


@pytest.mark.parametrize("capacity_tokens", [512 * 500, 512 * 20_000])
def test_one_machine_equals_single_cache_replay(real, capacity_tokens):
    t = real
    want = brute_lru_hits(t.offsets, t.blocks, t.tokens, capacity_tokens // 512)
    for ssd in ("shared", "per-machine"):
        res = simulate_cluster(t, ClusterConfig(nodes=1, ssd=ssd, ssd_capacity_tokens=capacity_tokens))
        assert np.array_equal(hit_tokens(res), want)
    # the GPU tier alone is the same LRU
    res = simulate_cluster(t, ClusterConfig(nodes=1, gpu_capacity_tokens=capacity_tokens, ssd_capacity_tokens=0))
    assert np.array_equal(res.requests["gpu_tokens"].to_numpy(), want)
    assert res.requests["ssd_tokens"].sum() == 0


def test_one_machine_matches_part1_lru_policy(real):
    policies = pytest.importorskip("tiered_kv.sim.policies")
    from tiered_kv.sim.trace_replay import replay

    ref = replay(real, policies.get_policy("lru", capacity_tokens=512 * 5000))
    res = simulate_cluster(real, ClusterConfig(nodes=1, ssd_capacity_tokens=512 * 5000))
    assert np.array_equal(hit_tokens(res), ref.hit_tokens_per_request)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 5), st.integers(0, 12), st.integers(0, 2**31 - 1))
def test_per_machine_caches_equal_brute_force(nodes, cap, seed):
    rng = np.random.default_rng(seed)
    n = 60
    rows = []
    for r in range(n):
        depth = int(rng.integers(1, 6))
        root = int(rng.integers(0, 4))
        ids = [root * 1000 + sum(int(rng.integers(0, 2)) << k for k in range(d + 1)) * 10 + d for d in range(depth)]
        rows.append({"request_id": r, "timestamp_s": float(r), "input_length": depth * 4 - int(rng.integers(0, 4)),
                     "output_length": 1, "block_ids": ids, "block_size": 4, "traffic_class": "x",
                     "session_id": None, "turn": None})
    from tiered_kv.sim.traces import SCHEMA

    t = compile_trace(pl.DataFrame(rows, schema=SCHEMA))
    res = simulate_cluster(t, ClusterConfig(nodes=nodes, ssd="per-machine", ssd_capacity_tokens=cap * 4,
                                            routing="random", seed=seed))
    machines = res.requests["machine"].to_numpy()
    want = brute_lru_hits(t.offsets, t.blocks, t.tokens, cap, machine_of=machines, parts=nodes)
    assert np.array_equal(hit_tokens(res), want)


@pytest.mark.parametrize("total_tokens", [512 * 20_000, 512 * 100_000])
def test_shared_pool_never_below_per_machine_caches_random_routing(real, total_tokens):
    shared = simulate_cluster(real, ClusterConfig(nodes=10, routing="random", ssd_capacity_tokens=total_tokens))
    split = simulate_cluster(real, ClusterConfig(nodes=10, routing="random", ssd="per-machine",
                                                 ssd_capacity_tokens=total_tokens // 10))
    assert shared.summary()["token_hit_rate"] >= split.summary()["token_hit_rate"]


def test_cache_aware_beats_random_on_real_trace(real):
    kw = dict(nodes=10, ssd="per-machine", ssd_capacity_tokens=512 * 10_000)
    rnd = simulate_cluster(real, ClusterConfig(routing="random", **kw)).summary()
    aware = simulate_cluster(real, ClusterConfig(routing="cache-aware", **kw)).summary()
    assert aware["token_hit_rate"] > rnd["token_hit_rate"] + 0.01
    assert aware["machine_load_imbalance"] < 1.5  # the load bound holds


def test_unlimited_shared_pool_is_routing_independent_infinite_bound(real):
    rates = {r: simulate_cluster(real, ClusterConfig(nodes=10, routing=r)).summary()["token_hit_rate"]
             for r in ("random", "round-robin", "cache-aware")}
    assert len(set(rates.values())) == 1
    assert rates["random"] == pytest.approx(0.374, abs=0.005)  # Mooncake's infinite-cache ratio


def test_tiers_window_and_replay_accounting(real):
    cfg = ClusterConfig(nodes=4, routing="cache-aware", gpu_capacity_tokens=512 * 2000,
                        host_capacity_bytes=70_272 * 1024 * 100)
    res = simulate_cluster(real, cfg)
    df = res.requests
    hit = df["gpu_tokens"] + df["ssd_tokens"]
    assert (df["gpu_tokens"] + df["ssd_tokens"] + df["recomputed_tokens"] == df["input_tokens"]).all()
    assert not (df["window_hit"] & (hit == 0)).any()
    assert (df["replay_tokens"] <= cfg.replay_tokens).all()
    assert ((df["replay_tokens"] > 0) == (~df["window_hit"] & (hit > 0))).all()
    s = res.summary()
    assert s["gpu_token_hit_rate"] > 0 and 0 < s["window_hit_rate"] < 1
    assert s["disk_token_fraction"] == pytest.approx(s["ssd_token_hit_rate"])
    ot = res.over_time(600.0)
    assert ot.filter(pl.col("traffic_class") == "all")["input_tokens"].sum() == df["input_tokens"].sum()


def test_lru_pool_reports_effective_retention_and_bytes(real):
    res = simulate_cluster(real, ClusterConfig(nodes=2, ssd_capacity_tokens=512 * 20_000))
    s = res.summary()
    ret = s["effective_retention"]["chatbot"]
    assert ret["evictions"] == res.evictions_ssd > 0
    assert 0 < ret["idle_at_eviction_p50_s"] <= ret["idle_at_eviction_p90_s"] <= ret["idle_at_eviction_p99_s"]
    assert s["ssd_bytes_used_max"] == 20_000 * 512 * 70_272


def test_deterministic_for_a_seed(real):
    a = simulate_cluster(real, ClusterConfig(nodes=5, seed=7, ssd="per-machine", ssd_capacity_tokens=10**6))
    b = simulate_cluster(real, ClusterConfig(nodes=5, seed=7, ssd="per-machine", ssd_capacity_tokens=10**6))
    c = simulate_cluster(real, ClusterConfig(nodes=5, seed=8, ssd="per-machine", ssd_capacity_tokens=10**6))
    assert a.requests.equals(b.requests)
    assert not a.requests["machine"].equals(c.requests["machine"])


def test_config_validation():
    with pytest.raises(ValueError, match="routing"):
        ClusterConfig(routing="closest")
    with pytest.raises(ValueError, match="nodes"):
        ClusterConfig(nodes=0)
    with pytest.raises(ValueError, match="ssd"):
        ClusterConfig(ssd="nfs")


def test_simulate_cli_cluster_fields(capsys):
    import json

    from tiered_kv.cli import main

    assert main(["simulate", "--trace", "conversation", "--capacity", "2560000", "--json"]) == 0
    single = json.loads(capsys.readouterr().out)
    assert main(["simulate", "--trace", "conversation", "--nodes", "1", "--capacity", "2560000", "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert one["hit_tokens"] == single["hit_tokens"]  # one machine = the single-cache replay
    assert main(["simulate", "--synth", "ci", "--days", "1", "--nodes", "4", "--routing", "cache-aware",
                 "--shared-capacity", "20000000", "--admission", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("ttft_p50_s", "ttft_p99_s", "disk_token_fraction", "cost_per_mtok", "by_class"):
        assert key in out
    assert 0 < out["ttft_p50_s"] <= out["ttft_p99_s"]
    assert set(out["by_class"]) == {"agent", "chatbot"}
    assert out["cost_per_mtok"] == pytest.approx(1 - out["token_hit_rate"] * (1 - 1 / 50))
    assert main(["simulate", "--synth", "ci", "--trace", "conversation"]) == 2


def test_window_state_sized_from_the_models_window():
    from tiered_kv.model import ModelConfig
    from tiered_kv.sim.cluster import ClusterConfig
    from tiered_kv.sim.cluster.model import V3_KV_BYTES_PER_TOKEN, WINDOW_TOKENS

    assert WINDOW_TOKENS == ModelConfig().window
    assert ClusterConfig().window_state_bytes == int(V3_KV_BYTES_PER_TOKEN * ModelConfig().window)
