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

from tiered_kv.sim.heap import heap_pop, heap_push
from tiered_kv.sim.policies.blockwise import BlockPolicy, check_bpt, wear_extra
from tiered_kv.sim.policies.registry import (
    PolicyRun,
    capacity_blocks,
    check_capacity,
    register_policy,
)
from tiered_kv.sim.trace_replay import CompiledTrace
from tiered_kv.units import DEFAULT_BYTES_PER_TOKEN


def next_use(trace: CompiledTrace) -> np.ndarray:
    """int64 [m]: index of the next access of the same block, or ``m`` when there is none."""
    m = trace.n_accesses
    order = np.argsort(trace.blocks, kind="stable")  # by block, then by position
    nxt = np.full(m, m, dtype=np.int64)
    same = trace.blocks[order[1:]] == trace.blocks[order[:-1]]
    nxt[order[:-1][same]] = order[1:][same]
    return nxt


@njit(cache=True)
def _belady_kernel(offsets, blocks, depth, nxt_use, n_unique, capacity):  # pragma: no cover - compiled
    # Blocks never used again ("dead") have the largest keys, so they are always evicted first;
    # which dead block goes first cannot change any later hit (none is accessed again), so they
    # are only counted, not heaped: most accesses of a trace are last accesses.
    # ``written[i]``: access i missed, its block has a next use, and it was kept (not bypassed):
    # the SSD write. A dead block is never written (it could only sit in free space).
    n = offsets.shape[0] - 1
    m = blocks.shape[0]
    dmul = np.int64(1)
    for i in range(m):
        if depth[i] + 1 > dmul:
            dmul = np.int64(depth[i]) + 1
    present = np.zeros(n_unique, np.bool_)
    key_of = np.zeros(n_unique, np.int64)
    heap_k = np.empty(m + 1, np.int64)  # min-heap of -(next use x dmul + depth), passed as both keys:
    heap_b = np.empty(m + 1, np.int64)  # live entries' keys are distinct, so no second key is needed
    hn = 0
    used = 0  # live (heaped) + dead blocks in the cache
    dead = 0
    hit = np.zeros(n, np.int64)
    any_present = np.zeros(n, np.int64)
    written = np.zeros(m, np.bool_)
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
            miss = not present[b]
            if miss:
                used += 1
            if nxt_use[i] >= m:  # last access of b: it turns dead
                present[b] = False
                key_of[b] = -1
                dead += 1
            else:
                present[b] = True
                key = nxt_use[i] * dmul + depth[i]
                key_of[b] = key
                hn = heap_push(heap_k, heap_k, heap_b, hn, -key, -key, b)
            while used > capacity:
                if dead > 0:
                    dead -= 1
                    used -= 1
                    continue
                # pop the max valid entry: the farthest next use, deepest on ties
                vk = -heap_k[0]
                vb = heap_b[0]
                hn = heap_pop(heap_k, heap_k, heap_b, hn)
                if present[vb] and key_of[vb] == vk:
                    present[vb] = False
                    used -= 1
            if miss and present[b]:
                written[i] = True
    return hit, any_present, written


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
    bytes_per_token: float = DEFAULT_BYTES_PER_TOKEN  # for SSD wear only

    def __post_init__(self) -> None:
        check_capacity("belady capacity_tokens", self.capacity_tokens)
        check_bpt(self.name, self.bytes_per_token)

    def run(self, trace: CompiledTrace, nxt: np.ndarray | None = None) -> PolicyRun:
        cap = capacity_blocks(trace, self.capacity_tokens)
        cap_i = np.int64(min(cap, trace.n_unique + 1)) if math.isfinite(cap) else np.int64(trace.n_unique + 1)
        nxt = next_use(trace) if nxt is None else nxt
        hit, any_present, written = _belady_kernel(trace.offsets, trace.blocks, trace.depth.astype(np.int64),
                                                   nxt, trace.n_unique, cap_i)
        return PolicyRun(hit, {"prefix_closed": bool(np.array_equal(hit, any_present)),
                               **wear_extra(trace, hit, written, cap, self.bytes_per_token)})


# --------------------------------------------------------------------------------------------
# every capacity in one pass: MIN with bypass is a priority stack algorithm


