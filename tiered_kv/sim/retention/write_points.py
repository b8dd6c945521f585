"""Where to write: KV stored in prefix units that end at chosen write points, not at every block.

DeepSeek writes its KV at "cache prefix units": the end of user input, the end of output,
detected common prefixes and fixed token intervals. Model, at block granularity on a compiled
trace (chained ids, so a block id names its whole prefix):

* A *write point* is an access (block ``k`` of a request) at which a unit ends.
  :func:`write_points` computes the per-access boolean for each strategy; it is what an
  admission filter can read (``is_write_point``).
* A unit holds the KV from the previous stored boundary of its request (its parent) up to its
  write point; a unit without a stored parent holds the whole prefix from token 0, even where
  other units already hold those tokens (they are not addressable inside another unit).
* A request hits the deepest stored unit that is a prefix of it; the hit tokens are
  ``min(depth * block, input_length)``, as in the default replay. A hit touches the unit and its
  ancestors; then every write point deeper than the hit writes a new unit.
* Units expire ``ttl`` of their class after their last touch (unlimited when ``inf``).

Strategies: ``every-block`` (every access is a write point: the default replay, exactly),
``turn-ends`` (the last full block and the last block of each request's input: the end of user
input; the end of the previous output is the next turn's input, so it is the same unit as that
turn's end of input up to the output's partial block), ``turn-ends+K`` (also every ``K`` tokens)
and ``common-prefixes`` (turn ends plus, online, the block where a request leaves every prefix
seen before: a radix-tree split, which is where a shared system prompt ends).
"""

from __future__ import annotations

import numpy as np
import polars as pl
from numba import njit

from tiered_kv.sim.policies.blockwise import leading_runs
from tiered_kv.sim.trace_replay import CompiledTrace, summarize
from tiered_kv.units import DAY_S

STRATEGIES = ("every-block", "turn-ends", "turn-ends+interval", "common-prefixes")


def _seen_before(trace: CompiledTrace) -> np.ndarray:
    """bool [m]: the access's block was touched by an earlier request."""
    first = np.full(trace.n_unique, trace.n_accesses, dtype=np.int64)
    np.minimum.at(first, trace.blocks, np.arange(trace.n_accesses, dtype=np.int64))
    return first[trace.blocks] < trace.offsets[:-1][trace.access_request]


