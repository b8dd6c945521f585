"""The offline-optimal retention frontier: most hit tokens for any storage budget.

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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from tiered_kv.sim.retention.gaps import Gaps
from tiered_kv.sim.trace_replay import CompiledTrace


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

