"""The LRU family: ``lru`` and ``ttl`` over block slots, and the one numba kernel they share with
the byte-watermark collectors of :mod:`tiered_kv.sim.policies.collectors` (``watermark``,
``gc-*``), which only change the weights and the victim rule.

Why numba (``cache=True``: compiled once per machine): the event loop is inherently sequential
(each decision depends on the state the previous one left), so numpy cannot vectorise it.

The kernel keeps a set of per-class LRU lists (a block sits in the list of the class whose
request touched it last), each block's last touch as an access index to find the
least-recently-used head across lists, exact TTL expiry at every request (``now - last_touch > ttl`` of that class), and
evicts by weight when the used weight passes a high watermark, down to a low one (``lru``:
both equal the capacity, weight 1 per block).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, NamedTuple

import numpy as np
from numba import njit

from tiered_kv.sim.policies.blockwise import check_bpt, ll_push_head, ll_unlink, per_class, wear_extra
from tiered_kv.sim.policies.registry import (
    PolicyRun,
    capacity_blocks,
    check_capacity,
    register_policy,
)
from tiered_kv.sim.trace_replay import CompiledTrace
from tiered_kv.units import DEFAULT_BYTES_PER_TOKEN

#: Victim rules of the kernel, by code: which class list's head goes when the used weight passes
#: the high watermark (:mod:`.collectors` says what each does; ``lru``: the least recent touch
#: of all). ``weighted`` and ``ttl-priority`` break ties towards the lower class index.
VICTIM_RULES = {"lru": 0, "weighted": 1, "ttl-priority": 2, "quotas": 3}


class CacheRun(NamedTuple):
    """What one kernel run returns: hits per request and, when recorded, every eviction."""

    hit_blocks: np.ndarray  # leading blocks present at each request's lookup
    idle_s: np.ndarray  # per eviction: now - last touch
    evicted_class: np.ndarray  # per eviction: the class that touched the block last
    evictions: int
    expirations: int
    age_s: np.ndarray  # per eviction: now - the write that began the block's residency


@njit(cache=True, inline="always")
def _oldest(n_unique, n_classes, nxt, seq):  # pragma: no cover - compiled
    """The least recently touched of the class lists' heads (-1 when all are empty)."""
    best = -1
    best_seq = np.iinfo(np.int64).max
    for k in range(n_classes):
        s = n_unique + k
        if nxt[s] != s and seq[nxt[s]] < best_seq:
            best_seq = seq[nxt[s]]
            best = nxt[s]
    return best


@njit(cache=True, inline="always")
def _victim(rule, now, n_unique, n_classes, nxt, last, param):  # pragma: no cover - compiled
    """The head a scored rule evicts (``weighted``: 1, ``ttl-priority``: 2); -1 when all are empty."""
    best = -1
    best_score = -np.inf
    for k in range(n_classes):
        s = n_unique + k
        h = nxt[s]
        if h == s:
            continue
        score = (now - last[h]) * param[k] if rule == 1 else -(last[h] + param[k])
        if score > best_score:
            best_score = score
            best = h
    return best


@njit(cache=True, inline="always")
def _evict(b, now, nxt, prv, present, last, born, bclass, bweight, cused, ev_idle, ev_age, ev_class, n_ev,
           record):  # pragma: no cover - compiled
    """Evict ``b`` (rules 1-3, which count bytes per class); the evictions so far."""
    ll_unlink(nxt, prv, b)
    present[b] = False
    cused[bclass[b]] -= bweight[b]
    if record:
        ev_idle[n_ev] = now - last[b]
        ev_age[n_ev] = now - born[b]
        ev_class[n_ev] = bclass[b]
    return n_ev + 1


@njit(cache=True, inline="always")
def _expire(now, n_unique, n_classes, ttl_by_class, nxt, prv, present, last, bclass, bweight, cused, used,
            n_exp):  # pragma: no cover - compiled
    """Drop every block idle longer than its class's TTL; (used weight, expirations so far)."""
    for k in range(n_classes):
        s = n_unique + k
        while nxt[s] != s:
            h = nxt[s]
            if now - last[h] > ttl_by_class[k]:
                ll_unlink(nxt, prv, h)
                present[h] = False
                used -= bweight[h]
                cused[bclass[h]] -= bweight[h]
                n_exp += 1
            else:
                break
    return used, n_exp


