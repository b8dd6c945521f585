"""Retention policies, registered by name: ``lru``, ``ttl``, ``watermark``, ``belady``.

A policy is a frozen, validated config plus a pure function of (config, event stream) ->
decisions: :meth:`run` reads a :class:`~tiered_kv.sim.replay.CompiledTrace` (the events, with
their simulated clock: the trace's timestamps) and returns, per request, how many leading
blocks were present at lookup (:class:`PolicyRun`). No wall clock, no globals, no randomness.
Counting (hit tokens, warm-up, classes) is the replay engine's job, not the policy's.

Capacities: ``capacity_tokens`` means ``floor(capacity / block_size)`` block slots (DESIGN.md);
a capacity in bytes is turned into tokens with the KV format's bytes per token
(:func:`capacity_tokens_from`). ``watermark`` counts real chunk bytes (bytes per token x the
tokens stored in the chunk, so a partial tail chunk is smaller).

The hot loops are numba kernels over the flat arrays (``cache=True``: compiled once per
machine, then loaded from ``__pycache__``). Why numba: the event loop is inherently
sequential (each decision depends on the state the previous one left), so numpy cannot
vectorise it, and a Python loop runs at about 1 M accesses/s; the kernel runs at tens of millions.

One kernel serves ``lru``, ``ttl`` and ``watermark``: a set of per-class LRU lists (a block sits
in the list of the class whose request touched it last), a global touch counter to find the
least-recently-used head across lists, exact TTL expiry at every request (``now - last_touch >
ttl`` of that class), and eviction by weight when the used weight passes a high watermark, down
to a low one (``lru``: both equal the capacity, weight 1 per block).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np
from numba import njit

from tiered_kv.sim.replay import CompiledTrace

#: Default KV format for byte capacities: DeepSeek-V3 MLA in bf16, 61 layers x (512 + 64)
#: x 2 bytes = 70,272 bytes per token. Pass another value for other models or FP4.
DEFAULT_BYTES_PER_TOKEN = 61 * (512 + 64) * 2


@dataclass(frozen=True)
class PolicyRun:
    """A policy's decisions: leading blocks present at each request's lookup (replay order)."""

    hit_blocks: np.ndarray
    extra: dict[str, Any] = field(default_factory=dict)


class Policy(Protocol):
    """What the replay engine needs from a policy (a frozen, validated dataclass in practice)."""

    name: ClassVar[str]

    def run(self, trace: CompiledTrace) -> PolicyRun:
        """Leading blocks present at each request's lookup, in the trace's replay order."""
        ...


_REGISTRY: dict[str, type] = {}


def register_policy(cls: type) -> type:
    """Class decorator: make a policy available by its ``name`` (``get_policy(name, ...)``)."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"register_policy: {cls.__name__} needs a class attribute 'name'")
    _REGISTRY[name] = cls
    return cls


def get_policy(name: str, **params: Any):
    """A policy object by registered name, configured with ``params``."""
    if name not in _REGISTRY:
        _load_optional()
    if name not in _REGISTRY:
        raise ValueError(f"policy: must be one of {policy_names()}, got {name!r}")
    return _REGISTRY[name](**params)


def policy_names() -> list[str]:
    _load_optional()
    return sorted(_REGISTRY)


def _load_optional() -> None:
    """Policies defined in sibling modules register themselves on import (e.g. lru-trie)."""
    try:
        import tiered_kv.sim.trie_lru  # noqa: F401
    except ImportError:
        pass


