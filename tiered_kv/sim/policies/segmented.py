"""The segmented family: ``arc``, ``slru`` and ``2q``, numba kernels (see :mod:`.blockwise`).

Definitions follow libCacheSim's C sources (ARC.c, SLRU.c, TwoQ.c), read, not copied, so
block-level hit counts are identical (``tests/test_policy_peers.py``); where those differ from
the papers it is said here and in docs/policies.md.

- ``arc`` (Megiddo and Modha, FAST'03): T1 (seen once) and T2 (seen again) LRU lists with ghost
  lists B1, B2 and a target size p for T1. A ghost hit in B1 raises p by max(|B2|/|B1|, 1), in
  B2 lowers it by max(|B1|/|B2|, 1), and the block is inserted into T2; REPLACE evicts T1's
  tail to B1 when |T1| > p (or == p on a B2 hit, or T2 is empty), else T2's tail to B2. On a
  miss in all four lists with |T1| + |B1| full, B1's tail is dropped (T1's tail, without a
  ghost, when B1 is empty); otherwise B2's tail is dropped once all four lists hold 2c. As in
  libCacheSim, this bookkeeping runs only when a block must be evicted.
- ``slru``: ``n_segments`` LRU segments of ``capacity // n_segments`` blocks each (libCacheSim's
  default 4, the generalised SLRU). A miss enters the lowest segment with room (so a cold cache
  fills the upper segments too), else segment 0 after evicting; a hit moves the block to the
  head of the next segment up (the top one: its head), and an overfull segment demotes its tail
  one segment down, segment 0 evicting. Evictions take the tail of the lowest non-empty segment.
- ``2q`` (Johnson and Shasha, VLDB'94, "full" version): A1in, a FIFO of ``in_ratio`` x c
  blocks (truncated), A1out, a FIFO of ``out_ratio`` x c ghost ids, and Am, an LRU of the rest.
  A miss whose id is in A1out goes to Am (evicting Am's own tail when Am is full); any other
  miss enters A1in. A hit in A1in changes nothing. To make room, A1in's tail moves to A1out
  while A1in is over its size, else Am's tail is evicted. Nothing is inserted while A1in's
  size is under one block (capacity < 4).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numba import njit

from tiered_kv.sim.policies.blockwise import BlockPolicy, ll_init, ll_push_head, ll_unlink
from tiered_kv.sim.policies.registry import check_range, register_policy


@njit(cache=True)
def _move_tail(nx, pv, where, sizes, base, src, dst):  # pragma: no cover - compiled
    """Move list ``src``'s tail to list ``dst``'s head (``dst`` 0: drop it); ``src`` must not be
    empty (its tail would be its sentinel): each caller checks its size or holds an invariant
    that implies it (2Q evicts from Am only while A1in is within its share of the capacity).

    Lists are numbered by their ``where`` code: list k has sentinel ``base + k - 1`` and size
    ``sizes[k - 1]``, so one step serves every ghosting and eviction of ARC and 2Q.
    """
    x = pv[base + src - 1]
    ll_unlink(nx, pv, x)
    where[x] = dst
    sizes[src - 1] -= 1
    if dst:
        ll_push_head(nx, pv, base + dst - 1, x)
        sizes[dst - 1] += 1


@njit(cache=True)
def _arc_replace(nx, pv, where, sizes, base, p, on_b2):  # pragma: no cover - compiled
    """REPLACE: T1's tail to B1 when |T1| > p (== p on a B2 hit, or T2 empty), else T2's to B2."""
    t1 = sizes[0]
    if (t1 > 0 and (t1 > p or (t1 == p and on_b2))) or sizes[1] == 0:
        _move_tail(nx, pv, where, sizes, base, 1, 3)
    else:
        _move_tail(nx, pv, where, sizes, base, 2, 4)


@njit(cache=True)
def _arc_ghost_hit(nx, pv, where, sizes, p, b, cap):  # pragma: no cover - compiled
    """Adapt p to a ghost hit on ``b`` (B1 raises it, B2 lowers it) and take ``b`` off its list."""
    if where[b] == 3:
        p = min(p + max(sizes[3] / sizes[2], 1.0), float(cap))
    else:
        p = max(p - max(sizes[2] / sizes[3], 1.0), 0.0)
    sizes[where[b] - 1] -= 1
    ll_unlink(nx, pv, b)
    where[b] = 0
    return p


@njit(cache=True)
def arc_kernel(blocks, n_unique, cap, admit):  # pragma: no cover - compiled
    m = blocks.shape[0]
    nx, pv = ll_init(n_unique, 4)
    T2 = n_unique + 1
    where = np.zeros(n_unique, np.int8)  # 0 absent, 1 T1, 2 T2, 3 B1, 4 B2 (see _move_tail)
    sizes = np.zeros(4, np.int64)
    hit = np.zeros(m, np.bool_)
    ins = np.zeros(m, np.bool_)
    p = 0.0
    peak = 0
    for i in range(m):
        b = blocks[i]
        w = where[b]
        if w == 1 or w == 2:
            ll_unlink(nx, pv, b)
            ll_push_head(nx, pv, T2, b)
            if w == 1:
                where[b] = 2
                sizes[0] -= 1
                sizes[1] += 1
            hit[i] = True
            continue
        ghost = 0
        if w >= 3:
            ghost = w - 2
            p = _arc_ghost_hit(nx, pv, where, sizes, p, b, cap)
        if not admit[i] or cap < 1:
            continue
        while sizes[0] + sizes[1] + 1 > cap:
            if ghost:
                _arc_replace(nx, pv, where, sizes, n_unique, p, ghost == 2)
            elif sizes[0] + sizes[2] + 1 > cap:
                if sizes[2] > 0:
                    _move_tail(nx, pv, where, sizes, n_unique, 3, 0)
                    _arc_replace(nx, pv, where, sizes, n_unique, p, False)
                else:
                    _move_tail(nx, pv, where, sizes, n_unique, 1, 0)
            else:
                if sizes[0] + sizes[1] + sizes[2] + sizes[3] >= 2 * cap and sizes[3] > 0:
                    _move_tail(nx, pv, where, sizes, n_unique, 4, 0)
                _arc_replace(nx, pv, where, sizes, n_unique, p, False)
        to = 2 if ghost else 1  # a ghost hit enters T2, a miss T1
        ll_push_head(nx, pv, n_unique + to - 1, b)
        where[b] = to
        sizes[to - 1] += 1
        ins[i] = True
        if sizes[0] + sizes[1] > peak:
            peak = sizes[0] + sizes[1]
    return hit, ins, peak


@njit(cache=True)
def _slru_evict(nx, pv, seg, cnt, n_unique, n_seg):  # pragma: no cover - compiled
    for k in range(n_seg):
        if cnt[k] > 0:
            t = pv[n_unique + k]
            ll_unlink(nx, pv, t)
            seg[t] = -1
            cnt[k] -= 1
            return


@njit(cache=True)
def _slru_fix(nx, pv, seg, cnt, mx, n_unique, n_seg, top):  # pragma: no cover - compiled
    """libCacheSim's recursive cooling, as a loop: while segment k is over, demote (0: evict)."""
    k = top
    while True:
        if cnt[k] > mx[k]:
            if k == 0:
                _slru_evict(nx, pv, seg, cnt, n_unique, n_seg)
            else:
                t = pv[n_unique + k]
                ll_unlink(nx, pv, t)
                ll_push_head(nx, pv, n_unique + k - 1, t)
                seg[t] = k - 1
                cnt[k] -= 1
                cnt[k - 1] += 1
                k -= 1
        elif k == top:
            return
        else:
            k += 1


