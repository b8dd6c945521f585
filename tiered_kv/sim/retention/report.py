"""One retention analysis of a trace: per-class TTL curves, the oracle frontier, the best per-class
TTLs for a capacity against the best shared TTL and the 3-day/7-day pair, and the watermark view.

Everything is computed from :mod:`tiered_kv.sim.retention` (one pass over the reuse gaps, then
binary searches), so the CLI, the benchmark and figure 11 read the same numbers. When no
capacity is given, the capacity is the average stored bytes of the 3-day (agent) / 7-day (every
other class) pair: the question then is what the same SSD would buy with better TTLs. On a trace
shorter than 7 days that pair would keep everything, so the default is then the average stored
bytes of one shared TTL of a tenth of the span.

Average stored bytes are byte-seconds over the span (Little's law, :mod:`.gaps`; for a TTL far
above the span an extrapolation); peak stored bytes of the TTL rows are counted in the same
steady state (:func:`.occupancy.ttl_occupancy`). The frontier keeps only intervals that end in a
reuse, inside the trace, so its peak needs no wrap.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from tiered_kv.sim.retention import occupancy as O
from tiered_kv.sim.retention.frontier import Frontier, oracle_frontier
from tiered_kv.sim.retention.gaps import Gaps, StorageModel, cross_class_tokens, reuse_gaps
from tiered_kv.sim.retention.ttl import TTLModel, best_shared_ttl, evaluate, optimal_ttls, ttl_choice
from tiered_kv.sim.trace_replay import CompiledTrace
from tiered_kv.units import DAY_S, DEEPSEEK_DEFAULT_TTL_DAYS, DEEPSEEK_TTL_DAYS


@dataclass(frozen=True)
class RetentionConfig:
    """Knobs of one analysis (validated; defaults fit both a 1-hour trace and a 14-day run)."""

    ttl_points: int = 64  # log-spaced TTLs per class curve, plus 3 d and 7 d
    frontier_points: int = 64  # frontier breakpoints reported per class
    samples: int = 512  # instants at which occupancy is counted for the peak
    min_ttl_s: float = 1.0
    watermark_high: float = O.FullChunkWatermark.high  # the collector's own watermarks
    watermark_low: float = O.FullChunkWatermark.low

    def __post_init__(self) -> None:
        for name in ("ttl_points", "frontier_points", "samples"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 2 <= v <= 100_000:
                raise ValueError(f"{name}: must be an integer in [2, 100000], got {v!r}")
        if not (self.min_ttl_s > 0 and math.isfinite(self.min_ttl_s)):
            raise ValueError(f"min_ttl_s: must be a finite number of seconds > 0, got {self.min_ttl_s!r}")
        if not (0.0 < self.watermark_low <= self.watermark_high <= 1.0):
            raise ValueError("watermark_high/low: need 0 < low <= high <= 1, got "
                             f"low={self.watermark_low}, high={self.watermark_high}")


@dataclass
class RetentionAnalysis:
    """The result: frames for plotting and a dict for ``--json``."""

    curves: pl.DataFrame  # class, ttl_s, hit_tokens, token_hit_rate, byte_days, avg_bytes, peak_bytes
    frontier: pl.DataFrame  # class (or "all"), byte_days, avg_bytes, peak_bytes, hit_tokens, token_hit_rate
    policies: pl.DataFrame  # named TTL vectors at the capacity, per class and total
    summary: dict[str, Any] = field(default_factory=dict)
    model: Any = None  # the per-class TTLModel the curves came from (for further queries)

    def to_dict(self) -> dict[str, Any]:
        return {**self.summary,
                "curves": _records(self.curves), "frontier": _records(self.frontier),
                "policies": _records(self.policies)}


def _records(df: pl.DataFrame) -> list[dict]:
    return [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
            for row in df.iter_rows(named=True)]


def pair_ttls(class_names: tuple[str, ...]) -> np.ndarray:
    """DeepSeek's pair: 3 days for ``agent``, 7 days for every other class (seconds)."""
    return np.array([DEEPSEEK_TTL_DAYS.get(c, DEEPSEEK_DEFAULT_TTL_DAYS) * DAY_S for c in class_names])


