"""Admission filters: which misses may be written to the cache, composable with any zoo policy.

A filter turns a compiled trace into a boolean mask over its accesses (``mask(trace)``): on a
miss, access ``i`` is inserted only when ``mask[i]`` is True. The mask depends on the access
stream only (never on what the policy holds), so one mask serves every policy and capacity.

- ``all`` (:class:`AdmitAll`): every miss is written.
- ``second-sighting`` (:class:`SecondSighting`): a block is written on the miss that is its
  second (``threshold``-th) sighting, counted in a counting Bloom filter (TinyLFU's doorkeeper;
  NVIDIA Dynamo's KVBM writes to disk only blocks seen twice). Counters saturate at 255 and are
  halved every ``decay_accesses`` accesses, so old sightings fade. The hashes are of the
  trace's own block ids (not the dense ids), so the mask is the same however a trace is cut.
  ``counters=0`` counts exactly (a dict, no false positives), for tests.
- ``write-points`` (:class:`WritePoints`): write only where a write-point strategy says so (the
  strategies: :mod:`tiered_kv.sim.retention.write_points`).
- :class:`AllOf`: the conjunction of several filters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numba import njit

from tiered_kv.sim.policies.registry import check_range
from tiered_kv.sim.trace_replay import CompiledTrace


@njit(cache=True)
def _doorkeeper(blocks, keys, n_counters, n_hashes, decay, threshold):  # pragma: no cover - compiled
    m = blocks.shape[0]
    counters = np.zeros(n_counters, np.uint8)
    out = np.zeros(m, np.bool_)
    idx = np.empty(n_hashes, np.int64)
    m1 = np.uint64(0x9E3779B97F4A7C15)
    m2 = np.uint64(0xBF58476D1CE4E5B9)
    for i in range(m):
        if decay > 0 and i > 0 and i % decay == 0:
            for j in range(n_counters):
                counters[j] = counters[j] >> np.uint8(1)
        k = keys[blocks[i]]
        h1 = (k ^ (k >> np.uint64(31))) * m1
        h2 = ((k ^ (k >> np.uint64(29))) * m2) | np.uint64(1)
        est = 255
        for j in range(n_hashes):
            c = np.int64((h1 + np.uint64(j) * h2) % np.uint64(n_counters))
            idx[j] = c
            if counters[c] < est:
                est = counters[c]
        est_after = est + 1 if est < 255 else 255
        for j in range(n_hashes):  # conservative update: raise only the minimal counters
            c = idx[j]
            if counters[c] < est_after:
                counters[c] = est_after
        out[i] = est_after >= threshold
    return out


def _exact_sightings(blocks: np.ndarray, decay: int, threshold: int) -> np.ndarray:
    seen: dict[int, int] = {}
    out = np.zeros(blocks.shape[0], dtype=bool)
    for i, b in enumerate(blocks.tolist()):
        if decay and i and i % decay == 0:
            seen = {k: v >> 1 for k, v in seen.items() if v >> 1}
        seen[b] = min(seen.get(b, 0) + 1, 255)
        out[i] = seen[b] >= threshold
    return out


@dataclass(frozen=True)
class AdmitAll:
    """Every miss is written (the default)."""

    name: ClassVar[str] = "all"

    def mask(self, trace: CompiledTrace) -> np.ndarray:
        return np.ones(trace.n_accesses, dtype=bool)


@dataclass(frozen=True)
class SecondSighting:
    """Write a block on its ``threshold``-th sighting (counting Bloom filter with decay)."""

    name: ClassVar[str] = "second-sighting"
    counters: int = 1 << 22
    hashes: int = 3
    decay_accesses: int = 1 << 24
    threshold: int = 2

    def __post_init__(self) -> None:
        check_range("second-sighting counters", self.counters, 0, 1 << 34, integer=True)
        check_range("second-sighting hashes", self.hashes, 1, 16, integer=True)
        check_range("second-sighting decay_accesses", self.decay_accesses, 0, integer=True)
        check_range("second-sighting threshold", self.threshold, 1, 255, integer=True)

    def mask(self, trace: CompiledTrace) -> np.ndarray:
        if self.counters == 0:
            return _exact_sightings(trace.blocks, self.decay_accesses, self.threshold)
        return _doorkeeper(trace.blocks, trace.block_keys.astype(np.uint64), int(self.counters), int(self.hashes),
                           int(self.decay_accesses), int(self.threshold))


@dataclass(frozen=True, eq=False)
class WritePoints:
    """Write only at write points: a bool array per access, or ``trace -> array``."""

    name: ClassVar[str] = "write-points"
    is_write_point: Any = None

    def __post_init__(self) -> None:
        if self.is_write_point is None:
            raise ValueError("write-points: needs is_write_point, a boolean array per access or a function "
                             "of the compiled trace returning one (strategies: the workload's write points)")

    def mask(self, trace: CompiledTrace) -> np.ndarray:
        v = self.is_write_point(trace) if callable(self.is_write_point) else self.is_write_point
        v = np.asarray(v)
        if v.shape != (trace.n_accesses,):
            raise ValueError(f"write-points: is_write_point must have one entry per access "
                             f"({trace.n_accesses}), got shape {v.shape}")
        return v.astype(bool)


@dataclass(frozen=True)
class AllOf:
    """Admit where every one of ``filters`` admits."""

    filters: tuple = ()
    name: ClassVar[str] = "all-of"

    def mask(self, trace: CompiledTrace) -> np.ndarray:
        out = np.ones(trace.n_accesses, dtype=bool)
        for f in self.filters:
            out &= get_admission(f).mask(trace)
        return out


#: The filters a name alone builds (write-points needs its array).
ADMISSIONS = {"all": AdmitAll, "second-sighting": SecondSighting}


def get_admission(spec: Any):
    """A filter from None (admit all), a name, or a filter object (anything with ``mask``)."""
    if spec is None:
        return AdmitAll()
    if isinstance(spec, str):
        if spec not in ADMISSIONS:
            raise ValueError(f"admission: must be one of {sorted(ADMISSIONS)} by name (write-points needs "
                             f"its array: WritePoints(is_write_point=...)), got {spec!r}")
        return ADMISSIONS[spec]()
    if not callable(getattr(spec, "mask", None)):
        raise ValueError(f"admission: must be None, a name or an object with mask(trace), got {spec!r}")
    return spec
