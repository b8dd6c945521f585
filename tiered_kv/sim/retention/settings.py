"""Hit rate, SSD occupancy and effective retention at any TTL/capacity setting, from one table.

A slider move must redraw in well under 200 ms on the real conversation trace (about 290k
block lookups), so nothing is replayed when a setting changes. The table keeps, for every
block lookup, the two quantities that decide whether it hits, both read from the replay
engine's own passes over the compiled trace (:mod:`tiered_kv.sim.trace_replay`):

* its *gap*: seconds since the block was last touched, and the traffic class of that toucher
  (a block's TTL is set by the class of the request that last touched it), from
  :func:`~tiered_kv.sim.retention.gaps.reuse_gaps`;
* its *stack distance*: distinct blocks touched since then, itself included (LRU by blocks),
  as the prefix maximum :func:`~tiered_kv.sim.curves.lru_keys` computes for the LRU curve.

A request hits its first ``p`` blocks where ``p`` counts leading blocks that are present, so the
table keeps per-request prefix maxima; a lookup of block ``i`` then hits at a setting exactly
when every prefix maximum is under its threshold. Evaluating a setting is one masked sum.

Exactness, per the replay semantics of docs/semantics.md (lookup, then touch every block in order):
TTL alone (any per-class TTLs) and capacity alone are exact. Together they are exact when all
classes share one TTL (a live block's more recent neighbours are all live, so LRU sees the same
stack); with differing per-class TTLs the combined value is a lower bound (blocks expiring early
free room that this evaluation does not credit). The watermark-LRU is evaluated as LRU with
``floor(watermark * capacity)`` blocks, the level it evicts down to.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl

from tiered_kv.sim.curves import COLD, lru_keys, segmented_prefix_max
from tiered_kv.sim.retention.gaps import reuse_gaps
from tiered_kv.sim.trace_replay import CompiledTrace, compile_trace


@dataclass(frozen=True)
class Setting:
    """A retention setting: TTL per class (seconds, ``inf`` = keep), capacity, watermark."""

    ttl_s: tuple[float, ...]  # one per class, in RetentionTable.classes order
    capacity_tokens: float = math.inf  # SSD capacity in tokens; inf = unbounded
    watermark: float = 1.0  # fraction of capacity the watermark-LRU evicts down to

    def __post_init__(self) -> None:
        if any(not t >= 0 for t in self.ttl_s):
            raise ValueError(f"Setting.ttl_s: every TTL must be >= 0 seconds (got {self.ttl_s})")
        if not self.capacity_tokens >= 0:
            raise ValueError(f"Setting.capacity_tokens must be >= 0 tokens (got {self.capacity_tokens})")
        if not 0.0 < self.watermark <= 1.0:
            raise ValueError(f"Setting.watermark must be in (0, 1] (got {self.watermark})")

    def capacity_blocks(self, block_size: int) -> float:
        if math.isinf(self.capacity_tokens):
            return math.inf
        return float(math.floor(math.floor(self.capacity_tokens / block_size) * self.watermark))


@dataclass(frozen=True)
class RetentionTable:
    """Per-lookup thresholds of one trace, reduced to the lookups that can ever hit."""

    classes: tuple[str, ...]
    block_size: int
    duration_s: float
    start_s: float
    input_tokens: np.ndarray  # per class, int64
    requests: np.ndarray  # per class, int64
    distinct_blocks: int  # the trace's footprint in blocks
    # one row per lookup that hits at TTL = inf and capacity = inf:
    reader: np.ndarray  # class index of the request that looks the block up (int8)
    weight: np.ndarray  # tokens credited when it hits (int64)
    gap_max: np.ndarray  # (n, n_classes) prefix max gap per toucher class; -1 when none
    sd_max: np.ndarray  # prefix max stack distance in blocks (int64)
    # one row per touch, for occupancy: [start, next touch or end of trace), toucher class
    touch_start: np.ndarray
    touch_len: np.ndarray
    touch_class: np.ndarray

    @property
    def n_classes(self) -> int:
        return len(self.classes)

    def default_setting(self) -> Setting:
        return Setting(ttl_s=(math.inf,) * self.n_classes)


def build_table(trace: pl.DataFrame | CompiledTrace) -> RetentionTable:
    """The table of a trace frame (:data:`tiered_kv.sim.traces.SCHEMA`) or a compiled trace; the slow step.

    A frame is compiled with the default :class:`~tiered_kv.sim.trace_replay.ReplayOptions`
    (timestamp order, every request counted); it must use one block size.
    """
    if not isinstance(trace, CompiledTrace):
        sizes = trace["block_size"].unique().to_list()
        if len(sizes) != 1 or sizes[0] is None or sizes[0] <= 0:
            raise ValueError(f"block_size: the trace must use one positive block size, got {sizes}")
        trace = compile_trace(trace)
    block_size = trace.uniform_block_size
    gaps = reuse_gaps(trace)
    n_cls = len(trace.class_names)
    reader = trace.class_codes.astype(np.int64)[trace.access_request]
    # the gap of each lookup in its toucher's column (a first touch: inf, in its reader's column)
    column = np.where(gaps.toucher_class >= 0, gaps.toucher_class, reader)
    gap_by_cls = np.full((trace.n_accesses, n_cls), -1.0)
    gap_by_cls[np.arange(trace.n_accesses), column] = gaps.gap_in
    gap_max = segmented_prefix_max(gap_by_cls, trace.offsets)
    sd_max = lru_keys(trace)
    reachable = np.isfinite(gap_max).all(axis=1) & (sd_max < COLD)
    next_touch = np.full(trace.n_accesses, np.inf)  # of each access's block (inf after its last access)
    next_touch[gaps.prev[gaps.prev >= 0]] = trace.access_time[gaps.prev >= 0]
    times = trace.timestamps
    start = float(times.min()) if trace.n_requests else 0.0
    end = float(times.max()) if trace.n_requests else 0.0
    return RetentionTable(
        classes=trace.class_names,
        block_size=block_size,
        duration_s=end - start,
        start_s=start,
        input_tokens=np.bincount(trace.class_codes, weights=trace.input_length, minlength=n_cls).astype(np.int64),
        requests=np.bincount(trace.class_codes, minlength=n_cls).astype(np.int64),
        distinct_blocks=trace.n_unique,
        reader=reader[reachable].astype(np.int8),
        weight=trace.tokens[reachable].astype(np.int64),
        gap_max=gap_max[reachable],
        sd_max=sd_max[reachable].astype(np.int64),
        touch_start=trace.access_time,
        touch_len=np.minimum(next_touch, end) - trace.access_time,
        touch_class=reader.astype(np.int8),
    )


def _ttls(table: RetentionTable, setting: Setting) -> np.ndarray:
    """The setting's TTLs as an array, one per class of the table."""
    if len(setting.ttl_s) != table.n_classes:
        raise ValueError(f"Setting.ttl_s needs {table.n_classes} TTLs, one per class {table.classes}")
    return np.asarray(setting.ttl_s, dtype=np.float64)