def ttl_grid(span_s: float, points: int, min_ttl_s: float = 1.0) -> np.ndarray:
    """Log-spaced TTLs from ``min_ttl_s`` to the span, plus 3 d and 7 d when they fit."""
    hi = max(span_s, min_ttl_s * 10)
    marks = [d * DAY_S for d in DEEPSEEK_TTL_DAYS.values() if d * DAY_S <= hi]
    return np.unique(np.concatenate([[0.0], np.geomspace(min_ttl_s, hi, points), marks]))


@dataclass(frozen=True)
class _Pass:
    """What every step after the one pass over the trace reads: its gaps, TTL model and frontier."""

    trace: CompiledTrace
    store: StorageModel
    gaps: Gaps
    model: TTLModel
    front: Frontier

    @property
    def span(self) -> float:
        return self.gaps.span_s

    @property
    def pair(self) -> np.ndarray:
        return pair_ttls(self.trace.class_names)


def analyze(trace: CompiledTrace, *, capacity_bytes: float | None = None, bytes_per_token: float | None = None,
            config: RetentionConfig | None = None) -> RetentionAnalysis:
    """Curves, frontier, optimal per-class TTLs, shared TTL, 3/7-day pair and watermark view."""
    cfg = config or RetentionConfig()
    if capacity_bytes is not None and not (capacity_bytes > 0 and math.isfinite(capacity_bytes)):
        raise ValueError(f"capacity: must be a size > 0 bytes, got {capacity_bytes!r}")
    timing: dict[str, float] = {}
    t0 = t1 = time.perf_counter()
    store = StorageModel.for_trace(trace, bytes_per_token)
    gaps = reuse_gaps(trace)
    model = TTLModel.build(trace, gaps, store.chunk_bytes)
    timing["gaps_s"] = time.perf_counter() - t1
    t1 = time.perf_counter()
    p = _Pass(trace, store, gaps, model, oracle_frontier(trace, gaps, store.chunk_bytes))
    timing["frontier_s"] = time.perf_counter() - t1
    t1 = time.perf_counter()
    cap, cap_from = _capacity(p, capacity_bytes)
    choices = {"optimal": optimal_ttls(model, cap), "shared": best_shared_ttl(model, cap),
               "3d/7d": ttl_choice(model, p.pair)}
    # the pair at its own storage: what the best per-class TTLs and the oracle do with the same bytes
    at_pair = optimal_ttls(model, choices["3d/7d"].avg_bytes)
    at_pair_hits = float(evaluate(trace, gaps, store.chunk_bytes, at_pair.ttl_s)[0].sum())
    timing["optimize_s"] = time.perf_counter() - t1
    t1 = time.perf_counter()
    grid = ttl_grid(p.span, cfg.ttl_points, cfg.min_ttl_s)
    extra = np.concatenate([np.asarray(ch.ttl_s) for ch in choices.values()])
    occ_ttls = np.unique(np.concatenate([grid, extra]))
    samples = O.sample_instants(trace, cfg.samples)
    occ = O.ttl_occupancy(trace, occ_ttls, samples, store.chunk_bytes, steady_state=True)  # [class, sample, ttl]
    timing["occupancy_s"] = time.perf_counter() - t1
    curves = _curves(p, grid, [o[:, np.searchsorted(occ_ttls, grid)].max(axis=0) for o in occ])
    t1 = time.perf_counter()
    frontier = _frontier_table(p, samples, cfg.frontier_points)
    timing["frontier_peak_s"] = time.perf_counter() - t1
    policies = _policy_table(p, choices, occ, occ_ttls)
    t1 = time.perf_counter()
    wm = O.watermark_view(trace, cap, store.bytes_per_token, cfg.watermark_high, cfg.watermark_low)
    timing["watermark_s"] = time.perf_counter() - t1
    timing["total_s"] = time.perf_counter() - t0
    summary = _summary(p, (cap, cap_from), choices, (at_pair, at_pair_hits), policies, wm)
    return RetentionAnalysis(curves=curves, frontier=frontier, policies=policies,
                             summary={**summary, "timing_s": timing}, model=model)


