"""The policy zoo against libCacheSim itself: identical block hits (docs/policies.md).

The conversation trace at 20 capacities for the nine policies both implement, and random small
traces (hypothesis) at every small capacity. Skipped when libcachesim (the ``peers`` extra) is
not installed; the extra's listing is checked here too.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import tomllib
from hypothesis import given, settings
from hypothesis import strategies as st

from tiered_kv.sim.trace_replay import compile_trace
from tiered_kv.sim.traces import random_trace

ROOT = Path(__file__).resolve().parent.parent


def test_peers_extra_lists_libcachesim_in_pyproject_and_environment_yml():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(r.startswith("libcachesim") for r in extras["peers"])
    env = (ROOT / "environment.yml").read_text()
    block = env.split("optional extra `peers`", 1)[1].split("\n\n", 1)[0]
    listed = [m.group(1).strip() for m in re.finditer(r"#\s+- (.+)", block)]
    assert sorted(listed) == sorted(extras["peers"]), "environment.yml's peers block drifted from pyproject"


@pytest.fixture(scope="module")
def lcs():
    return pytest.importorskip("libcachesim", reason="libcachesim is the optional 'peers' extra")


@pytest.fixture(scope="module")
def conversation_trace():
    from tiered_kv.sim.traces import load_trace, resolve_trace_path

    return compile_trace(load_trace(resolve_trace_path("conversation")))


@pytest.mark.peers
@pytest.mark.slow
def test_identical_hits_on_the_conversation_trace(lcs, conversation_trace):
    from tiered_kv.sim.peers.libcachesim import PAIRS, cross_check

    t = conversation_trace
    caps = np.unique(np.geomspace(20, t.n_unique, 20).astype(np.int64))
    assert caps.size == 20
    out = cross_check(t, caps)
    assert set(out) == set(PAIRS)
    bad = {k: v for k, v in out.items() if not v["identical"]}
    assert not bad, bad
    assert out["Belady"]["hits_ours"][-1] == t.n_accesses - t.n_unique  # every reuse hits


@pytest.mark.peers
@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_identical_hits_on_random_traces(lcs, seed):
    from tiered_kv.sim.peers.libcachesim import cross_check

    # capacities from 20: below that the process crashed inside libCacheSim in one run (its
    # queues of zero objects); the zoo's small-capacity behaviour is tested in test_policy_zoo.py
    t = compile_trace(random_trace(seed, 120, alphabet=4))
    out = cross_check(t, [20, 23, 31, 47, 64])
    assert all(v["identical"] for v in out.values()), {k: v for k, v in out.items() if not v["identical"]}


@pytest.mark.peers
def test_bench_peers_reports_libcachesim_identical_and_speedup(lcs):
    """`tiered-kv bench peers --json`: every libCacheSim pair identical, median-of-3 speed ratio."""
    import argparse

    from tiered_kv.bench import peers as bench
    from tiered_kv.sim.peers.libcachesim import PAIRS

    args = argparse.Namespace(trace="synthetic", points=4, min_tokens=1e4, max_tokens=1e8, policies="lru",
                              skip="kvcache-simulator,lmcache", repeat=1, lmcache_bytes_per_token=2,
                              libcachesim_points=3, libcachesim_repeat=3, json=True)
    out = bench.run(args)
    sec = out["libcachesim"]
    assert sec["status"]["available"] and sec["repeat"] == 3
    assert out["identical"] is True and out["peers_run"] == len(PAIRS)
    for name, ours in PAIRS.items():
        rec = sec[name]
        assert rec["ours_policy"] == ours and rec["identical"] is True and rec["speedup_vs_peer"] > 0
        assert len(rec["peer_seconds_all"]) == 3 == len(rec["ours_seconds_all"])
        assert len(rec["hits_peer"]) == len(sec["capacities_blocks"]) and rec["hits_peer"] == rec["hits_ours"]