def write_points(trace: CompiledTrace, strategy: str, every_tokens: int | None = None) -> np.ndarray:
    """bool [m]: whether each access is a write point under ``strategy`` (module docstring)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy: must be one of {list(STRATEGIES)}, got {strategy!r}")
    m = trace.n_accesses
    if strategy == "every-block":
        return np.ones(m, dtype=bool)
    bs = trace.uniform_block_size
    start = trace.offsets[:-1]
    n = np.diff(trace.offsets)
    wp = np.zeros(m, dtype=bool)
    has = n > 0
    wp[(start + n - 1)[has]] = True  # the last block (partial or full)
    n_full = trace.input_length // bs
    full = (n_full > 0) & (n_full <= n)
    wp[(start + n_full - 1)[full]] = True  # the last full block
    if strategy == "turn-ends+interval":
        if every_tokens is None or every_tokens < bs or every_tokens % bs:
            raise ValueError(f"every_tokens: must be a multiple of the block size {bs}, got {every_tokens!r}")
        wp |= (trace.depth.astype(np.int64) + 1) % (every_tokens // bs) == 0
    elif strategy == "common-prefixes":
        # leading run of seen blocks per request; its last block is where the request branches off
        run = leading_runs(trace.offsets, _seen_before(trace))
        split = (run > 0) & (run < n)
        wp[(start + run - 1)[split]] = True
    return wp


@njit(cache=True)
def _unit_kernel(offsets, blocks, chunk_tokens, times, req_class, wp, ttl_by_class, n_unique,
                 bytes_per_token, t_end):  # pragma: no cover - compiled
    n = offsets.shape[0] - 1
    is_unit = np.zeros(n_unique, np.bool_)
    seen = np.zeros(n_unique, np.bool_)
    last = np.zeros(n_unique, np.float64)
    ubytes = np.zeros(n_unique, np.float64)
    parent = np.full(n_unique, -1, np.int64)
    uclass = np.zeros(n_unique, np.int64)
    hit = np.zeros(n, np.int64)
    written = 0.0
    units = 0
    byte_s = 0.0
    for r in range(n):
        now = times[r]
        c = req_class[r]
        lo = offsets[r]
        hi = offsets[r + 1]
        deepest = lo - 1
        for i in range(lo, hi):
            b = blocks[i]
            if not seen[b]:
                break
            if is_unit[b] and now - last[b] <= ttl_by_class[uclass[b]]:
                deepest = i
        hit[r] = deepest - lo + 1
        if deepest >= lo:  # touch the unit and its ancestors
            u = blocks[deepest]
            while u >= 0:
                byte_s += ubytes[u] * (now - last[u])
                last[u] = now
                uclass[u] = c
                u = parent[u]
        prev = deepest
        for i in range(lo, hi):
            b = blocks[i]
            seen[b] = True
            if i <= deepest or not wp[i]:
                continue
            if is_unit[b]:  # an expired unit rewritten: charge its last residency first
                byte_s += ubytes[b] * min(ttl_by_class[uclass[b]], now - last[b])
            tok = 0
            for j in range(prev + 1, i + 1):
                tok += chunk_tokens[j]
            is_unit[b] = True
            ubytes[b] = tok * bytes_per_token
            parent[b] = blocks[prev] if prev >= lo else -1
            last[b] = now
            uclass[b] = c
            written += ubytes[b]
            units += 1
            prev = i
    stored_end = 0.0
    for b in range(n_unique):
        if is_unit[b]:
            tail = min(ttl_by_class[uclass[b]], t_end - last[b])
            byte_s += ubytes[b] * tail
            if t_end - last[b] <= ttl_by_class[uclass[b]]:
                stored_end += ubytes[b]
    return hit, written, units, byte_s, stored_end


def replay_write_points(trace: CompiledTrace, wp: np.ndarray, ttl_by_class=None,
                        bytes_per_token: float = 1.0) -> dict:
    """Replay the unit store (module docstring) with write points ``wp``: hit blocks per request,
    bytes written, units written, average stored bytes over the trace, bytes stored at its end."""
    wp = np.asarray(wp, dtype=bool)
    if wp.shape != (trace.n_accesses,):
        raise ValueError(f"wp: need one boolean per access ({trace.n_accesses}), got shape {wp.shape}")
    k = len(trace.class_names)
    ttl = np.full(k, np.inf) if ttl_by_class is None else np.asarray(ttl_by_class, dtype=np.float64)
    t0, t1 = float(trace.timestamps[0]), float(trace.timestamps[-1])
    hit, written, units, byte_s, end = _unit_kernel(
        trace.offsets, trace.blocks, trace.chunk_tokens, trace.timestamps, trace.class_codes.astype(np.int64),
        wp, ttl, trace.n_unique, float(bytes_per_token), t1)
    return {"hit_blocks": np.asarray(hit, dtype=np.int64), "bytes_written": float(written), "units": int(units),
            "avg_stored_bytes": float(byte_s) / max(t1 - t0, 1.0), "stored_bytes_end": float(end),
            "span_s": t1 - t0}


def compare_strategies(trace: CompiledTrace, *, every_tokens: int = 4096, ttl_by_class=None,
                       bytes_per_token: float = 1.0) -> pl.DataFrame:
    """One row per strategy: token hit rate (all and per class), bytes written per day, average
    stored bytes and bytes stored at the end, units written."""
    rows = []
    for s in STRATEGIES:
        wp = write_points(trace, s, every_tokens if s == "turn-ends+interval" else None)
        out = replay_write_points(trace, wp, ttl_by_class, bytes_per_token)
        _, inp, hit, by_class = summarize(trace, trace.hit_tokens_from_blocks(out["hit_blocks"]))
        row = {"strategy": s if s != "turn-ends+interval" else f"turn-ends+{every_tokens}",
               "token_hit_rate": hit / max(inp, 1),
               "write_point_share": float(wp.mean()) if wp.size else 0.0,
               "bytes_written_per_day": out["bytes_written"] / max(out["span_s"], 1.0) * DAY_S,
               "avg_stored_bytes": out["avg_stored_bytes"], "stored_bytes_end": out["stored_bytes_end"],
               "units": out["units"],
               **{f"token_hit_rate_{n}": c["hit_tokens"] / max(c["input_tokens"], 1) for n, c in by_class.items()}}
        rows.append(row)
    return pl.DataFrame(rows)
