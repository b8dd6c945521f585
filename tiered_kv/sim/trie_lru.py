"""Prefix-trie policies (kvcache.ai semantics): trie-LRU, trie-Belady with bypass, FIFO; all curves.

kvcache.ai's simulator (``kvcache-simulator`` on PyPI, the engine behind its web tool) keeps
blocks as nodes of a prefix trie: a node is (parent node, block id), so a cached set is always
*prefix-closed*. Its rules, pinned from its source (v0.1.3):

- lookup: a request hits its leading present nodes; the hit prefix is refreshed, nothing else;
- admission: the missing nodes are inserted in order; when the cache is full one *leaf* outside
  the request's hit prefix is evicted first; admission stops at the first node that cannot be
  placed (no evictable leaf, or, for ``optimal``, every leaf is needed no later than the node);
- ``lru`` evicts the leaf with the oldest touch; ``optimal`` the leaf whose next use (a
  *request* index) is farthest, larger node id first on ties, and bypasses the new node when
  that leaf is needed no later than it; ``fifo`` evicts the oldest inserted node, trie or not;
- a capacity counts only if the cache filled up during the warm-up requests; otherwise the
  point is "underfilled" and reports 0 hit tokens.

Why the curves can be one pass
------------------------------
*Trie-LRU.* A parent is touched in every request that touches its child, and before it, so the
oldest leaf is always the node with the smallest key ``(last request, -depth)``: among the
nodes last used by the oldest request, only the deepest present one can be a leaf, and no node
of an older request remains. Hence, whenever the cache holds anything from an earlier request,
trie-LRU evicts exactly what plain LRU would if each request touched its path *deepest first*,
and the cache at capacity ``C`` is the top ``C`` of that LRU stack. Stack distances (Mattson,
with a Fenwick tree over touch stamps) then give every capacity at once. The exception is a
request longer than the cache (``C`` < its block count): the peer then runs out of evictable
leaves mid-request and keeps one node fewer. Capacities below the longest request therefore
get an exact per-capacity replay; all the others come from the one pass.

*Trie-Belady with bypass.* Keys (next-use request, node id) never decrease from parent to
child, so the farthest unprotected leaf is also the farthest unprotected node, and protecting
the hit prefix never changes a decision (those nodes are needed no later than any candidate).
The policy is then "keep the best ``C`` of cache + candidate" under one total order that every
capacity shares at each step: a priority stack algorithm (Mattson et al. 1970). Membership only
matters at the requested capacities, so the stack is kept as one segment per capacity, each a
max-heap of its worst member; an access pushes the candidate down through the segments above
its own, swapping with a segment's worst where the candidate is better. Exact at every
requested capacity, O(accesses x segments x log) in one pass.

*FIFO* is not a stack algorithm (Belady's anomaly), so each capacity is its own O(n) replay.

The hot loops use numba (already a dependency): the stack passes and heaps are
branchy, per-element loops that numpy cannot vectorise, and numba keeps them within a small
factor of the peer's C++ while staying in one readable file.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba as nb
import numpy as np

#: Next-use value of a node that is never used again (sorts after every request index).
_NEVER_OFFSET = 1


@dataclass(frozen=True)
class TrieTrace:
    """A trace as prefix-trie nodes: the input of every function here.

    ``node[a]`` is the trie node (1..n_nodes) of access ``a``; request ``r`` is
    ``offsets[r]:offsets[r+1]``; ``tokens[a]`` the hit tokens of access ``a``; requests before
    ``warmup`` are not counted; ``next_use[a]`` the next request using ``node[a]``.
    """

    node: np.ndarray  # int64 [m]
    parent: np.ndarray  # int64 [n_nodes + 1], parent[0] = 0 (root)
    offsets: np.ndarray  # int64 [n + 1]
    tokens: np.ndarray  # int64 [m]
    next_use: np.ndarray  # int64 [m]
    warmup: int
    measured_tokens: int  # sum of tokens over counted requests (kvcache.ai's total)

    @property
    def n_requests(self) -> int:
        return int(self.offsets.shape[0] - 1)

    @property
    def n_nodes(self) -> int:
        return int(self.parent.shape[0] - 1)

    @property
    def max_request_blocks(self) -> int:
        return int(np.diff(self.offsets).max()) if self.n_requests else 0

    @property
    def warmup_nodes(self) -> int:
        """Distinct nodes seen during warm-up: the largest capacity that fills in time."""
        end = int(self.offsets[self.warmup])
        return int(np.unique(self.node[:end]).shape[0]) if end else 0


def build_trie(blocks: np.ndarray, offsets: np.ndarray, tokens: np.ndarray, warmup: int) -> TrieTrace:
    """Map each request's block sequence onto prefix-trie nodes (node = (parent, block))."""
    blocks = np.ascontiguousarray(blocks, dtype=np.int64)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    tokens = np.ascontiguousarray(tokens, dtype=np.int64)
    n = offsets.shape[0] - 1
    if not 0 <= warmup <= n:
        raise ValueError(f"warmup: must be in [0, {n}] requests, got {warmup}")
    _, dense = np.unique(blocks, return_inverse=True)
    node, parent = _build_trie(dense.astype(np.int64).reshape(-1), offsets)
    next_use = _next_use(node, offsets, parent.shape[0])
    measured = int(tokens[offsets[warmup]:].sum())
    return TrieTrace(node=node, parent=parent, offsets=offsets, tokens=tokens, next_use=next_use,
                     warmup=int(warmup), measured_tokens=measured)


