"""kvcache.ai's LRU over prefix-trie leaves: every capacity in one stack pass, and the exact replay.

Rules: :mod:`tiered_kv.sim.peers.trie` (leaves only, the hit prefix refreshed and guarded,
admission stops when only the request's own path is left).

Why the curve is one pass
-------------------------
A parent is touched in every request that touches its child, and before it, so the
oldest leaf is always the node with the smallest key ``(last request, -depth)``: among the
nodes last used by the oldest request, only the deepest present one can be a leaf, and no node
of an older request remains. Hence, whenever the cache holds anything from an earlier request,
trie-LRU evicts exactly what plain LRU would if each request touched its path *deepest first*,
and the cache at capacity ``C`` is the top ``C`` of that LRU stack: stack distances (Mattson,
with a Fenwick tree over touch stamps) give every capacity at once. The exception is a request
longer than the cache (``C`` < its block count): the peer then runs out of evictable leaves
mid-request and keeps only the request's first ``C`` nodes, or ``C - 1`` when it had to drop
the ``C``-th one it had just inserted. From there the cache is again the top ``C`` of the same
stack, minus that one dropped node until a request touches it again (it is the node at depth
``C``) or another long request comes; so a small capacity needs one scan over the requests,
not a replay (:func:`lru_trie_curve`). :func:`replay_lru_trie` is the O(1)-per-access exact
replay (a linked list in that order) that the policy and the tests use.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tiered_kv.sim.peers.trie import TrieTrace, curve_capacities, lookup, replay_at
from tiered_kv.sim.policies.blockwise import ll_init, ll_push_head, ll_unlink


def replay_lru_trie(t: TrieTrace, capacity: int) -> tuple[np.ndarray, bool]:
    """Exact trie-LRU at one capacity (blocks): (leading hit blocks per request, filled in warm-up)."""
    return replay_at(t, capacity, lambda hit: _lru_list(t.node, t.offsets, t.fill_by, t.parent.shape[0],
                                                           int(capacity), hit))


def lru_trie_curve(t: TrieTrace, capacities) -> np.ndarray:
    """Trie-LRU counted hit tokens at each capacity (blocks); 0 where kvcache.ai says underfilled.

    At a capacity at least the longest request a block hits iff its stack distance is within
    it; each smaller capacity takes one scan over requests (module docstring)."""
    caps, live = curve_capacities(t, capacities)
    out = np.zeros(caps.shape[0], dtype=np.int64)
    if not live.any():
        return out
    dist = _lru_trie_distances(t.node, t.offsets, t.n_nodes)
    big = live & (caps >= t.max_request_blocks)
    if big.any():
        counted = slice(int(t.offsets[t.warmup]), None)
        hist = np.bincount(np.minimum(dist[counted], t.n_nodes + 1), weights=t.tokens[counted],
                           minlength=t.n_nodes + 2)
        cum = np.cumsum(hist).round().astype(np.int64)  # token sums are exact in float64
        out[big] = cum[np.minimum(caps[big], t.n_nodes)]  # bin n_nodes + 1: first touches, never hits
    small = np.flatnonzero(live & ~big)
    if small.size:
        out[small] = _lru_small_capacities(dist, t.node, t.offsets, t.tokens, t.warmup,
                                           caps[small])
    return out


@njit(cache=True)
def _lru_small_capacities(dist, node, offsets, tokens, warmup, caps):
    """Exact trie-LRU hit tokens for capacities below the longest request, O(requests) each."""
    cum = np.zeros(tokens.shape[0] + 1, dtype=np.int64)
    for a in range(tokens.shape[0]):
        cum[a + 1] = cum[a] + tokens[a]
    out = np.zeros(caps.shape[0], dtype=np.int64)
    for q in range(caps.shape[0]):
        c = caps[q]
        dropped = -1  # node the peer dropped and the stack still ranks within the top c
        hits = 0
        for r in range(offsets.shape[0] - 1):
            s, e = offsets[r], offsets[r + 1]
            k = e - s
            h = 0
            while h < k and dist[s + h] <= c:  # distances grow with depth: a prefix
                h += 1
            at_c = node[s + c - 1] if k >= c else -2  # the node at depth c (fixed depth in a trie)
            if h >= c and at_c == dropped:
                h = c - 1
            if r >= warmup:
                hits += cum[s + h] - cum[s]
            if k > c:  # long request: the cache ends as its first c nodes, or c-1 (drops depth c)
                dropped = at_c if h < c else -1
            elif at_c == dropped:
                dropped = -1  # touched again: inserted, the stack and the cache agree again
        out[q] = hits
    return out


@njit(cache=True)
def _relink_head(node, s, stop, r, owner, nx, pv, sentinel):
    """Move node[s:stop] (all cached, so linked) to the list's head, node[s] first; mark them as
    request ``r``'s."""
    for a in range(stop - 1, s - 1, -1):
        x = node[a]
        ll_unlink(nx, pv, x)
        ll_push_head(nx, pv, sentinel, x)
        owner[x] = r


