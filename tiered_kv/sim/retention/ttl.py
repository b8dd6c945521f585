"""Per-class TTL curves for every TTL at once, and the best per-class TTLs for an SSD capacity.

The TTL of a chunk is that of the class whose request touched it last (as in
:mod:`tiered_kv.sim.policies`); its cost goes to that class and its hits to the class of the
reading request. Hits follow docs/semantics.md: a lookup hits its leading present blocks, so block ``k``
of a request hits under TTL ``T`` iff the reuse times of blocks ``0..k`` are all ``<= T``:
:func:`tiered_kv.sim.curves.ttl_keys` gives that prefix maximum for every access, and a sorted
array answers every ``T``. When two classes share blocks a lookup can depend on another
class's TTL; the per-class curves then treat the reader's TTL as governing its prefix
(``cross_class_tokens`` reports how many hit tokens that concerns), while :func:`evaluate`
is always exact for any per-class TTL vector.

Optimal per-class TTLs
----------------------
Maximise ``sum_c hits_c(T_c)`` subject to ``sum_c cost_c(T_c) <= capacity * span``. ``hits_c``
is a step function that only rises at the prefix-max keys of class ``c`` and ``cost_c`` is
continuous and increasing, so some optimum has every ``T_c`` but the last at one of its keys and
the last as large as the budget allows (:func:`optimal_ttls`). At an interior optimum the
marginal hits per byte-day of the classes are equal; both marginals are reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from tiered_kv.sim.policies.blockwise import leading_runs
from tiered_kv.sim.retention.gaps import Gaps
from tiered_kv.sim.trace_replay import CompiledTrace
from tiered_kv.units import DAY_S


@dataclass(frozen=True, eq=False)
class TTLModel:
    """Per class: sorted hit keys (reader) and sorted gaps (toucher), with cumulative sums.

    ``hits(c, T)`` and ``cost(c, T)`` then answer any array of TTLs by binary search.
    """

    class_names: tuple[str, ...]
    chunk_bytes: float
    span_s: float
    input_tokens: np.ndarray  # per class
    keys: tuple[np.ndarray, ...]  # sorted finite prefix-max keys of reads by class c
    key_cum: tuple[np.ndarray, ...]  # [0, cumulative weights]
    gaps: tuple[np.ndarray, ...]  # sorted gap_out of intervals opened by class c (inf last)
    gap_cum: tuple[np.ndarray, ...]  # [0, cumulative finite gaps]

    @classmethod
    def build(cls, trace: CompiledTrace, gaps: Gaps, chunk_bytes: float) -> TTLModel:
        keys, key_cum, gs, gap_cum, inp = [], [], [], [], []
        for c in range(len(trace.class_names)):
            sel = (gaps.access_class == c) & np.isfinite(gaps.key) & (gaps.weight > 0)
            k_sel = gaps.key[sel]
            order = np.argsort(k_sel)
            keys.append(k_sel[order])
            key_cum.append(np.concatenate([[0], np.cumsum(gaps.weight[sel][order])]))
            g = np.sort(gaps.gap_out[gaps.access_class == c])
            gs.append(g)
            gap_cum.append(np.concatenate([[0.0], np.cumsum(np.where(np.isfinite(g), g, 0.0))]))
            req = trace.counted & (trace.class_codes == c)
            inp.append(int(trace.input_length[req].sum()))
        return cls(trace.class_names, float(chunk_bytes), gaps.span_s, np.array(inp, dtype=np.int64),
                   tuple(keys), tuple(key_cum), tuple(gs), tuple(gap_cum))

    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    def hits(self, c: int, ttl) -> np.ndarray:
        """Hit tokens of class ``c``'s reads at TTL(s) ``ttl`` (seconds)."""
        idx = np.searchsorted(self.keys[c], np.asarray(ttl, dtype=np.float64), side="right")
        return self.key_cum[c][idx]

    def cost(self, c: int, ttl) -> np.ndarray:
        """Byte-seconds stored for class ``c`` at TTL(s) ``ttl``: bytes x sum min(gap, T)."""
        t = np.asarray(ttl, dtype=np.float64)
        g = self.gaps[c]
        k = np.searchsorted(g, t, side="right")  # gaps <= T are kept whole
        longer = len(g) - k
        with np.errstate(invalid="ignore"):
            tail = np.where(longer > 0, t * longer, 0.0)
        return self.chunk_bytes * (self.gap_cum[c][k] + tail)

    def max_ttl(self, c: int, budget_byte_s):
        """The largest TTL(s) of class ``c`` whose cost fits ``budget_byte_s`` (inverse of :meth:`cost`;
        -1 for a negative budget, ``inf`` when even keeping everything forever fits).

        ``sum min(g, T)`` is piecewise linear in ``T``, so it is inverted exactly. The budget gets
        a 1e-12 relative allowance so that a TTL whose cost equals it up to float rounding counts
        as fitting (otherwise a key exactly at the budget could be missed).
        """
        g, gap_cum = self.gaps[c], self.gap_cum[c]
        units = np.asarray(budget_byte_s, np.float64) / self.chunk_bytes * (1 + 1e-12)
        n = len(g)
        if n == 0:
            return np.where(units < 0, -1.0, np.inf)
        k = np.arange(1, n + 1)
        fin = np.isfinite(g)
        at = np.where(fin, gap_cum[k] + np.where(fin, g, 0.0) * (n - k), np.inf)  # cost at T = g[k-1]
        j = np.searchsorted(at, units, side="right")  # T lies in [g[j-1], g[j])
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(j < n, (units - gap_cum[np.minimum(j, n)]) / np.maximum(n - j, 1), np.inf)
        return np.where(units < 0, -1.0, t)

    def evaluate_separable(self, ttl_by_class) -> tuple[np.ndarray, np.ndarray]:
        """(hit tokens, byte-seconds) per class under per-class TTLs, from the curves."""
        t = np.asarray(ttl_by_class, dtype=np.float64)
        return (np.array([float(self.hits(c, t[c])) for c in range(self.n_classes)]),
                np.array([float(self.cost(c, t[c])) for c in range(self.n_classes)]))


