"""One watermark, two TTLs: what a single LRU garbage collector does to each traffic class.

DeepSeek's store has no expiry timer, only an LRU collector under a disk watermark per storage
node, yet it quotes 3 days (agent) and 7 days (chatbot). This module replays a trace through a
byte-weighted cache under one high/low watermark with four victim rules and records, for every
evicted chunk, its idle time (now - last touch) and its age (now - first write of that
residency):

* ``lru``: one least-recently-used order across classes (the collector as described).
* ``weighted``: class weight on recency; the victim has the largest ``idle * weight[class]``
  (a weight of 7/3 on agent makes its chunks look 7/3 times as idle as they are).
* ``ttl-priority``: the TTLs as the collector's priority, no timer; the victim has the earliest
  ``last touch + ttl[class]`` (a pure function of the two TTLs).
* ``quotas``: one LRU and one watermark per class over its own quota of bytes.

Every rule keeps one LRU list per class (a chunk sits in the list of the class that touched it
last), so each class's head is its least recent chunk, which is also its victim under every rule;
a rule only chooses between the heads. The collector starts cold at the trace's start.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl
from numba import njit

from tiered_kv.sim.trace_replay import CompiledTrace

MECHANISMS = ("lru", "weighted", "ttl-priority", "quotas")
_MODE = {name: i for i, name in enumerate(MECHANISMS)}


@njit(cache=True)
def _gc_kernel(offsets, blocks, times, req_class, n_unique, n_classes, chunk_bytes, mode, param,
               high, low):  # pragma: no cover - compiled
    """Hit blocks per request and (class, idle, age) of every eviction. ``param`` is the weight
    (weighted), the TTL (ttl-priority) or the quota share (quotas) of each class; ``high`` and
    ``low`` are byte watermarks (per class under quotas, else in element 0)."""
    n = offsets.shape[0] - 1
    m = blocks.shape[0]
    size = n_unique + n_classes
    nxt = np.empty(size, np.int64)
    prv = np.empty(size, np.int64)
    for s in range(n_unique, size):
        nxt[s] = s
        prv[s] = s
    present = np.zeros(n_unique, np.bool_)
    last = np.zeros(n_unique, np.float64)
    born = np.zeros(n_unique, np.float64)
    bclass = np.zeros(n_unique, np.int64)
    used = np.zeros(n_classes, np.float64)
    hit = np.zeros(n, np.int64)
    ev_class = np.empty(m, np.int64)
    ev_idle = np.empty(m, np.float64)
    ev_age = np.empty(m, np.float64)
    n_ev = 0
    for r in range(n):
        now = times[r]
        c = req_class[r]
        lo = offsets[r]
        hi = offsets[r + 1]
        p = 0
        for i in range(lo, hi):
            if present[blocks[i]]:
                p += 1
            else:
                break
        hit[r] = p
        tail = n_unique + c
        for i in range(lo, hi):
            b = blocks[i]
            if present[b]:
                nxt[prv[b]] = nxt[b]
                prv[nxt[b]] = prv[b]
                used[bclass[b]] -= chunk_bytes
            else:
                present[b] = True
                born[b] = now
            used[c] += chunk_bytes
            pv = prv[tail]
            nxt[pv] = b
            prv[b] = pv
            nxt[b] = tail
            prv[tail] = b
            last[b] = now
            bclass[b] = c
            # the collector
            if mode == 3:
                if used[c] > high[c]:
                    while used[c] > low[c] and nxt[n_unique + c] != n_unique + c:
                        v = nxt[n_unique + c]
                        nxt[prv[v]] = nxt[v]
                        prv[nxt[v]] = prv[v]
                        present[v] = False
                        used[c] -= chunk_bytes
                        ev_class[n_ev] = c
                        ev_idle[n_ev] = now - last[v]
                        ev_age[n_ev] = now - born[v]
                        n_ev += 1
                continue
            total = 0.0
            for k in range(n_classes):
                total += used[k]
            if total <= high[0]:
                continue
            while total > low[0]:
                best = -1
                best_score = -np.inf
                for k in range(n_classes):
                    s = n_unique + k
                    if nxt[s] == s:
                        continue
                    h = nxt[s]
                    if mode == 0:
                        score = now - last[h]
                    elif mode == 1:
                        score = (now - last[h]) * param[k]
                    else:
                        score = -(last[h] + param[k])
                    if score > best_score:
                        best_score = score
                        best = h
                if best < 0:
                    break
                nxt[prv[best]] = nxt[best]
                prv[nxt[best]] = prv[best]
                present[best] = False
                k = bclass[best]
                used[k] -= chunk_bytes
                total -= chunk_bytes
                ev_class[n_ev] = k
                ev_idle[n_ev] = now - last[best]
                ev_age[n_ev] = now - born[best]
                n_ev += 1
    return hit, ev_class[:n_ev], ev_idle[:n_ev], ev_age[:n_ev]


@dataclass(frozen=True)
class GCRun:
    """One replay under one collector: per-request hit blocks and every eviction."""

    mechanism: str
    hit_blocks: np.ndarray
    evicted_class: np.ndarray
    idle_s: np.ndarray
    age_s: np.ndarray


def run_gc(trace: CompiledTrace, mechanism: str, capacity_bytes: float, chunk_bytes: float, *,
           param=None, high: float = 0.95, low: float = 0.85) -> GCRun:
    """Replay ``trace`` under one collector (see the module docstring).

    ``param`` per class (trace class order): weights for ``weighted`` (default 1), TTLs in
    seconds for ``ttl-priority`` (required), quota shares of ``capacity_bytes`` for ``quotas``
    (required, summing to at most 1).
    """
    if mechanism not in _MODE:
        raise ValueError(f"mechanism: must be one of {list(MECHANISMS)}, got {mechanism!r}")
    if not (capacity_bytes > 0 and math.isfinite(capacity_bytes)):
        raise ValueError(f"capacity_bytes: must be a finite size > 0, got {capacity_bytes!r}")
    if not (0.0 < low <= high <= 1.0):
        raise ValueError(f"high/low: need 0 < low <= high <= 1, got low={low}, high={high}")
    k = len(trace.class_names)
    if param is None:
        if mechanism in ("ttl-priority", "quotas"):
            raise ValueError(f"param: {mechanism} needs one value per class {list(trace.class_names)}")
        param = np.ones(k)
    param = np.asarray(param, dtype=np.float64)
    if param.shape != (k,) or np.any(~(param >= 0)):
        raise ValueError(f"param: need {k} values >= 0 (one per class {list(trace.class_names)}), got {param}")
    if mechanism == "quotas":
        if param.sum() > 1 + 1e-9:
            raise ValueError(f"param: quota shares must sum to at most 1, got {param.sum():.4f}")
        hi_b, lo_b = high * capacity_bytes * param, low * capacity_bytes * param
    else:
        hi_b, lo_b = np.full(k, high * capacity_bytes), np.full(k, low * capacity_bytes)
    hit, ev_c, idle, age = _gc_kernel(trace.offsets, trace.blocks, trace.timestamps,
                                      trace.class_codes.astype(np.int64), trace.n_unique, k, float(chunk_bytes),
                                      _MODE[mechanism], param, hi_b, lo_b)
    return GCRun(mechanism, np.asarray(hit, dtype=np.int64), ev_c, idle, age)


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
    hit_tokens = trace.hit_tokens_from_blocks(run.hit_blocks)
    rows = []
    for code, name in enumerate(trace.class_names):
        sel = trace.counted & (trace.class_codes == code)
        idle, age = run.idle_s[run.evicted_class == code], run.age_s[run.evicted_class == code]

        def q(a, p):
            return float(np.quantile(a, p)) if a.size else None

        rows.append({"mechanism": run.mechanism, "traffic_class": name,
                     "hit_tokens": int(hit_tokens[sel].sum()), "input_tokens": int(trace.input_length[sel].sum()),
                     "evictions": int(idle.size), "idle_p10_s": q(idle, 0.1), "idle_p50_s": q(idle, 0.5),
                     "idle_p90_s": q(idle, 0.9), "age_p50_s": q(age, 0.5)})
    return rows


def one_watermark_study(trace: CompiledTrace, *, bytes_per_token: float | None = None,
                        ttl_s: dict[str, float] | None = None, high: float = 0.95, low: float = 0.85,
                        agent_weight: float | None = None) -> dict:
    """A single watermark sized to the TTL pair's storage, under each collector, per class.

    The capacity is the average stored bytes of the per-class TTLs ``ttl_s`` (default DeepSeek's
    pair: 3 d agent, 7 d everything else). Returns ``summary`` (per mechanism and class: hit rate,
    evictions, idle/age quantiles), ``evictions`` (one row per eviction), the capacity, the TTL
    pair's own hit rate and the oracle frontier's at the same average bytes.
    ``weighted`` uses ``agent_weight`` on the agent class (default: the TTL ratio, 7/3);
    ``quotas`` gives each class the share of the pair's bytes its own TTL stores.
    """
    from tiered_kv.sim.retention.frontier import oracle_frontier
    from tiered_kv.sim.retention.gaps import StorageModel, reuse_gaps
    from tiered_kv.sim.retention.report import pair_ttls
    from tiered_kv.sim.retention.ttl import TTLModel, evaluate

    names = trace.class_names
    ttl = pair_ttls(names) if ttl_s is None else np.array([float(ttl_s[n]) for n in names])
    cb = StorageModel.for_trace(trace, bytes_per_token).chunk_bytes
    gaps = reuse_gaps(trace)
    model = TTLModel.build(trace, gaps, cb)
    span = gaps.span_s
    cost = np.array([float(model.cost(c, ttl[c])) for c in range(len(names))])
    capacity = float(cost.sum() / span)
    inp = int(trace.input_length[trace.counted].sum())
    pair_hits, _ = evaluate(trace, gaps, cb, ttl)
    frontier_rate = float(oracle_frontier(trace, gaps, cb).at(capacity * span)) / max(inp, 1)
    weights = np.ones(len(names))
    agent = [i for i, n in enumerate(names) if n == "agent"]
    if agent:
        others = [t for i, t in enumerate(ttl) if i not in agent]
        weights[agent] = agent_weight if agent_weight is not None else (max(others) / ttl[agent[0]] if others else 1.0)
    params = {"lru": None, "weighted": weights, "ttl-priority": ttl, "quotas": cost / cost.sum()}
    rows, frames = [], []
    for mech, param in params.items():
        run = run_gc(trace, mech, capacity, cb, param=param, high=high, low=low)
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
