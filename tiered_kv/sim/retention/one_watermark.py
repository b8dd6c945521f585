"""One watermark, two TTLs: what a single LRU garbage collector does to each traffic class.

DeepSeek's store has no expiry timer, only an LRU collector under a disk watermark per storage
node, yet it quotes 3 days (agent) and 7 days (chatbot). :func:`one_watermark_study` replays a
trace through one watermark sized to the TTL pair's storage under each of the four collectors
(the registered policies of :mod:`tiered_kv.sim.policies.collectors`: ``lru``, ``weighted``,
``ttl-priority``, ``quotas``) and records, for every evicted chunk, its idle time (now - last
touch) and its age (now - first write of that residency).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from tiered_kv.sim.trace_replay import CompiledTrace, summarize

MECHANISMS = ("lru", "weighted", "ttl-priority", "quotas")


@dataclass(frozen=True)
class GCRun:
    """One replay under one collector: per-request hit blocks and every eviction."""

    mechanism: str
    hit_blocks: np.ndarray
    evicted_class: np.ndarray
    idle_s: np.ndarray
    age_s: np.ndarray


#: The registered collector's parameter that ``param`` of :func:`run_gc` fills, per mechanism.
_PARAM = {"weighted": "weights", "ttl-priority": "ttl_seconds", "quotas": "shares"}


def run_gc(trace: CompiledTrace, mechanism: str, capacity_bytes: float, *, bytes_per_token: float,
           param=None) -> GCRun:
    """Replay ``trace`` under the registered collector ``gc-<mechanism>`` (at its own watermarks),
    every chunk weighing ``bytes_per_token`` x the block size. ``param``, one value per class of the
    trace: weights for ``weighted`` (default 1), TTLs in seconds for ``ttl-priority`` and quota
    shares of ``capacity_bytes`` for ``quotas`` (both required)."""
    from tiered_kv.sim.policies import get_policy

    names = trace.class_names
    if not (capacity_bytes > 0 and np.isfinite(capacity_bytes)):
        raise ValueError(f"capacity_bytes: must be a finite size > 0, got {capacity_bytes!r}")
    if mechanism not in MECHANISMS:
        raise ValueError(f"mechanism: must be one of {list(MECHANISMS)}, got {mechanism!r}")
    if param is None and mechanism in ("ttl-priority", "quotas"):
        raise ValueError(f"param: {mechanism} needs one value per class {list(names)}")
    extra = {}
    if mechanism != "lru":
        values = np.ones(len(names)) if param is None else np.asarray(param, dtype=np.float64)
        if values.shape != (len(names),):
            raise ValueError(f"param: need {len(names)} values (one per class {list(names)}), got {values}")
        extra[_PARAM[mechanism]] = dict(zip(names, values.tolist(), strict=True))
    res = get_policy(f"gc-{mechanism}", capacity_bytes=capacity_bytes, bytes_per_token=bytes_per_token,
                     **extra).collect(trace)
    return GCRun(mechanism, np.asarray(res.hit_blocks, dtype=np.int64), res.evicted_class, res.idle_s, res.age_s)


def eviction_frame(run: GCRun, names: tuple[str, ...]) -> pl.DataFrame:
    """One row per eviction: mechanism, traffic_class, idle_s, age_s (typed even when empty)."""
    n = run.evicted_class.size
    return pl.DataFrame({"mechanism": [run.mechanism] * n,
                         "traffic_class": np.asarray(names, dtype=object)[run.evicted_class].tolist(),
                         "idle_s": run.idle_s, "age_s": run.age_s},
                        schema={"mechanism": pl.Utf8, "traffic_class": pl.Utf8, "idle_s": pl.Float64,
                                "age_s": pl.Float64})


def summarize_run(trace: CompiledTrace, run: GCRun) -> list[dict]:
    """Per class: hit rate, evictions, idle and age quantiles at eviction (None when none)."""
    def q(a, p):
        return float(np.quantile(a, p)) if a.size else None

    rows = []
    for code, (name, c) in enumerate(summarize(trace, trace.hit_tokens_from_blocks(run.hit_blocks))[3].items()):
        idle, age = run.idle_s[run.evicted_class == code], run.age_s[run.evicted_class == code]
        rows.append({"mechanism": run.mechanism, "traffic_class": name, "hit_tokens": c["hit_tokens"],
                     "input_tokens": c["input_tokens"], "evictions": int(idle.size),
                     **{f"idle_p{p}_s": q(idle, p / 100) for p in (10, 50, 90)}, "age_p50_s": q(age, 0.5)})
    return rows


def one_watermark_study(trace: CompiledTrace, *, ttl_s: dict[str, float] | None = None) -> dict:
    """A single watermark sized to the TTL pair's storage, under each collector, per class.

    The capacity is the average stored bytes of the per-class TTLs ``ttl_s`` (default DeepSeek's
    pair: 3 d agent, 7 d everything else). Returns ``summary`` (per mechanism and class: hit rate,
    evictions, idle/age quantiles), ``evictions`` (one row per eviction), the capacity, the TTL
    pair's own hit rate and the oracle frontier's at the same average bytes.
    ``weighted`` weighs the agent class by the longest other TTL over its own (7/3 for the pair);
    ``quotas`` gives each class the share of the pair's bytes its own TTL stores. Chunks are
    DeepSeek-V3 KV in MXFP4.
    """
    from tiered_kv.sim.retention.frontier import oracle_frontier
    from tiered_kv.sim.retention.gaps import StorageModel, reuse_gaps
    from tiered_kv.sim.retention.report import pair_ttls
    from tiered_kv.sim.retention.ttl import TTLModel, evaluate

    names = trace.class_names
    missing = [] if ttl_s is None else sorted(set(names) - set(ttl_s))
    if missing:
        raise ValueError(f"ttl_s: no TTL for the trace's classes {missing} (its classes: {list(names)})")
    ttl = pair_ttls(names) if ttl_s is None else np.array([float(ttl_s[n]) for n in names])
    storage = StorageModel.for_trace(trace)
    cb = storage.chunk_bytes
    gaps = reuse_gaps(trace)
    model = TTLModel.build(trace, gaps, cb)
    span = gaps.span_s
    cost = np.array([float(model.cost(c, ttl[c])) for c in range(len(names))])
    capacity = float(cost.sum() / span)
    inp = int(trace.input_length[trace.counted].sum())
    pair_hits, _ = evaluate(trace, gaps, cb, ttl)
    frontier_rate = float(oracle_frontier(trace, gaps, cb).at(capacity * span)) / max(inp, 1)
    weights = np.ones(len(names))
    if "agent" in names and len(names) > 1:  # class names are unique: one agent class at most
        a = names.index("agent")
        weights[a] = np.delete(ttl, a).max() / ttl[a]
    params = {"lru": None, "weighted": weights, "ttl-priority": ttl, "quotas": cost / cost.sum()}
    rows, frames = [], []
    for mech, param in params.items():
        run = run_gc(trace, mech, capacity, bytes_per_token=storage.bytes_per_token, param=param)
        rows += summarize_run(trace, run)
        frames.append(eviction_frame(run, names))
    summary = pl.DataFrame(rows).with_columns(
        (pl.col("hit_tokens") / pl.col("input_tokens")).alias("token_hit_rate"))
    totals = summary.group_by("mechanism", maintain_order=True).agg(
        (pl.col("hit_tokens").sum() / pl.col("input_tokens").sum()).alias("token_hit_rate"))
    return {"summary": summary, "totals": totals, "evictions": pl.concat(frames), "capacity_bytes": capacity,
            "chunk_bytes": cb, "ttl_s": dict(zip(names, ttl.tolist(), strict=True)), "span_s": span,
            "pair_token_hit_rate": float(pair_hits.sum()) / max(inp, 1), "frontier_token_hit_rate": frontier_rate,
            "weights": dict(zip(names, weights.tolist(), strict=True))}
