"""kvcache.ai's prefix trie: a trace as trie nodes, and what its three policies share.

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
  point is "underfilled" and reports 0 hit tokens (even with an empty warm-up). Semantics that
  count every request have no warm-up to judge by: there the rule is off and every capacity
  counts (``TrieTrace.fill_rule``).

One module per policy: :mod:`.trie_lru`, :mod:`.trie_fifo`, :mod:`.trie_belady` (``optimal``),
each with a one-pass (or many-capacities) curve and an exact one-capacity replay; this module
holds the :class:`TrieTrace` they all read and the pieces every replay and curve shares.

The hot loops are numba kernels (sequential per-access loops numpy cannot vectorise). Numba's
cache keys a compiled function on its own file only: after editing :func:`lookup` (inlined by
the replays of the three policy modules), touch those modules too so that they recompile.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numba import njit


@dataclass(frozen=True)
class TrieTrace:
    """A trace as prefix-trie nodes: the input of every function here.

    ``node[a]`` is the trie node (1..n_nodes) of access ``a``; request ``r`` is
    ``offsets[r]:offsets[r+1]``; ``tokens[a]`` the hit tokens of access ``a``; requests before
    ``warmup`` are not counted; ``next_use[a]`` the next request using ``node[a]``;
    ``fill_rule``: kvcache.ai's underfilled rule applies.
    """

    node: np.ndarray  # int64 [m]
    parent: np.ndarray  # int64 [n_nodes + 1], parent[0] = 0 (root)
    offsets: np.ndarray  # int64 [n + 1]
    tokens: np.ndarray  # int64 [m]
    warmup: int
    measured_tokens: int  # sum of tokens over counted requests (kvcache.ai's total)
    fill_rule: bool = True

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

    @property
    def fill_by(self) -> int:
        """The request by which the cache must have filled for a capacity to count: the end of
        the warm-up, or, with the rule off, after the last request (the kernels' early stop
        never fires)."""
        return self.warmup if self.fill_rule else self.n_requests

    @cached_property
    def warmup_nodes(self) -> int:
        """Distinct nodes seen during warm-up: the largest capacity that fills in time
        (node ids number first appearances, so it is the largest id seen)."""
        end = int(self.offsets[self.warmup])
        return int(self.node[:end].max()) if end else 0


def build_trie(blocks: np.ndarray, offsets: np.ndarray, tokens: np.ndarray, warmup: int,
               fill_rule: bool = True) -> TrieTrace:
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
                     warmup=int(warmup), measured_tokens=measured, fill_rule=bool(fill_rule))


@njit(cache=True)
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
    """A :class:`TrieTrace` from a :class:`tiered_kv.sim.trace_replay.CompiledTrace` (its replay order,
    token weights and warm-up). A trace that counts every request was compiled without a warm-up,
    so kvcache.ai's underfilled rule is off for it."""
    counted = np.asarray(trace.counted, dtype=bool)
    warmup = int(np.argmax(counted)) if counted.any() else counted.shape[0]
    if not counted[warmup:].all():
        raise ValueError("trie policies need the warm-up to be a leading block of requests")
    return build_trie(trace.blocks, trace.offsets, trace.tokens, warmup, fill_rule=warmup > 0)


@njit(cache=True)
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


@njit(cache=True)
def _next_use(node, offsets, n_nodes):
    n = offsets.shape[0] - 1
    never = n + 1  # a node never used again: after every request index
    last = np.full(n_nodes, never, dtype=np.int64)
    out = np.empty(node.shape[0], dtype=np.int64)
    for r in range(n - 1, -1, -1):
        for a in range(offsets[r], offsets[r + 1]):
            out[a] = last[node[a]]
        for a in range(offsets[r], offsets[r + 1]):
            last[node[a]] = r
    return out


# --------------------------------------------------------------------------------------------
# what every replay and curve shares: hit tokens (counted requests) at capacities in blocks


def underfilled_mask(t: TrieTrace, caps: np.ndarray) -> np.ndarray:
    """kvcache.ai reports 0 unless the cache filled during warm-up; a capacity of 0 holds
    nothing. With the rule off only the capacities of 0 are underfilled."""
    if not t.fill_rule:
        return caps <= 0
    return (caps > t.warmup_nodes) | (caps <= 0) | (t.measured_tokens <= 0)


def curve_capacities(t: TrieTrace, capacities) -> tuple[np.ndarray, np.ndarray]:
    """What every curve starts from: the capacities in blocks (int64, >= 0) and which of them
    count (:func:`underfilled_mask`; the others report 0 hit tokens)."""
    caps = np.asarray(capacities, dtype=np.int64).reshape(-1)
    if caps.size and caps.min() < 0:
        raise ValueError("capacities: must be >= 0 blocks")
    return caps, ~underfilled_mask(t, caps)


def hit_tokens_of(t: TrieTrace, hit_blocks: np.ndarray) -> int:
    """Counted hit tokens from per-request leading hit blocks."""
    cum = np.concatenate([[0], np.cumsum(t.tokens, dtype=np.int64)])
    start = t.offsets[t.warmup:-1]
    return int((cum[start + hit_blocks[t.warmup:]] - cum[start]).sum())


def replay_at(t: TrieTrace, capacity: int, kernel: Callable[[np.ndarray], bool]) -> tuple[np.ndarray, bool]:
    """(leading hit blocks per request, whether the capacity counts) of a one-capacity replay.

    ``kernel(hit_blocks)`` replays with :attr:`TrieTrace.fill_by` as its deadline, fills
    ``hit_blocks`` and returns whether the cache filled by then; with the rule off every
    capacity counts. A capacity of 0 (or a trace without requests) needs no replay: no hits,
    and a cache of 0 blocks counts as filled.
    """
    hit_blocks = np.zeros(t.n_requests, dtype=np.int64)
    if capacity <= 0 or t.n_requests == 0:
        return hit_blocks, capacity <= 0 or not t.fill_rule
    return hit_blocks, bool(kernel(hit_blocks)) or not t.fill_rule


@njit(cache=True, inline="always")
def lookup(present, node, offsets, r, hit_blocks):
    """Request ``r``'s lookup: its leading present nodes, recorded in ``hit_blocks[r]``.

    Returns ``(s, e, h)``: the request's accesses are ``s..e-1``, those before ``h`` hit.
    """
    s, e = offsets[r], offsets[r + 1]
    h = s
    while h < e and present[node[h]]:
        h += 1
    hit_blocks[r] = h - s
    return s, e, h