def from_compiled(trace) -> TrieTrace:
    """A :class:`TrieTrace` from a :class:`tiered_kv.sim.replay.CompiledTrace`."""
    counted = np.asarray(trace.counted, dtype=bool)
    warmup = int(np.argmax(counted)) if counted.any() else counted.shape[0]
    if counted[warmup:].sum() != counted.shape[0] - warmup:
        raise ValueError("trie policies need the warm-up to be a leading block of requests")
    return build_trie(trace.blocks, trace.offsets, trace.tokens, warmup)


@nb.njit(cache=True)
def _build_trie(dense, offsets):
    n_ids = dense.max() + 1 if dense.shape[0] else 1
    edges = dict()
    edges[np.int64(-1)] = np.int64(0)
    node = np.empty(dense.shape[0], dtype=np.int64)
    parent = np.zeros(dense.shape[0] + 1, dtype=np.int64)
    count = 1
    for r in range(offsets.shape[0] - 1):
        p = 0
        for a in range(offsets[r], offsets[r + 1]):
            key = p * n_ids + dense[a]
            nd = edges.get(key, -1)
            if nd < 0:
                nd = count
                edges[key] = nd
                parent[nd] = p
                count += 1
            node[a] = nd
            p = nd
    return node, parent[:count].copy()


@nb.njit(cache=True)
def _next_use(node, offsets, n_nodes):
    n = offsets.shape[0] - 1
    never = n + _NEVER_OFFSET
    last = np.full(n_nodes, never, dtype=np.int64)
    out = np.empty(node.shape[0], dtype=np.int64)
    for r in range(n - 1, -1, -1):
        for a in range(offsets[r], offsets[r + 1]):
            out[a] = last[node[a]]
        for a in range(offsets[r], offsets[r + 1]):
            last[node[a]] = r
    return out


# --------------------------------------------------------------------------------------------
# curves: hit tokens (counted requests) at each capacity in blocks; underfilled points give 0


def _check_capacities(capacities) -> np.ndarray:
    caps = np.asarray(capacities, dtype=np.int64).reshape(-1)
    if caps.size and caps.min() < 0:
        raise ValueError("capacities: must be >= 0 blocks")
    return caps


def _underfilled_mask(t: TrieTrace, caps: np.ndarray) -> np.ndarray:
    """kvcache.ai reports 0 unless the cache filled during warm-up (or the capacity is 0)."""
    return (caps > t.warmup_nodes) | (caps <= 0) | (t.measured_tokens <= 0)


def lru_trie_curve(t: TrieTrace, capacities) -> np.ndarray:
    """Trie-LRU hit tokens at each capacity (blocks): one stack pass plus short exact replays."""
    caps = _check_capacities(capacities)
    out = np.zeros(caps.shape[0], dtype=np.int64)
    if t.n_requests == 0:
        return out
    dist_hist = _lru_trie_distance_hist(t.node, t.offsets, t.tokens, t.warmup, t.n_nodes)
    cum = np.cumsum(dist_hist)
    dead = _underfilled_mask(t, caps)
    small = caps < t.max_request_blocks
    for i, c in enumerate(caps):
        if dead[i]:
            continue
        if small[i]:
            out[i] = _replay_lru_list(t.node, t.parent, t.offsets, t.tokens, t.warmup, int(c))
        else:
            out[i] = cum[min(int(c), cum.shape[0] - 1)]
    return out


