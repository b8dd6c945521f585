"""The frequency family: ``lfu`` (with optional aging) and ``gdsf`` (cost-aware), numba kernels.

Both keep a binary min-heap (:mod:`~tiered_kv.sim.heap`) of (key, tie, block) with
lazy deletion: a block's entry is pushed again whenever its key changes, and a popped entry that
no longer matches the block's current key is skipped. Ties break by the access sequence number
(oldest first), so runs are exact and repeatable.

- ``lfu``: evict the least frequently used block, among equals the one least recently used;
  a block starts at frequency 1 when inserted and forgets its count when evicted. This is
  libCacheSim's LFU.c exactly (its frequency buckets append on every access and evict from the
  front), so block hits are identical. ``aging_accesses`` > 0 halves every cached block's count
  (rounding up: 1 stays 1) each time that many accesses have passed, so a block that was hot
  last week cannot sit on the cache forever (LFU with aging, Arlitt et al. 2000); 0 is no aging.
- ``gdsf`` (Greedy-Dual-Size-Frequency, Cherkasova 1998): a block's priority is
  ``L + frequency x cost / size``, evicting the lowest and raising ``L`` to it. Here the cost is
  the prefill compute the block saves (``a x tokens + b x (end^2 - start^2)`` seconds for its
  tokens [start, end): the latency model's linear plus attention term, so deep blocks are worth
  more) and the size is its bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numba import njit

from tiered_kv.sim.heap import heap_pop, heap_push
from tiered_kv.sim.policies.blockwise import BlockPolicy
from tiered_kv.sim.policies.registry import check_range, register_policy


@njit(cache=True)
def _age(k1, k2, hv, members, used, freq, cur1, cur2):  # pragma: no cover - compiled
    """LFU aging: halve the count of each of the ``used`` cached blocks in ``members`` (rounding
    up, so 1 stays 1) and rebuild the heap from their new entries alone, every older entry being
    stale now. Returns the heap's size."""
    hn = 0
    for j in range(used):
        x = members[j]
        freq[x] = (freq[x] + 1) >> 1
        cur1[x] = float(freq[x])
        hn = heap_push(k1, k2, hv, hn, cur1[x], cur2[x], x)
    return hn


@njit(cache=True)
def _heap_kernel(blocks, n_unique, cap, admit, value, aging, dynamic):  # pragma: no cover - compiled
    """LFU (dynamic=False: key = frequency) or GDSF (dynamic=True: key = L + frequency x value)."""
    m = blocks.shape[0]
    size = m + n_unique + 1
    k1 = np.empty(size, np.float64)
    k2 = np.empty(size, np.int64)
    hv = np.empty(size, np.int64)
    hn = 0
    freq = np.zeros(n_unique, np.int64)
    cur1 = np.zeros(n_unique, np.float64)
    cur2 = np.zeros(n_unique, np.int64)
    val = np.zeros(n_unique, np.float64)
    members = np.empty(n_unique, np.int64)  # cached blocks, for aging
    slot = np.full(n_unique, -1, np.int64)  # the block's place in members; -1: not cached
    hit = np.zeros(m, np.bool_)
    ins = np.zeros(m, np.bool_)
    used = 0
    peak = 0
    floor = 0.0
    for i in range(m):
        if aging > 0 and i > 0 and i % aging == 0:
            hn = _age(k1, k2, hv, members, used, freq, cur1, cur2)
        b = blocks[i]
        if slot[b] >= 0:
            hit[i] = True
            freq[b] += 1
            cur1[b] = floor + freq[b] * val[b] if dynamic else float(freq[b])
            cur2[b] = i
            hn = heap_push(k1, k2, hv, hn, cur1[b], i, b)
            continue
        if not admit[i] or cap < 1:
            continue
        while used + 1 > cap:
            x = hv[0]
            a = k1[0]
            t = k2[0]
            hn = heap_pop(k1, k2, hv, hn)
            if slot[x] < 0 or cur1[x] != a or cur2[x] != t:
                continue  # stale entry
            if dynamic:
                floor = a
            used -= 1
            last = members[used]
            members[slot[x]] = last
            slot[last] = slot[x]
            slot[x] = -1
        freq[b] = 1
        val[b] = value[i]
        cur1[b] = floor + val[b] if dynamic else 1.0
        cur2[b] = i
        hn = heap_push(k1, k2, hv, hn, cur1[b], i, b)
        members[used] = b
        slot[b] = used
        used += 1
        ins[i] = True
        if used > peak:
            peak = used
    return hit, ins, peak


@register_policy
@dataclass(frozen=True)
class LFU(BlockPolicy):
    """Least frequently used (ties: least recently used), optional aging (module docstring)."""

    name: ClassVar[str] = "lfu"
    aging_accesses: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("lfu aging_accesses", self.aging_accesses, 0, integer=True)

    def kernel_run(self, trace, capacity_blocks, admit):
        ones = np.ones(trace.n_accesses, np.float64)
        return _heap_kernel(trace.blocks, trace.n_unique, capacity_blocks, admit, ones, int(self.aging_accesses), False)


#: The deepseek-v3 latency preset's prefill coefficients (s/token, s/token^2;
#: :mod:`tiered_kv.sim.cluster.latency`); a test keeps them equal.
PRESET_PREFILL_A = 1.8280541415359558e-05
PRESET_PREFILL_B = 6.172301291724429e-10


@register_policy
@dataclass(frozen=True)
class GDSF(BlockPolicy):
    """Greedy-Dual-Size-Frequency with recompute cost per byte as the value (module docstring)."""

    name: ClassVar[str] = "gdsf"
    prefill_a_s_per_token: float = PRESET_PREFILL_A
    prefill_b_s_per_token2: float = PRESET_PREFILL_B

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("gdsf prefill_a_s_per_token", self.prefill_a_s_per_token, 0.0)
        check_range("gdsf prefill_b_s_per_token2", self.prefill_b_s_per_token2, 0.0)
        if self.prefill_a_s_per_token == 0 and self.prefill_b_s_per_token2 == 0:
            raise ValueError("gdsf prefill_a_s_per_token, prefill_b_s_per_token2: must not both be 0 "
                             "(every block would be worth nothing)")

    def value_per_byte(self, trace) -> np.ndarray:
        """Seconds of prefill saved per stored byte, per access."""
        bs = trace.block_size[trace.access_request].astype(np.float64)
        start = trace.depth.astype(np.float64) * bs
        tok = trace.chunk_tokens.astype(np.float64)
        cost = self.prefill_a_s_per_token * tok + self.prefill_b_s_per_token2 * ((start + tok) ** 2 - start ** 2)
        return cost / (tok * self.bytes_per_token)

    def kernel_run(self, trace, capacity_blocks, admit):
        return _heap_kernel(trace.blocks, trace.n_unique, capacity_blocks, admit, self.value_per_byte(trace), 0, True)