@njit(cache=True, inline="always")
def _collect(rule, c, now, high, low, param, used, n_ev, n_unique, n_classes, nxt, prv, present, last, born,
             bclass, bweight, cused, ev_idle, ev_age, ev_class, record):  # pragma: no cover - compiled
    """The collector of rules 1-3 after a touch by class ``c``: evict while over the watermark;
    (used weight, evictions so far). Rule 0 (``lru``) runs inline in the kernel."""
    if rule == 3:  # quotas: the toucher's own list under its own share of the watermarks
        if cused[c] > high * param[c]:
            while cused[c] > low * param[c] and nxt[n_unique + c] != n_unique + c:
                v = nxt[n_unique + c]
                used -= bweight[v]
                n_ev = _evict(v, now, nxt, prv, present, last, born, bclass, bweight, cused, ev_idle, ev_age,
                              ev_class, n_ev, record)
        return used, n_ev
    total = 0.0  # summed per class, in class order
    for k in range(n_classes):
        total += cused[k]
    if total > high:
        while total > low:
            v = _victim(rule, now, n_unique, n_classes, nxt, last, param)
            if v < 0:
                break
            used -= bweight[v]
            total -= bweight[v]
            n_ev = _evict(v, now, nxt, prv, present, last, born, bclass, bweight, cused, ev_idle, ev_age, ev_class,
                          n_ev, record)
    return used, n_ev


@njit(cache=True, inline="always")
def _block_state(n_unique, n_classes):  # pragma: no cover - compiled
    """The kernel's empty per-block state: the class lists' links (dense ids, then one sentinel per
    class list), and per block: present, last touch, start of residency (for ages at eviction),
    touch order, class and weight."""
    size = n_unique + n_classes
    return (np.arange(size), np.arange(size), np.zeros(n_unique, np.bool_), np.zeros(n_unique, np.float64),
            np.zeros(n_unique, np.float64), np.zeros(n_unique, np.int64), np.zeros(n_unique, np.int64),
            np.zeros(n_unique, np.float64))


@njit(cache=True)
def _cache_kernel(offsets, blocks, weights, times, req_class, n_unique, n_classes, ttl_by_class,
                  high, low, record, inserted, rule, param):  # pragma: no cover - compiled
    n = offsets.shape[0] - 1
    m = blocks.shape[0]
    nxt, prv, present, last, born, seq, bclass, bweight = _block_state(n_unique, n_classes)
    cused = np.zeros(n_classes, np.float64)  # used weight per class (of the blocks each touched last)
    hit = np.zeros(n, np.int64)
    ev_idle = np.empty(m if record else 0, np.float64)
    ev_age = np.empty(m if record else 0, np.float64)
    ev_class = np.empty(m if record else 0, np.int64)
    n_ev = n_exp = 0
    used = 0.0
    any_ttl = (ttl_by_class < np.inf).any()
    for r in range(n):
        now = times[r]
        c = req_class[r]
        if any_ttl:
            used, n_exp = _expire(now, n_unique, n_classes, ttl_by_class, nxt, prv, present, last, bclass, bweight,
                                  cused, used, n_exp)
        p = offsets[r]
        while p < offsets[r + 1] and present[blocks[p]]:
            p += 1
        hit[r] = p - offsets[r]
        for i in range(offsets[r], offsets[r + 1]):
            b = blocks[i]
            if present[b]:
                ll_unlink(nxt, prv, b)
                if rule != 0:  # rule 0 needs only the total
                    cused[bclass[b]] -= bweight[b]
            else:
                present[b] = True
                born[b] = now
                bweight[b] = weights[i]
                used += weights[i]
                inserted[i] = True
            if rule != 0:
                cused[c] += bweight[b]
            ll_push_head(prv, nxt, n_unique + c, b)  # prv/nxt swapped: at the MRU end, before the sentinel
            last[b] = now
            seq[b] = i  # touch order
            bclass[b] = c
            if rule == 0:  # the least recent touch of all, down to the low watermark
                if used > high:
                    while used > low:
                        v = _oldest(n_unique, n_classes, nxt, seq)
                        if v < 0:
                            break
                        used -= bweight[v]
                        ll_unlink(nxt, prv, v)
                        present[v] = False
                        if record:
                            ev_idle[n_ev] = now - last[v]
                            ev_age[n_ev] = now - born[v]
                            ev_class[n_ev] = bclass[v]
                        n_ev += 1
            else:
                used, n_ev = _collect(rule, c, now, high, low, param, used, n_ev, n_unique, n_classes, nxt, prv,
                                      present, last, born, bclass, bweight, cused, ev_idle, ev_age, ev_class, record)
    return hit, ev_idle[:n_ev], ev_class[:n_ev], n_ev, n_exp, ev_age[:n_ev]  # empty unless recorded


