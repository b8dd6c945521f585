"""Hit rate, SSD occupancy and effective retention at any TTL/capacity setting, from one scan.

A slider move must redraw in well under 200 ms on the real conversation trace (about 290k
block lookups), so nothing is replayed when a slider moves. One pass over the trace records,
for every block lookup, the two quantities that decide whether it hits:

* its *gap*: seconds since the block was last touched, and the traffic class of that toucher
  (a block's TTL is set by the class of the request that last touched it);
* its *stack distance*: distinct blocks touched since then, itself included (LRU by blocks).

A request hits its first ``p`` blocks where ``p`` counts leading blocks that are present, so the
scan keeps per-request prefix maxima; a lookup of block ``i`` then hits at a setting exactly
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

import numba
import numpy as np
import polars as pl

#: Sentinel stack distance of a block never seen before (never hits).
NEVER = np.iinfo(np.int64).max


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


@numba.njit(cache=True)
def _scan(times, cls, offsets, blocks, n_unique):  # pragma: no cover - compiled
    n_req = len(offsets) - 1
    n_acc = len(blocks)
    last_pos = np.full(n_unique, -1, np.int64)
    last_time = np.zeros(n_unique, np.float64)
    last_cls = np.zeros(n_unique, np.int8)
    bit = np.zeros(n_acc + 1, np.int64)  # Fenwick tree over access positions: 1 = latest touch
    gap = np.full(n_acc, np.inf)
    gcls = np.zeros(n_acc, np.int8)
    sd = np.full(n_acc, np.iinfo(np.int64).max)
    next_time = np.full(n_acc, np.inf)
    for r in range(n_req):
        s, e = offsets[r], offsets[r + 1]
        # markers before position s
        before_s = 0
        i = s
        while i > 0:
            before_s += bit[i]
            i -= i & (-i)
        for k in range(s, e):  # lookup: state before this request touches anything
            b = blocks[k]
            p = last_pos[b]
            if p >= 0:
                gap[k] = times[r] - last_time[b]
                gcls[k] = last_cls[b]
                before_p = 0
                i = p
                while i > 0:
                    before_p += bit[i]
                    i -= i & (-i)
                sd[k] = before_s - before_p  # markers in [p, s): itself and newer distinct blocks
            else:
                gcls[k] = cls[r]
        for k in range(s, e):  # touch in order
            b = blocks[k]
            p = last_pos[b]
            if p >= 0:
                next_time[p] = times[r]
                i = p + 1
                while i <= n_acc:
                    bit[i] -= 1
                    i += i & (-i)
            i = k + 1
            while i <= n_acc:
                bit[i] += 1
                i += i & (-i)
            last_pos[b] = k
            last_time[b] = times[r]
            last_cls[b] = cls[r]
    return gap, gcls, sd, next_time


def _request_arrays(frame: pl.DataFrame):
    frame = frame.with_row_index("_order").sort(["timestamp_s", "_order"])
    labels = frame["traffic_class"].cast(pl.Utf8).fill_null("default")
    classes = tuple(sorted(set(labels.to_list())))
    cls = labels.replace_strict({c: i for i, c in enumerate(classes)}, return_dtype=pl.Int8).to_numpy()
    times = frame["timestamp_s"].cast(pl.Float64).to_numpy()
    lengths = frame["block_ids"].list.len().to_numpy().astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    flat = frame["block_ids"].explode().cast(pl.Int64, wrap_numerical=True).to_numpy()
    uniq, dense = np.unique(flat, return_inverse=True)
    return classes, times, cls, offsets, dense.astype(np.int64), len(uniq), frame["input_length"].to_numpy()


def build_table(frame: pl.DataFrame) -> RetentionTable:
    """Scan a trace frame (:data:`tiered_kv.sim.traces.SCHEMA`) once; the slow step.

    Reads ``timestamp_s``, ``input_length``, ``block_ids`` (chained), ``block_size`` (one value)
    and ``traffic_class``. About 3 s for the one-hour conversation trace (290k lookups).
    """
    sizes = frame["block_size"].unique().to_list()
    if len(sizes) != 1 or sizes[0] is None or sizes[0] <= 0:
        raise ValueError(f"block_size: the trace must use one positive block size, got {sizes}")
    block_size = int(sizes[0])
    classes, times, cls, offsets, blocks, n_unique, in_len = _request_arrays(frame)
    gap, gcls, sd, next_time = _scan(times, cls, offsets, blocks, n_unique)
    n_cls = len(classes)
    req_of = np.repeat(np.arange(len(times)), np.diff(offsets))
    pos = np.arange(len(blocks)) - offsets[req_of]
    weight = np.clip(in_len[req_of] - pos * block_size, 0, block_size).astype(np.int64)
    # per-request prefix maxima: gap per toucher class, stack distance
    gap_by_cls = np.full((len(blocks), n_cls), -1.0)
    gap_by_cls[np.arange(len(blocks)), gcls] = gap
    gap_max = np.empty_like(gap_by_cls)
    for c in range(n_cls):
        gap_max[:, c] = _segmented_cummax(gap_by_cls[:, c], offsets)
    sd_max = _segmented_cummax(sd.astype(np.float64), offsets)
    reachable = np.isfinite(gap_max).all(axis=1) & (sd_max < float(NEVER))
    end = float(times.max()) if len(times) else 0.0
    touch_len = np.minimum(next_time, end) - times[req_of]
    return RetentionTable(
        classes=classes,
        block_size=block_size,
        duration_s=end - float(times.min() if len(times) else 0.0),
        start_s=float(times.min() if len(times) else 0.0),
        input_tokens=np.bincount(cls, weights=in_len, minlength=n_cls).astype(np.int64),
        requests=np.bincount(cls, minlength=n_cls).astype(np.int64),
        distinct_blocks=int(n_unique),
        reader=cls[req_of][reachable].astype(np.int8),
        weight=weight[reachable],
        gap_max=gap_max[reachable],
        sd_max=sd_max[reachable].astype(np.int64),
        touch_start=times[req_of],
        touch_len=touch_len,
        touch_class=cls[req_of].astype(np.int8),
    )


def _segmented_cummax(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Running max of ``values`` restarting at each ``offsets`` boundary (one per request)."""
    return _segmented_cummax_nb(values.astype(np.float64), offsets)