def evaluate(trace: CompiledTrace, gaps: Gaps, chunk_bytes: float, ttl_by_class) -> tuple[np.ndarray, np.ndarray]:
    """Exact (hit tokens per reader class, byte-seconds per toucher class) for per-class TTLs.

    A read of block ``j`` finds it iff ``gap_in[j] <= T[toucher]``; a request hits its leading
    found blocks. Exact whether or not classes share blocks.
    """
    t = np.asarray(ttl_by_class, dtype=np.float64)
    n_cls = len(trace.class_names)
    found = (gaps.toucher_class >= 0) & (gaps.gap_in <= t[np.maximum(gaps.toucher_class, 0)])
    hit = trace.depth < leading_runs(trace.offsets, found)[trace.access_request]  # its leading found blocks
    hits = np.bincount(gaps.access_class[hit], weights=gaps.weight[hit], minlength=n_cls)
    kept = np.minimum(gaps.gap_out, t[gaps.access_class])
    cost = chunk_bytes * np.bincount(gaps.access_class, weights=kept, minlength=n_cls)
    return np.rint(hits), cost


@dataclass(frozen=True)
class TTLChoice:
    """A per-class TTL vector with its hit tokens and average stored bytes."""

    ttl_s: tuple[float, ...]
    hit_tokens: float
    byte_seconds: float
    avg_bytes: float
    marginal_hits_per_byte_day: tuple[float, ...] = field(default=())


def _marginals(model: TTLModel, ttl: np.ndarray) -> tuple[float, ...]:
    """Hit tokens per byte-day around each class's TTL (secant from T/1.5 to 1.5 T: hits are steps)."""
    out = []
    for c in range(model.n_classes):
        if not math.isfinite(float(ttl[c])):
            out.append(0.0)
            continue
        t0, t1 = float(ttl[c]) / 1.5, max(float(ttl[c]) * 1.5, float(ttl[c]) + 1.0)
        dc = float(model.cost(c, t1) - model.cost(c, t0))
        dh = float(model.hits(c, t1) - model.hits(c, t0))
        out.append(dh / (dc / DAY_S) if dc > 0 else 0.0)
    return tuple(out)


