"""Small random traces in the frame schema, with heavy prefix sharing (tests, examples)."""

from __future__ import annotations

import numpy as np
import polars as pl

from tiered_kv.sim.traces.schema import SCHEMA, validate_frame


def random_trace(seed: int, n_requests: int = 30, *, block_size: int = 4, max_blocks: int = 6,
                 alphabet: int = 3, classes: tuple[str, ...] = ("chatbot", "agent"),
                 max_gap_s: int = 5) -> pl.DataFrame:
    """A small random trace in :data:`SCHEMA` with heavy prefix sharing (tests, examples).

    Each block's content is drawn from ``alphabet`` values, so prompts share prefixes often;
    chained ids number the distinct prefixes. Timestamps are integers (exact in float), with
    ties; the last block is often partial. Deterministic for ``seed``.
    """
    rng = np.random.default_rng(seed)
    ids: dict[tuple[int, ...], int] = {}
    rows = []
    t = 0
    for r in range(n_requests):
        t += int(rng.integers(0, max_gap_s + 1))
        nb = int(rng.integers(1, max_blocks + 1))
        content = tuple(int(x) for x in rng.integers(0, alphabet, nb))
        rows.append({"request_id": r, "timestamp_s": float(t),
                     "input_length": (nb - 1) * block_size + int(rng.integers(1, block_size + 1)),
                     "output_length": int(rng.integers(0, 10)),
                     "block_ids": [ids.setdefault(content[: k + 1], len(ids)) for k in range(nb)],
                     "block_size": block_size, "traffic_class": classes[int(rng.integers(0, len(classes)))],
                     "session_id": None, "turn": None})
    return validate_frame(pl.DataFrame(rows, schema=SCHEMA), source=f"random_trace(seed={seed})")
