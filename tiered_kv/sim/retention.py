"""Retention economics: hit tokens against stored byte-seconds, per class, for every TTL at once;
the offline-optimal retention frontier; the best per-class TTLs for an SSD capacity.

The cost model
--------------
A chunk (one block of ``block_size`` tokens in the KV format, FP4 scales included) costs its
bytes times the time it is kept: byte-seconds (shown as byte-days). Every access ``i`` of a
block opens an *interval* that ends at the block's next access (gap ``g_i``; ``inf`` after the
last access). An idle TTL ``T`` keeps the chunk ``min(g_i, T)`` after access ``i``, so a TTL's
storage cost is ``bytes * sum_i min(g_i, T)``: each access keeps the chunk until it is reused,
or ``T`` after its last access. Charging the whole residency of everything written in the
trace window and dividing by the window's length is Little's law: the result is the steady-state
average stored bytes, so a budget can be stated as an SSD capacity (e.g. 100 PiB) as well as in
byte-days. Peak stored bytes come from separate scans (:mod:`tiered_kv.sim.retention_occupancy`)
that count the chunks held at evenly spaced instants, in the same steady state (residency left
at the trace's end wraps around to its start, so the peak is never below this average).

The TTL of a chunk is that of the class whose request touched it last (as in
:mod:`tiered_kv.sim.policies`); its cost goes to that class and its hits to the class of the
reading request. Hits follow DESIGN.md: a lookup hits its leading present blocks, so block ``k``
of a request hits under TTL ``T`` iff the reuse times of blocks ``0..k`` are all ``<= T``:
:func:`tiered_kv.sim.curves.ttl_keys` gives that prefix maximum for every access, and a sorted
array answers every ``T``. When two classes share blocks a lookup can depend on another
class's TTL; the per-class curves then treat the reader's TTL as governing its prefix
(``cross_class_tokens`` reports how many hit tokens that concerns), while :func:`evaluate`
is always exact for any per-class TTL vector.

The oracle frontier, and why it is prefix-closed
------------------------------------------------
With the future known, a chunk is worth keeping only over intervals that end in a reuse: an
*item* is the interval ending at access ``j`` (cost ``bytes * g``, value ``w_j``, the tokens
``j`` would hit). Items are disjoint (each interval ends at exactly one access, which belongs to
exactly one request), so the only coupling is the prefix rule: item ``j`` (depth ``k`` in its
request) yields its tokens only if the items of depths ``0..k-1`` of the same request are kept.
The items of one request form a *chain* (cut at its first cold access: nothing after it can hit).

*Lemma (chained blocks are prefix-closed under the ratio order).* Let block ``b`` at depth
``k >= 1`` have parent ``a``. Every request holding ``b`` holds ``a`` just before it, so if ``b``
was last accessed at ``t'``, then ``a`` was accessed at ``t'`` too, and ``a``'s gap ending at the
current request is ``g_a <= g_b``. Every chunk has the same bytes, and ``a`` is a full block of
the current request, so ``w_a = block_size >= w_b``. Hence ``cost/value`` of ``a``'s item is at
most ``b``'s: sorting all items by increasing cost per hit token (parents first on ties) lists
every item after its ancestors, so every prefix of that order is a prefix-closed set, and all
its values count.

*Optimality.* Drop the prefix rule and allow fractions of items: that is the fractional
knapsack, whose optimum for any budget takes items by increasing ratio (the last one in part).
Its value, the piecewise-linear curve through the greedy's cumulative (cost, value) points, is
an upper bound on any policy (a policy that keeps a chunk over a reused interval pays at least
that item's cost; anything else it keeps only costs more). At each breakpoint the greedy set is
integral and, by the lemma, feasible under the prefix rule, so there the bound is attained:
the frontier is exact at its breakpoints and an upper bound between them.

*When it is not prefix-closed.* The lemma needs equal chunk bytes and reads that never credit
a child more than its parent; other weightings (or non-chained ids) can invert a ratio along a
chain. The code does not rely on the lemma: within each chain it merges adjacent items whose
ratios are out of order (pool-adjacent-violators: a child cheaper per token than its parent is
only reachable through the parent, so the pair is one item with the summed cost and value)
until the group ratios strictly increase along the chain. That is the classical solution of
the fractional knapsack with chain precedence, the same two statements hold with groups in
place of items, and for chained traces no merge happens except for exact ties.
``tests/test_retention.py`` checks the frontier against exhaustive search on tiny traces.

Optimal per-class TTLs
----------------------
Maximise ``sum_c hits_c(T_c)`` subject to ``sum_c cost_c(T_c) <= capacity * span``. ``hits_c``
is a step function that only rises at the prefix-max keys of class ``c`` and ``cost_c`` is
continuous and increasing, so some optimum has every ``T_c`` but the last at one of its keys and
the last as large as the budget allows (:func:`optimal_ttls`: exhaustive and exact for up to
two classes; coordinate ascent from the best shared TTL beyond). At an interior optimum the
marginal hits per byte-day of the classes are equal; both marginals are reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from tiered_kv.sim.replay import CompiledTrace

DAY_S = 86_400.0


#: DeepSeek-V3 MLA elements per token (61 layers x (512 latent + 64 rope); tiered_kv.arch.DEEPSEEK_V3)
#: and FP4 bytes per element with the block scales (tiered_kv.kernels.fp4.bytes_per_element). Spelled
#: out here because both modules import torch (seconds on a busy machine) for one product; a test
#: pins these to those modules.
_V3_ELEMENTS_PER_TOKEN = 61 * (512 + 64)
_FP4_BYTES_PER_ELEMENT = {"mxfp4": 0.5 + 1.0 / 32, "nvfp4": 0.5 + 1.0 / 16}


def default_bytes_per_token(fmt: str = "mxfp4") -> float:
    """DeepSeek-V3 MLA KV per token in an FP4 format, scales included (18,666 B in MXFP4)."""
    if fmt not in _FP4_BYTES_PER_ELEMENT:
        raise ValueError(f"fmt: must be one of {sorted(_FP4_BYTES_PER_ELEMENT)}, got {fmt!r}")
    return _V3_ELEMENTS_PER_TOKEN * _FP4_BYTES_PER_ELEMENT[fmt]


@dataclass(frozen=True)
class StorageModel:
    """Bytes of one stored chunk: bytes per token x block tokens (FP4 metadata included)."""

    bytes_per_token: float
    block_tokens: int

    def __post_init__(self) -> None:
        if not (self.bytes_per_token > 0 and math.isfinite(self.bytes_per_token)):
            raise ValueError(f"bytes_per_token: must be a finite number > 0, got {self.bytes_per_token!r}")
        if isinstance(self.block_tokens, bool) or not isinstance(self.block_tokens, (int, np.integer)) \
                or self.block_tokens < 1:
            raise ValueError(f"block_tokens: must be an integer >= 1, got {self.block_tokens!r}")

    @property
    def chunk_bytes(self) -> float:
        return float(self.bytes_per_token) * int(self.block_tokens)

    @classmethod
    def for_trace(cls, trace: CompiledTrace, bytes_per_token: float | None = None) -> StorageModel:
        bpt = default_bytes_per_token() if bytes_per_token is None else float(bytes_per_token)
        return cls(bpt, trace.uniform_block_size)


# --------------------------------------------------------------------------------------------
# reuse gaps: the one pass everything else reads


@dataclass(frozen=True, eq=False)
class Gaps:
    """Per access: gap to the next access of its block (out) and from the previous one (in).

    ``gap_out[i]`` is ``inf`` after a block's last access, ``gap_in[j]`` is ``inf`` on a first
    access; ``prev[j]`` is the previous access of the same block (-1 when none); ``key[j]`` is the
    prefix-max of ``gap_in`` over the request (the TTL from which ``j`` hits).
    """

    gap_out: np.ndarray
    gap_in: np.ndarray
    prev: np.ndarray
    key: np.ndarray
    access_class: np.ndarray  # class of the request of each access (int64)
    toucher_class: np.ndarray  # class that touched the block last before j (-1 when cold)
    weight: np.ndarray  # tokens credited when the access hits (0 for warm-up requests)
    span_s: float  # time span of the trace (seconds, at least 1)


@njit(cache=True)
def _gap_scan(offsets, blocks, times, req_class, n_unique):  # pragma: no cover - compiled
    """One pass: previous access, gaps in and out, prefix-max key and toucher class of every access."""
    m = blocks.shape[0]
    last = np.full(n_unique, -1, np.int64)
    last_t = np.zeros(n_unique, np.float64)
    prev = np.full(m, -1, np.int64)
    gap_in = np.full(m, np.inf)
    gap_out = np.full(m, np.inf)
    key = np.empty(m, np.float64)
    toucher = np.full(m, -1, np.int64)
    acc_cls = np.empty(m, np.int64)
    for r in range(offsets.shape[0] - 1):
        now = times[r]
        c = req_class[r]
        run = 0.0
        for i in range(offsets[r], offsets[r + 1]):
            b = blocks[i]
            p = last[b]
            acc_cls[i] = c
            if p >= 0:
                g = now - last_t[b]
                prev[i] = p
                gap_in[i] = g
                gap_out[p] = g
                toucher[i] = acc_cls[p]
                if g > run:
                    run = g
            else:
                run = np.inf
            key[i] = run
            last[b] = i
            last_t[b] = now
    return prev, gap_in, gap_out, key, toucher, acc_cls


def reuse_gaps(trace: CompiledTrace) -> Gaps:
    """Every access's reuse gaps in one O(m) pass; ``key`` equals :func:`tiered_kv.sim.curves.ttl_keys`."""
    prev, gap_in, gap_out, key, toucher, cls = _gap_scan(
        trace.offsets, trace.blocks, trace.timestamps, trace.class_codes.astype(np.int64), trace.n_unique)
    weight = np.where(trace.counted[trace.access_request], trace.tokens, 0).astype(np.int64)
    span = float(np.ptp(trace.timestamps)) if trace.n_requests else 0.0
    return Gaps(gap_out=gap_out, gap_in=gap_in, prev=prev, key=key, access_class=cls,
                toucher_class=toucher, weight=weight, span_s=max(span, 1.0))