@nb.njit(cache=True)
def _relink_head(node, s, stop, r, owner, prv, nxt, head, tail):
    """Move node[s:stop] to the list head, node[s] first; mark them as request ``r``'s."""
    for a in range(stop - 1, s - 1, -1):
        x = node[a]
        p, q = prv[x], nxt[x]
        if p >= 0 or q >= 0 or head == x:
            if p >= 0:
                nxt[p] = q
            else:
                head = q
            if q >= 0:
                prv[q] = p
            else:
                tail = p
        prv[x] = -1
        nxt[x] = head
        if head >= 0:
            prv[head] = x
        head = x
        if tail < 0:
            tail = x
        owner[x] = r
    return head, tail


@nb.njit(cache=True)
def _replay_lru_list(node, parent, offsets, tokens, warmup, capacity):
    """Exact trie-LRU at one capacity in O(1) per access: an LRU list in (request, -depth) order.

    The current request's nodes sit at the head while it is admitted, so the tail is the
    oldest leaf of an earlier request (module docstring). When the tail belongs to the current
    request the cache holds nothing else: the peer then evicts the node just inserted (if any)
    and stops admission, which is reproduced here.
    """
    n_nodes = parent.shape[0]
    present = np.zeros(n_nodes, dtype=np.bool_)
    owner = np.full(n_nodes, -1, dtype=np.int64)  # request that last touched the node
    nxt = np.full(n_nodes, -1, dtype=np.int64)  # towards the tail (older)
    prv = np.full(n_nodes, -1, dtype=np.int64)  # towards the head (newer)
    head = -1
    tail = -1
    size = 0
    filled = False
    hits = 0
    for r in range(offsets.shape[0] - 1):
        if r >= warmup and not filled:
            return 0
        s, e = offsets[r], offsets[r + 1]
        h = s
        while h < e and present[node[h]]:
            if r >= warmup:
                hits += tokens[h]
            h += 1
        head, tail = _relink_head(node, s, h, r, owner, prv, nxt, head, tail)  # guard the hits
        stop = h  # nodes s..stop-1 are present after admission
        for a in range(h, e):
            x = node[a]
            if size >= capacity:
                v = tail
                if owner[v] == r:  # only this request's path is cached
                    if a - 1 >= h:  # the node inserted just before is the one leaf: dropped
                        d = node[a - 1]
                        present[d] = False
                        size -= 1
                        stop = a - 1
                        p, q = prv[d], nxt[d]  # unlink it (it was linked at the head)
                        if p >= 0:
                            nxt[p] = q
                        else:
                            head = q
                        if q >= 0:
                            prv[q] = p
                        else:
                            tail = p
                        prv[d] = -1
                        nxt[d] = -1
                    break
                present[v] = False  # evict the oldest leaf
                size -= 1
                p = prv[v]
                tail = p
                if p >= 0:
                    nxt[p] = -1
                else:
                    head = -1
                prv[v] = -1
            present[x] = True
            size += 1
            owner[x] = r
            # link at the head for now (final order is fixed below)
            prv[x] = -1
            nxt[x] = head
            if head >= 0:
                prv[head] = x
            head = x
            if tail < 0:
                tail = x
            if size >= capacity and r < warmup:
                filled = True
            stop = a + 1
        # re-link this request's present nodes at the head, shallowest first (deepest oldest)
        head, tail = _relink_head(node, s, stop, r, owner, prv, nxt, head, tail)
    return hits if filled else 0


@nb.njit(cache=True)
def _lru_trie_distance_hist(node, offsets, tokens, warmup, n_nodes):
    """hist[d] = counted hit tokens whose LRU stack distance (deepest-first touches) is d."""
    m = node.shape[0]
    tree = np.zeros(m + 1, dtype=np.int64)  # Fenwick over touch stamps 1..m
    last = np.zeros(n_nodes + 1, dtype=np.int64)  # 0 = never touched
    hist = np.zeros(n_nodes + 2, dtype=np.int64)
    stamp = 0
    distinct = 0
    for r in range(offsets.shape[0] - 1):
        s, e = offsets[r], offsets[r + 1]
        if r >= warmup:
            for a in range(s, e):
                p = last[node[a]]
                if p == 0:
                    break  # never seen: this and every deeper node miss at all capacities
                below = 0  # marks at stamps <= p
                i = p
                while i > 0:
                    below += tree[i]
                    i -= i & -i
                hist[distinct - below + 1] += tokens[a]
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
    return hist


