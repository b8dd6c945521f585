"""Garbage collectors under a byte watermark: ``watermark`` and four victim rules, ``gc-lru``,
``gc-weighted``, ``gc-ttl-priority``, ``gc-quotas``.

DeepSeek's store has no expiry timer, only an LRU collector under a disk watermark per storage
node, yet it quotes 3 days (agent) and 7 days (chatbot). These policies are that collector and
three ways a single collector could favour one class, so a replay can say what each does to each
class's effective retention (the idle age of its chunks at eviction). When the used bytes pass
``high`` x ``capacity_bytes`` the collector evicts down to ``low``:

* ``watermark``: one LRU order over the bytes each chunk really holds (a partial tail chunk is
  smaller); ties go to the chunk touched first (a global touch counter);
* ``gc-lru``: one LRU order across classes (the collector as described);
* ``gc-weighted``: class weight on recency; the victim has the largest ``idle * weight[class]``
  (a weight of 7/3 on agent makes its chunks look 7/3 times as idle as they are);
* ``gc-ttl-priority``: the TTLs as the collector's priority, no timer; the victim has the
  earliest ``last touch + ttl[class]``;
* ``gc-quotas``: one LRU and one watermark per class over its own share of the bytes.

The ``gc-*`` chunks weigh a full chunk's bytes (``bytes_per_token`` x the block size, the unit a
store allocates). All run in the LRU family's kernel under one of its victim rules
(:data:`~tiered_kv.sim.policies.lru.VICTIM_RULES`); ``gc-lru`` is the weighted rule with unit
weights. The collector starts cold at the trace's start.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import ClassVar

import numpy as np

from tiered_kv.sim.policies.blockwise import check_bpt, per_class, wear_extra
from tiered_kv.sim.policies.lru import CacheRun, retention_quantiles, run_cache_kernel
from tiered_kv.sim.policies.registry import PolicyRun, check_range, register_policy
from tiered_kv.sim.trace_replay import CompiledTrace
from tiered_kv.units import DAY_S, DEEPSEEK_DEFAULT_TTL_DAYS, DEFAULT_BYTES_PER_TOKEN

#: The registered ``gc-*`` names, in the order the module docstring explains them.
COLLECTORS = ("gc-lru", "gc-weighted", "gc-ttl-priority", "gc-quotas")


@dataclass(frozen=True)
class Collector:
    """What the collectors share: the capacity, the watermarks and the chunk's bytes."""

    name: ClassVar[str] = "gc"
    rule: ClassVar[str] = "weighted"
    capacity_bytes: float = 0.0
    high: float = 0.95
    low: float = 0.85
    bytes_per_token: float = DEFAULT_BYTES_PER_TOKEN

    def __post_init__(self) -> None:
        cap = self.capacity_bytes
        if isinstance(cap, bool) or not isinstance(cap, (int, float, np.number)) or not (0 <= cap < math.inf):
            raise ValueError(f"{self.name} capacity_bytes: must be a finite size >= 0, got {cap!r}")
        if not (0.0 < self.low <= self.high <= 1.0):
            raise ValueError(f"{self.name} high/low: need 0 < low <= high <= 1, got low={self.low}, high={self.high}")
        check_bpt(self.name, self.bytes_per_token)
        for f in fields(self):  # the per-class numbers (weights, TTLs, shares)
            values = getattr(self, f.name)
            for cls, v in values.items() if isinstance(values, dict) else ():
                if isinstance(v, bool) or not isinstance(v, (int, float, np.number)) or not v >= 0:
                    raise ValueError(f"{self.name} {f.name} for class {cls!r}: must be a number >= 0, got {v!r}")

    def chunk_bytes(self, trace: CompiledTrace) -> np.ndarray:
        """Bytes per access: a full chunk's."""
        return np.full(trace.n_accesses, float(self.bytes_per_token) * trace.uniform_block_size)

    def param(self, trace: CompiledTrace) -> np.ndarray:
        """The rule's number per class, in the trace's class order."""
        return np.ones(len(trace.class_names))

    def collect(self, trace: CompiledTrace, inserted: np.ndarray | None = None) -> CacheRun:
        """Hits per request and every eviction (class, idle and age), from the one kernel."""
        return run_cache_kernel(trace, weights=self.chunk_bytes(trace), high=self.high * self.capacity_bytes,
                                low=self.low * self.capacity_bytes, record=True, inserted=inserted, rule=self.rule,
                                param=self.param(trace))

    def run(self, trace: CompiledTrace) -> PolicyRun:
        ins = np.zeros(trace.n_accesses, np.bool_)
        res = self.collect(trace, ins)
        cap_blocks = self.capacity_bytes / (trace.uniform_block_size * float(self.bytes_per_token))
        return PolicyRun(res.hit_blocks, {
            "evictions": int(res.evictions),
            "effective_retention_s": retention_quantiles(res.idle_s, res.evicted_class, trace.class_names),
            **wear_extra(trace, res.hit_blocks, ins, cap_blocks, self.bytes_per_token)})


