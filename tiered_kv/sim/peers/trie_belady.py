"""kvcache.ai's "optimal" (prefix-trie Belady with bypass): every capacity in one stack pass.

Rules pinned from ``kvcache-simulator`` (see :mod:`tiered_kv.sim.peers.trie` for the shared trie
rules): a node's key is the index of the next *request* that uses it; on a full cache the leaf
with the farthest key (larger node id first on ties) outside the request's hit prefix is
evicted, unless it is needed no later than the node being admitted, in which case that node is
bypassed and admission stops.

Why one pass is exact
---------------------
Keys never decrease from parent to child (a child is used only together with its parent), and
node ids grow with depth, so the farthest unprotected leaf is the farthest unprotected *node*:
the leaf restriction changes nothing. The hit prefix is needed no later than any node being
admitted, so protecting it never changes a decision either. What is left is "keep the best C of
cache + candidate" under one total order shared by every capacity at each step: resident nodes
by (next use, id), a candidate after every resident with the same next use (ties keep the
resident). That is a priority stack algorithm (Mattson, Gecsei, Slutz and Traiger 1970): the
cache of size C is the top C of one stack, and an access pushes the candidate down the stack,
swapping with whatever it beats. Only the requested capacities matter, so the stack is kept as
one segment per capacity (a max-heap of each segment's members, worst on top): an access
visits the segments above its own, O(segments x log) at most, for every capacity together.
The pass is :func:`tiered_kv.sim.policies.belady.stack_hist`, the one plain Belady uses too,
given this policy's priorities (next use in requests, then node id).

:func:`replay_optimal_trie` is the plain per-capacity replay (heap of leaves, versioned
entries), kept as an independent reference for the tests and for per-request answers.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tiered_kv.sim.peers.trie import TrieTrace, check_capacities, lookup, replay_at, underfilled_mask
from tiered_kv.sim.policies.belady import stack_hist
from tiered_kv.sim.policies.frequency import heap_pop, heap_push


def replay_optimal_trie(t: TrieTrace, capacity: int) -> tuple[np.ndarray, bool]:
    """Exact trie-Belady-with-bypass at one capacity: (hit blocks per request, filled in warm-up)."""
    return _replay_leaves(t, capacity, True)


def replay_lru_trie_heap(t: TrieTrace, capacity: int) -> tuple[np.ndarray, bool]:
    """Trie-LRU by the leaf heap: a second, independent reference for the list replay."""
    return _replay_leaves(t, capacity, False)


def _replay_leaves(t: TrieTrace, capacity: int, optimal: bool) -> tuple[np.ndarray, bool]:
    return replay_at(t, capacity, lambda hit: _replay_trie(t.node, t.parent, t.offsets, t.next_use, t.warmup,
                                                           int(capacity), optimal, hit))


def optimal_trie_curve(t: TrieTrace, capacities) -> np.ndarray:
    """Trie-Belady-with-bypass hit tokens at each capacity (blocks), all in one pass."""
    caps = check_capacities(capacities)
    out = np.zeros(caps.shape[0], dtype=np.int64)
    live = caps[~underfilled_mask(t, caps)]
    if live.size == 0 or t.n_requests == 0:
        return out
    bounds = np.unique(live)
    big = np.int64(t.n_nodes + 2)  # priority = next use * big + node id; a candidate ties last
    counted = np.arange(t.node.shape[0]) >= t.offsets[t.warmup]
    hist = stack_hist(t.node, t.next_use * big + (big - 1), t.next_use * big + t.node,
                      np.int64(t.n_requests + 1) * big, np.where(counted, t.tokens, 0), np.zeros_like(t.node), 1,
                      t.n_nodes + 1, bounds)
    cum = np.cumsum(hist[0])
    idx = np.searchsorted(bounds, caps)
    ok = ~underfilled_mask(t, caps)
    out[ok] = cum[idx[ok]]
    return out


@njit(cache=True, inline="always")
def _current(present, children, version, key, nd, k, v):  # pragma: no cover - compiled
    """Whether a heap entry ``(k, nd, v)`` is still ``nd``'s: a present leaf at that key and version."""
    return present[nd] and children[nd] == 0 and version[nd] == v and key[nd] == k


@njit(cache=True, inline="always")
def _push_leaf(hk, hn, hv, hsize, key, version, nd):  # pragma: no cover - compiled
    """Push ``nd`` under a new version (its older entries turn stale); the heap's size. Entries are
    (key, -node, version) in the min-heap of :mod:`tiered_kv.sim.policies.frequency`: the smallest
    key first, the larger node on ties."""
    version[nd] += 1
    return heap_push(hk, hn, hv, hsize, float(key[nd]), -nd, version[nd])