def belady_stack(trace: CompiledTrace, capacities_blocks, nxt: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray] | None:
    """(counted hit tokens ``[class, capacity]``, tokens written ``[capacity]``) of :class:`Belady`.

    MIN with bypass keeps, at each step, the best ``C`` of its cache plus the accessed block
    under one order shared by every capacity (next use, sooner first), so the caches of all
    capacities are the tops of one stack (Mattson et al. 1970) and inclusion holds: one pass
    (:func:`stack_pass`) serves every capacity. This counts *block* hits of the accesses replayed
    one by one, which equal the replay's prefix hits because Belady's cache is prefix-closed at
    every lookup (:mod:`tiered_kv.sim.curves`); that needs chained ids (each block id always
    behind the same parent), so for any other trace this returns None and the caller replays
    each capacity. Writes are counted as :meth:`Belady.run` does (chunk tokens, warm-up included).
    """
    caps = np.asarray(capacities_blocks, dtype=np.int64).reshape(-1)
    n_cls = len(trace.class_names)
    out = np.zeros((n_cls, caps.shape[0]), dtype=np.int64)
    written = np.zeros(caps.shape[0], dtype=np.int64)
    nxt = next_use(trace) if nxt is None else nxt
    if not _chained(trace.offsets, trace.blocks, nxt):
        return None
    caps = np.minimum(caps, trace.n_unique + 1)
    live = caps > 0
    if not live.any() or trace.n_accesses == 0:
        return out, written
    bounds = np.unique(caps[live])
    counted = trace.counted[trace.access_request]
    weight = np.where(counted, trace.tokens, 0).astype(np.int64)
    cls = trace.class_codes[trace.access_request].astype(np.int64)
    blocks = trace.blocks.astype(np.int64)
    whist = np.zeros(bounds.shape[0] + 1, np.int64)
    hist = stack_pass(blocks, nxt, nxt, np.int64(trace.n_accesses), weight, cls, n_cls, trace.n_unique, bounds,
                      trace.chunk_tokens.astype(np.int64), whist)
    cum = np.cumsum(hist, axis=1)
    at = np.searchsorted(bounds, caps[live])
    out[:, live] = cum[:, at]
    written[live] = np.cumsum(whist)[at]
    return out, written


def _chained(offsets: np.ndarray, blocks: np.ndarray, nxt: np.ndarray) -> bool:
    """True when every block id always follows the same parent (or always opens its request).

    ``nxt`` (:func:`next_use`) links each access to the next one of its block, so the parents
    of a block's accesses are all equal iff each equals the next one's: numpy, no kernel.
    """
    m = blocks.shape[0]
    parent = np.empty(m, np.int64)  # the block before each access; -1 for the first of a request
    parent[1:] = blocks[:-1]
    parent[offsets[:-1][offsets[:-1] < offsets[1:]]] = -1
    again = nxt < m
    return bool(np.array_equal(parent[again], parent[nxt[again]]))


@njit(cache=True, inline="always")
def _swap(prio, member, pos, base, i, j):
    """Swap heap slots ``i`` and ``j`` of the segment starting at ``base``."""
    prio[base + i], prio[base + j] = prio[base + j], prio[base + i]
    member[base + i], member[base + j] = member[base + j], member[base + i]
    pos[member[base + i]] = i
    pos[member[base + j]] = j


@njit(cache=True)
def _sift_up(prio, member, pos, base, i):  # pragma: no cover - compiled
    while i > 0:
        p = (i - 1) >> 1
        if prio[base + p] >= prio[base + i]:
            break
        _swap(prio, member, pos, base, p, i)
        i = p


@njit(cache=True)
def _sift_down(prio, member, pos, base, size, i):  # pragma: no cover - compiled
    while True:
        best = i
        for c in (2 * i + 1, 2 * i + 2):
            if c < size and prio[base + c] > prio[base + best]:
                best = c
        if best == i:
            break
        _swap(prio, member, pos, base, best, i)
        i = best


@njit(cache=True, inline="always")
def _deposit(prio, member, pos, seg, fill, base, q, y, py):
    """Put item ``y`` (priority ``py``) into segment ``q``, which has room."""
    b = base[q]
    i = fill[q]
    prio[b + i] = py
    member[b + i] = y
    pos[y] = i
    seg[y] = q
    fill[q] = i + 1
    _sift_up(prio, member, pos, b, i)


@njit(cache=True, inline="always")
def _fill_hole(prio, member, pos, b, i, last):  # pragma: no cover - compiled
    """Slot ``i`` of the heap at ``b`` was emptied: its ``last`` slot moves there and sifts."""
    if i != last:
        prio[b + i] = prio[b + last]
        member[b + i] = member[b + last]
        moved = member[b + i]
        pos[moved] = i
        _sift_up(prio, member, pos, b, i)
        _sift_down(prio, member, pos, b, last, pos[moved])


@njit(cache=True, inline="always")
def _first_room(fill, base, q):  # pragma: no cover - compiled
    """The first segment from ``q`` on with room (-1 when none)."""
    for s in range(q, fill.shape[0]):
        if fill[s] < base[s + 1] - base[s]:
            return s
    return -1


