"""Peak stored bytes and the watermark view of :mod:`tiered_kv.sim.retention`.

Average stored bytes follow from byte-seconds alone; the peak needs the set of chunks held at an
instant. Both scans here count it exactly at evenly spaced instants of the trace, for every TTL
or every frontier point at once (the TTL scan from a cold cache or in steady state:
:func:`ttl_occupancy`):

* TTL: a chunk is held at ``s`` iff its last touch ``t <= s`` has ``s - t <= T`` of the class that
  touched it; one Fenwick tree per class over access positions holds a 1 at each block's latest
  touch, so the count for any ``T`` is a range sum over the touches since ``s - T``.
* Frontier: a kept item (reuse interval) is held over ``[start, end)``; items are bucketed by the
  first frontier point that keeps them, one sweep adds and removes them, a cumulative sum over
  buckets gives every point.

The watermark view replays the ``watermark`` collector over full chunks
and reports the idle age of each class's chunks at eviction: the retention each class gets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numba import njit

from tiered_kv.sim.policies.collectors import Collector
from tiered_kv.sim.policies.lru import retention_quantiles
from tiered_kv.sim.retention.frontier import Frontier
from tiered_kv.sim.retention.gaps import Gaps
from tiered_kv.sim.trace_replay import CompiledTrace, summarize

# --- peak stored bytes: occupancy at evenly spaced instants ---------------------------------------

@njit(cache=True)
def _ttl_occupancy(access_time, blocks, access_class, n_unique, n_classes, samples, ttls):  # pragma: no cover
    """Chunks held at each sample instant under each TTL, by the class that touched them last."""
    m = blocks.shape[0]
    tree = np.zeros((n_classes, m + 1), np.int32)  # Fenwick trees: 1 at each block's last touch
    last = np.full(n_unique, -1, np.int64)
    last_cls = np.zeros(n_unique, np.int64)
    occ = np.zeros((n_classes, samples.shape[0], ttls.shape[0]), np.float64)
    i = 0
    for s_idx in range(samples.shape[0]):
        s = samples[s_idx]
        while i < m and access_time[i] <= s:
            b = blocks[i]
            if last[b] >= 0:
                j = last[b] + 1
                while j <= m:
                    tree[last_cls[b], j] -= 1
                    j += j & (-j)
            c = access_class[i]
            j = i + 1
            while j <= m:
                tree[c, j] += 1
                j += j & (-j)
            last[b] = i
            last_cls[b] = c
            i += 1
        for k in range(ttls.shape[0]):
            lo = np.searchsorted(access_time[:i], s - ttls[k], side="left")  # touches within T of s
            for c in range(n_classes):
                tot = 0
                j = i
                while j > 0:
                    tot += tree[c, j]
                    j -= j & (-j)
                j = lo
                while j > 0:
                    tot -= tree[c, j]
                    j -= j & (-j)
                occ[c, s_idx, k] = tot
    return occ


@njit(cache=True)
def _item_occupancy(start_bucket, end_bucket, access_time, n_buckets, samples):  # pragma: no cover
    """Chunks held at each sample instant by kept items, per bucket.

    ``start_bucket[p]`` is the bucket of the item that starts at access ``p`` and ``end_bucket[j]``
    that of the item ending at ``j`` (-1: none); one sweep over the accesses in time order.
    """
    m = access_time.shape[0]
    held = np.zeros(n_buckets, np.float64)
    occ = np.zeros((samples.shape[0], n_buckets), np.float64)
    i = 0
    for s_idx in range(samples.shape[0]):
        s = samples[s_idx]
        while i < m and access_time[i] <= s:
            if start_bucket[i] >= 0:
                held[start_bucket[i]] += 1.0
            if end_bucket[i] >= 0:
                held[end_bucket[i]] -= 1.0
            i += 1
        occ[s_idx, :] = held
    return occ


def sample_instants(trace: CompiledTrace, n: int = 1024) -> np.ndarray:
    """``n`` evenly spaced instants over the trace (the last one at its final request)."""
    t0, t1 = float(trace.timestamps[0]), float(trace.timestamps[-1])
    return np.linspace(t0, t1, max(n, 2)) if t1 > t0 else np.array([t1])


def ttl_occupancy(trace: CompiledTrace, ttls, samples: np.ndarray, chunk_bytes: float, *,
                  steady_state: bool = False) -> np.ndarray:
    """Stored bytes [class, sample, ttl] under an idle TTL (by the class that touched last).

    ``steady_state=False`` counts from a cold cache at the trace's start. ``steady_state=True``
    takes the trace as one period of a stationary workload: a chunk whose last touch leaves it
    held past the trace's end is also held at the start of the next period, i.e. its residency
    wraps around to the start of the window (once per span it outlasts). The time average of
    that occupancy is exactly the Little's-law average ``byte-seconds / span`` of
    :mod:`tiered_kv.sim.retention`, so its peak is never below that average; a cold cache's peak
    is, whenever the TTL is comparable to the span (the cache never warms up in the window).
    """
    ttls = np.asarray(ttls, np.float64)
    samples = np.asarray(samples, np.float64)
    codes = trace.class_codes[trace.access_request].astype(np.int64)
    occ = _ttl_occupancy(trace.access_time, trace.blocks.astype(np.int64), codes, trace.n_unique,
                         len(trace.class_names), samples, ttls)
    if steady_state:
        occ += _wrapped_tails(trace, codes, samples, ttls)
    return occ * chunk_bytes


def _wrapped_tails(trace: CompiledTrace, codes: np.ndarray, samples: np.ndarray, ttls: np.ndarray) -> np.ndarray:
    """Chunks [class, sample, ttl] held at each instant by residencies that ran past the trace's end.

    A block's last access at ``t`` keeps it until ``t + T``; the part after the end ``t1`` maps to
    ``t0 + (t + T - t1) mod span``: at instant ``s`` it counts ``floor((t + T - s) / span)`` times.
    """
    t0, t1 = float(trace.timestamps[0]), float(trace.timestamps[-1])
    span = max(t1 - t0, 1.0)  # the span of tiered_kv.sim.retention.reuse_gaps
    last = np.full(trace.n_unique, -1, np.int64)
    last[trace.blocks] = np.arange(trace.blocks.shape[0])  # the last access of each block wins
    last = last[last >= 0]
    out = np.zeros((len(trace.class_names), samples.shape[0], ttls.shape[0]))
    for c in range(len(trace.class_names)):
        t = np.sort(trace.access_time[last[codes[last] == c]])
        for k, ttl in enumerate(ttls):
            if not np.isfinite(ttl):
                out[c, :, k] = np.inf if t.size else 0.0
                continue
            wraps = 1
            while True:  # tails with t + T - s >= wraps * span, at every instant s at once
                cnt = t.size - np.searchsorted(t, samples + wraps * span - ttl, side="left")
                if not cnt.any():
                    break
                out[c, :, k] += cnt
                wraps += 1
    return out


def frontier_occupancy(trace: CompiledTrace, gaps: Gaps, frontier: Frontier, points: np.ndarray,
                       samples: np.ndarray, chunk_bytes: float, c: int | None = None) -> np.ndarray:
    """Stored bytes [sample, point] when the frontier keeps its first ``points[q]`` groups."""
    items = np.flatnonzero(frontier.item_group >= 0)
    grp = frontier.item_group[items]
    if c is None:
        rank = frontier.rank[grp]
    else:
        keep = frontier.group_class[grp] == c
        items, rank = items[keep], frontier.class_rank[grp[keep]]
    pts = np.asarray(points, dtype=np.int64)
    bucket = np.searchsorted(pts, rank, side="right")  # kept from point q on iff rank < pts[q]
    start_bucket = np.full(trace.n_accesses, -1, dtype=np.int64)
    end_bucket = np.full(trace.n_accesses, -1, dtype=np.int64)
    start_bucket[gaps.prev[items]] = bucket
    end_bucket[items] = bucket
    occ = _item_occupancy(start_bucket, end_bucket, trace.access_time, len(pts) + 1,
                          np.asarray(samples, np.float64))
    return np.cumsum(occ, axis=1)[:, : len(pts)] * chunk_bytes


# --- the watermark view ---------------------------------------------------------------------------

@dataclass(frozen=True)
class FullChunkWatermark(Collector):
    """The ``watermark`` collector's one LRU order (ties to the chunk touched first) over full
    chunks, the bytes the retention model stores (``watermark`` itself weighs a partial tail less)."""

    name: ClassVar[str] = "watermark"
    rule: ClassVar[str] = "lru"


def watermark_view(trace: CompiledTrace, capacity_bytes: float, bytes_per_token: float, high: float,
                   low: float) -> dict:
    """:class:`FullChunkWatermark` on ``capacity_bytes``: hits per class and the effective
    retention each class gets (idle age of its chunks at eviction)."""
    res = FullChunkWatermark(capacity_bytes=float(capacity_bytes), high=high, low=low,
                             bytes_per_token=bytes_per_token).collect(trace)
    by_class = summarize(trace, trace.hit_tokens_from_blocks(np.asarray(res.hit_blocks, dtype=np.int64)))[3]
    return {"capacity_bytes": float(capacity_bytes), "high": high, "low": low, "evictions": int(res.evictions),
            "effective_retention_s": retention_quantiles(res.idle_s, res.evicted_class, trace.class_names),
            "by_class": {n: {"hit_tokens": c["hit_tokens"], "input_tokens": c["input_tokens"]}
                         for n, c in by_class.items()}}