def _capacity(p: _Pass, given: float | None) -> tuple[float, str]:
    """The capacity the TTL choices must fit, and where it came from (see the module docstring)."""
    if given is not None:
        return float(given), "given"
    classes = range(len(p.trace.class_names))
    if p.span >= max(DEEPSEEK_TTL_DAYS.values()) * DAY_S:
        return float(np.sum([p.model.cost(c, p.pair[c]) for c in classes])) / p.span, "3d/7d pair average"
    return float(np.sum([p.model.cost(c, p.span / 10) for c in classes])) / p.span, "shared TTL of span/10"


def _usage(hits: Any, cost: Any, input_tokens: int, span: float, peak: Any) -> dict[str, Any]:
    """The columns every curve and policy row shares, in their order."""
    return {"hit_tokens": hits, "token_hit_rate": hits / max(input_tokens, 1), "byte_days": cost / DAY_S,
            "avg_bytes": cost / span, "peak_bytes": peak}


def _curves(p: _Pass, grid: np.ndarray, peaks: list[np.ndarray]) -> pl.DataFrame:
    """One TTL curve per class: hits, stored byte-days and average and peak bytes at each grid TTL."""
    inp = p.model.input_tokens
    return pl.concat([pl.DataFrame({"class": name, "ttl_s": grid,
                                    **_usage(p.model.hits(c, grid).astype(np.float64), p.model.cost(c, grid),
                                             int(inp[c]), p.span, peaks[c])})
                      for c, name in enumerate(p.trace.class_names)])


def _frontier_table(p: _Pass, samples: np.ndarray, points: int) -> pl.DataFrame:
    """The oracle frontier per class and for all classes together, at ``points`` breakpoints each."""
    inp, front, cb = p.model.input_tokens, p.front, p.store.chunk_bytes
    frows = []
    for c, name in [*enumerate(p.trace.class_names), (None, "all")]:
        fcost = front.cost if c is None else front.class_cost[c]
        fhits = front.hits if c is None else front.class_hits[c]
        pts = _frontier_points(fcost, points)
        peak = O.frontier_occupancy(p.trace, p.gaps, front, pts, samples, cb, c).max(axis=0)
        denom = max(int(inp.sum() if c is None else inp[c]), 1)
        frows.append(pl.DataFrame({"class": name, "groups": pts, "byte_days": fcost[pts] / DAY_S,
                                   "avg_bytes": fcost[pts] / p.span, "peak_bytes": peak,
                                   "hit_tokens": fhits[pts], "token_hit_rate": fhits[pts] / denom}))
    return pl.concat(frows)


def _policy_table(p: _Pass, choices: dict[str, Any], occ: Any, occ_ttls: np.ndarray) -> pl.DataFrame:
    """Each named TTL vector evaluated exactly, per class and in total, with its peak stored bytes."""
    inp, names = p.model.input_tokens, p.trace.class_names
    prow = []
    for label, ch in choices.items():
        exact_h, exact_c = evaluate(p.trace, p.gaps, p.store.chunk_bytes, ch.ttl_s)
        idx = np.searchsorted(occ_ttls, ch.ttl_s)
        peak = float(sum(occ[c][:, idx[c]] for c in range(len(names))).max())
        for c, name in enumerate(names):
            prow.append({"policy": label, "class": name, "ttl_s": ch.ttl_s[c],
                         **_usage(float(exact_h[c]), float(exact_c[c]), int(inp[c]), p.span,
                                  float(occ[c][:, idx[c]].max())),
                         "marginal_hits_per_byte_day": ch.marginal_hits_per_byte_day[c]})
        prow.append({"policy": label, "class": "total", "ttl_s": math.nan,
                     **_usage(float(exact_h.sum()), float(exact_c.sum()), int(inp.sum()), p.span, peak),
                     "marginal_hits_per_byte_day": math.nan})
    return pl.DataFrame(prow)