@njit(cache=True)
def stack_pass(items, cand, res, never, weight, cls, n_cls, n_items, bounds, wweight,
               whist):  # pragma: no cover - compiled
    """One pass of a priority stack algorithm over accesses, for the capacities ``bounds`` (sorted, > 0).

    Access ``a`` touches item ``items[a]`` (``0 <= item < n_items``), which then competes with
    priority ``cand[a]`` and, once kept, stays with ``res[a]`` (smaller is better; the two differ
    only to break ties the way a policy does); ``never`` or more means never used again. The
    stack is one segment per capacity, each a max-heap of its members (worst on top). Returns
    ``hist[c, q]``: the ``weight`` of class-``c`` accesses whose item sat in segment ``q`` at
    the access, that is, hits at every capacity ``>= bounds[q]``. Serves :class:`Belady`
    (:func:`belady_stack`) and kvcache.ai's trie-Belady (:mod:`tiered_kv.sim.peers.trie_belady`).

    Writes (when ``whist`` has ``len(bounds) + 1`` slots; empty arrays skip them): an access
    whose item sat in segment ``s`` (or below every capacity) and that is used again lands in
    the first segment ``q`` where it finds room or beats the worst member; it missed and was
    kept, so written, at every capacity ``bounds[q] <= C < bounds[s]``. ``whist`` gets
    ``+wweight[a]`` at ``q`` and ``-wweight[a]`` at ``s``: its cumulative sum is the weight
    written at each capacity. An item never used again is never written (as in :class:`Belady`).
    """
    track = whist.shape[0] > 0
    nq = bounds.shape[0]
    base = np.zeros(nq + 1, np.int64)  # segment q is the stack's slots base[q]..base[q + 1] - 1
    base[1:] = bounds
    prio = np.empty(bounds[nq - 1], np.int64)
    member = np.empty(bounds[nq - 1], np.int64)
    fill = np.zeros(nq, np.int64)
    seg = np.full(n_items, -1, np.int64)  # -1: unseen; nq: below every capacity
    pos = np.zeros(n_items, np.int64)
    hist = np.zeros((n_cls, nq), np.int64)
    for a in range(items.shape[0]):
        x = items[a]
        sx = seg[x]
        inside = 0 <= sx < nq
        if inside:  # a hit from capacity bounds[sx] up; take x out (its slot is refilled below)
            hist[cls[a], sx] += weight[a]
            fill[sx] -= 1
            _fill_hole(prio, member, pos, base[sx], pos[x], fill[sx])
        y = x
        py = cand[a]  # x competes as a candidate...
        y_res = res[a]  # ...and is stored with its resident priority
        placed = False
        landed = -1  # the segment x itself lands in (-1: not yet)
        for q in range(sx if inside else nq):
            if fill[q] < base[q + 1] - base[q]:  # room: the stack is shallower than this capacity
                _deposit(prio, member, pos, seg, fill, base, q, y, y_res)
                if y == x:
                    landed = q
                placed = True
                break
            if py >= never:
                # y is never used again: below here it could only trade places with other such
                # items, which changes no segment's count of them and no future hit.
                q2 = -1 if inside else _first_room(fill, base, q + 1)
                if q2 >= 0:
                    _deposit(prio, member, pos, seg, fill, base, q2, y, y_res)
                    placed = True
                break
            b = base[q]
            if py < prio[b]:  # y beats the segment's worst: swap them
                if y == x and landed < 0:
                    landed = q
                w = member[b]
                pw = prio[b]
                prio[b] = y_res
                member[b] = y
                pos[y] = 0
                seg[y] = q
                _sift_down(prio, member, pos, b, fill[q], np.int64(0))  # int64: the one specialisation
                y = w  # the worst moves down, competing with its resident priority
                py = y_res = pw
        if not placed:
            if inside:
                _deposit(prio, member, pos, seg, fill, base, sx, y, y_res)
            else:
                seg[y] = nq
        if track and landed >= 0 and cand[a] < never:
            whist[landed] += wweight[a]
            whist[sx if inside else nq] -= wweight[a]
    return hist


# --------------------------------------------------------------------------------------------
# MIN without bypass, at block level: libCacheSim's Belady


@njit(cache=True)
def _belady_nobypass_kernel(blocks, n_unique, cap, admit, nxt):  # pragma: no cover - compiled
    m = blocks.shape[0]
    k1 = np.empty(m + 1, np.float64)  # min-heap of -next use
    k2 = np.empty(m + 1, np.int64)
    hv = np.empty(m + 1, np.int64)
    hn = 0
    present = np.zeros(n_unique, np.bool_)
    cur = np.zeros(n_unique, np.int64)
    hit = np.zeros(m, np.bool_)
    ins = np.zeros(m, np.bool_)
    used = 0
    peak = 0
    for i in range(m):
        b = blocks[i]
        if present[b]:
            hit[i] = True
        else:
            if not admit[i] or cap < 1:
                continue
            while used + 1 > cap:
                x = hv[0]
                key = k1[0]
                hn = heap_pop(k1, k2, hv, hn)
                if present[x] and -key == cur[x]:
                    present[x] = False
                    used -= 1
            present[b] = True
            used += 1
            ins[i] = True
            if used > peak:
                peak = used
        cur[b] = nxt[i]
        hn = heap_push(k1, k2, hv, hn, -float(nxt[i]), i, b)
    return hit, ins, peak


@register_policy
@dataclass(frozen=True)
class BeladyNoBypass(BlockPolicy):
    """MIN without bypass (libCacheSim's Belady): a miss is always inserted, evicting the farthest.

    Not a bound on prefix hits (``belady`` with bypass is); kept to cross-check libCacheSim at
    block level, where it is the optimum among policies that must insert every miss.
    """

    name: ClassVar[str] = "belady-nobypass"

    def kernel_run(self, trace, capacity_blocks, admit):
        return _belady_nobypass_kernel(trace.blocks, trace.n_unique, capacity_blocks, admit, next_use(trace))
