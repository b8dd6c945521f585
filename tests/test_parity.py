"""Identical hit tokens to the public simulators under the matching ``--semantics`` preset.

Runs only where the peers are installed (``pip install -e '.[peers]'`` and
``scripts/fetch_peers.sh``); skipped otherwise. Each peer reads the trace its own way (its own
parser, its own ordering), so file order, warm-up, token weights, chunking and capacity
arithmetic are all part of what is compared, not just the policy.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tiered_kv.sim import peers
from tiered_kv.sim.peers.lmcache_io import read_lookup_logs, write_lookup_jsonl
from tiered_kv.sim.traces import load_trace, random_trace, shipped_trace

pytestmark = pytest.mark.peers


@pytest.fixture(scope="module")
def kvcache():
    pytest.importorskip("kvcache_sim", reason=f"kvcache-simulator not installed ({peers.INSTALL_HINT})")
    return peers.kvcache_status()


@pytest.fixture(scope="module")
def lmcache():
    status = peers.lmcache_status()
    if not status.available:
        pytest.skip(f"LMCache simulator unavailable: {status.detail}")
    return peers.lmcache_simulator()


def _capacities(bs: int, n: int = 12) -> np.ndarray:
    """Blocks: a few below the longest request (the peer's special case) and a log sweep to 1e8 tokens."""
    return np.unique(np.concatenate([[1, 2, 19, 60, 200], np.geomspace(1e4, 1e8, n) // bs]).astype(np.int64))


@pytest.mark.parametrize("name", ["conversation", "synthetic"])
def test_kvcache_shipped_traces_identical(kvcache, name):
    path = shipped_trace(name)
    df = load_trace(path)
    caps = _capacities(512)
    backend = "cpp" if "cpp" in kvcache.detail else "python"
    if backend == "python":
        caps = caps[::3]
    trace = peers.kvcache_trace(path, block_size=512)
    for policy in ("lru", "optimal", "fifo"):
        want = peers.run_kvcache(trace, caps, policy, backend=backend)
        got = peers.ours_kvcache(df, caps, policy)
        assert np.array_equal(got, want), (name, policy, caps[got != want])
    assert want.max() > 0  # the comparison is not between two zero curves


def _shuffled_ids(df, seed):
    """Give requests a file order different from their time order (kvcache.ai replays file order)."""
    import polars as pl

    perm = np.random.default_rng(seed).permutation(df.height)
    return df.with_columns(pl.Series("request_id", perm, dtype=pl.Int64))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31), n=st.integers(2, 40), max_blocks=st.integers(1, 7),
       alphabet=st.integers(1, 4), bs=st.sampled_from([1, 4, 16]))
def test_kvcache_random_traces_identical(kvcache, tmp_path_factory, seed, n, max_blocks, alphabet, bs):
    df = _shuffled_ids(random_trace(seed, n, block_size=bs, max_blocks=max_blocks, alphabet=alphabet), seed)
    path = peers.write_kvcache_jsonl(df, tmp_path_factory.mktemp("kv") / "trace.jsonl")
    trace = peers.kvcache_trace(path)
    caps = np.arange(0, len(set(trace.ids)) + 4)
    for policy in ("lru", "optimal", "fifo"):
        want = peers.run_kvcache(trace, caps, policy, backend="python")
        assert np.array_equal(peers.ours_kvcache(df, caps, policy), want), policy


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31), n=st.integers(2, 30), max_blocks=st.integers(1, 6),
       alphabet=st.integers(1, 3), warm=st.sampled_from([0.25, 0.5, 0.75]))
