"""kvcache.ai's "optimal" (prefix-trie Belady with bypass): every capacity in one stack pass.

Rules: :mod:`tiered_kv.sim.peers.trie`; a node's key is the index of the next *request* that
uses it.

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
swapping with whatever it beats. The pass is :func:`tiered_kv.sim.policies.belady.stack_pass`
(one heap segment per requested capacity; O(segments x log) per access at most), the one plain
Belady uses too, given this policy's priorities (next use in requests, then node id).

:func:`replay_optimal_trie` is the plain per-capacity replay (heap of leaves, versioned
entries), kept as an independent reference for the tests and for per-request answers.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tiered_kv.sim.heap import heap_pop, heap_push
from tiered_kv.sim.peers.trie import TrieTrace, curve_capacities, lookup, replay_at
from tiered_kv.sim.policies.belady import stack_pass


def replay_optimal_trie(t: TrieTrace, capacity: int) -> tuple[np.ndarray, bool]:
    """Exact trie-Belady-with-bypass at one capacity: (hit blocks per request, filled in warm-up)."""
    return _replay_leaves(t, capacity, True)


def replay_lru_trie_heap(t: TrieTrace, capacity: int) -> tuple[np.ndarray, bool]:
    """Trie-LRU by the leaf heap: a second, independent reference for the list replay."""
    return _replay_leaves(t, capacity, False)


def _replay_leaves(t: TrieTrace, capacity: int, optimal: bool) -> tuple[np.ndarray, bool]:
    return replay_at(t, capacity, lambda hit: _replay_trie(t.node, t.parent, t.offsets, t.next_use, t.fill_by,
                                                           int(capacity), optimal, hit))


def optimal_trie_curve(t: TrieTrace, capacities) -> np.ndarray:
    """Trie-Belady-with-bypass hit tokens at each capacity (blocks), all in one pass."""
    caps, ok = curve_capacities(t, capacities)
    out = np.zeros(caps.shape[0], dtype=np.int64)
    live = caps[ok]
    if live.size == 0 or t.n_requests == 0:
        return out
    bounds = np.unique(live)
    big = np.int64(t.n_nodes + 2)  # priority = next use * big + node id; a candidate ties last
    counted = np.arange(t.node.shape[0]) >= t.offsets[t.warmup]
    no_writes = np.zeros(0, np.int64)
    hist = stack_pass(t.node, t.next_use * big + (big - 1), t.next_use * big + t.node,
                      np.int64(t.n_requests + 1) * big, np.where(counted, t.tokens, 0), np.zeros_like(t.node), 1,
                      t.n_nodes + 1, bounds, no_writes, no_writes)
    cum = np.cumsum(hist[0])
    idx = np.searchsorted(bounds, caps)
    out[ok] = cum[idx[ok]]
    return out


@njit(cache=True)
def _replay_trie(node, parent, offsets, next_use, fill_by, capacity, optimal, hit_blocks):
    """Leaf-restricted replay. Keys: LRU = touch clock (min first); optimal = -next use. Heap
    entries are (key, -node, version), so among equal keys the deeper (larger) node goes first.

    Fills ``hit_blocks``; returns whether the cache filled by request ``fill_by``."""
    n_nodes = parent.shape[0]
    present = np.zeros(n_nodes, dtype=np.bool_)
    present[0] = True
    children = np.zeros(n_nodes, dtype=np.int64)
    key = np.zeros(n_nodes, dtype=np.int64)
    version = np.zeros(n_nodes, dtype=np.int64)
    guard = np.zeros(n_nodes, dtype=np.int64)
    cap_heap = 4 * node.shape[0] + 16
    hk = np.empty(cap_heap, dtype=np.int64)
    hn = np.empty(cap_heap, dtype=np.int64)  # -node: among equal keys the deeper node pops first
    hv = np.empty(cap_heap, dtype=np.int64)
    sk = np.empty(capacity + 16, dtype=np.int64)
    sn = np.empty(capacity + 16, dtype=np.int64)
    sv = np.empty(capacity + 16, dtype=np.int64)
    hsize = 0
    size = 0
    clock = 0
    filled = False
    for r in range(offsets.shape[0] - 1):
        if r >= fill_by and not filled:
            return False
        s, e, h = lookup(present, node, offsets, r, hit_blocks)
        for a in range(s, h):
            nd = node[a]
            clock += 1
            key[nd] = -next_use[a] if optimal else clock
            if children[nd] == 0:
                version[nd] += 1
                hsize = heap_push(hk, hn, hv, hsize, key[nd], -nd, version[nd])
            guard[nd] = r + 1
        hsize, size, clock, filled = _admit(node, parent, next_use, capacity, optimal, h, e, r, r < fill_by,
                                            present, children, key, version, guard, hk, hn, hv, sk, sn, sv,
                                            hsize, size, clock, filled)
        if hsize > cap_heap - 2 * (e - s) - 8:
            hsize = _compact(hk, hn, hv, hsize, present, children, version, key)
    return filled


@njit(cache=True)
def _admit(node, parent, next_use, capacity, optimal, h, e, r, filling, present, children, key, version,
           guard, hk, hn, hv, sk, sn, sv, hsize, size, clock, filled):
    """Admit request ``r``'s missed nodes ``node[h:e]`` in order, each evicting the best
    unguarded leaf when the cache is full (this request's hit prefix is guarded, and stashed
    while the heap is searched past it); stops at the first node not admitted (the optimal
    policy bypasses a node used no sooner than the best leaf). Returns (heap size, cache size,
    clock, filled) as updated."""
    for a in range(h, e):
        nd = node[a]
        if size >= capacity:
            # evict the best unguarded leaf, or stop admission
            ns = 0
            evicted = False
            while hsize > 0:
                k0, n0, v0 = hk[0], -hn[0], hv[0]
                hsize = heap_pop(hk, hn, hv, hsize)
                if not present[n0] or children[n0] != 0 or version[n0] != v0 or key[n0] != k0:
                    continue
                if guard[n0] == r + 1:
                    sk[ns], sn[ns], sv[ns] = k0, n0, v0
                    ns += 1
                    continue
                if optimal and -k0 <= next_use[a]:
                    hsize = heap_push(hk, hn, hv, hsize, k0, -n0, v0)
                    break
                present[n0] = False
                size -= 1
                p = parent[n0]
                children[p] -= 1
                if p > 0 and present[p] and children[p] == 0:
                    version[p] += 1
                    hsize = heap_push(hk, hn, hv, hsize, key[p], -p, version[p])
                evicted = True
                break
            for j in range(ns):
                hsize = heap_push(hk, hn, hv, hsize, sk[j], -sn[j], sv[j])
            if not evicted:
                break
        if size < capacity and present[parent[nd]]:
            present[nd] = True
            size += 1
            children[parent[nd]] += 1
            clock += 1
            key[nd] = -next_use[a] if optimal else clock
            version[nd] += 1
            hsize = heap_push(hk, hn, hv, hsize, key[nd], -nd, version[nd])
            if size >= capacity and filling:
                filled = True
        else:
            break
    return hsize, size, clock, filled


@njit(cache=True)
def _compact(hk, hn, hv, hsize, present, children, version, key):
    """Drop stale entries (node gone, no longer a leaf, or re-keyed since) and rebuild the heap."""
    j = 0
    for i in range(hsize):
        n0 = -hn[i]
        if present[n0] and children[n0] == 0 and version[n0] == hv[i] and key[n0] == hk[i]:
            hk[j], hn[j], hv[j] = hk[i], hn[i], hv[i]
            j += 1
    hsize = 0
    for i in range(j):
        hsize = heap_push(hk, hn, hv, hsize, hk[i], hn[i], hv[i])
    return hsize