def replay_lru_trie(t: TrieTrace, capacity: int) -> int:
    """Exact trie-LRU replay at one capacity (blocks): counted hit tokens (0 if underfilled)."""
    if capacity <= 0 or t.n_requests == 0:
        return 0
    return int(_replay_trie(t.node, t.parent, t.offsets, t.tokens, t.next_use, t.warmup,
                            int(capacity), False))


def replay_optimal_trie(t: TrieTrace, capacity: int) -> int:
    """Exact trie-Belady-with-bypass replay at one capacity (the reference for the stack pass)."""
    if capacity <= 0 or t.n_requests == 0:
        return 0
    return int(_replay_trie(t.node, t.parent, t.offsets, t.tokens, t.next_use, t.warmup,
                            int(capacity), True))


@nb.njit(cache=True)
def _heap_push(hk, hn, hv, size, key, nd, ver):
    i = size
    hk[i], hn[i], hv[i] = key, nd, ver
    while i > 0:
        p = (i - 1) >> 1
        if hk[p] < hk[i] or (hk[p] == hk[i] and hn[p] > hn[i]):
            break
        hk[p], hk[i] = hk[i], hk[p]
        hn[p], hn[i] = hn[i], hn[p]
        hv[p], hv[i] = hv[i], hv[p]
        i = p
    return size + 1


@nb.njit(cache=True)
def _heap_pop(hk, hn, hv, size):
    """Remove the root (smallest key; larger node first on ties); caller read it already."""
    size -= 1
    hk[0], hn[0], hv[0] = hk[size], hn[size], hv[size]
    i = 0
    while True:
        lft = 2 * i + 1
        best = i
        if lft < size and (hk[lft] < hk[best] or (hk[lft] == hk[best] and hn[lft] > hn[best])):
            best = lft
        rgt = lft + 1
        if rgt < size and (hk[rgt] < hk[best] or (hk[rgt] == hk[best] and hn[rgt] > hn[best])):
            best = rgt
        if best == i:
            break
        hk[best], hk[i] = hk[i], hk[best]
        hn[best], hn[i] = hn[i], hn[best]
        hv[best], hv[i] = hv[i], hv[best]
        i = best
    return size