def run_cache_kernel(trace: CompiledTrace, *, ttl_by_class: np.ndarray | None = None,
                     weights: np.ndarray | None = None, high: float = math.inf, low: float | None = None,
                     record: bool = False, inserted: np.ndarray | None = None, rule: str = "lru",
                     param: np.ndarray | None = None) -> CacheRun:
    """Run the shared LRU/TTL/watermark kernel on ``trace`` (see the module docstring).

    ``inserted``: a bool array of ``trace.n_accesses`` the kernel marks at every access that
    (re)inserts its block (absent when touched: a miss written to the cache), for SSD wear;
    ``None``: a scratch one. Its length is checked here, as the compiled kernel checks no bounds.
    ``rule``: the victim rule (:data:`VICTIM_RULES`) with its ``param`` per class, in the trace's
    class order (weights, TTLs in seconds, or quota shares; default 1 each).
    """
    if rule not in VICTIM_RULES:
        raise ValueError(f"rule: must be one of {list(VICTIM_RULES)}, got {rule!r}")
    k = len(trace.class_names)
    ttl = np.full(k, np.inf) if ttl_by_class is None else np.asarray(ttl_by_class, dtype=np.float64)
    w = np.ones(trace.n_accesses, np.float64) if weights is None else np.asarray(weights, np.float64)
    ins = np.zeros(trace.n_accesses, np.bool_) if inserted is None else inserted
    if ins.shape != (trace.n_accesses,) or ins.dtype != np.bool_:
        raise ValueError(f"inserted: must be a bool array of {trace.n_accesses} (the trace's accesses), "
                         f"got {ins.dtype} {ins.shape}")
    prm = np.ones(k, np.float64) if param is None else np.asarray(param, np.float64)
    return CacheRun(*_cache_kernel(trace.offsets, trace.blocks, w, trace.timestamps,
                                   trace.class_codes.astype(np.int64), trace.n_unique, k, ttl, float(high),
                                   float(high if low is None else low), record, ins, VICTIM_RULES[rule], prm))


@register_policy
@dataclass(frozen=True)
class LRU:
    """Least recently used over block slots; ``capacity_tokens=None`` is unlimited."""

    name: ClassVar[str] = "lru"
    capacity_tokens: int | None = None
    bytes_per_token: float = DEFAULT_BYTES_PER_TOKEN  # for SSD wear only

    def __post_init__(self) -> None:
        check_capacity(f"{self.name} capacity_tokens", self.capacity_tokens)
        check_bpt(self.name, self.bytes_per_token)

    def ttl_by_class(self, trace: CompiledTrace) -> np.ndarray | None:
        """Per-class TTL in the trace's class order (None: no expiry)."""
        return None

    def run(self, trace: CompiledTrace) -> PolicyRun:
        ttl = self.ttl_by_class(trace)
        cap = capacity_blocks(trace, self.capacity_tokens)
        ins = np.zeros(trace.n_accesses, np.bool_)
        hit, _, _, n_ev, n_exp, _ = run_cache_kernel(trace, ttl_by_class=ttl, high=cap, inserted=ins)
        extra = {"evictions": int(n_ev)}
        if ttl is not None:
            extra.update(expirations=int(n_exp), ttl_seconds=dict(zip(trace.class_names, ttl.tolist(), strict=True)))
        return PolicyRun(hit, {**extra, **wear_extra(trace, hit, ins, cap, self.bytes_per_token)})


@register_policy
@dataclass(frozen=True)
class TTL(LRU):
    """Keep a block while ``now - last_touch <= ttl`` of the class that touched it last.

    ``ttl_seconds`` maps class -> seconds (``default`` or ``*`` for classes not listed, else
    ``default_ttl_seconds``); with ``capacity_tokens`` the least recently used live block is
    evicted on overflow.
    """

    name: ClassVar[str] = "ttl"
    ttl_seconds: dict[str, float] = field(default_factory=dict, hash=False)
    default_ttl_seconds: float = math.inf

    def __post_init__(self) -> None:
        super().__post_init__()
        for cls, v in {**self.ttl_seconds, "default": self.default_ttl_seconds}.items():
            if not isinstance(v, (int, float)) or math.isnan(v) or v < 0:
                raise ValueError(f"ttl for class {cls!r}: must be a duration >= 0 seconds, got {v!r}")

    def ttl_by_class(self, trace: CompiledTrace) -> np.ndarray:
        default = self.ttl_seconds.get("*", self.ttl_seconds.get("default", self.default_ttl_seconds))
        named = {k: v for k, v in self.ttl_seconds.items() if k not in ("*", "default")}
        return per_class(trace, named, default, "ttl")


def retention_quantiles(ages: np.ndarray, classes: np.ndarray, names: tuple[str, ...]) -> dict[str, dict]:
    """Per class: evictions and p10/p50/p90 idle age at eviction (seconds; None when none)."""
    out = {}
    for code, name in enumerate(names):
        a = ages[classes == code]
        q = np.quantile(a, [0.1, 0.5, 0.9]).tolist() if a.size else [None] * 3
        out[name] = {"evictions": int(a.size), "p10_s": q[0], "p50_s": q[1], "p90_s": q[2],
                     "mean_s": float(a.mean()) if a.size else None}
    return out