@numba.njit(cache=True)
def _segmented_cummax_nb(values, offsets):  # pragma: no cover - compiled
    out = np.empty_like(values)
    for r in range(len(offsets) - 1):
        m = -np.inf
        for k in range(offsets[r], offsets[r + 1]):
            if values[k] > m:
                m = values[k]
            out[k] = m
    return out


def hit_tokens(table: RetentionTable, setting: Setting) -> np.ndarray:
    """Hit tokens per reader class at ``setting`` (int64 array, one per class)."""
    if len(setting.ttl_s) != table.n_classes:
        raise ValueError(f"Setting.ttl_s needs {table.n_classes} TTLs, one per class {table.classes}")
    ttl = np.asarray(setting.ttl_s, dtype=np.float64)
    return _hits(table.reader, table.weight, table.gap_max, table.sd_max, ttl,
                 float(setting.capacity_blocks(table.block_size)), table.n_classes)


@numba.njit(cache=True)
def _hits(reader, weight, gap_max, sd_max, ttl, cap, n_cls):  # pragma: no cover - compiled
    out = np.zeros(n_cls, np.int64)
    for i in range(len(reader)):
        if sd_max[i] > cap:
            continue
        ok = True
        for c in range(gap_max.shape[1]):
            if gap_max[i, c] > ttl[c]:
                ok = False
                break
        if ok:
            out[reader[i]] += weight[i]
    return out


def hit_rates(table: RetentionTable, setting: Setting) -> pl.DataFrame:
    """One row per class plus ``total``: requests, input and hit tokens, token hit rate."""
    hits = hit_tokens(table, setting)
    names = list(table.classes) + ["total"]
    hit_col = list(hits) + [int(hits.sum())]
    inp = list(table.input_tokens) + [int(table.input_tokens.sum())]
    req = list(table.requests) + [int(table.requests.sum())]
    ttl = list(setting.ttl_s) + [math.nan]
    return pl.DataFrame(
        {
            "class": names,
            "ttl_seconds": [float(t) for t in ttl],
            "requests": [int(x) for x in req],
            "input_tokens": [int(x) for x in inp],
            "hit_tokens": [int(x) for x in hit_col],
            "token_hit_rate": [h / i if i else 0.0 for h, i in zip(hit_col, inp, strict=True)],
        }
    )


def ttl_grid(table: RetentionTable, points: int = 48) -> np.ndarray:
    """Log-spaced TTLs (seconds) from one second to the trace's duration."""
    hi = max(table.duration_s, 2.0)
    return np.unique(np.concatenate([[0.0], np.geomspace(1.0, hi, points)]))


def ttl_curves(table: RetentionTable, setting: Setting, grid: np.ndarray) -> pl.DataFrame:
    """Hit rate of each class against its own TTL, other settings held at ``setting``.

    Exact one-pass: each lookup hits from the smallest TTL at or above its threshold on, so a
    histogram of thresholds over the grid, cumulated, is the curve (one compiled pass over the
    table for all classes at once).
    """
    if len(setting.ttl_s) != table.n_classes:
        raise ValueError(f"Setting.ttl_s needs {table.n_classes} TTLs, one per class {table.classes}")
    ttl = np.asarray(setting.ttl_s, dtype=np.float64)
    cap = setting.capacity_blocks(table.block_size)
    hist = _ttl_hist(table.reader, table.weight, table.gap_max, table.sd_max, ttl,
                     float(cap), np.asarray(grid, dtype=np.float64))
    rows = []
    for c, name in enumerate(table.classes):
        hits = np.cumsum(hist[c])[: len(grid)]
        denom = max(int(table.input_tokens[c]), 1)
        rows.append(pl.DataFrame({"class": name, "ttl_seconds": grid, "token_hit_rate": hits / denom}))
    return pl.concat(rows)


