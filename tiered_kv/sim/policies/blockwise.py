"""What the policies share: the zoo's base (one access at a time, an admission mask), SSD wear,
and the checks of the parameters every policy takes.

Every zoo policy (``ZOO`` in :mod:`tiered_kv.sim.policies`, and ``belady-nobypass``) is a numba
kernel with one signature::

    kernel(blocks, n_unique, capacity_blocks, admit, *params) -> (hit, inserted, peak)

It replays the flattened block accesses in order and answers, for every access, whether the
block was present (``hit``) and whether a miss was written to the cache (``inserted``): the
libCacheSim ``get`` (look up; on a miss, evict until the object fits, then insert), at block
level with unit-size objects. ``admit[i]`` False forbids inserting access ``i`` on a miss (the
admission filters of :mod:`.admission`); ``peak`` is the most blocks ever held (a test checks it
never passes the capacity).

Prefix hits from block hits: a request's hit blocks are the leading run of its accesses that
hit. That equals "leading blocks present at lookup, then touch every block" (docs/semantics.md)
whenever touching a present block evicts nothing, which holds for every policy here but
``slru`` at a capacity that is not a multiple of its segment count (libCacheSim's integer
segment sizes let the first segment overfill, and a promotion then evicts; the difference is
one block in rare requests, documented in docs/policies.md).

SSD wear: each inserted access writes its chunk (``chunk_tokens`` x bytes per token). From the
tokens a run wrote, :func:`wear` reports bytes written, bytes written per hit byte, and drive
writes per day (bytes written per simulated day / capacity bytes: TiB written per day per TiB of
capacity; an unlimited capacity counts as the trace's footprint). Every policy's run reports it
through :func:`wear_extra`, and the one-pass curves call :func:`wear` per point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numba import njit

from tiered_kv.sim.policies.admission import get_admission
from tiered_kv.sim.policies.registry import PolicyRun, check_capacity
from tiered_kv.sim.trace_replay import CompiledTrace
from tiered_kv.units import DAY_S, DEFAULT_BYTES_PER_TOKEN

# --------------------------------------------------------------------------------------------
# intrusive doubly linked lists over dense block ids, one sentinel per list.
# nx[x] points towards the tail (older), pv[x] towards the head (newer); for a sentinel s,
# nx[s] is the head (newest) and pv[s] the tail (oldest); the list is empty when nx[s] == s.


@njit(cache=True)
def ll_init(size, n_lists):  # pragma: no cover - compiled
    nx = np.empty(size + n_lists, np.int64)
    pv = np.empty(size + n_lists, np.int64)
    for s in range(size, size + n_lists):
        nx[s] = s
        pv[s] = s
    return nx, pv


@njit(cache=True, inline="always")
def ll_unlink(nx, pv, b):  # pragma: no cover - compiled
    nx[pv[b]] = nx[b]
    pv[nx[b]] = pv[b]


@njit(cache=True, inline="always")
def ll_push_head(nx, pv, s, b):  # pragma: no cover - compiled
    h = nx[s]
    nx[s] = b
    pv[b] = s
    nx[b] = h
    pv[h] = b


@njit(cache=True)
def leading_runs(offsets, hit):  # pragma: no cover - compiled
    """Per request: how many of its first accesses hit in a row."""
    n = offsets.shape[0] - 1
    out = np.zeros(n, np.int64)
    for r in range(n):
        p = 0
        for i in range(offsets[r], offsets[r + 1]):
            if hit[i]:
                p += 1
            else:
                break
        out[r] = p
    return out


# --------------------------------------------------------------------------------------------
# the policy base


def capacity_slots(trace: CompiledTrace, capacity_tokens: int | None) -> int:
    """Block slots of a capacity in tokens; unlimited is every distinct block."""
    if capacity_tokens is None:
        return max(trace.n_unique, 1)
    return int(capacity_tokens // trace.uniform_block_size)


def per_class(trace: CompiledTrace, values: dict[str, float], default: float, what: str) -> np.ndarray:
    """``values`` (class -> number) in the trace's class order, ``default`` for classes not named."""
    unknown = sorted(set(values) - set(trace.class_names))
    if unknown:
        raise ValueError(f"{what}: classes {unknown} are not in the trace (classes: {list(trace.class_names)})")
    return np.array([float(values.get(c, default)) for c in trace.class_names], dtype=np.float64)