@nb.njit(cache=True)
def _replay_trie(node, parent, offsets, tokens, next_use, warmup, capacity, optimal):
    """Leaf-restricted replay. Keys: LRU = touch clock (min first); optimal = -next use."""
    n_nodes = parent.shape[0]
    present = np.zeros(n_nodes, dtype=np.bool_)
    present[0] = True
    children = np.zeros(n_nodes, dtype=np.int64)
    key = np.zeros(n_nodes, dtype=np.int64)
    version = np.zeros(n_nodes, dtype=np.int64)
    guard = np.zeros(n_nodes, dtype=np.int64)
    cap_heap = 4 * node.shape[0] + 16
    hk = np.empty(cap_heap, dtype=np.int64)
    hn = np.empty(cap_heap, dtype=np.int64)
    hv = np.empty(cap_heap, dtype=np.int64)
    sk = np.empty(capacity + 16, dtype=np.int64)
    sn = np.empty(capacity + 16, dtype=np.int64)
    sv = np.empty(capacity + 16, dtype=np.int64)
    hsize = 0
    size = 0
    clock = 0
    filled = False
    hits = 0
    for r in range(offsets.shape[0] - 1):
        if r >= warmup and not filled:
            return 0
        s, e = offsets[r], offsets[r + 1]
        h = s
        while h < e and present[node[h]]:
            nd = node[h]
            if r >= warmup:
                hits += tokens[h]
            clock += 1
            key[nd] = -next_use[h] if optimal else clock
            if children[nd] == 0:
                version[nd] += 1
                hsize = _heap_push(hk, hn, hv, hsize, key[nd], nd, version[nd])
            guard[nd] = r + 1
            h += 1
        for a in range(h, e):
            nd = node[a]
            if size >= capacity:
                # evict the best unguarded leaf, or stop admission
                ns = 0
                evicted = False
                while hsize > 0:
                    k0, n0, v0 = hk[0], hn[0], hv[0]
                    hsize = _heap_pop(hk, hn, hv, hsize)
                    if not present[n0] or children[n0] != 0 or version[n0] != v0 or key[n0] != k0:
                        continue
                    if guard[n0] == r + 1:
                        sk[ns], sn[ns], sv[ns] = k0, n0, v0
                        ns += 1
                        continue
                    if optimal and -k0 <= next_use[a]:
                        hsize = _heap_push(hk, hn, hv, hsize, k0, n0, v0)
                        break
                    present[n0] = False
                    size -= 1
                    p = parent[n0]
                    children[p] -= 1
                    if p > 0 and present[p] and children[p] == 0:
                        version[p] += 1
                        hsize = _heap_push(hk, hn, hv, hsize, key[p], p, version[p])
                    evicted = True
                    break
                for j in range(ns):
                    hsize = _heap_push(hk, hn, hv, hsize, sk[j], sn[j], sv[j])
                if not evicted:
                    break
            if size < capacity and present[parent[nd]]:
                present[nd] = True
                size += 1
                children[parent[nd]] += 1
                clock += 1
                key[nd] = -next_use[a] if optimal else clock
                version[nd] += 1
                hsize = _heap_push(hk, hn, hv, hsize, key[nd], nd, version[nd])
                if size >= capacity and r < warmup:
                    filled = True
            else:
                break
        if hsize > cap_heap - 2 * (e - s) - 8:  # compact stale entries
            j = 0
            for i in range(hsize):
                n0 = hn[i]
                if present[n0] and children[n0] == 0 and version[n0] == hv[i] and key[n0] == hk[i]:
                    hk[j], hn[j], hv[j] = hk[i], n0, hv[i]
                    j += 1
            hsize = 0
            for i in range(j):
                hsize = _heap_push(hk, hn, hv, hsize, hk[i], hn[i], hv[i])
    if not filled:
        return 0
    return hits


# --------------------------------------------------------------------------------------------
# trie-Belady with bypass: one priority-stack pass, one segment per requested capacity


def optimal_trie_curve(t: TrieTrace, capacities) -> np.ndarray:
    """Trie-Belady-with-bypass hit tokens at each capacity (blocks), all in one pass."""
    caps = _check_capacities(capacities)
    out = np.zeros(caps.shape[0], dtype=np.int64)
    live = caps[~_underfilled_mask(t, caps)]
    if live.size == 0 or t.n_requests == 0:
        return out
    bounds = np.unique(live)
    hist = _optimal_stack_hist(t.node, t.offsets, t.tokens, t.next_use, t.warmup,
                               t.n_nodes, bounds)
    cum = np.cumsum(hist)
    idx = np.searchsorted(bounds, caps)
    ok = ~_underfilled_mask(t, caps)
    out[ok] = cum[idx[ok]]
    return out


@nb.njit(cache=True)
def _sift_up(prio, hnode, pos, base, i):
    while i > 0:
        p = (i - 1) >> 1
        if prio[base + p] >= prio[base + i]:
            break
        prio[base + p], prio[base + i] = prio[base + i], prio[base + p]
        hnode[base + p], hnode[base + i] = hnode[base + i], hnode[base + p]
        pos[hnode[base + p]] = p
        pos[hnode[base + i]] = i
        i = p


@nb.njit(cache=True)
def _sift_down(prio, hnode, pos, base, size, i):
    while True:
        lft = 2 * i + 1
        best = i
        if lft < size and prio[base + lft] > prio[base + best]:
            best = lft
        if lft + 1 < size and prio[base + lft + 1] > prio[base + best]:
            best = lft + 1
        if best == i:
            break
        prio[base + best], prio[base + i] = prio[base + i], prio[base + best]
        hnode[base + best], hnode[base + i] = hnode[base + i], hnode[base + best]
        pos[hnode[base + best]] = best
        pos[hnode[base + i]] = i
        i = best