@numba.njit(cache=True)
def _ttl_hist(reader, weight, gap_max, sd_max, ttl, cap, grid):  # pragma: no cover - compiled
    n_cls = gap_max.shape[1]
    hist = np.zeros((n_cls, len(grid) + 1), np.float64)
    for i in range(len(reader)):
        if sd_max[i] > cap:
            continue
        r = reader[i]
        ok = True
        for c in range(n_cls):
            if c != r and gap_max[i, c] > ttl[c]:
                ok = False
                break
        if ok:
            hist[r, np.searchsorted(grid, gap_max[i, r])] += weight[i]  # first grid TTL >= gap
    return hist


def capacity_grid(table: RetentionTable, points: int = 40) -> np.ndarray:
    """Log-spaced capacities (tokens) from 16 blocks to the trace's distinct-block footprint."""
    footprint = max(table.distinct_blocks, 32) * table.block_size
    return np.unique(np.geomspace(16 * table.block_size, footprint, points).round())


def capacity_curve(table: RetentionTable, setting: Setting, grid_tokens: np.ndarray) -> pl.DataFrame:
    """Overall token hit rate against SSD capacity (tokens), TTLs and watermark held."""
    blocks = np.floor(np.floor(grid_tokens / table.block_size) * setting.watermark)
    ttl = np.asarray(setting.ttl_s, dtype=np.float64)
    hist = _capacity_hist(table.weight, table.gap_max, table.sd_max, ttl, blocks.astype(np.float64))
    hits = np.cumsum(hist)[: len(blocks)]
    total = max(int(table.input_tokens.sum()), 1)
    return pl.DataFrame({"capacity_tokens": grid_tokens.astype(np.float64), "token_hit_rate": hits / total})


@numba.njit(cache=True)
def _capacity_hist(weight, gap_max, sd_max, ttl, blocks):  # pragma: no cover - compiled
    hist = np.zeros(len(blocks) + 1, np.float64)
    for i in range(len(weight)):
        ok = True
        for c in range(gap_max.shape[1]):
            if gap_max[i, c] > ttl[c]:
                ok = False
                break
        if ok:
            hist[np.searchsorted(blocks, float(sd_max[i]))] += weight[i]  # first capacity >= distance
    return hist


def occupancy(table: RetentionTable, setting: Setting, bins: int = 120) -> pl.DataFrame:
    """Tokens resident on the SSD tier over time under the TTLs, clipped at the usable capacity.

    A touch keeps its block until the next touch or ``TTL`` of the toucher's class, whichever
    is first; counting live intervals on a time grid gives the TTL-only occupancy exactly.
    The watermark-LRU never holds more than the usable capacity, so the curve is clipped there.
    """
    ttl = np.asarray(setting.ttl_s, dtype=np.float64)
    span = max(table.duration_s, 1e-9)
    edges = np.linspace(table.start_s, table.start_s + span, bins + 1)
    starts, ends = _occupancy_counts(table.touch_start, table.touch_len, table.touch_class, ttl,
                                     table.start_s, span, bins)
    resident = np.cumsum(starts) - np.cumsum(ends)
    blocks_cap = setting.capacity_blocks(table.block_size)
    tokens = resident.astype(np.float64) * table.block_size
    if math.isfinite(blocks_cap):
        tokens = np.minimum(tokens, blocks_cap * table.block_size)
    return pl.DataFrame({"time_seconds": edges[1:] - table.start_s, "resident_tokens": tokens})


@numba.njit(cache=True)
def _occupancy_counts(start, length, cls, ttl, t0, span, bins):  # pragma: no cover - compiled
    """Touches starting, and touches ending (before the trace ends), per time bin."""
    starts = np.zeros(bins, np.int64)
    ends = np.zeros(bins, np.int64)
    scale = bins / span
    for i in range(len(start)):
        b = int((start[i] - t0) * scale)
        starts[min(b, bins - 1)] += 1
        stop = start[i] + min(length[i], ttl[cls[i]])
        if stop < t0 + span:  # a block still live when the trace ends never leaves
            ends[min(int((stop - t0) * scale), bins - 1)] += 1
    return starts, ends


def effective_retention(table: RetentionTable, setting: Setting) -> np.ndarray:
    """Seconds an untouched block survives, per class: its TTL, or sooner under LRU capacity.

    Under capacity ``C`` blocks, the LRU evicts a block once ``C`` newer distinct blocks have been
    touched; the median gap of lookups whose stack distance is just above ``C`` is that age.
    """
    ttl = np.asarray(setting.ttl_s, dtype=np.float64)
    cap = setting.capacity_blocks(table.block_size)
    if not math.isfinite(cap):
        return ttl
    near = (table.sd_max >= cap) & (table.sd_max <= max(cap * 1.25, cap + 1))
    gaps = table.gap_max[near].max(axis=1) if near.any() else np.empty(0)
    age = float(np.median(gaps)) if gaps.size else math.inf
    return np.minimum(ttl, age)