def _summary(p: _Pass, capacity: tuple[float, str], choices: dict[str, Any], at_pair: tuple[Any, float],
             policies: pl.DataFrame, wm: dict[str, Any]) -> dict[str, Any]:
    """The headline numbers: each policy's total hit rate and the points it loses to the next best."""
    names, inp, (cap, cap_from), (opt_at_pair, opt_at_pair_hits) = (
        p.trace.class_names, p.model.input_tokens, capacity, at_pair)
    total_inp = max(int(inp.sum()), 1)
    totals = policies.filter(pl.col("class") == "total")
    rate = dict(zip(totals["policy"], totals["token_hit_rate"], strict=True))
    pair_bytes = choices["3d/7d"].avg_bytes
    frontier_rate = float(p.front.at(cap * p.span)) / total_inp
    wm_hits = sum(v["hit_tokens"] for v in wm["by_class"].values())
    return {
        "requests": int(p.trace.counted.sum()), "block_accesses": p.trace.n_accesses,
        "classes": list(names), "span_s": p.span, "block_size": p.trace.uniform_block_size,
        "bytes_per_token": p.store.bytes_per_token, "chunk_bytes": p.store.chunk_bytes,
        "input_tokens": {n: int(inp[c]) for c, n in enumerate(names)},
        "capacity_bytes": cap, "capacity_from": cap_from,
        "optimal_ttl_s": dict(zip(names, choices["optimal"].ttl_s, strict=True)),
        "optimal_token_hit_rate": rate["optimal"], "shared_ttl_s": choices["shared"].ttl_s[0],
        "shared_token_hit_rate": rate["shared"],
        "pair_ttl_s": dict(zip(names, p.pair.tolist(), strict=True)),
        "pair_token_hit_rate": rate["3d/7d"], "frontier_token_hit_rate": frontier_rate,
        "shared_loss_points": 100 * (rate["optimal"] - rate["shared"]),
        "pair_avg_bytes": pair_bytes,
        "optimal_at_pair_storage_ttl_s": dict(zip(names, opt_at_pair.ttl_s, strict=True)),
        "optimal_at_pair_storage_token_hit_rate": opt_at_pair_hits / total_inp,
        "frontier_at_pair_storage_token_hit_rate": float(p.front.at(pair_bytes * p.span)) / total_inp,
        "pair_loss_points": 100 * (opt_at_pair_hits / total_inp - rate["3d/7d"]),
        "oracle_gap_points": 100 * (frontier_rate - rate["optimal"]),
        "infinite_token_hit_rate": float(sum(p.model.key_cum[c][-1] for c in range(len(names)))) / total_inp,
        "cross_class_tokens": cross_class_tokens(p.trace, p.gaps),
        "watermark": {**wm, "token_hit_rate": wm_hits / total_inp},
    }


def _frontier_points(cost: np.ndarray, k: int) -> np.ndarray:
    """Breakpoint indices spread evenly in log cost (exact frontier points, not interpolations)."""
    n = len(cost) - 1
    if n <= 0:
        return np.array([0], dtype=np.int64)
    pos = cost[1:][cost[1:] > 0]
    lo = pos[0] if len(pos) else 1.0
    targets = np.geomspace(lo, max(cost[-1], lo), k)
    idx = np.searchsorted(cost, targets, side="right") - 1
    return np.unique(np.concatenate([[0], np.clip(idx, 0, n), [n]])).astype(np.int64)