@nb.njit(cache=True)
def _optimal_stack_hist(node, offsets, tokens, next_use, warmup, n_nodes, bounds):
    """hist[q] = counted hit tokens whose node sat in segment q (hit at every capacity >= bounds[q])."""
    nq = bounds.shape[0]
    big = np.int64(n_nodes + 2)  # priority = next_use * big + id; a candidate ties last
    base = np.zeros(nq + 1, dtype=np.int64)
    for q in range(nq):
        base[q + 1] = bounds[q]
    limit = np.diff(base)
    prio = np.empty(bounds[nq - 1], dtype=np.int64)
    hnode = np.empty(bounds[nq - 1], dtype=np.int64)
    fill = np.zeros(nq, dtype=np.int64)
    seg = np.full(n_nodes + 1, -1, dtype=np.int64)  # -1 unseen, nq = below every capacity
    pos = np.zeros(n_nodes + 1, dtype=np.int64)
    hist = np.zeros(nq + 1, dtype=np.int64)
    for r in range(offsets.shape[0] - 1):
        for a in range(offsets[r], offsets[r + 1]):
            x = node[a]
            sx = seg[x]
            if r >= warmup and 0 <= sx < nq:
                hist[sx] += tokens[a]
            if 0 <= sx < nq:  # take x out of its segment (its slot is refilled below)
                b = base[sx]
                i = pos[x]
                last = fill[sx] - 1
                fill[sx] = last
                if i != last:
                    prio[b + i] = prio[b + last]
                    hnode[b + i] = hnode[b + last]
                    moved = hnode[b + i]
                    pos[moved] = i
                    _sift_up(prio, hnode, pos, b, i)
                    _sift_down(prio, hnode, pos, b, last, pos[moved])
            y = x
            py = next_use[a] * big + (big - 1)  # x competes as a candidate
            y_res = next_use[a] * big + x  # ...and is stored with its resident priority
            top = sx if 0 <= sx < nq else nq
            placed = False
            for q in range(top):
                b = base[q]
                if fill[q] < limit[q]:
                    i = fill[q]
                    prio[b + i] = y_res
                    hnode[b + i] = y
                    pos[y] = i
                    seg[y] = q
                    fill[q] = i + 1
                    _sift_up(prio, hnode, pos, b, i)
                    placed = True
                    break
                if py < prio[b]:  # y beats the segment's worst: swap them
                    w = hnode[b]
                    pw = prio[b]
                    prio[b] = y_res
                    hnode[b] = y
                    pos[y] = 0
                    seg[y] = q
                    _sift_down(prio, hnode, pos, b, fill[q], 0)
                    y = w
                    py = pw
                    y_res = pw
            if not placed:
                if 0 <= sx < nq:
                    b = base[sx]
                    i = fill[sx]
                    prio[b + i] = y_res
                    hnode[b + i] = y
                    pos[y] = i
                    seg[y] = sx
                    fill[sx] = i + 1
                    _sift_up(prio, hnode, pos, b, i)
                else:
                    seg[y] = nq
    return hist


# --------------------------------------------------------------------------------------------
# FIFO over trie nodes (not prefix-closed: a hit needs every earlier block of the request)


def fifo_trie_curve(t: TrieTrace, capacities) -> np.ndarray:
    """kvcache.ai FIFO hit tokens at each capacity (blocks); one O(n) replay per capacity."""
    caps = _check_capacities(capacities)
    out = np.zeros(caps.shape[0], dtype=np.int64)
    dead = _underfilled_mask(t, caps)
    for i, c in enumerate(caps):
        if not dead[i]:
            out[i] = _replay_fifo(t.node, t.offsets, t.tokens, t.warmup, t.n_nodes, int(c))
    return out


@nb.njit(cache=True)
def _replay_fifo(node, offsets, tokens, warmup, n_nodes, capacity):
    cached = np.zeros(n_nodes + 1, dtype=np.bool_)
    ring = np.empty(capacity, dtype=np.int64)
    head = 0
    size = 0
    filled = False
    hits = 0
    for r in range(offsets.shape[0] - 1):
        if r >= warmup and not filled:
            return 0
        s, e = offsets[r], offsets[r + 1]
        if r >= warmup:
            for a in range(s, e):
                if not cached[node[a]]:
                    break
                hits += tokens[a]
        for a in range(s, e):
            x = node[a]
            if cached[x]:
                continue
            if size >= capacity:
                cached[ring[head]] = False
                head = (head + 1) % capacity
                size -= 1
            cached[x] = True
            ring[(head + size) % capacity] = x
            size += 1
            if size >= capacity and r < warmup:
                filled = True
    return hits if filled else 0
