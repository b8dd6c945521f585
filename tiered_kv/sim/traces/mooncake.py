"""Mooncake FAST'25 JSONL traces.

Fields: ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids`` (chained ids of
512-token blocks, ``ceil(input_length/512)`` of them). The ids are already chained and are kept
as they are (so numbers match other tools on the file). The file carries no traffic class: it
follows the file name (:func:`~tiered_kv.sim.traces.shipped.default_class_for`).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from tiered_kv.sim.traces._reading import check_lengths, finish, read_jsonl, scan_jsonl_for_error
from tiered_kv.sim.traces.shipped import default_class_for

MOONCAKE_BLOCK_SIZE = 512


def load_mooncake(path: Path, traffic_class: str | None) -> pl.DataFrame:
    schema = {"timestamp": pl.Float64(), "input_length": pl.Int64(), "output_length": pl.Int64(),
              "hash_ids": pl.List(pl.Int64())}
    required = {"timestamp": (int, float), "input_length": int, "output_length": int, "hash_ids": list}
    raw = read_jsonl(path, schema, required)
    if (raw["hash_ids"].explode().drop_nulls() < 0).any() or (raw["input_length"] < 1).any() \
            or (raw["timestamp"] < 0).any() or (raw["output_length"] < 0).any():
        scan_jsonl_for_error(path, required)
    df = raw.with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("request_id"),
        (pl.col("timestamp") / 1000.0).alias("timestamp_s"),
        pl.col("hash_ids").cast(pl.List(pl.UInt64())).alias("block_ids"),
        pl.lit(MOONCAKE_BLOCK_SIZE, dtype=pl.Int32).alias("block_size"),
        pl.lit(traffic_class or default_class_for(path)).alias("traffic_class"),
        pl.lit(None, dtype=pl.Utf8).alias("session_id"),
        pl.lit(None, dtype=pl.Int32).alias("turn"),
    )
    check_lengths(df, path, rows_are_lines=True, strict_ceil=True)
    return finish(df, str(path))