@njit(cache=True)
def slru_kernel(blocks, n_unique, cap, admit, n_seg):  # pragma: no cover - compiled
    m = blocks.shape[0]
    nx, pv = ll_init(n_unique, n_seg)
    seg = np.full(n_unique, -1, np.int64)
    cnt = np.zeros(n_seg, np.int64)
    mx = np.full(n_seg, cap // n_seg, np.int64)
    hit = np.zeros(m, np.bool_)
    ins = np.zeros(m, np.bool_)
    peak = 0
    for i in range(m):
        b = blocks[i]
        k = seg[b]
        if k >= 0:
            hit[i] = True
            ll_unlink(nx, pv, b)
            if k == n_seg - 1:
                ll_push_head(nx, pv, n_unique + k, b)
            else:
                cnt[k] -= 1
                seg[b] = k + 1
                cnt[k + 1] += 1
                ll_push_head(nx, pv, n_unique + k + 1, b)
                _slru_fix(nx, pv, seg, cnt, mx, n_unique, n_seg, k + 1)
            continue
        if not admit[i] or mx[0] < 1:
            continue
        while cnt.sum() + 1 > cap:
            _slru_evict(nx, pv, seg, cnt, n_unique, n_seg)
        target = -1
        for j in range(n_seg):
            if cnt[j] + 1 <= mx[j]:
                target = j
                break
        if target < 0:  # every segment is full (room was made above)
            target = 0
        ll_push_head(nx, pv, n_unique + target, b)
        seg[b] = target
        cnt[target] += 1
        ins[i] = True
        used = cnt.sum()
        if used > peak:
            peak = used
    return hit, ins, peak


@njit(cache=True)
def twoq_kernel(blocks, n_unique, cap, admit, in_ratio, out_ratio):  # pragma: no cover - compiled
    m = blocks.shape[0]
    in_cap = np.int64(cap * in_ratio)
    out_cap = np.int64(cap * out_ratio)
    am_cap = cap - in_cap
    nx, pv = ll_init(n_unique, 3)
    AM = n_unique + 1
    where = np.zeros(n_unique, np.int8)  # 0 absent, 1 A1in, 2 Am, 3 A1out (see _move_tail)
    sizes = np.zeros(3, np.int64)
    hit = np.zeros(m, np.bool_)
    ins = np.zeros(m, np.bool_)
    peak = 0
    for i in range(m):
        b = blocks[i]
        w = where[b]
        if w == 1 or w == 2:  # a hit in Am refreshes it; one in A1in changes nothing
            if w == 2:
                ll_unlink(nx, pv, b)
                ll_push_head(nx, pv, AM, b)
            hit[i] = True
            continue
        if w == 3:
            ll_unlink(nx, pv, b)
            where[b] = 0
            sizes[2] -= 1
        if not admit[i] or in_cap < 1:
            continue
        while sizes[0] + sizes[1] + 1 > cap:
            if sizes[0] <= in_cap:
                _move_tail(nx, pv, where, sizes, n_unique, 2, 0)
            elif out_cap < 1:
                _move_tail(nx, pv, where, sizes, n_unique, 1, 0)
            else:
                while sizes[2] + 1 > out_cap:
                    _move_tail(nx, pv, where, sizes, n_unique, 3, 0)
                _move_tail(nx, pv, where, sizes, n_unique, 1, 3)
        if w == 3:
            if am_cap < 1:
                continue
            while sizes[1] + 1 > am_cap:
                _move_tail(nx, pv, where, sizes, n_unique, 2, 0)
        to = 2 if w == 3 else 1  # an A1out hit enters Am, any other miss A1in
        ll_push_head(nx, pv, n_unique + to - 1, b)
        where[b] = to
        sizes[to - 1] += 1
        ins[i] = True
        if sizes[0] + sizes[1] > peak:
            peak = sizes[0] + sizes[1]
    return hit, ins, peak


@register_policy
@dataclass(frozen=True)
class ARC(BlockPolicy):
    """Adaptive Replacement Cache (see the module docstring)."""

    name: ClassVar[str] = "arc"

    def kernel_run(self, trace, capacity_blocks, admit):
        return arc_kernel(trace.blocks, trace.n_unique, capacity_blocks, admit)


@register_policy
@dataclass(frozen=True)
class SLRU(BlockPolicy):
    """Segmented LRU with ``n_segments`` equal segments (see the module docstring)."""

    name: ClassVar[str] = "slru"
    n_segments: int = 4

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("slru n_segments", self.n_segments, 1, 64, integer=True)

    def kernel_run(self, trace, capacity_blocks, admit):
        return slru_kernel(trace.blocks, trace.n_unique, capacity_blocks, admit, int(self.n_segments))


@register_policy
@dataclass(frozen=True)
class TwoQ(BlockPolicy):
    """2Q: A1in FIFO, A1out ghost FIFO, Am LRU (see the module docstring)."""

    name: ClassVar[str] = "2q"
    in_ratio: float = 0.25
    out_ratio: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("2q in_ratio", self.in_ratio, 0.0, 1.0, lo_open=True)
        if self.in_ratio == 1.0:
            raise ValueError("2q in_ratio: must be in (0, 1) (Am needs room), got 1.0")
        check_range("2q out_ratio", self.out_ratio, 0.0, 10.0)

    def kernel_run(self, trace, capacity_blocks, admit):
        return twoq_kernel(trace.blocks, trace.n_unique, capacity_blocks, admit, float(self.in_ratio),
                           float(self.out_ratio))