def capacity_tokens_from(value: str | int | float | None, *, bytes_per_token: float = DEFAULT_BYTES_PER_TOKEN,
                         name: str = "capacity") -> int | None:
    """Tokens from ``"2000000"`` (tokens), ``"64GiB"`` (bytes / bytes_per_token) or None."""
    from tiered_kv.units import parse_bytes

    if value is None:
        return None
    if isinstance(value, (int, float)):
        if value < 0 or not math.isfinite(value):
            raise ValueError(f"{name}: must be a number of tokens >= 0, got {value!r}")
        return int(value)
    text = value.strip()
    if text.lower() in ("inf", "none", "unlimited"):
        return None
    if re.fullmatch(r"[0-9_]*\.?[0-9]+(?:[eE]\+?[0-9]+)?", text):  # a plain number: tokens
        return int(float(text.replace("_", "")))
    try:
        return int(parse_bytes(text, name=name) // bytes_per_token)
    except ValueError:
        raise ValueError(f"{name}: cannot parse {value!r}; give tokens (e.g. 2000000) or a size in "
                         "bytes with a unit (e.g. 64GiB, 1.5TB)") from None


def _check_capacity(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0):
        raise ValueError(f"{name}: must be an integer number of tokens >= 0 or None (unlimited), got {value!r}")


# --------------------------------------------------------------------------------------------
# the LRU / TTL / watermark kernel


@njit(cache=True)
def _cache_kernel(offsets, blocks, weights, times, req_class, n_unique, n_classes, ttl_by_class,
                  high, low, record):  # pragma: no cover - compiled
    n = offsets.shape[0] - 1
    m = blocks.shape[0]
    size = n_unique + n_classes  # dense ids, then one sentinel per class list
    nxt = np.empty(size, np.int64)
    prv = np.empty(size, np.int64)
    for s in range(n_unique, size):
        nxt[s] = s
        prv[s] = s
    present = np.zeros(n_unique, np.bool_)
    last = np.zeros(n_unique, np.float64)
    seq = np.zeros(n_unique, np.int64)
    bclass = np.zeros(n_unique, np.int64)
    bweight = np.zeros(n_unique, np.float64)
    hit = np.zeros(n, np.int64)
    ev_age = np.empty(m if record else 0, np.float64)
    ev_class = np.empty(m if record else 0, np.int64)
    n_ev = 0
    n_exp = 0
    used = 0.0
    tick = 0
    any_ttl = False
    for k in range(n_classes):
        if ttl_by_class[k] < np.inf:
            any_ttl = True
    for r in range(n):
        now = times[r]
        c = req_class[r]
        if any_ttl:
            for k in range(n_classes):
                s = n_unique + k
                while nxt[s] != s:
                    h = nxt[s]
                    if now - last[h] > ttl_by_class[k]:
                        nxt[prv[h]] = nxt[h]
                        prv[nxt[h]] = prv[h]
                        present[h] = False
                        used -= bweight[h]
                        n_exp += 1
                    else:
                        break
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
            else:
                present[b] = True
                bweight[b] = weights[i]
                used += weights[i]
            # link at the MRU end (just before the sentinel) of this class's list
            pv = prv[tail]
            nxt[pv] = b
            prv[b] = pv
            nxt[b] = tail
            prv[tail] = b
            last[b] = now
            seq[b] = tick
            tick += 1
            bclass[b] = c
            if used > high:
                while used > low:
                    best = -1
                    best_seq = tick + 1
                    for k in range(n_classes):
                        s = n_unique + k
                        if nxt[s] != s and seq[nxt[s]] < best_seq:
                            best_seq = seq[nxt[s]]
                            best = nxt[s]
                    if best < 0:
                        break
                    nxt[prv[best]] = nxt[best]
                    prv[nxt[best]] = prv[best]
                    present[best] = False
                    used -= bweight[best]
                    if record:
                        ev_age[n_ev] = now - last[best]
                        ev_class[n_ev] = bclass[best]
                    n_ev += 1
    return hit, ev_age[:n_ev] if record else ev_age, ev_class[:n_ev] if record else ev_class, n_ev, n_exp


def run_cache_kernel(trace: CompiledTrace, *, ttl_by_class: np.ndarray | None = None,
                     weights: np.ndarray | None = None, high: float = math.inf, low: float | None = None,
                     record: bool = False):
    """Run the shared LRU/TTL/watermark kernel on ``trace`` (see the module docstring)."""
    k = len(trace.class_names)
    ttl = np.full(k, np.inf) if ttl_by_class is None else np.asarray(ttl_by_class, dtype=np.float64)
    w = np.ones(trace.n_accesses, np.float64) if weights is None else np.asarray(weights, np.float64)
    return _cache_kernel(trace.offsets, trace.blocks, w, trace.timestamps, trace.class_codes.astype(np.int64),
                         trace.n_unique, k, ttl, float(high), float(high if low is None else low), record)


def _blocks_for(trace: CompiledTrace, capacity_tokens: int | None) -> float:
    if capacity_tokens is None:
        return math.inf
    return float(capacity_tokens // trace.uniform_block_size)


@register_policy
@dataclass(frozen=True)
class LRU:
    """Least recently used over block slots; ``capacity_tokens=None`` is unlimited."""

    name: ClassVar[str] = "lru"
    capacity_tokens: int | None = None

    def __post_init__(self) -> None:
        _check_capacity("lru capacity_tokens", self.capacity_tokens)

    def run(self, trace: CompiledTrace) -> PolicyRun:
        cap = _blocks_for(trace, self.capacity_tokens)
        hit, _, _, n_ev, _ = run_cache_kernel(trace, high=cap)
        return PolicyRun(hit, {"evictions": int(n_ev)})


def ttl_vector(trace: CompiledTrace, ttl_seconds: dict[str, float], default: float) -> np.ndarray:
    """Per-class TTL array in the trace's class order; unknown class names are an error."""
    unknown = sorted(set(ttl_seconds) - set(trace.class_names) - {"*", "default"})
    if unknown:
        raise ValueError(f"ttl: classes {unknown} are not in the trace (classes: {list(trace.class_names)})")
    return np.array([float(ttl_seconds.get(c, default)) for c in trace.class_names], dtype=np.float64)


@register_policy
@dataclass(frozen=True)
class TTL:
    """Keep a block while ``now - last_touch <= ttl`` of the class that touched it last.

    ``ttl_seconds`` maps class -> seconds (``default`` for classes not listed); with
    ``capacity_tokens`` the least recently used live block is evicted on overflow.
    """

    name: ClassVar[str] = "ttl"
    ttl_seconds: dict[str, float] = field(default_factory=dict)
    default_ttl_seconds: float = math.inf
    capacity_tokens: int | None = None

    def __post_init__(self) -> None:
        _check_capacity("ttl capacity_tokens", self.capacity_tokens)
        for cls, v in {**self.ttl_seconds, "default": self.default_ttl_seconds}.items():
            if not isinstance(v, (int, float)) or math.isnan(v) or v < 0:
                raise ValueError(f"ttl for class {cls!r}: must be a duration >= 0 seconds, got {v!r}")

    def __hash__(self) -> int:
        return hash((tuple(sorted(self.ttl_seconds.items())), self.default_ttl_seconds, self.capacity_tokens))

    def run(self, trace: CompiledTrace) -> PolicyRun:
        default = self.ttl_seconds.get("*", self.ttl_seconds.get("default", self.default_ttl_seconds))
        ttl = ttl_vector(trace, self.ttl_seconds, default)
        hit, _, _, n_ev, n_exp = run_cache_kernel(trace, ttl_by_class=ttl, high=_blocks_for(trace, self.capacity_tokens))
        return PolicyRun(hit, {"evictions": int(n_ev), "expirations": int(n_exp),
                               "ttl_seconds": dict(zip(trace.class_names, ttl.tolist(), strict=True))})


@register_policy
@dataclass(frozen=True)
class Watermark:
    """LRU over chunk bytes: when used bytes pass ``high`` x capacity, evict down to ``low``.

    Reports each class's *effective retention*: the idle age (now - last touch) of its chunks
    at eviction, as quantiles, which is what a single watermark makes of each class's TTL.
    """

    name: ClassVar[str] = "watermark"
    capacity_bytes: int = 0
    high: float = 0.95
    low: float = 0.85
    bytes_per_token: float = DEFAULT_BYTES_PER_TOKEN

    def __post_init__(self) -> None:
        if isinstance(self.capacity_bytes, bool) or not isinstance(self.capacity_bytes, (int, np.integer)) \
                or self.capacity_bytes < 0:
            raise ValueError(f"watermark capacity_bytes: must be an integer >= 0, got {self.capacity_bytes!r}")
        if not (0.0 < self.low <= self.high <= 1.0):
            raise ValueError(f"watermark high/low: need 0 < low <= high <= 1, got low={self.low}, high={self.high}")
        if not (self.bytes_per_token > 0):
            raise ValueError(f"watermark bytes_per_token: must be > 0, got {self.bytes_per_token!r}")

    def run(self, trace: CompiledTrace) -> PolicyRun:
        w = trace.chunk_tokens.astype(np.float64) * float(self.bytes_per_token)
        hit, ages, classes, n_ev, _ = run_cache_kernel(
            trace, weights=w, high=self.high * self.capacity_bytes, low=self.low * self.capacity_bytes, record=True)
        return PolicyRun(hit, {"evictions": int(n_ev),
                               "effective_retention_s": retention_quantiles(ages, classes, trace.class_names)})


def retention_quantiles(ages: np.ndarray, classes: np.ndarray, names: tuple[str, ...]) -> dict[str, dict]:
    """Per class: evictions and p10/p50/p90 idle age at eviction (seconds; None when none)."""
    out = {}
    for code, name in enumerate(names):
        a = ages[classes == code]
        q = np.quantile(a, [0.1, 0.5, 0.9]).tolist() if a.size else [None] * 3
        out[name] = {"evictions": int(a.size), "p10_s": q[0], "p50_s": q[1], "p90_s": q[2],
                     "mean_s": float(a.mean()) if a.size else None}
    return out


# --------------------------------------------------------------------------------------------
# Belady (MIN with bypass), see tiered_kv.sim.curves for the proof that it bounds prefix hits


def next_use(trace: CompiledTrace) -> np.ndarray:
    """int64 [m]: index of the next access of the same block, or ``m`` when there is none."""
    m = trace.n_accesses
    order = np.lexsort((np.arange(m), trace.blocks))
    nxt = np.full(m, m, dtype=np.int64)
    same = trace.blocks[order[1:]] == trace.blocks[order[:-1]]
    nxt[order[:-1][same]] = order[1:][same]
    return nxt


@njit(cache=True)
def _belady_kernel(offsets, blocks, depth, nxt_use, n_unique, capacity):  # pragma: no cover - compiled
    # Blocks never used again ("dead") have the largest keys, so they are always evicted first;
    # which dead block goes first cannot change any later hit (none is accessed again), so they
    # are only counted, not heaped: most accesses of a trace are last accesses.
    n = offsets.shape[0] - 1
    m = blocks.shape[0]
    dmul = np.int64(1)
    for i in range(m):
        if depth[i] + 1 > dmul:
            dmul = np.int64(depth[i]) + 1
    present = np.zeros(n_unique, np.bool_)
    key_of = np.zeros(n_unique, np.int64)
    heap_k = np.empty(m + 1, np.int64)  # max-heap of keys: next use x dmul + depth
    heap_b = np.empty(m + 1, np.int64)
    hn = 0
    used = 0  # live (heaped) + dead blocks in the cache
    dead = 0
    hit = np.zeros(n, np.int64)
    any_present = np.zeros(n, np.int64)
    for r in range(n):
        lo = offsets[r]
        hi = offsets[r + 1]
        p = 0
        lead = True
        for i in range(lo, hi):
            if present[blocks[i]]:
                any_present[r] += 1
                if lead:
                    p += 1
            else:
                lead = False
        hit[r] = p
        for i in range(lo, hi):
            b = blocks[i]
            if not present[b]:
                used += 1
            if nxt_use[i] >= m:  # last access of b: it turns dead
                present[b] = False
                key_of[b] = -1
                dead += 1
            else:
                present[b] = True
                key = nxt_use[i] * dmul + depth[i]
                key_of[b] = key
                j = hn
                hn += 1
                while j > 0:
                    parent = (j - 1) >> 1
                    if heap_k[parent] >= key:
                        break
                    heap_k[j] = heap_k[parent]
                    heap_b[j] = heap_b[parent]
                    j = parent
                heap_k[j] = key
                heap_b[j] = b
            while used > capacity:
                if dead > 0:
                    dead -= 1
                    used -= 1
                    continue
                # pop the max valid entry: the farthest next use, deepest on ties
                vk = heap_k[0]
                vb = heap_b[0]
                hn -= 1
                lk = heap_k[hn]
                lb = heap_b[hn]
                j = 0
                while True:
                    child = 2 * j + 1
                    if child >= hn:
                        break
                    if child + 1 < hn and heap_k[child + 1] > heap_k[child]:
                        child += 1
                    if heap_k[child] <= lk:
                        break
                    heap_k[j] = heap_k[child]
                    heap_b[j] = heap_b[child]
                    j = child
                if hn > 0:
                    heap_k[j] = lk
                    heap_b[j] = lb
                if present[vb] and key_of[vb] == vk:
                    present[vb] = False
                    used -= 1
    return hit, any_present


@register_policy
@dataclass(frozen=True)
class Belady:
    """Offline optimum (MIN with bypass, deeper blocks first on ties): an upper bound.

    Evicts the cached block whose next use is farthest in the future (possibly the block just
    inserted: bypass). ``extra['prefix_closed']`` records that at every lookup the request's
    present blocks formed a prefix (proof in :mod:`tiered_kv.sim.curves`).
    """

    name: ClassVar[str] = "belady"
    capacity_tokens: int | None = None

    def __post_init__(self) -> None:
        _check_capacity("belady capacity_tokens", self.capacity_tokens)

    def run(self, trace: CompiledTrace, nxt: np.ndarray | None = None) -> PolicyRun:
        cap = _blocks_for(trace, self.capacity_tokens)
        cap_i = np.int64(min(cap, trace.n_unique + 1)) if math.isfinite(cap) else np.int64(trace.n_unique + 1)
        nxt = next_use(trace) if nxt is None else nxt
        hit, any_present = _belady_kernel(trace.offsets, trace.blocks, trace.depth.astype(np.int64), nxt,
                                          trace.n_unique, cap_i)
        return PolicyRun(hit, {"prefix_closed": bool(np.array_equal(hit, any_present))})