@register_policy
@dataclass(frozen=True)
class Watermark(Collector):
    """LRU over chunk bytes: when used bytes pass ``high`` x capacity, evict down to ``low``.

    Reports each class's *effective retention*: the idle age (now - last touch) of its chunks
    at eviction, as quantiles, which is what a single watermark makes of each class's TTL.
    """

    name: ClassVar[str] = "watermark"
    rule: ClassVar[str] = "lru"
    capacity_bytes: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.capacity_bytes, bool) or not isinstance(self.capacity_bytes, (int, np.integer)):
            raise ValueError(f"watermark capacity_bytes: must be an integer >= 0, got {self.capacity_bytes!r}")
        super().__post_init__()

    def chunk_bytes(self, trace: CompiledTrace) -> np.ndarray:
        """Bytes per access: the tokens the chunk holds."""
        return trace.chunk_tokens.astype(np.float64) * float(self.bytes_per_token)


@register_policy
@dataclass(frozen=True)
class GCLRU(Collector):
    """One LRU order across classes under the watermark (DeepSeek's collector)."""

    name: ClassVar[str] = "gc-lru"


@register_policy
@dataclass(frozen=True)
class GCWeighted(Collector):
    """The victim has the largest ``idle * weights[class]`` (classes not named weigh 1)."""

    name: ClassVar[str] = "gc-weighted"
    weights: dict[str, float] = field(default_factory=dict, hash=False)

    def param(self, trace: CompiledTrace) -> np.ndarray:
        return per_class(trace, self.weights, 1.0, "gc-weighted weights")


@register_policy
@dataclass(frozen=True)
class GCTTLPriority(Collector):
    """The victim has the earliest ``last touch + ttl_seconds[class]`` (classes not named: 7 days)."""

    name: ClassVar[str] = "gc-ttl-priority"
    rule: ClassVar[str] = "ttl-priority"
    ttl_seconds: dict[str, float] = field(default_factory=dict, hash=False)
    default_ttl_seconds: float = DEEPSEEK_DEFAULT_TTL_DAYS * DAY_S

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("gc-ttl-priority default_ttl_seconds", self.default_ttl_seconds, 0.0)

    def param(self, trace: CompiledTrace) -> np.ndarray:
        return per_class(trace, self.ttl_seconds, self.default_ttl_seconds, "gc-ttl-priority ttl_seconds")


@register_policy
@dataclass(frozen=True)
class GCQuotas(Collector):
    """One LRU and one watermark per class over ``shares[class]`` of the bytes (default: equal shares)."""

    name: ClassVar[str] = "gc-quotas"
    rule: ClassVar[str] = "quotas"
    shares: dict[str, float] = field(default_factory=dict, hash=False)

    def param(self, trace: CompiledTrace) -> np.ndarray:
        if not self.shares:
            return np.full(len(trace.class_names), 1.0 / len(trace.class_names))
        shares = per_class(trace, self.shares, 0.0, "gc-quotas shares")
        if shares.sum() > 1 + 1e-9:
            raise ValueError(f"gc-quotas shares: must sum to at most 1, got {shares.sum():.4f}")
        return shares
