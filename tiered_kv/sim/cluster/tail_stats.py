"""Tail statistics of repeated runs: percentiles per class, their spread, intervals, paired ratios.

Why a module of its own: one run of a few dozen requests gives a p99 that is nearly its maximum,
and one run of a setting beside one run of another says little about which is better. The
benchmark therefore repeats every point in interleaved rounds, and this module turns the rounds
into what its record shows:

* per class, each percentile's **median over the repeats** with its spread (min, max);
* the percentile of the **pooled** requests with a distribution-free **order-statistic
  interval** (the ranks ``l, u`` with ``P(l <= B < u) >= level`` for ``B ~ Binomial(n, q)``):
  where ``n`` is too small for an upper end (a p99 needs about 300 requests for a 90% one) the
  interval says so (``None``) instead of inventing one, as a bootstrap of the maximum would;
* ratios of two settings **paired by repeat** (the two ran back to back in the same round), so
  their median and spread show what a ratio of medians hides.
"""

from __future__ import annotations

import math

import numpy as np

CLASSES = ("restore", "miss")
#: Percentiles reported per class.
QUANTILES = (25, 50, 75, 90, 99)


def _binomial_cdf(k: int, n: int, p: float) -> float:
    """P(B <= k) for B ~ Binomial(n, p), summed in log space (no scipy)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    logs = [math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * math.log(p)
            + (n - j) * math.log1p(-p) for j in range(k + 1)]
    top = max(logs)
    return min(1.0, math.exp(top) * sum(math.exp(x - top) for x in logs))


def order_statistic_ranks(n: int, q: float, level: float = 0.9) -> tuple[int | None, int | None]:
    """1-based ranks ``(l, u)`` of the sorted sample bounding its ``q``-th percentile with
    coverage at least ``level``; ``None`` where the sample is too small for that end."""
    if not (0 < q < 100 and 0 < level < 1 and n >= 1):
        raise ValueError(f"order_statistic_ranks: need n >= 1, q in (0, 100), level in (0, 1); got {n}, {q}, {level}")
    p, tail = q / 100.0, (1.0 - level) / 2.0
    lo = max((j for j in range(1, n + 1) if _binomial_cdf(j - 1, n, p) <= tail), default=None)
    hi = min((j for j in range(1, n + 1) if _binomial_cdf(j - 1, n, p) >= 1.0 - tail), default=None)
    return lo, hi


def order_statistic_interval(values, q: float, level: float = 0.9) -> list:
    """[lo, hi] bounding the ``q``-th percentile of the population ``values`` came from;
    an end is ``None`` when the sample is too small to bound it."""
    v = np.sort(np.asarray(values, dtype=np.float64))
    if v.size == 0:
        return [None, None]
    lo, hi = order_statistic_ranks(int(v.size), q, level)
    return [None if lo is None else float(v[lo - 1]), None if hi is None else float(v[hi - 1])]


def class_percentiles(ttft_s, restore, recomputed=None, *, interval: bool = True) -> dict:
    """Per class (``restore``, ``miss``, ``all``): count, mean, p25..p99 and max of TTFT in ms,
    the recomputed fraction, and (``interval``) 90% order-statistic intervals of p50 and p99."""
    t = np.asarray(ttft_s, dtype=np.float64) * 1e3
    restore = np.asarray(restore, dtype=bool)
    rec = np.zeros(t.size, dtype=bool) if recomputed is None else np.asarray(recomputed, dtype=bool)
    out = {}
    for cls, mask in (("restore", restore), ("miss", ~restore), ("all", np.ones(t.size, dtype=bool))):
        v = t[mask]
        d: dict = {"count": int(v.size)}
        if v.size:
            d["mean_ms"] = float(v.mean())
            d.update({f"p{q}_ms": float(np.percentile(v, q)) for q in QUANTILES})
            d["max_ms"] = float(v.max())
            d["recomputed_fraction"] = float(rec[mask].mean())
            if interval:
                for q in (50, 99):
                    d[f"p{q}_ms_ci90"] = order_statistic_interval(v, q)
        out[cls] = d
    return out


def over_repeats(runs: list[dict]) -> dict:
    """Per class, the median over repeats of each statistic of :func:`class_percentiles`
    (``runs``: one such dict per repeat) and its spread ``[min, max]`` (``*_spread``)."""
    out = {}
    for cls in (*CLASSES, "all"):
        d: dict = {"repeats": len(runs)}
        keys = [k for k in runs[0][cls] if k != "count" and not k.endswith("_ci90")] if runs else []
        for k in keys:
            vals = np.array([r[cls][k] for r in runs if k in r[cls]])
            d[k] = float(np.median(vals))
            d[f"{k}_spread"] = [float(vals.min()), float(vals.max())]
        d["count"] = int(runs[0][cls]["count"]) if runs else 0
        out[cls] = d
    return out


def paired_ratios(with_runs: list[dict], without_runs: list[dict], cls: str, key: str = "p99_ms") -> dict | None:
    """Ratio of ``key`` with over without, repeat by repeat (same round), and its median and
    spread; None when a class has no requests."""
    r = [w[cls][key] / o[cls][key] for w, o in zip(with_runs, without_runs, strict=True)
         if w[cls].get(key) and o[cls].get(key)]
    if not r:
        return None
    return {"ratios": [float(x) for x in r], "median": float(np.median(r)), "min": float(np.min(r)),
            "max": float(np.max(r))}


def direction(ratios: dict | None, *, changed: bool) -> str:
    """'cut' / 'increase' when every paired repeat is on one side of 1, 'even' when every one is
    1, 'mixed' when not; 'no_decision' when the policy changed no decision (an apparent effect
    there is the noise between repeats, not the policy)."""
    if not changed:
        return "no_decision"
    if ratios is None:
        return "mixed"
    if ratios["min"] == ratios["max"] == 1.0:
        return "even"
    if ratios["max"] < 1.0:
        return "cut"
    if ratios["min"] > 1.0:
        return "increase"
    return "mixed"