@njit(cache=True)
def _evict_leaf(hk, hn, hv, hsize, sk, sn, sv, present, children, version, key, guard, parent, r, optimal,
                need):  # pragma: no cover - compiled
    """Evict the best leaf not guarded by request ``r``, unless (``optimal``) it is needed no later
    than ``need``: then nothing goes. Returns (heap size, evicted)."""
    ns = 0  # guarded entries set aside, pushed back after
    evicted = False
    while hsize > 0:
        k0, n0, v0 = hk[0], -hn[0], hv[0]
        hsize = heap_pop(hk, hn, hv, hsize)
        if not _current(present, children, version, key, n0, k0, v0):
            continue
        if guard[n0] == r + 1:
            sk[ns], sn[ns], sv[ns] = k0, n0, v0
            ns += 1
            continue
        if optimal and -k0 <= need:
            hsize = heap_push(hk, hn, hv, hsize, k0, -n0, v0)
            break
        present[n0] = False
        p = parent[n0]
        children[p] -= 1
        if p > 0 and present[p] and children[p] == 0:
            hsize = _push_leaf(hk, hn, hv, hsize, key, version, p)
        evicted = True
        break
    for j in range(ns):
        hsize = heap_push(hk, hn, hv, hsize, sk[j], -sn[j], sv[j])
    return hsize, evicted


@njit(cache=True)
def _compact(hk, hn, hv, hsize, present, children, version, key):  # pragma: no cover - compiled
    """Drop the stale entries and rebuild the heap from the rest; its size."""
    j = 0
    for i in range(hsize):
        if _current(present, children, version, key, -hn[i], hk[i], hv[i]):
            hk[j], hn[j], hv[j] = hk[i], hn[i], hv[i]
            j += 1
    hsize = 0
    for i in range(j):
        hsize = heap_push(hk, hn, hv, hsize, hk[i], hn[i], hv[i])
    return hsize


@njit(cache=True)
def _replay_trie(node, parent, offsets, next_use, warmup, capacity, optimal, hit_blocks):
    """Leaf-restricted replay. Keys: LRU = touch clock (min first); optimal = -next use.

    Fills ``hit_blocks``; returns whether the cache filled during warm-up."""
    n_nodes = parent.shape[0]
    present = np.zeros(n_nodes, dtype=np.bool_)
    present[0] = True
    children = np.zeros(n_nodes, dtype=np.int64)
    key = np.zeros(n_nodes, dtype=np.int64)
    version = np.zeros(n_nodes, dtype=np.int64)
    guard = np.zeros(n_nodes, dtype=np.int64)
    cap_heap = 4 * node.shape[0] + 16
    hk = np.empty(cap_heap, dtype=np.float64)
    hn = np.empty(cap_heap, dtype=np.int64)
    hv = np.empty(cap_heap, dtype=np.int64)
    sk = np.empty(capacity + 16, dtype=np.float64)
    sn = np.empty(capacity + 16, dtype=np.int64)
    sv = np.empty(capacity + 16, dtype=np.int64)
    hsize = size = clock = 0
    filled = False
    for r in range(offsets.shape[0] - 1):
        if r >= warmup and not filled:
            return False
        s, e, h = lookup(present, node, offsets, r, hit_blocks)
        for a in range(s, h):  # hits: touch, guard from eviction
            nd = node[a]
            clock += 1
            key[nd] = -next_use[a] if optimal else clock
            if children[nd] == 0:
                hsize = _push_leaf(hk, hn, hv, hsize, key, version, nd)
            guard[nd] = r + 1
        for a in range(h, e):  # misses: admit while there is room or a leaf to evict
            nd = node[a]
            if size >= capacity:
                hsize, evicted = _evict_leaf(hk, hn, hv, hsize, sk, sn, sv, present, children, version, key, guard,
                                             parent, r, optimal, next_use[a])
                if not evicted:
                    break
                size -= 1
            if size >= capacity or not present[parent[nd]]:
                break
            present[nd] = True
            size += 1
            children[parent[nd]] += 1
            clock += 1
            key[nd] = -next_use[a] if optimal else clock
            hsize = _push_leaf(hk, hn, hv, hsize, key, version, nd)
            filled = filled or (size >= capacity and r < warmup)
        if hsize > cap_heap - 2 * (e - s) - 8:
            hsize = _compact(hk, hn, hv, hsize, present, children, version, key)
    return filled