def _trim(model: TTLModel, ttl: np.ndarray, shared: bool = False) -> np.ndarray:
    """The smallest TTLs with the same hits: each down to its class's largest key at or below it.

    Hits only change at keys, so a TTL between two keys pays for nothing; with a budget larger
    than the traffic needs this turns "anything up to 10^5 days" into the longest reuse gap.
    ``shared``: one TTL for all classes, trimmed to the largest such key over the classes.
    """
    out = np.asarray(ttl, dtype=np.float64).copy()
    for c in range(model.n_classes):
        k = model.keys[c]
        i = int(np.searchsorted(k, out[c], side="right"))
        out[c] = float(k[i - 1]) if i > 0 else 0.0
    if shared:
        out[:] = out.max() if len(out) else 0.0
    return out


def ttl_choice(model: TTLModel, ttl: np.ndarray) -> TTLChoice:
    """A per-class TTL vector as a :class:`TTLChoice`: hits, storage and marginals from the curves."""
    h, c = model.evaluate_separable(ttl)
    return TTLChoice(tuple(float(x) for x in ttl), float(h.sum()), float(c.sum()), float(c.sum()) / model.span_s,
                     _marginals(model, ttl))


def best_shared_ttl(model: TTLModel, capacity_bytes: float) -> TTLChoice:
    """The best single TTL for every class whose average stored bytes fit ``capacity_bytes``: the
    largest that fits, trimmed down to the smallest TTL with the same hits (:func:`_trim`)."""
    budget = capacity_bytes * model.span_s

    def total(t: float) -> float:
        return float(sum(model.cost(c, t) for c in range(model.n_classes)))

    lo, hi = 0.0, 1.0
    if total(0.0) > budget:
        return ttl_choice(model, np.zeros(model.n_classes))
    while total(hi) <= budget and hi < 1e18:
        lo, hi = hi, hi * 2.0
    for _ in range(200):  # bisection: total cost is continuous and increasing in T
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        lo, hi = (mid, hi) if total(mid) <= budget else (lo, mid)
    return ttl_choice(model, _trim(model, np.full(model.n_classes, lo), shared=True))


def _best_pair(model: TTLModel, i: int, j: int, budget: float) -> tuple[float, float]:
    """Exact best (T_i, T_j) for a byte-second budget: every key of ``i``, ``j`` filling the rest."""
    cand = np.unique(np.concatenate([[0.0], model.keys[i]]))
    ci = model.cost(i, cand)
    ok = ci <= budget * (1 + 1e-12)
    cand, ci = cand[ok], ci[ok]
    if len(cand) == 0:
        return 0.0, 0.0
    tj = np.maximum(model.max_ttl(j, budget - ci), 0.0)
    total = model.hits(i, cand) + model.hits(j, tj)
    best = int(np.argmax(total))
    # class i also takes any budget that class j cannot use
    ti = float(model.max_ttl(i, budget - float(model.cost(j, tj[best]))))
    return max(ti, float(cand[best])), float(tj[best])


def optimal_ttls(model: TTLModel, capacity_bytes: float) -> TTLChoice:
    """Per-class TTLs with the most hit tokens at average stored bytes <= ``capacity_bytes``.

    Exact for one or two classes (every key of the first class, the second filling the rest of
    the budget). For more, pairwise exchange from the best shared TTL: each pair of classes is
    re-solved exactly on the budget the others leave, until no pair improves; it never does
    worse than the shared TTL, but it is a local optimum.
    """
    budget = capacity_bytes * model.span_s
    n = model.n_classes
    if n == 1:
        return ttl_choice(model, _trim(model, np.array([max(float(model.max_ttl(0, budget)), 0.0)])))
    if n == 2:
        return ttl_choice(model, _trim(model, np.array(_best_pair(model, 0, 1, budget))))
    ttl = np.array(best_shared_ttl(model, capacity_bytes).ttl_s)

    def total_hits(t: np.ndarray) -> float:
        return float(sum(model.hits(c, t[c]) for c in range(n)))

    for _ in range(10):
        improved = False
        for i in range(n):
            for j in range(i + 1, n):
                rest = budget - sum(float(model.cost(k, ttl[k])) for k in range(n) if k not in (i, j))
                trial = ttl.copy()
                trial[i], trial[j] = _best_pair(model, i, j, rest)
                if total_hits(trial) > total_hits(ttl):
                    ttl, improved = trial, True
        if not improved:
            break
    return ttl_choice(model, _trim(model, ttl))
