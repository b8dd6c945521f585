"""The cost model of retention, and the one pass over reuse gaps everything else reads.

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
byte-days. Peak stored bytes, in the same steady state, come from :mod:`.occupancy`.

:func:`reuse_gaps` records, per access, the gap from the block's previous access and to its
next one, the prefix-max key from which the access hits under a TTL, and the class that
touched the block last: the TTL curves (:mod:`.ttl`), the frontier (:mod:`.frontier`) and the
occupancy scans all read that one frame.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from tiered_kv.keys import DEFAULT_FORMAT, FORMATS, bytes_per_element
from tiered_kv.sim.policies.blockwise import leading_runs
from tiered_kv.sim.trace_replay import CompiledTrace
from tiered_kv.units import DEEPSEEK_V3_KV_ELEMENTS


def default_bytes_per_token(fmt: str = DEFAULT_FORMAT) -> float:
    """DeepSeek-V3 MLA KV per token in an FP4 format, scales included (18,666 B in MXFP4)."""
    if fmt not in FORMATS:
        raise ValueError(f"fmt: must be one of {sorted(FORMATS)}, got {fmt!r}")
    return DEEPSEEK_V3_KV_ELEMENTS * bytes_per_element(fmt)


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


# --- reuse gaps: the one pass everything else reads -----------------------------------------------

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
    foreign = (gaps.toucher_class >= 0) & (gaps.toucher_class != gaps.access_class)
    after = trace.depth >= leading_runs(trace.offsets, ~foreign)[trace.access_request]  # prefix rule
    return int(gaps.weight[after & np.isfinite(gaps.key)].sum())
