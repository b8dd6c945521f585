"""``lru-trie`` under a semantics without warm-up replays every request (it used to report 0 hits).

kvcache.ai's underfilled rule zeroes a capacity that did not fill during the warm-up; with no
warm-up (the ``tiered-kv`` and ``lmcache`` semantics count every request) nothing could ever
fill, so ``tiered-kv simulate --policy lru-trie`` reported 0 hits at every capacity. The
reference below is prefix-trie LRU written out plainly: each request touches its whole path,
and while the cache holds more than ``capacity`` nodes the one with the oldest touch goes,
deepest first on ties (what the SSD tier's watermark GC does, :mod:`tiered_kv.tiers.ssd.retention`).
Requests here are never longer than the cache, where the peer's own-path rule would apply.
"""

from __future__ import annotations

import numpy as np
import pytest

from tiered_kv.sim.peers.semantics import get_semantics
from tiered_kv.sim.policies import get_policy
from tiered_kv.sim.trace_replay import ReplayOptions, compile_trace, replay
from tiered_kv.sim.traces import random_trace


def tree_lru_hit_blocks(blocks: np.ndarray, offsets: np.ndarray, capacity: float) -> list[int]:
    """Leading hit blocks per request of prefix-trie LRU (oldest touch, deepest first) at ``capacity`` nodes."""
    last: dict[tuple, int] = {}  # present node (its path) -> last request that touched it
    hits = []
    for r in range(offsets.shape[0] - 1):
        ids = [int(b) for b in blocks[offsets[r]:offsets[r + 1]]]
        path = [tuple(ids[:i + 1]) for i in range(len(ids))]
        h = 0
        while h < len(path) and path[h] in last:
            h += 1
        hits.append(h)
        for node in path:
            last[node] = r
        while len(last) > capacity:
            del last[min(last, key=lambda x: (last[x], -len(x)))]
    return hits


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("capacity", [4, 6, 9])
def test_lru_trie_without_warmup_is_prefix_tree_lru(seed, capacity):
    ct = compile_trace(random_trace(seed, 60, block_size=4, max_blocks=4, alphabet=3), ReplayOptions())
    assert ct.counted.all()  # no warm-up: every request counts
    res = replay(ct, get_policy("lru-trie", capacity_tokens=capacity * 4))
    want = tree_lru_hit_blocks(ct.blocks, ct.offsets, capacity)
    assert res.hit_blocks_per_request.tolist() == want
    assert res.extra["underfilled"] is False and res.hit_tokens > 0


def test_lru_trie_at_unlimited_capacity_is_lru_and_the_peers_warmup_rule_stays():
    df = random_trace(3, 80, block_size=4, max_blocks=6, alphabet=3)
    ct = compile_trace(df, ReplayOptions())
    trie = replay(ct, get_policy("lru-trie"))
    assert trie.hit_tokens > 0
    assert np.array_equal(trie.hit_tokens_per_request, replay(ct, get_policy("lru")).hit_tokens_per_request)
    # with kvcache.ai's warm-up, a capacity larger than what the warm-up saw is still "underfilled"
    kv = compile_trace(df, get_semantics("kvcache-ai").options)
    res = replay(kv, get_policy("lru-trie"))
    assert res.extra["underfilled"] is True and res.hit_tokens == 0


@pytest.mark.parametrize("semantics", ["tiered-kv", "kvcache-ai"])
def test_every_trie_curve_equals_its_one_capacity_replay(semantics):
    """Each trie curve (one pass over every capacity) agrees with the registered policy replayed
    at each capacity, with the peer's warm-up and without one (where it once reported zeros)."""
    from tiered_kv.sim.peers import trie
    from tiered_kv.sim.peers.trie_belady import optimal_trie_curve
    from tiered_kv.sim.peers.trie_fifo import fifo_trie_curve
    from tiered_kv.sim.peers.trie_lru import lru_trie_curve

    ct = compile_trace(random_trace(5, 90, block_size=4, max_blocks=5, alphabet=3), get_semantics(semantics).options)
    t = trie.from_compiled(ct)
    caps = np.arange(1, t.n_nodes + 2)
    for name, curve in [("lru-trie", lru_trie_curve), ("fifo-trie", fifo_trie_curve), ("belady-trie", optimal_trie_curve)]:
        got = curve(t, caps)
        want = [replay(ct, get_policy(name, capacity_tokens=int(c) * 4)).hit_tokens for c in caps]
        assert got.tolist() == want, name
        assert (got > 0).sum() >= len(caps) // 2, name  # not the underfilled zeros


def test_curves_command_reports_fifo_trie_hits_without_warmup():
    """``tiered-kv curves --fifo-trie`` under the default semantics: the FIFO-trie curve is the
    policy's replay at each capacity, and not all zeros."""
    from tiered_kv.commands.curves import compute_curves

    sem = get_semantics("tiered-kv")
    ct = compile_trace(random_trace(6, 80, block_size=4, max_blocks=5, alphabet=3), sem.options)
    caps = [8, 16, 32, 64]
    out = compute_curves(ct, sem, caps, [], [], progress=False, fifo_trie=True)
    want = [replay(ct, get_policy("fifo-trie", capacity_tokens=c)).hit_tokens for c in caps]
    assert out["fifo_trie_hit_tokens"] == want and max(want) > 0


def test_trie_policies_are_found_by_name_in_a_fresh_process():
    """The registry loads the policies the package ships above it on an unknown name: no caller
    has to import ``tiered_kv.sim.peers`` first."""
    import subprocess
    import sys

    code = ("from tiered_kv.sim.policies import get_policy, policy_names\n"
            "print(type(get_policy('fifo-trie', capacity_tokens=8)).__name__)\n"
            "print('belady-trie' in policy_names())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["FIFOTrie", "True"]