@njit(cache=True)
def _lru_list(node, offsets, fill_by, n, capacity, hit_blocks):
    """Exact trie-LRU at one capacity in O(1) per access: an LRU list in (request, -depth) order.

    The current request's nodes sit at the head while it is admitted, so the tail is the
    oldest leaf of an earlier request (module docstring). When the tail belongs to the current
    request the cache holds nothing else: the peer then evicts the node just inserted (if any)
    and stops admission, which is reproduced here. Fills ``hit_blocks``; returns whether the
    cache filled by request ``fill_by``. Nodes are ``0..n-1``.
    """
    present = np.zeros(n, dtype=np.bool_)
    owner = np.full(n, -1, dtype=np.int64)  # request that last touched the node
    nx, pv = ll_init(n, 1)  # one list (blockwise's), sentinel n: pv[n] is the tail
    size = 0
    filled = False
    for r in range(offsets.shape[0] - 1):
        if r >= fill_by and not filled:
            return False
        s, e, h = lookup(present, node, offsets, r, hit_blocks)
        _relink_head(node, s, h, r, owner, nx, pv, n)  # guard the hits
        stop = h  # nodes s..stop-1 are present after admission
        for a in range(h, e):
            x = node[a]
            if size >= capacity:
                v = pv[n]
                if owner[v] == r:  # only this request's path is cached
                    if a - 1 >= h:  # the node inserted just before is the one leaf: dropped
                        d = node[a - 1]
                        present[d] = False
                        size -= 1
                        stop = a - 1
                        ll_unlink(nx, pv, d)
                    break
                present[v] = False  # evict the oldest leaf
                size -= 1
                ll_unlink(nx, pv, v)
            present[x] = True
            size += 1
            owner[x] = r
            ll_push_head(nx, pv, n, x)  # at the head for now (final order is fixed below)
            if size >= capacity and r < fill_by:
                filled = True
            stop = a + 1
        # re-link this request's present nodes at the head, shallowest first (deepest oldest)
        _relink_head(node, s, stop, r, owner, nx, pv, n)
    return filled


@njit(cache=True)
def _lru_trie_distances(node, offsets, n_nodes):
    """Per access: its distance in the LRU stack where each request touches its path deepest
    first (Fenwick tree over touch stamps); 2**62 for a node never seen before."""
    m = node.shape[0]
    tree = np.zeros(m + 1, dtype=np.int64)
    last = np.zeros(n_nodes + 1, dtype=np.int64)  # 0 = never touched
    dist = np.empty(m, dtype=np.int64)
    stamp = 0
    distinct = 0
    for r in range(offsets.shape[0] - 1):
        s, e = offsets[r], offsets[r + 1]
        for a in range(s, e):  # all lookups see the stack before this request
            p = last[node[a]]
            if p == 0:
                dist[a] = 2**62
                continue
            below = 0  # marks at stamps <= p
            i = p
            while i > 0:
                below += tree[i]
                i -= i & -i
            dist[a] = distinct - below + 1
        for a in range(e - 1, s - 1, -1):  # deepest first
            nd = node[a]
            p = last[nd]
            if p == 0:
                distinct += 1
            else:
                i = p
                while i <= m:
                    tree[i] -= 1
                    i += i & -i
            stamp += 1
            last[nd] = stamp
            i = stamp
            while i <= m:
                tree[i] += 1
                i += i & -i
    return dist