def hit_tokens(table: RetentionTable, setting: Setting) -> np.ndarray:
    """Hit tokens per reader class at ``setting`` (int64 array, one per class): the rows within
    capacity whose gaps are within the TTL of every toucher class."""
    cap = float(setting.capacity_blocks(table.block_size))
    ok = (table.sd_max <= cap) & (table.gap_max <= _ttls(table, setting)).all(axis=1)
    return np.bincount(table.reader[ok], weights=table.weight[ok], minlength=table.n_classes).astype(np.int64)


def hit_rates(table: RetentionTable, setting: Setting) -> pl.DataFrame:
    """One row per class plus ``total``: requests, input and hit tokens, token hit rate."""
    def with_total(a: np.ndarray) -> list[int]:
        return [*(int(x) for x in a), int(a.sum())]

    hits, inp = with_total(hit_tokens(table, setting)), with_total(table.input_tokens)
    return pl.DataFrame({"class": [*table.classes, "total"], "ttl_seconds": [*map(float, setting.ttl_s), math.nan],
                         "requests": with_total(table.requests), "input_tokens": inp, "hit_tokens": hits,
                         "token_hit_rate": [h / i if i else 0.0 for h, i in zip(hits, inp, strict=True)]})


def ttl_grid(table: RetentionTable, points: int = 48) -> np.ndarray:
    """Log-spaced TTLs (seconds) from one second to the trace's duration."""
    hi = max(table.duration_s, 2.0)
    return np.unique(np.concatenate([[0.0], np.geomspace(1.0, hi, points)]))