def test_kvcache_raw_ids_any_trie(kvcache, seed, n, max_blocks, alphabet, warm):
    """Ids that are not chained (the same id under different parents): the trie builder's general path."""
    from kvcache_sim.plan import build_execution_plan
    from kvcache_sim.policies import simulate_policy
    from kvcache_sim.trace import parse_trace_lines

    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(n):
        k = int(rng.integers(1, max_blocks + 1))
        lines.append(json.dumps({"input_length": int(rng.integers(1, 4 * k + 3)), "block_size": 4,
                                 "hash_ids": [int(x) for x in rng.integers(0, alphabet, k)]}))
    trace = parse_trace_lines(lines)
    plan = build_execution_plan(trace, warmup_fraction=warm)
    t = peers.build_trie(np.array(trace.ids), np.array(trace.request_starts), np.array(trace.tokens),
                            plan.warmup_requests)
    assert t.n_nodes == plan.unique_blocks
    caps = np.arange(1, t.n_nodes + 3)
    for policy, curve in (("lru", peers.lru_trie_curve), ("optimal", peers.optimal_trie_curve),
                          ("fifo", peers.fifo_trie_curve)):
        want = [simulate_policy(plan, policy, int(c)).hitTokens for c in caps]
        assert curve(t, caps).tolist() == want, policy


def test_lmcache_shipped_trace_identical(lmcache, tmp_path):
    df = load_trace(shipped_trace("conversation"))
    log = write_lookup_jsonl(df, tmp_path / "lookup_hashes_conv.jsonl", bytes_per_token=2)
    events = peers.lmcache_events(log)
    caps = np.array([19, 300, 5_000, 60_000])
    want = peers.run_lmcache(events, caps, lmcache.compute_kv_bytes_per_chunk(events[0]))
    assert np.array_equal(peers.ours_lmcache(df, caps), want)
    assert np.array_equal(peers.ours_lmcache(read_lookup_logs(log), caps), want)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31), n=st.integers(1, 40), max_blocks=st.integers(1, 7),
       alphabet=st.integers(1, 4), bs=st.sampled_from([1, 4, 16]), shuffle=st.booleans())
def test_lmcache_random_traces_identical(lmcache, tmp_path_factory, seed, n, max_blocks, alphabet, bs, shuffle):
    df = random_trace(seed, n, block_size=bs, max_blocks=max_blocks, alphabet=alphabet)
    if shuffle:  # a log whose lines are not in time order: LMCache sorts them (stable)
        df = df[np.random.default_rng(seed).permutation(df.height).tolist()]
    log = write_lookup_jsonl(df, tmp_path_factory.mktemp("lm") / "lookup_hashes_r.jsonl", bytes_per_token=4)
    events = peers.lmcache_events(log)
    caps = np.arange(0, int(df["block_ids"].list.len().sum()) + 3)
    want = peers.run_lmcache(events, caps, lmcache.compute_kv_bytes_per_chunk(events[0]))
    assert np.array_equal(peers.ours_lmcache(read_lookup_logs(log), caps), want)
    if not shuffle:
        assert np.array_equal(peers.ours_lmcache(df, caps), want)


def test_bench_peers_reports_parity_and_ratios(kvcache, lmcache):
    from tiered_kv.bench import peers as bench

    args = argparse.Namespace(trace="synthetic", points=4, min_tokens=1e4, max_tokens=1e8,
                              policies="lru,optimal,fifo", skip="libcachesim", repeat=1, lmcache_bytes_per_token=2,
                              json=True)  # libCacheSim's section: tests/test_policy_peers.py
    out = bench.run(args)
    assert out["identical"] is True and out["peers_run"] == 4
    for peer, pols in (("kvcache-simulator", ("lru", "optimal", "fifo")), ("lmcache", ("lru",))):
        for p in pols:
            rec = out[peer][p]
            assert rec["identical"] is True and rec["speedup_vs_peer"] > 0
            assert len(rec["hit_tokens_peer"]) == 4 == len(rec["hit_tokens_ours"])


def test_chunk_bytes_need_one_dtype_per_tensor():
    from tiered_kv.sim.peers.lmcache_io import bytes_per_chunk

    assert bytes_per_chunk([[256, 8], [256, 8]], ["bfloat16", "float32"]) == 256 * 8 * (2 + 4)
    with pytest.raises(ValueError, match="dtypes: 1 for 2 tensor shapes"):
        bytes_per_chunk([[256, 8], [256, 8]], ["bfloat16"])  # used to drop the second tensor
