"""The simulator's prediction for a captured engine trace, beside what the connector measured.

The capture (:mod:`.capture`) is a generic trace whose block ids are the tier's own keys, so
replaying it with the tier's policy and capacity (unlimited capacity: ``lru`` without a
capacity; per-class TTLs: ``ttl``) must give each request exactly the hit tokens the connector
found in the tier. Runs in the main venv: it needs the simulator, not vLLM.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np


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
