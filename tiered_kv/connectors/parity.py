"""The simulator's prediction for a captured engine trace, beside what the connector measured.

The capture (:mod:`.capture`) is a generic trace whose block ids are the tier's own keys, so
replaying it with the policy that models the tier's retention must give each request exactly
the hit tokens the connector found in the tier. Which registered policy that is:

* unlimited capacity: ``lru`` without a capacity (nothing is ever removed);
* per-class TTLs (the connector with ``gc_each_request``, so expiry is decided at each lookup):
  ``ttl`` with ``ttl_seconds={class: seconds}``. Exact while no block is touched by a class
  with a *shorter* TTL after one with a longer TTL whose window is still open: the tier keeps a
  block while *any* class that touched it is within its TTL, ``ttl`` keeps it for the TTL of
  the class that touched it last;
* a finite ``capacity_bytes`` (the tier's watermark GC): ``lru-trie`` at
  :func:`trie_capacity_tokens`. The tier evicts in the order (last access, deepest first),
  where a chunk's last access includes its descendants', so it removes prefixes from their
  tails: prefix-tree LRU, not block LRU (``lru``/``watermark``/``gc-lru`` evict a chain's
  head first, which loses the whole chain). Its watermark hysteresis is one capacity only at
  some capacities (:func:`trie_capacity_tokens` checks; no registered policy models the others).
  Requests must not be longer than that capacity's ``k`` blocks (there the tier evicts the
  request's own tail, the peer's rule keeps one block fewer).

Runs in the main venv: it needs the simulator, not vLLM.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from tiered_kv.tiers.ssd.retention import RetentionPolicy


def trie_capacity_tokens(capacity_bytes: float, chunk_bytes: tuple[int, int], block_size: int) -> int:
    """The ``lru-trie`` capacity (tokens) that is the tier's watermark GC at ``capacity_bytes``.

    ``chunk_bytes``: the smallest and largest chunk in the store (a chunk's real size, header
    included: the header's JSON varies by a few bytes with its creation time). The watermarks
    ``high`` and ``low`` are :class:`~tiered_kv.tiers.ssd.retention.RetentionPolicy`'s defaults,
    the only ones the connector's tier has. With ``k`` the chunks that fit under ``low``, the GC
    is a capacity of ``k`` chunks when ``k`` chunks never pass ``high`` and ``k + 1`` always do;
    otherwise this raises ``ValueError``.
    """
    high, low = RetentionPolicy.high_watermark, RetentionPolicy.low_watermark
    small, large = int(chunk_bytes[0]), int(chunk_bytes[1])
    if not 0 < small <= large or not 0 < capacity_bytes < math.inf:
        raise ValueError(f"trie_capacity_tokens: need 0 < chunk bytes (min <= max) and a finite capacity, got "
                         f"{chunk_bytes}, {capacity_bytes}")
    k = int(low * capacity_bytes // large)
    if (k + 1) * small <= high * capacity_bytes:
        raise ValueError(f"capacity_bytes={capacity_bytes}: {k} chunks of {small}-{large} bytes fit under the low "
                         f"watermark but {k + 1} do not always pass the high one; the GC's hysteresis is then no "
                         "one-capacity trie LRU (choose a capacity where it is)")
    return k * int(block_size)


def measured_hits(capture: str | Path) -> np.ndarray:
    """``hit_tokens`` of every captured request, in file (= lookup) order."""
    with open(capture, encoding="utf-8") as f:
        return np.array([json.loads(line)["hit_tokens"] for line in f if line.strip()], dtype=np.int64)


def predicted_hits(capture: str | Path, policy: str = "lru", **params: Any) -> np.ndarray:
    """Hit tokens the simulator predicts for each captured request, in file order."""
    from tiered_kv.sim.policies import get_policy
    from tiered_kv.sim.trace_replay import ReplayOptions, replay
    from tiered_kv.sim.traces import load_trace

    frame = load_trace(capture, format="generic")
    result = replay(frame, get_policy(policy, **params), ReplayOptions(order="file"))
    order = np.argsort(result.request_ids, kind="stable")
    return np.asarray(result.hit_tokens_per_request, dtype=np.int64)[order]


def parity(capture: str | Path, policy: str = "lru", **params: Any) -> dict[str, Any]:
    """Measured and predicted hit tokens of a capture, and whether they agree request by request."""
    measured = measured_hits(capture)
    predicted = predicted_hits(capture, policy, **params)
    return {"requests": int(measured.size), "measured_hit_tokens": int(measured.sum()),
            "predicted_hit_tokens": int(predicted.sum()), "identical": bool(np.array_equal(measured, predicted)),
            "measured": measured.tolist(), "predicted": predicted.tolist()}