def check_bpt(name: str, value: Any) -> None:
    """Bytes per token (the KV format) must be a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not 0 < value < math.inf:
        raise ValueError(f"{name} bytes_per_token: must be a number > 0, got {value!r}")


def simulated_days(trace: CompiledTrace) -> float:
    """The trace's span in days (at least one second), what drive writes per day divide by."""
    span = float(trace.timestamps[-1] - trace.timestamps[0]) if trace.n_requests else 0.0
    return max(span, 1.0) / DAY_S


def wear(trace: CompiledTrace, written_tokens: float, hit_tokens: int, capacity_blocks: float,
         bytes_per_token: float) -> dict[str, Any]:
    """SSD bytes written, bytes written per hit byte, drive writes per day (see the module docstring).

    An unlimited capacity (``inf`` blocks) counts as the trace's footprint, every distinct block
    (:func:`capacity_slots`), so one rule serves the zoo, the one-pass curves and the rest.
    """
    cap = capacity_slots(trace, None) if not math.isfinite(capacity_blocks) else capacity_blocks
    written = float(written_tokens) * bytes_per_token
    cap_bytes = cap * trace.uniform_block_size * bytes_per_token
    hit_bytes = hit_tokens * bytes_per_token
    return {"ssd_bytes_written": written,
            "bytes_written_per_hit_byte": written / hit_bytes if hit_bytes else math.inf,
            "drive_writes_per_day": written / simulated_days(trace) / cap_bytes if cap_bytes else math.inf,
            "simulated_days": simulated_days(trace)}


def wear_extra(trace: CompiledTrace, hit_blocks: np.ndarray, inserted: np.ndarray, capacity_blocks: float,
               bytes_per_token: float) -> dict:
    """SSD wear of a run from its hit blocks per request and inserted accesses (:func:`wear`),
    with ``tokens_written`` and ``blocks_written``."""
    inserted = np.asarray(inserted, dtype=bool)
    hit_tokens = int(trace.hit_tokens_from_blocks(np.asarray(hit_blocks, dtype=np.int64))[trace.counted].sum())
    tokens = int(trace.chunk_tokens[inserted].sum())
    return {**wear(trace, tokens, hit_tokens, capacity_blocks, bytes_per_token),
            "tokens_written": tokens, "blocks_written": int(inserted.sum())}


@dataclass(frozen=True)
class BlockPolicy:
    """Base of the zoo: capacity in tokens (block slots), an admission filter, bytes per token.

    Subclasses set ``name`` and implement :meth:`kernel_run` (block hits, inserts, peak).
    ``admission`` is None (admit every miss), a filter name (``"second-sighting"``) or a filter
    object from :mod:`.admission`.
    """

    name: ClassVar[str] = "block-policy"
    capacity_tokens: int | None = None
    admission: Any = None
    bytes_per_token: float = DEFAULT_BYTES_PER_TOKEN

    def __post_init__(self) -> None:
        check_capacity(f"{self.name} capacity_tokens", self.capacity_tokens)
        check_bpt(self.name, self.bytes_per_token)
        object.__setattr__(self, "admission", get_admission(self.admission))

    def kernel_run(self, trace: CompiledTrace, capacity_blocks: int, admit: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, int]:
        raise NotImplementedError

    def block_run(self, trace: CompiledTrace, capacity_blocks: int | None = None
                  ) -> tuple[np.ndarray, np.ndarray, int]:
        """(hit, inserted, peak) per access at ``capacity_blocks`` (default: this policy's)."""
        cap = capacity_slots(trace, self.capacity_tokens) if capacity_blocks is None else int(capacity_blocks)
        admit = self.admission.mask(trace)
        hit, ins, peak = self.kernel_run(trace, cap, np.ascontiguousarray(admit, dtype=np.bool_))
        return hit.astype(bool), ins.astype(bool), int(peak)

    def run(self, trace: CompiledTrace) -> PolicyRun:
        cap = capacity_slots(trace, self.capacity_tokens)
        hit, ins, peak = self.block_run(trace, cap)
        p = leading_runs(trace.offsets, hit)
        extra = {"block_hits": int(hit.sum()), "block_accesses": trace.n_accesses, "peak_blocks": peak,
                 "admission": self.admission.name, **wear_extra(trace, p, ins, cap, self.bytes_per_token)}
        return PolicyRun(p, extra)
