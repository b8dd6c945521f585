"""The FIFO family: ``fifo``, ``sieve`` and ``s3fifo``, each a numba kernel (see :mod:`.blockwise`).

Definitions follow libCacheSim's C sources (FIFO.c, Sieve.c, S3FIFO.c), read, not copied, so
block-level hit counts are identical (``tests/test_policy_peers.py``):

- ``fifo``: insert at the head, evict the tail; a hit changes nothing.
- ``sieve`` (Zhang et al., NSDI'24): FIFO order plus a visited bit set on a hit; the hand walks
  from the tail towards the head, clearing visited bits, and evicts the first unvisited block;
  it resumes from the evicted block's newer neighbour (from the tail when that is none).
- ``s3fifo`` (Yang et al., SOSP'23): a small FIFO (``small_ratio`` of the capacity, truncated to
  whole blocks), a main FIFO (the rest) and a ghost FIFO of ids (``ghost_ratio``). Misses enter
  the small queue, or the main one when their id is in the ghost; a hit adds 1 to a counter.
  Evicting from the small queue moves a block with counter >= ``move_to_main`` to the main
  queue (counter reset), else drops it into the ghost; evicting from the main queue reinserts a
  block with counter >= 1 (counter ``min(c, 3) - 1``) and drops one with 0. The small queue is
  evicted unless the main one is over its size or the small one is empty. As in libCacheSim
  (0.3.5, its S3FIFO.c after December 2024), until the first eviction a miss that finds the
  small queue full enters the main queue, and nothing is inserted at all while the small
  queue holds fewer than two blocks (capacity < 20 at the default ratio).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numba import njit

from tiered_kv.sim.policies.blockwise import BlockPolicy, ll_init, ll_push_head, ll_unlink
from tiered_kv.sim.policies.registry import check_range, register_policy

# --------------------------------------------------------------------------------------------
# numbered queues, shared with :mod:`.segmented`: queue ``k`` (1, 2, ...) is the list with
# sentinel ``base + k - 1``, ``where[b] == k`` marks its members (0: absent) and ``cnt[k - 1]``
# counts them.


@njit(cache=True)
def q_push(nx, pv, where, cnt, base, k, b):  # pragma: no cover - compiled
    """Insert ``b`` at the head (newest end) of queue ``k``."""
    ll_push_head(nx, pv, base + k - 1, b)
    where[b] = k
    cnt[k - 1] += 1


@njit(cache=True)
def q_remove(nx, pv, where, cnt, b):  # pragma: no cover - compiled
    """Take ``b`` out of its queue; it becomes absent."""
    ll_unlink(nx, pv, b)
    cnt[where[b] - 1] -= 1
    where[b] = 0


@njit(cache=True)
def q_pop(nx, pv, where, cnt, base, k):  # pragma: no cover - compiled
    """Take the tail (oldest) of queue ``k`` out; it becomes absent. Returns it."""
    t = pv[base + k - 1]
    q_remove(nx, pv, where, cnt, t)
    return t


@njit(cache=True)
def ghost_push(nx, pv, where, cnt, base, k, b, ghost_cap):  # pragma: no cover - compiled
    """Remember the id ``b`` in the ghost FIFO ``k``, dropping its oldest ids to stay within
    ``ghost_cap``; a ghost of less than one id remembers nothing."""
    if ghost_cap < 1:
        return
    while cnt[k - 1] + 1 > ghost_cap:
        q_pop(nx, pv, where, cnt, base, k)
    q_push(nx, pv, where, cnt, base, k, b)


@njit(cache=True)
def fifo_kernel(blocks, n_unique, cap, admit):  # pragma: no cover - compiled
    m = blocks.shape[0]
    nx, pv = ll_init(n_unique, 1)
    s = n_unique
    present = np.zeros(n_unique, np.bool_)
    hit = np.zeros(m, np.bool_)
    ins = np.zeros(m, np.bool_)
    used = 0
    peak = 0
    for i in range(m):
        b = blocks[i]
        if present[b]:
            hit[i] = True
            continue
        if not admit[i] or cap < 1:
            continue
        while used + 1 > cap:
            t = pv[s]
            ll_unlink(nx, pv, t)
            present[t] = False
            used -= 1
        ll_push_head(nx, pv, s, b)
        present[b] = True
        used += 1
        ins[i] = True
        if used > peak:
            peak = used
    return hit, ins, peak


@njit(cache=True)
def sieve_kernel(blocks, n_unique, cap, admit):  # pragma: no cover - compiled
    m = blocks.shape[0]
    nx, pv = ll_init(n_unique, 1)
    s = n_unique
    present = np.zeros(n_unique, np.bool_)
    visited = np.zeros(n_unique, np.bool_)
    hit = np.zeros(m, np.bool_)
    ins = np.zeros(m, np.bool_)
    hand = -1  # -1: start from the tail
    used = 0
    peak = 0
    for i in range(m):
        b = blocks[i]
        if present[b]:
            visited[b] = True
            hit[i] = True
            continue
        if not admit[i] or cap < 1:
            continue
        while used + 1 > cap:
            o = pv[s] if hand < 0 else hand
            while visited[o]:
                visited[o] = False
                o = pv[s] if pv[o] == s else pv[o]
            hand = -1 if pv[o] == s else pv[o]
            ll_unlink(nx, pv, o)
            present[o] = False
            used -= 1
        ll_push_head(nx, pv, s, b)
        present[b] = True
        visited[b] = False
        used += 1
        ins[i] = True
        if used > peak:
            peak = used
    return hit, ins, peak


@njit(cache=True)
def _s3_evict(nx, pv, where, freq, cnt, base, main_cap, ghost_cap, move_to_main):  # pragma: no cover
    """Evict one block: from the main queue (2) when it is over its size or the small one (1) is
    empty, else from the small one, whose tail moves to main or drops into the ghost (3)."""
    M = base + 1
    if cnt[1] > main_cap or cnt[0] == 0:
        while cnt[1] > 0:
            t = pv[M]
            if freq[t] < 1:
                q_remove(nx, pv, where, cnt, t)
                return
            freq[t] = min(freq[t], 3) - 1  # reinserted
            ll_unlink(nx, pv, t)
            ll_push_head(nx, pv, M, t)
        return
    while cnt[0] > 0:
        t = q_pop(nx, pv, where, cnt, base, 1)
        if freq[t] < move_to_main:
            ghost_push(nx, pv, where, cnt, base, 3, t, ghost_cap)
            return
        freq[t] = 0
        q_push(nx, pv, where, cnt, base, 2, t)


@njit(cache=True)
def s3fifo_kernel(blocks, n_unique, cap, admit, small_ratio, ghost_ratio, move_to_main):  # pragma: no cover
    m = blocks.shape[0]
    small_cap = np.int64(cap * small_ratio)
    main_cap = cap - small_cap
    ghost_cap = np.int64(cap * ghost_ratio)
    nx, pv = ll_init(n_unique, 3)
    where = np.zeros(n_unique, np.int8)  # 0 absent, 1 small, 2 main, 3 ghost (queues at n_unique + k - 1)
    cnt = np.zeros(3, np.int64)
    freq = np.zeros(n_unique, np.int64)
    hit = np.zeros(m, np.bool_)
    ins = np.zeros(m, np.bool_)
    peak = 0
    evicted_once = False
    for i in range(m):
        b = blocks[i]
        w = where[b]
        if w == 1 or w == 2:
            freq[b] += 1
            hit[i] = True
            continue
        if w == 3:
            q_remove(nx, pv, where, cnt, b)
        if not admit[i] or small_cap < 1:
            continue
        while cnt[0] + cnt[1] + 1 > cap:
            evicted_once = True
            _s3_evict(nx, pv, where, freq, cnt, n_unique, main_cap, ghost_cap, move_to_main)
        if w == 3 or (small_cap > 1 and not evicted_once and cnt[0] >= small_cap):
            q_push(nx, pv, where, cnt, n_unique, 2, b)
        elif small_cap > 1:
            q_push(nx, pv, where, cnt, n_unique, 1, b)
        else:
            continue
        freq[b] = 0
        ins[i] = True
        peak = max(peak, cnt[0] + cnt[1])
    return hit, ins, peak


@register_policy
@dataclass(frozen=True)
class FIFO(BlockPolicy):
    """First in, first out over block slots; a hit changes nothing."""

    name: ClassVar[str] = "fifo"

    def kernel_run(self, trace, capacity_blocks, admit):
        return fifo_kernel(trace.blocks, trace.n_unique, capacity_blocks, admit)


@register_policy
@dataclass(frozen=True)
class Sieve(BlockPolicy):
    """SIEVE: FIFO with a visited bit and a moving hand (see the module docstring)."""

    name: ClassVar[str] = "sieve"

    def kernel_run(self, trace, capacity_blocks, admit):
        return sieve_kernel(trace.blocks, trace.n_unique, capacity_blocks, admit)


@register_policy
@dataclass(frozen=True)
class S3FIFO(BlockPolicy):
    """S3-FIFO: small, main and ghost FIFO queues (see the module docstring)."""

    name: ClassVar[str] = "s3fifo"
    small_ratio: float = 0.10
    ghost_ratio: float = 0.90
    move_to_main: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("s3fifo small_ratio", self.small_ratio, 0.0, 1.0, lo_open=True)
        check_range("s3fifo ghost_ratio", self.ghost_ratio, 0.0, 10.0)
        check_range("s3fifo move_to_main", self.move_to_main, 1, 1 << 20, integer=True)

    def kernel_run(self, trace, capacity_blocks, admit):
        return s3fifo_kernel(trace.blocks, trace.n_unique, capacity_blocks, admit, float(self.small_ratio),
                             float(self.ghost_ratio), int(self.move_to_main))