def ttl_curves(table: RetentionTable, setting: Setting, grid: np.ndarray) -> pl.DataFrame:
    """Hit rate of each class against its own TTL, other settings held at ``setting``.

    Exact one-pass: each lookup hits from the smallest TTL at or above its threshold on, so a
    histogram of thresholds over the grid, cumulated, is the curve (all classes at once).
    """
    ttl = _ttls(table, setting)
    grid = np.asarray(grid, dtype=np.float64)
    rows_at = np.arange(len(table.reader))
    reader = table.reader.astype(np.int64)
    other_over = table.gap_max > ttl  # the reader's own class is the curve's axis: not held
    other_over[rows_at, reader] = False
    ok = (table.sd_max <= float(setting.capacity_blocks(table.block_size))) & ~other_over.any(axis=1)
    bucket = np.searchsorted(grid, table.gap_max[rows_at, reader])  # first grid TTL >= gap
    width = len(grid) + 1
    hist = np.bincount(reader[ok] * width + bucket[ok], weights=table.weight[ok],
                       minlength=table.n_classes * width).reshape(table.n_classes, width)
    rows = []
    for c, name in enumerate(table.classes):
        hits = np.cumsum(hist[c])[: len(grid)]
        denom = max(int(table.input_tokens[c]), 1)
        rows.append(pl.DataFrame({"class": name, "ttl_seconds": grid, "token_hit_rate": hits / denom}))
    return pl.concat(rows)


def capacity_grid(table: RetentionTable, points: int = 40) -> np.ndarray:
    """Log-spaced capacities (tokens) from 16 blocks to the trace's distinct-block footprint."""
    footprint = max(table.distinct_blocks, 32) * table.block_size
    return np.unique(np.geomspace(16 * table.block_size, footprint, points).round())


def capacity_curve(table: RetentionTable, setting: Setting, grid_tokens: np.ndarray) -> pl.DataFrame:
    """Overall token hit rate against SSD capacity (tokens), TTLs and watermark held."""
    blocks = np.floor(np.floor(grid_tokens / table.block_size) * setting.watermark).astype(np.float64)
    ttl = _ttls(table, setting)
    ok = (table.gap_max <= ttl).all(axis=1)
    bucket = np.searchsorted(blocks, table.sd_max[ok].astype(np.float64))  # first capacity >= distance
    hist = np.bincount(bucket, weights=table.weight[ok], minlength=len(blocks) + 1)
    hits = np.cumsum(hist)[: len(blocks)]
    total = max(int(table.input_tokens.sum()), 1)
    return pl.DataFrame({"capacity_tokens": grid_tokens.astype(np.float64), "token_hit_rate": hits / total})


def occupancy(table: RetentionTable, setting: Setting, bins: int = 120) -> pl.DataFrame:
    """Tokens resident on the SSD tier over time under the TTLs, clipped at the usable capacity.

    A touch keeps its block until the next touch or ``TTL`` of the toucher's class, whichever
    is first; counting live intervals on a time grid gives the TTL-only occupancy exactly.
    The watermark-LRU never holds more than the usable capacity, so the curve is clipped there.
    """
    ttl = _ttls(table, setting)
    span = max(table.duration_s, 1e-9)
    edges = np.linspace(table.start_s, table.start_s + span, bins + 1)
    scale = bins / span
    starts = np.bincount(np.minimum(((table.touch_start - table.start_s) * scale).astype(np.int64), bins - 1),
                         minlength=bins)
    stop = table.touch_start + np.minimum(table.touch_len, ttl[table.touch_class])
    leaves = stop[stop < table.start_s + span]  # a block still live when the trace ends never leaves
    ends = np.bincount(np.minimum(((leaves - table.start_s) * scale).astype(np.int64), bins - 1), minlength=bins)
    resident = np.cumsum(starts) - np.cumsum(ends)
    blocks_cap = setting.capacity_blocks(table.block_size)
    tokens = resident.astype(np.float64) * table.block_size
    if math.isfinite(blocks_cap):
        tokens = np.minimum(tokens, blocks_cap * table.block_size)
    return pl.DataFrame({"time_seconds": edges[1:] - table.start_s, "resident_tokens": tokens})


def effective_retention(table: RetentionTable, setting: Setting) -> np.ndarray:
    """Seconds an untouched block survives, per class: its TTL, or sooner under LRU capacity.

    Under capacity ``C`` blocks, the LRU evicts a block once ``C`` newer distinct blocks have been
    touched; the median gap of lookups whose stack distance is just above ``C`` is that age.
    """
    ttl = _ttls(table, setting)
    cap = setting.capacity_blocks(table.block_size)
    if not math.isfinite(cap):
        return ttl
    near = (table.sd_max >= cap) & (table.sd_max <= max(cap * 1.25, cap + 1))
    gaps = table.gap_max[near].max(axis=1) if near.any() else np.empty(0)
    age = float(np.median(gaps)) if gaps.size else math.inf
    return np.minimum(ttl, age)
