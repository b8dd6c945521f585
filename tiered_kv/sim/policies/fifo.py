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


# The two eviction steps are inlined into the kernel: as real calls, one per miss, they were
# measured slower than the rest of the kernel together.
@njit(cache=True, inline="always")
def _s3fifo_evict_main(nx, pv, M, where, freq, n_main):  # pragma: no cover - compiled
    """Evict one block from the main queue: a tail block with counter >= 1 goes back to the head
    with ``min(c, 3) - 1``, the first with 0 leaves. Returns the main queue's new size."""
    evicted = False
    while not evicted and n_main > 0:
        t = pv[M]
        ll_unlink(nx, pv, t)
        if freq[t] >= 1:
            f = freq[t] if freq[t] < 3 else 3
            freq[t] = f - 1
            ll_push_head(nx, pv, M, t)
        else:
            where[t] = 0
            n_main -= 1
            evicted = True
    return n_main


@njit(cache=True, inline="always")
def _s3fifo_evict_small(nx, pv, S, M, G, where, freq, move_to_main, ghost_cap, n_small, n_main,
                        n_ghost):  # pragma: no cover - compiled
    """Evict one block from the small queue: a tail block with counter >= ``move_to_main`` moves
    to the main queue (counter reset), the first below it leaves and its id enters the ghost,
    which forgets its oldest ids beyond ``ghost_cap``. Returns the three queues' new sizes (the
    small queue may empty by moves alone, evicting nothing)."""
    evicted = False
    while not evicted and n_small > 0:
        t = pv[S]
        ll_unlink(nx, pv, t)
        n_small -= 1
        if freq[t] >= move_to_main:
            freq[t] = 0
            where[t] = 2
            ll_push_head(nx, pv, M, t)
            n_main += 1
        else:
            where[t] = 0
            if ghost_cap >= 1:
                while n_ghost + 1 > ghost_cap:
                    g = pv[G]
                    ll_unlink(nx, pv, g)
                    where[g] = 0
                    n_ghost -= 1
                where[t] = 3
                ll_push_head(nx, pv, G, t)
                n_ghost += 1
            evicted = True
    return n_small, n_main, n_ghost


@njit(cache=True)
def s3fifo_kernel(blocks, n_unique, cap, admit, small_ratio, ghost_ratio, move_to_main):  # pragma: no cover
    m = blocks.shape[0]
    small_cap = np.int64(cap * small_ratio)
    main_cap = cap - small_cap
    ghost_cap = np.int64(cap * ghost_ratio)
    nx, pv = ll_init(n_unique, 3)
    S = n_unique  # small queue
    M = n_unique + 1  # main queue
    G = n_unique + 2  # ghost ids
    where = np.zeros(n_unique, np.int8)  # 0 absent, 1 small, 2 main, 3 ghost
    freq = np.zeros(n_unique, np.int64)
    hit = np.zeros(m, np.bool_)
    ins = np.zeros(m, np.bool_)
    n_small = 0
    n_main = 0
    n_ghost = 0
    peak = 0
    evicted_once = False
    for i in range(m):
        b = blocks[i]
        w = where[b]
        if w == 1 or w == 2:
            freq[b] += 1
            hit[i] = True
            continue
        on_ghost = False
        if w == 3:
            ll_unlink(nx, pv, b)
            where[b] = 0
            n_ghost -= 1
            on_ghost = True
        if not admit[i] or small_cap < 1:
            continue
        while n_small + n_main + 1 > cap:
            evicted_once = True
            if n_main > main_cap or n_small == 0:
                n_main = _s3fifo_evict_main(nx, pv, M, where, freq, n_main)
            else:
                n_small, n_main, n_ghost = _s3fifo_evict_small(nx, pv, S, M, G, where, freq, move_to_main,
                                                               ghost_cap, n_small, n_main, n_ghost)
        if on_ghost or (small_cap > 1 and not evicted_once and n_small >= small_cap):
            where[b] = 2
            ll_push_head(nx, pv, M, b)
            n_main += 1
        elif small_cap > 1:
            where[b] = 1
            ll_push_head(nx, pv, S, b)
            n_small += 1
        else:
            continue
        freq[b] = 0
        ins[i] = True
        if n_small + n_main > peak:
            peak = n_small + n_main
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
