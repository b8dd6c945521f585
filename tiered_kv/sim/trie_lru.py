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
and the cache at capacity ``C`` is the top ``C`` of that LRU stack: stack distances (Mattson,
with a Fenwick tree over touch stamps) give every capacity at once. The exception is a request
longer than the cache (``C`` < its block count): the peer then runs out of evictable leaves
mid-request and keeps only the request's first ``C`` nodes, or ``C - 1`` when it had to drop
the ``C``-th one it had just inserted. From there the cache is again the top ``C`` of the same
stack, minus that one dropped node until a request touches it again (it is the node at depth
``C``) or another long request comes; so a small capacity needs one scan over the requests,
not a replay (:func:`lru_trie_curve`). :func:`replay_lru_trie` is the O(1)-per-access exact
replay (a linked list in that order) that the policy and the tests use.

*Trie-Belady with bypass* is a priority stack algorithm too: see :mod:`tiered_kv.sim.trie_belady`.

*FIFO* is not a stack algorithm (Belady's anomaly), so each capacity is its own O(n) pass;
32 capacities walk the accesses together (:mod:`tiered_kv.sim.trie_fifo`).

The hot loops use numba (already a dependency): they are sequential, branchy per-access loops
(a Fenwick tree, heaps, linked lists) that numpy cannot vectorise; numba runs them at C speed
from one readable Python file and caches the machine code on disk (``cache=True``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

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
    warmup: int
    measured_tokens: int  # sum of tokens over counted requests (kvcache.ai's total)

    @cached_property
    def next_use(self) -> np.ndarray:
        """int64 [m]: the next request using each access's node (n + 1: never); Belady's key."""
        return _next_use(self.node, self.offsets, self.parent.shape[0])

    @property
    def n_requests(self) -> int:
        return int(self.offsets.shape[0] - 1)

    @property
    def n_nodes(self) -> int:
        return int(self.parent.shape[0] - 1)

    @cached_property
    def max_request_blocks(self) -> int:
        return int(np.diff(self.offsets).max()) if self.n_requests else 0

    @cached_property
    def warmup_nodes(self) -> int:
        """Distinct nodes seen during warm-up: the largest capacity that fills in time
        (node ids number first appearances, so it is the largest id seen)."""
        end = int(self.offsets[self.warmup])
        return int(self.node[:end].max()) if end else 0


def build_trie(blocks: np.ndarray, offsets: np.ndarray, tokens: np.ndarray, warmup: int) -> TrieTrace:
    """Map each request's block sequence onto prefix-trie nodes (node = (parent, block)).

    Node ids follow first appearance in replay order, as in kvcache.ai (its ``optimal`` breaks
    ties on them). Chained ids (each id always behind the same parent) map one to one onto
    nodes and take a vectorised path; anything else goes through an explicit trie.
    """
    blocks = np.ascontiguousarray(blocks, dtype=np.int64)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    tokens = np.ascontiguousarray(tokens, dtype=np.int64)
    n = offsets.shape[0] - 1
    if not 0 <= warmup <= n:
        raise ValueError(f"warmup: must be in [0, {n}] requests, got {warmup}")
    if tokens.shape != blocks.shape or int(offsets[-1]) != blocks.shape[0]:
        raise ValueError("build_trie: blocks, tokens and offsets disagree in length")
    m = blocks.shape[0]
    if m and 0 <= blocks.min() and blocks.max() < 4 * m + 16:
        dense = blocks  # already small ints (a compiled trace's dense ids)
    else:
        dense = np.unique(blocks, return_inverse=True)[1].astype(np.int64).reshape(-1)
    n_ids = int(dense.max()) + 1 if m else 1
    node, parent, ok = _chained_nodes(dense, offsets, n_ids)
    if not ok:
        node, parent = _build_trie(dense, offsets)
    measured = int(tokens[offsets[warmup]:].sum())
    return TrieTrace(node=node, parent=parent, offsets=offsets, tokens=tokens,
                     warmup=int(warmup), measured_tokens=measured)


@nb.njit(cache=True)
def _chained_nodes(dense, offsets, n_ids):
    """(node, parent, True) when every id always follows the same parent (chained ids: one id
    per trie node), numbered by first appearance; else (.., .., False). One pass, no sort."""
    m = dense.shape[0]
    node_of = np.zeros(n_ids, dtype=np.int64)  # 0 = not seen yet
    parent = np.zeros(n_ids + 1, dtype=np.int64)
    node = np.empty(m, dtype=np.int64)
    count = 0
    for r in range(offsets.shape[0] - 1):
        prev = 0
        for a in range(offsets[r], offsets[r + 1]):
            b = dense[a]
            nd = node_of[b]
            if nd == 0:
                count += 1
                nd = count
                node_of[b] = nd
                parent[nd] = prev
            elif parent[nd] != prev:
                return node, parent, False
            node[a] = nd
            prev = nd
    return node, parent[: count + 1].copy(), True


def from_compiled(trace) -> TrieTrace:
    """A :class:`TrieTrace` from a :class:`tiered_kv.sim.replay.CompiledTrace` (its replay order,
    token weights and warm-up)."""
    counted = np.asarray(trace.counted, dtype=bool)
    warmup = int(np.argmax(counted)) if counted.any() else counted.shape[0]
    if not counted[warmup:].all():
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


def hit_tokens_of(t: TrieTrace, hit_blocks: np.ndarray) -> int:
    """Counted hit tokens from per-request leading hit blocks."""
    cum = np.concatenate([[0], np.cumsum(t.tokens, dtype=np.int64)])
    start = t.offsets[t.warmup:-1]
    return int((cum[start + hit_blocks[t.warmup:]] - cum[start]).sum())


def replay_lru_trie(t: TrieTrace, capacity: int) -> tuple[np.ndarray, bool]:
    """Exact trie-LRU at one capacity (blocks): (leading hit blocks per request, filled in warm-up)."""
    if capacity <= 0 or t.n_requests == 0:
        return np.zeros(t.n_requests, dtype=np.int64), capacity <= 0
    return _replay_lru_list(t.node, t.parent, t.offsets, t.warmup, int(capacity))


def lru_trie_curve(t: TrieTrace, capacities) -> np.ndarray:
    """Trie-LRU counted hit tokens at each capacity (blocks); 0 where kvcache.ai says underfilled.

    One stack pass gives every access its distance ``d`` in the deepest-first LRU stack. At a
    capacity ``C`` at least the longest request, a block hits iff ``d <= C``. Below that, a
    request longer than ``C`` ends with the cache holding only its own first ``C`` nodes,
    or ``C - 1`` when it had to drop the ``C``-th one it had just inserted (the peer's rule);
    from there on the cache is the top ``C`` of the same stack minus that one dropped node,
    until a request touches it or another long request comes. So each small capacity needs a
    scan over requests (``_lru_small_capacities``), not a replay.
    """
    caps = _check_capacities(capacities)
    out = np.zeros(caps.shape[0], dtype=np.int64)
    dead = _underfilled_mask(t, caps)
    if dead.all():
        return out
    dist = _lru_trie_distances(t.node, t.offsets, t.n_nodes)
    big = ~dead & (caps >= t.max_request_blocks)
    if big.any():
        counted = slice(int(t.offsets[t.warmup]), None)
        hist = np.bincount(np.minimum(dist[counted], t.n_nodes + 1), weights=t.tokens[counted],
                           minlength=t.n_nodes + 2)
        cum = np.cumsum(hist).round().astype(np.int64)  # token sums are exact in float64
        out[big] = cum[np.minimum(caps[big], t.n_nodes + 1)]
    small = np.flatnonzero(~dead & ~big)
    if small.size:
        out[small] = _lru_small_capacities(dist, t.node, t.offsets, t.tokens, t.warmup,
                                           caps[small].astype(np.int64))
    return out


@nb.njit(cache=True)
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
def _replay_lru_list(node, parent, offsets, warmup, capacity):
    """Exact trie-LRU at one capacity: (hit blocks per request, filled during warm-up)."""
    n_nodes = parent.shape[0]
    hit_blocks = np.zeros(offsets.shape[0] - 1, dtype=np.int64)
    filled = _lru_list_into(node, offsets, warmup, capacity, np.zeros(n_nodes, dtype=np.bool_),
                            np.empty(n_nodes, dtype=np.int32), np.empty(n_nodes, dtype=np.int32),
                            np.empty(n_nodes, dtype=np.int32), hit_blocks)
    return hit_blocks, filled


@nb.njit(cache=True)
def _lru_list_into(node, offsets, warmup, capacity, present, owner, prv, nxt, hit_blocks):
    """Exact trie-LRU at one capacity in O(1) per access: an LRU list in (request, -depth) order.

    The current request's nodes sit at the head while it is admitted, so the tail is the
    oldest leaf of an earlier request (module docstring). When the tail belongs to the current
    request the cache holds nothing else: the peer then evicts the node just inserted (if any)
    and stops admission, which is reproduced here. Fills ``hit_blocks``; returns whether the
    cache filled during warm-up.
    """
    present[:] = False
    owner[:] = -1  # request that last touched the node
    nxt[:] = -1  # towards the tail (older)
    prv[:] = -1  # towards the head (newer)
    hit_blocks[:] = 0
    head = -1
    tail = -1
    size = 0
    filled = False
    for r in range(offsets.shape[0] - 1):
        if r >= warmup and not filled:
            return False
        s, e = offsets[r], offsets[r + 1]
        h = s
        while h < e and present[node[h]]:
            h += 1
        hit_blocks[r] = h - s
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
    return filled


@nb.njit(cache=True)
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


def fifo_trie_curve(t: TrieTrace, capacities) -> np.ndarray:
    """kvcache.ai's ``fifo`` at each capacity (blocks); see :mod:`tiered_kv.sim.trie_fifo`."""
    from tiered_kv.sim.trie_fifo import fifo_trie_curve as curve

    return curve(t, capacities)


def replay_fifo_trie(t: TrieTrace, capacity: int) -> tuple[np.ndarray, bool]:
    """kvcache.ai's ``fifo`` at one capacity; see :mod:`tiered_kv.sim.trie_fifo`."""
    from tiered_kv.sim.trie_fifo import replay_fifo_trie as replay

    return replay(t, capacity)


def optimal_trie_curve(t: TrieTrace, capacities) -> np.ndarray:
    """kvcache.ai's ``optimal`` at each capacity (blocks); see :mod:`tiered_kv.sim.trie_belady`."""
    from tiered_kv.sim.trie_belady import optimal_trie_curve as curve

    return curve(t, capacities)


# --------------------------------------------------------------------------------------------
# policies for the replay engine (tiered_kv.sim.policies registry)


def _trie_blocks(trace, capacity_tokens: int | None) -> int:
    if capacity_tokens is None:
        return int(np.unique(trace.blocks).shape[0]) + 1 if trace.n_accesses else 1
    return int(capacity_tokens) // trace.uniform_block_size


def _trie_run(trace, capacity_tokens: int | None, replay_fn):
    from tiered_kv.sim.policies import PolicyRun

    t = from_compiled(trace)
    cap = _trie_blocks(trace, capacity_tokens)
    hit_blocks, filled = replay_fn(t, cap)
    underfilled = bool(cap <= 0 or not filled or cap > t.warmup_nodes or t.measured_tokens <= 0)
    if underfilled:  # kvcache.ai: a cache that never filled during warm-up reports no hits
        hit_blocks = np.zeros_like(hit_blocks)
    return PolicyRun(np.asarray(hit_blocks, dtype=np.int64),
                     {"capacity_blocks": cap, "underfilled": underfilled, "trie_nodes": t.n_nodes})


def _register() -> None:
    """Register kvcache.ai's three trie policies; they differ only in their replay function."""
    from tiered_kv.sim.policies import _check_capacity, register_policy

    @dataclass(frozen=True)
    class _TriePolicy:
        name: ClassVar[str]
        capacity_tokens: int | None = None

        def __post_init__(self) -> None:
            _check_capacity(f"{self.name} capacity_tokens", self.capacity_tokens)

        def run(self, trace):
            return _trie_run(trace, self.capacity_tokens, self.replay())

    @register_policy
    @dataclass(frozen=True)
    class LRUTrie(_TriePolicy):
        """kvcache.ai's LRU: leaves of the prefix trie only, hit prefix refreshed, admission stops."""

        name: ClassVar[str] = "lru-trie"

        @staticmethod
        def replay():
            return replay_lru_trie

    @register_policy
    @dataclass(frozen=True)
    class FIFOTrie(_TriePolicy):
        """kvcache.ai's FIFO over trie nodes (oldest inserted first; not prefix-closed)."""

        name: ClassVar[str] = "fifo-trie"

        @staticmethod
        def replay():
            return replay_fifo_trie

    @register_policy
    @dataclass(frozen=True)
    class BeladyTrie(_TriePolicy):
        """kvcache.ai's "optimal": prefix-trie Belady with bypass (next use in requests)."""

        name: ClassVar[str] = "belady-trie"

        @staticmethod
        def replay():
            from tiered_kv.sim.trie_belady import replay_optimal_trie

            return replay_optimal_trie


_register()