def cross_class_tokens(trace: CompiledTrace, gaps: Gaps) -> int:
    """Reusable tokens whose hit depends on a chunk last touched by another class."""
    foreign = ((gaps.toucher_class >= 0) & (gaps.toucher_class != gaps.access_class)).astype(np.int64)
    csum = np.concatenate([[0], np.cumsum(foreign)])
    start = trace.offsets[:-1][trace.access_request]
    any_foreign = csum[1:] - csum[start] > 0
    return int(gaps.weight[any_foreign & np.isfinite(gaps.key)].sum())


# --------------------------------------------------------------------------------------------
# TTL curves for every T at once


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
        -1 for a negative budget, ``inf`` when even keeping everything forever fits)."""
        return _inverse_cost(self.gaps[c], self.gap_cum[c], np.asarray(budget_byte_s, np.float64) / self.chunk_bytes)

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
    miss = np.concatenate([[0], np.cumsum(~found)])
    start = trace.offsets[:-1][trace.access_request]
    hit = miss[1:] - miss[start] == 0
    hits = np.bincount(gaps.access_class[hit], weights=gaps.weight[hit], minlength=n_cls)
    kept = np.minimum(gaps.gap_out, t[gaps.access_class])
    cost = chunk_bytes * np.bincount(gaps.access_class, weights=kept, minlength=n_cls)
    return np.rint(hits), cost


# --------------------------------------------------------------------------------------------
# the oracle frontier


@njit(cache=True)
def _chain_groups(offsets, gap_in, weight, counted, req_class, chunk_bytes):  # pragma: no cover
    """Pool-adjacent-violators per request chain; groups in chain order with strictly rising ratios."""
    n = offsets.shape[0] - 1
    m = gap_in.shape[0]
    g_cost = np.empty(m, np.float64)
    g_val = np.empty(m, np.float64)
    g_cls = np.empty(m, np.int64)
    g_depth = np.empty(m, np.int64)
    item_group = np.full(m, -1, np.int64)
    st_cost = np.empty(m, np.float64)
    st_val = np.empty(m, np.float64)
    st_first = np.empty(m, np.int64)
    ng = 0
    for r in range(n):
        if not counted[r]:
            continue
        lo = offsets[r]
        top = 0
        end = lo
        for i in range(lo, offsets[r + 1]):
            if not np.isfinite(gap_in[i]):
                break
            end = i + 1
            st_cost[top] = chunk_bytes * gap_in[i]
            st_val[top] = weight[i]
            st_first[top] = i
            top += 1
            # merge while the new group is not strictly worse (higher cost per token) than its parent
            while top >= 2 and st_cost[top - 1] * st_val[top - 2] <= st_cost[top - 2] * st_val[top - 1]:
                st_cost[top - 2] += st_cost[top - 1]
                st_val[top - 2] += st_val[top - 1]
                top -= 1
        for s in range(top):
            g_cost[ng] = st_cost[s]
            g_val[ng] = st_val[s]
            g_cls[ng] = req_class[r]
            g_depth[ng] = st_first[s] - lo
            stop = st_first[s + 1] if s + 1 < top else end
            for i in range(st_first[s], stop):
                item_group[i] = ng
            ng += 1
    return g_cost[:ng], g_val[:ng], g_cls[:ng], g_depth[:ng], item_group


@dataclass(frozen=True, eq=False)
class Frontier:
    """Cumulative (byte-seconds, hit tokens) of the ratio-ordered groups, pooled and per class.

    ``cost[0] = hits[0] = 0``; point ``k`` keeps the ``k`` cheapest-per-token groups. ``rank`` of
    a group is its position in the pooled order, ``class_rank`` in its class's order.
    """

    cost: np.ndarray
    hits: np.ndarray
    class_cost: tuple[np.ndarray, ...]
    class_hits: tuple[np.ndarray, ...]
    group_class: np.ndarray
    rank: np.ndarray
    class_rank: np.ndarray
    item_group: np.ndarray

    def at(self, budget_byte_s, c: int | None = None) -> np.ndarray:
        """Most hit tokens for a budget: exact at breakpoints, the LP bound between them."""
        cost = self.cost if c is None else self.class_cost[c]
        hits = self.hits if c is None else self.class_hits[c]
        last = np.append(cost[1:] > cost[:-1], True)  # zero-cost groups: the last point of a tie
        cost, hits = cost[last], hits[last]
        return np.interp(np.asarray(budget_byte_s, dtype=np.float64), cost, hits)


def oracle_frontier(trace: CompiledTrace, gaps: Gaps, chunk_bytes: float) -> Frontier:
    """The offline-optimal retention frontier (see the module docstring for the proof)."""
    g_cost, g_val, g_cls, g_depth, item_group = _chain_groups(
        trace.offsets, gaps.gap_in, gaps.weight, trace.counted, trace.class_codes.astype(np.int64),
        float(chunk_bytes))
    ratio = g_cost / g_val
    order = np.lexsort((g_depth, ratio))
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    cost = np.concatenate([[0.0], np.cumsum(g_cost[order])])
    hits = np.concatenate([[0.0], np.cumsum(g_val[order])])
    class_cost, class_hits = [], []
    class_rank = np.empty(len(order), dtype=np.int64)
    for c in range(len(trace.class_names)):
        sel = order[g_cls[order] == c]
        class_rank[sel] = np.arange(len(sel))
        class_cost.append(np.concatenate([[0.0], np.cumsum(g_cost[sel])]))
        class_hits.append(np.concatenate([[0.0], np.cumsum(g_val[sel])]))
    return Frontier(cost, hits, tuple(class_cost), tuple(class_hits), g_cls, rank, class_rank, item_group)


# --------------------------------------------------------------------------------------------
# optimal per-class TTLs for a capacity


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


def _choice(model: TTLModel, ttl: np.ndarray) -> TTLChoice:
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
        return _choice(model, np.zeros(model.n_classes))
    while total(hi) <= budget and hi < 1e18:
        lo, hi = hi, hi * 2.0
    for _ in range(200):  # bisection: total cost is continuous and increasing in T
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        lo, hi = (mid, hi) if total(mid) <= budget else (lo, mid)
    return _choice(model, _trim(model, np.full(model.n_classes, lo), shared=True))


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
        return _choice(model, _trim(model, np.array([max(float(model.max_ttl(0, budget)), 0.0)])))
    if n == 2:
        return _choice(model, _trim(model, np.array(_best_pair(model, 0, 1, budget))))
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
    return _choice(model, _trim(model, ttl))


def _inverse_cost(g: np.ndarray, gap_cum: np.ndarray, units: np.ndarray) -> np.ndarray:
    """Largest T with ``sum min(g, T) <= units`` (g sorted; piecewise linear, solved exactly).

    ``units`` gets a 1e-12 relative allowance so that a TTL whose cost equals the budget up to
    float rounding counts as fitting (otherwise a key exactly at the budget could be missed).
    """
    units = np.asarray(units, dtype=np.float64) * (1 + 1e-12)
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
