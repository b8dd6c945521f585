"""One retention analysis of a trace: per-class TTL curves, the oracle frontier, the best per-class
TTLs for a capacity against the best shared TTL and the 3-day/7-day pair, and the watermark view.

Everything is computed from :mod:`tiered_kv.sim.retention` (one pass over the reuse gaps, then
binary searches), so the CLI, the benchmark and figure 11 read the same numbers. When no
capacity is given, the capacity is the average stored bytes of the 3-day (agent) / 7-day (every
other class) pair: the question then is what the same SSD would buy with better TTLs. On a trace
shorter than 7 days that pair would keep everything, so the default is then the average stored
bytes of one shared TTL of a tenth of the span.

Average stored bytes are byte-seconds over the span (Little's law: a steady-state average, which
charges each chunk its full residency, T after its last access included, even past the trace's
end; for a TTL far above the span that is an extrapolation). Peak stored bytes of the TTL rows
are counted at evenly spaced instants in the same steady state: the trace is one period of a
stationary workload, so what a chunk still holds at the trace's end wraps around to its start
(:func:`tiered_kv.sim.retention.occupancy.ttl_occupancy`). Counting them from a cold cache
instead put the peak below the average whenever the TTL was comparable to the span (a 14-day
TTL on 14 days of traffic never warms up inside the window). The frontier keeps only intervals
that end in a reuse, inside the trace, so its peak needs no wrap.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from tiered_kv.sim.retention import occupancy as O
from tiered_kv.sim.retention.frontier import oracle_frontier
from tiered_kv.sim.retention.gaps import DAY_S, StorageModel, cross_class_tokens, reuse_gaps
from tiered_kv.sim.retention.ttl import TTLModel, best_shared_ttl, evaluate, optimal_ttls, ttl_choice
from tiered_kv.sim.trace_replay import CompiledTrace

#: DeepSeek's published retention: agent traffic 3 days, chatbot (and anything else) 7 days.
PAIR_DAYS = {"agent": 3.0}
PAIR_DEFAULT_DAYS = 7.0


@dataclass(frozen=True)
class RetentionConfig:
    """Knobs of one analysis (validated; defaults fit both a 1-hour trace and a 14-day run)."""

    ttl_points: int = 64  # log-spaced TTLs per class curve, plus 3 d and 7 d
    frontier_points: int = 64  # frontier breakpoints reported per class
    samples: int = 512  # instants at which occupancy is counted for the peak
    min_ttl_s: float = 1.0
    watermark_high: float = 0.95
    watermark_low: float = 0.85

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
    return np.array([PAIR_DAYS.get(c, PAIR_DEFAULT_DAYS) * DAY_S for c in class_names])


def ttl_grid(span_s: float, points: int, min_ttl_s: float = 1.0) -> np.ndarray:
    """Log-spaced TTLs from ``min_ttl_s`` to the span, plus 3 d and 7 d when they fit."""
    hi = max(span_s, min_ttl_s * 10)
    marks = [d * DAY_S for d in (3.0, 7.0) if d * DAY_S <= hi]
    return np.unique(np.concatenate([[0.0], np.geomspace(min_ttl_s, hi, points), marks]))


def analyze(trace: CompiledTrace, *, capacity_bytes: float | None = None, bytes_per_token: float | None = None,
            config: RetentionConfig | None = None) -> RetentionAnalysis:
    """Curves, frontier, optimal per-class TTLs, shared TTL, 3/7-day pair and watermark view."""
    cfg = config or RetentionConfig()
    if capacity_bytes is not None and not (capacity_bytes > 0 and math.isfinite(capacity_bytes)):
        raise ValueError(f"capacity: must be a size > 0 bytes, got {capacity_bytes!r}")
    timing: dict[str, float] = {}
    t0 = time.perf_counter()
    store = StorageModel.for_trace(trace, bytes_per_token)
    cb = store.chunk_bytes
    gaps = reuse_gaps(trace)
    model = TTLModel.build(trace, gaps, cb)
    timing["gaps_s"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    front = oracle_frontier(trace, gaps, cb)
    timing["frontier_s"] = time.perf_counter() - t1
    names, span, inp = trace.class_names, gaps.span_s, model.input_tokens

    t1 = time.perf_counter()
    pair = pair_ttls(names)
    if capacity_bytes is not None:
        cap, cap_from = float(capacity_bytes), "given"
    elif span >= PAIR_DEFAULT_DAYS * DAY_S:
        cap, cap_from = float(np.sum([model.cost(c, pair[c]) for c in range(len(names))])) / span, "3d/7d pair average"
    else:  # a short trace: the pair would keep everything; ask about a tenth of the span instead
        cap = float(np.sum([model.cost(c, span / 10) for c in range(len(names))])) / span
        cap_from = "shared TTL of span/10"
    choices = {"optimal": optimal_ttls(model, cap), "shared": best_shared_ttl(model, cap),
               "3d/7d": ttl_choice(model, pair)}
    pair_bytes = choices["3d/7d"].avg_bytes
    # the pair at its own storage: what the best per-class TTLs and the oracle do with the same bytes
    opt_at_pair = optimal_ttls(model, pair_bytes)
    opt_at_pair_exact = float(evaluate(trace, gaps, cb, opt_at_pair.ttl_s)[0].sum())
    timing["optimize_s"] = time.perf_counter() - t1

    t1 = time.perf_counter()
    grid = ttl_grid(span, cfg.ttl_points, cfg.min_ttl_s)
    extra = np.concatenate([np.asarray(ch.ttl_s) for ch in choices.values()])
    occ_ttls = np.unique(np.concatenate([grid, extra]))
    samples = O.sample_instants(trace, cfg.samples)
    occ = O.ttl_occupancy(trace, occ_ttls, samples, cb, steady_state=True)  # [class, sample, ttl]
    timing["occupancy_s"] = time.perf_counter() - t1

    rows = []
    for c, name in enumerate(names):
        h, cost = model.hits(c, grid), model.cost(c, grid)
        peak = occ[c][:, np.searchsorted(occ_ttls, grid)].max(axis=0)
        rows.append(pl.DataFrame({"class": name, "ttl_s": grid, "hit_tokens": h.astype(np.float64),
                                  "token_hit_rate": h / max(int(inp[c]), 1), "byte_days": cost / DAY_S,
                                  "avg_bytes": cost / span, "peak_bytes": peak}))
    curves = pl.concat(rows)

    t1 = time.perf_counter()
    frows = []
    for c, name in [(c, n) for c, n in enumerate(names)] + [(None, "all")]:
        fcost = front.cost if c is None else front.class_cost[c]
        fhits = front.hits if c is None else front.class_hits[c]
        pts = _frontier_points(fcost, cfg.frontier_points)
        peak = O.frontier_occupancy(trace, gaps, front, pts, samples, cb, c).max(axis=0)
        denom = max(int(inp.sum() if c is None else inp[c]), 1)
        frows.append(pl.DataFrame({"class": name, "groups": pts, "byte_days": fcost[pts] / DAY_S,
                                   "avg_bytes": fcost[pts] / span, "peak_bytes": peak,
                                   "hit_tokens": fhits[pts], "token_hit_rate": fhits[pts] / denom}))
    frontier = pl.concat(frows)
    timing["frontier_peak_s"] = time.perf_counter() - t1

    prow = []
    total_inp = max(int(inp.sum()), 1)
    for label, ch in choices.items():
        exact_h, exact_c = evaluate(trace, gaps, cb, ch.ttl_s)
        idx = np.searchsorted(occ_ttls, ch.ttl_s)
        peak = float(sum(occ[c][:, idx[c]] for c in range(len(names))).max())
        for c, name in enumerate(names):
            prow.append({"policy": label, "class": name, "ttl_s": ch.ttl_s[c], "hit_tokens": float(exact_h[c]),
                         "token_hit_rate": float(exact_h[c]) / max(int(inp[c]), 1),
                         "byte_days": float(exact_c[c]) / DAY_S, "avg_bytes": float(exact_c[c]) / span,
                         "peak_bytes": float(occ[c][:, idx[c]].max()),
                         "marginal_hits_per_byte_day": ch.marginal_hits_per_byte_day[c]})
        prow.append({"policy": label, "class": "total", "ttl_s": math.nan, "hit_tokens": float(exact_h.sum()),
                     "token_hit_rate": float(exact_h.sum()) / total_inp, "byte_days": float(exact_c.sum()) / DAY_S,
                     "avg_bytes": float(exact_c.sum()) / span, "peak_bytes": peak,
                     "marginal_hits_per_byte_day": math.nan})
    policies = pl.DataFrame(prow)

    t1 = time.perf_counter()
    wm = O.watermark_view(trace, cap, cb, cfg.watermark_high, cfg.watermark_low)
    timing["watermark_s"] = time.perf_counter() - t1
    timing["total_s"] = time.perf_counter() - t0

    def rate(label: str) -> float:
        return float(policies.filter((pl.col("policy") == label) & (pl.col("class") == "total"))["token_hit_rate"][0])

    frontier_rate = float(front.at(cap * span)) / total_inp
    wm_hits = sum(v["hit_tokens"] for v in wm["by_class"].values())
    summary = {
        "requests": int(trace.counted.sum()), "block_accesses": trace.n_accesses,
        "classes": list(names), "span_s": span, "block_size": trace.uniform_block_size,
        "bytes_per_token": store.bytes_per_token, "chunk_bytes": cb,
        "input_tokens": {n: int(inp[c]) for c, n in enumerate(names)},
        "capacity_bytes": cap, "capacity_from": cap_from,
        "optimal_ttl_s": dict(zip(names, choices["optimal"].ttl_s, strict=True)),
        "optimal_token_hit_rate": rate("optimal"), "shared_ttl_s": choices["shared"].ttl_s[0],
        "shared_token_hit_rate": rate("shared"), "pair_ttl_s": dict(zip(names, pair.tolist(), strict=True)),
        "pair_token_hit_rate": rate("3d/7d"), "frontier_token_hit_rate": frontier_rate,
        "shared_loss_points": 100 * (rate("optimal") - rate("shared")),
        "pair_avg_bytes": pair_bytes,
        "optimal_at_pair_storage_ttl_s": dict(zip(names, opt_at_pair.ttl_s, strict=True)),
        "optimal_at_pair_storage_token_hit_rate": opt_at_pair_exact / total_inp,
        "frontier_at_pair_storage_token_hit_rate": float(front.at(pair_bytes * span)) / total_inp,
        "pair_loss_points": 100 * (opt_at_pair_exact / total_inp - rate("3d/7d")),
        "oracle_gap_points": 100 * (frontier_rate - rate("optimal")),
        "infinite_token_hit_rate": float(sum(model.key_cum[c][-1] for c in range(len(names)))) / total_inp,
        "cross_class_tokens": cross_class_tokens(trace, gaps),
        "watermark": {**wm, "token_hit_rate": wm_hits / total_inp},
        "timing_s": timing,
    }
    return RetentionAnalysis(curves=curves, frontier=frontier, policies=policies, summary=summary, model=model)


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
