"""The one trace frame every loader produces and the whole simulator reads, and its check.

Every trace, whatever its source, becomes a polars frame with the fixed :data:`SCHEMA`: one row
per request, ``block_ids`` holding *chained* ids (equal id <=> equal whole prefix up to and
including that block). Validation happens once, when a trace is loaded; policies, curves and
the cluster model trust the frame (vidur's habit: clean once, then only read the frame).
"""

from __future__ import annotations

import numpy as np
import polars as pl

#: The one frame layout every loader produces and every consumer reads.
SCHEMA: dict[str, pl.DataType] = {
    "request_id": pl.Int64(),
    "timestamp_s": pl.Float64(),
    "input_length": pl.Int64(),
    "output_length": pl.Int64(),
    "block_ids": pl.List(pl.UInt64()),
    "block_size": pl.Int32(),
    "traffic_class": pl.Utf8(),
    "session_id": pl.Utf8(),
    "turn": pl.Int32(),
}


def validate_frame(df: pl.DataFrame, *, source: str = "trace") -> pl.DataFrame:
    """Check a frame against :data:`SCHEMA` and the trace invariants; return it unchanged.

    Invariants: not empty; column types exactly as in SCHEMA; lengths >= 0 (input >= 1);
    block_size >= 1; ``ceil(input_length/block_size)`` block ids (or ``floor`` when only full
    blocks are listed); timestamps finite and non-decreasing; request ids unique.
    """
    if df.height == 0:
        raise ValueError(f"{source}: the trace is empty (no requests)")
    missing = [c for c in SCHEMA if c not in df.columns]
    if missing:
        raise ValueError(f"{source}: missing columns {missing}; expected {list(SCHEMA)}")
    for name, dtype in SCHEMA.items():
        if df.schema[name] != dtype:
            raise ValueError(f"{source}: column {name!r} has type {df.schema[name]}, expected {dtype}")
    for name in ("request_id", "timestamp_s", "input_length", "output_length", "block_ids",
                 "block_size", "traffic_class"):
        nulls = df[name].null_count()
        if nulls:
            row = int(df.with_row_index("_r").filter(pl.col(name).is_null())["_r"][0])
            raise ValueError(f"{source}: row {row}: field {name!r} is missing")
    n_blocks = df["block_ids"].list.len().cast(pl.Int64)
    bs = df["block_size"].cast(pl.Int64)
    ceil_blocks = (df["input_length"] + bs - 1) // bs
    floor_blocks = df["input_length"] // bs
    checks = [
        ("timestamp_s", ~df["timestamp_s"].is_finite(), "must be a finite number"),
        ("input_length", df["input_length"] < 1, "must be >= 1 token"),
        ("output_length", df["output_length"] < 0, "must be >= 0 tokens"),
        ("block_size", bs < 1, "must be >= 1 token"),
        ("block_ids", (n_blocks != ceil_blocks) & (n_blocks != floor_blocks),
         "length inconsistent with input_length and block_size (expected ceil or floor of "
         "input_length/block_size)"),
    ]
    for field, bad, what in checks:
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            r = df.row(row, named=True)
            raise ValueError(
                f"{source}: row {row}: field {field!r} {what} (input_length={r['input_length']}, "
                f"block_size={r['block_size']}, {len(r['block_ids'])} block ids, "
                f"timestamp_s={r['timestamp_s']})"
            )
    ts = df["timestamp_s"].to_numpy()
    if np.any(np.diff(ts) < 0):
        raise ValueError(f"{source}: timestamps must be non-decreasing (load_trace sorts them)")
    if df["request_id"].n_unique() != df.height:
        raise ValueError(f"{source}: request_id values must be unique")
    return df
