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

import tiered_kv.sim.peers  # noqa: F401 - registers lru-trie
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
