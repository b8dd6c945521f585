"""``class-lru``: LRU where each traffic class's idle time is divided by its weight.

A block belongs to the class of the request that touched it last and sits in that class's LRU
list. To evict, every class's least recently used block is scored by ``(now - last touch) /
weight[class]`` (seconds of the trace's clock) and the highest score goes (ties: the older
touch). A class with weight 2 thus keeps its blocks about twice as long idle as a class with
weight 1 under the same pressure: a soft per-class priority without per-class TTLs or
partitions. With every weight equal it is plain LRU (a test checks it against ``lru``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
from numba import njit

from tiered_kv.sim.policies.blockwise import BlockPolicy, ll_init, ll_push_head, ll_unlink, per_class
from tiered_kv.sim.policies.registry import register_policy


@njit(cache=True)
def class_lru_kernel(blocks, n_unique, cap, admit, acc_class, acc_time, weight):  # pragma: no cover
    m = blocks.shape[0]
    k = weight.shape[0]
    nx, pv = ll_init(n_unique, k)
    present = np.zeros(n_unique, np.bool_)
    last = np.zeros(n_unique, np.float64)
    seq = np.zeros(n_unique, np.int64)
    hit = np.zeros(m, np.bool_)
    ins = np.zeros(m, np.bool_)
    used = 0
    peak = 0
    for i in range(m):
        b = blocks[i]
        c = acc_class[i]
        now = acc_time[i]
        if present[b]:
            hit[i] = True
            ll_unlink(nx, pv, b)
        else:
            if not admit[i] or cap < 1:
                continue
            while used + 1 > cap:
                best = -1
                best_score = -1.0
                best_seq = 0
                for j in range(k):
                    s = n_unique + j
                    if pv[s] == s:
                        continue
                    t = pv[s]
                    score = (now - last[t]) / weight[j]
                    if best < 0 or score > best_score or (score == best_score and seq[t] < best_seq):
                        best, best_score, best_seq = t, score, seq[t]
                ll_unlink(nx, pv, best)
                present[best] = False
                used -= 1
            present[b] = True
            used += 1
            ins[i] = True
            if used > peak:
                peak = used
        ll_push_head(nx, pv, n_unique + c, b)
        last[b] = now
        seq[b] = i
    return hit, ins, peak


@register_policy
@dataclass(frozen=True)
class ClassLRU(BlockPolicy):
    """LRU with per-class weights on idle time (``weights``: class -> weight > 0, default 1)."""

    name: ClassVar[str] = "class-lru"
    weights: dict[str, float] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        for cls, w in self.weights.items():
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not (0 < w < math.inf):
                raise ValueError(f"class-lru weights[{cls!r}]: must be a number in (0, inf), got {w!r}")

    def kernel_run(self, trace, capacity_blocks, admit):
        w = per_class(trace, self.weights, 1.0, "class-lru weights")
        acc_class = trace.class_codes[trace.access_request].astype(np.int64)
        return class_lru_kernel(trace.blocks, trace.n_unique, capacity_blocks, admit, acc_class,
                                trace.access_time, w)
