"""Belady: MIN with bypass over block accesses, the offline optimum and an upper bound.

:mod:`tiered_kv.sim.curves` holds the proof that it bounds the prefix hits of any policy with
the same capacity, and that its cache stays prefix-closed (so block hits are prefix hits).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numba import njit

from tiered_kv.sim.policies.registry import PolicyRun, capacity_blocks, check_capacity, register_policy
from tiered_kv.sim.replay import CompiledTrace


def next_use(trace: CompiledTrace) -> np.ndarray:
    """int64 [m]: index of the next access of the same block, or ``m`` when there is none."""
    m = trace.n_accesses
    order = np.lexsort((np.arange(m), trace.blocks))
    nxt = np.full(m, m, dtype=np.int64)
    same = trace.blocks[order[1:]] == trace.blocks[order[:-1]]
    nxt[order[:-1][same]] = order[1:][same]
    return nxt


@njit(cache=True)
def _belady_kernel(offsets, blocks, depth, nxt_use, n_unique, capacity):  # pragma: no cover - compiled
    # Blocks never used again ("dead") have the largest keys, so they are always evicted first;
    # which dead block goes first cannot change any later hit (none is accessed again), so they
    # are only counted, not heaped: most accesses of a trace are last accesses.
    n = offsets.shape[0] - 1
    m = blocks.shape[0]
    dmul = np.int64(1)
    for i in range(m):
        if depth[i] + 1 > dmul:
            dmul = np.int64(depth[i]) + 1
    present = np.zeros(n_unique, np.bool_)
    key_of = np.zeros(n_unique, np.int64)
    heap_k = np.empty(m + 1, np.int64)  # max-heap of keys: next use x dmul + depth
    heap_b = np.empty(m + 1, np.int64)
    hn = 0
    used = 0  # live (heaped) + dead blocks in the cache
    dead = 0
    hit = np.zeros(n, np.int64)
    any_present = np.zeros(n, np.int64)
    for r in range(n):
        lo = offsets[r]
        hi = offsets[r + 1]
        p = 0
        lead = True
        for i in range(lo, hi):
            if present[blocks[i]]:
                any_present[r] += 1
                if lead:
                    p += 1
            else:
                lead = False
        hit[r] = p
        for i in range(lo, hi):
            b = blocks[i]
            if not present[b]:
                used += 1
            if nxt_use[i] >= m:  # last access of b: it turns dead
                present[b] = False
                key_of[b] = -1
                dead += 1
            else:
                present[b] = True
                key = nxt_use[i] * dmul + depth[i]
                key_of[b] = key
                j = hn
                hn += 1
                while j > 0:
                    parent = (j - 1) >> 1
                    if heap_k[parent] >= key:
                        break
                    heap_k[j] = heap_k[parent]
                    heap_b[j] = heap_b[parent]
                    j = parent
                heap_k[j] = key
                heap_b[j] = b
            while used > capacity:
                if dead > 0:
                    dead -= 1
                    used -= 1
                    continue
                # pop the max valid entry: the farthest next use, deepest on ties
                vk = heap_k[0]
                vb = heap_b[0]
                hn -= 1
                lk = heap_k[hn]
                lb = heap_b[hn]
                j = 0
                while True:
                    child = 2 * j + 1
                    if child >= hn:
                        break
                    if child + 1 < hn and heap_k[child + 1] > heap_k[child]:
                        child += 1
                    if heap_k[child] <= lk:
                        break
                    heap_k[j] = heap_k[child]
                    heap_b[j] = heap_b[child]
                    j = child
                if hn > 0:
                    heap_k[j] = lk
                    heap_b[j] = lb
                if present[vb] and key_of[vb] == vk:
                    present[vb] = False
                    used -= 1
    return hit, any_present


@register_policy
@dataclass(frozen=True)
class Belady:
    """Offline optimum (MIN with bypass, deeper blocks first on ties): an upper bound.

    Evicts the cached block whose next use is farthest in the future (possibly the block just
    inserted: bypass). ``extra['prefix_closed']`` records that at every lookup the request's
    present blocks formed a prefix (proof in :mod:`tiered_kv.sim.curves`).
    """

    name: ClassVar[str] = "belady"
    capacity_tokens: int | None = None

    def __post_init__(self) -> None:
        check_capacity("belady capacity_tokens", self.capacity_tokens)

    def run(self, trace: CompiledTrace, nxt: np.ndarray | None = None) -> PolicyRun:
        cap = capacity_blocks(trace, self.capacity_tokens)
        cap_i = np.int64(min(cap, trace.n_unique + 1)) if math.isfinite(cap) else np.int64(trace.n_unique + 1)
        nxt = next_use(trace) if nxt is None else nxt
        hit, any_present = _belady_kernel(trace.offsets, trace.blocks, trace.depth.astype(np.int64), nxt,
                                          trace.n_unique, cap_i)
        return PolicyRun(hit, {"prefix_closed": bool(np.array_equal(hit, any_present))})
