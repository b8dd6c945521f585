"""Alibaba Bailian usage-trace JSONL.

Fields: ``chat_id``, ``parent_chat_id`` (-1 for a first turn), ``timestamp`` (s),
``input_length``, ``output_length``, ``type``, ``turn``, ``hash_ids`` of 16-token blocks
compared by longest prefix, i.e. per-block content ids. They are chained here with
:func:`tiered_kv.keys.chain_ids`. ``type`` is the traffic class; the session is the root of the
``parent_chat_id`` chain.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from tiered_kv.sim.traces._reading import chain_column, check_lengths, finish, line_of_row, read_jsonl

BAILIAN_BLOCK_SIZE = 16


def load_bailian(path: Path, traffic_class: str | None) -> pl.DataFrame:
    schema = {"chat_id": pl.Int64(), "parent_chat_id": pl.Int64(), "timestamp": pl.Float64(),
              "input_length": pl.Int64(), "output_length": pl.Int64(), "type": pl.Utf8(),
              "turn": pl.Int64(), "hash_ids": pl.List(pl.Int64())}
    required = {"chat_id": int, "parent_chat_id": int, "timestamp": (int, float), "input_length": int,
                "output_length": int, "hash_ids": list}
    raw = read_jsonl(path, schema, required)
    if raw["chat_id"].n_unique() != raw.height:
        dup = raw.with_row_index("_r").filter(pl.col("chat_id").is_duplicated())["_r"][1]
        raise ValueError(f"{path}:{line_of_row(path, int(dup))}: field 'chat_id' repeats an earlier id")
    # session = root of the parent chain (parents may point outside the file: then the parent is the root)
    parent = dict(zip(raw["chat_id"].to_list(), raw["parent_chat_id"].to_list(), strict=True))
    root: dict[int, int] = {}

    def find_root(c: int) -> int:
        path_ = []
        while c not in root:
            p = parent.get(c, -1)
            if p == -1 or p not in parent or len(path_) > len(parent):
                root[c] = c
                break
            path_.append(c)
            c = p
        r = root[c]
        for x in path_:
            root[x] = r
        return r

    sessions = [str(find_root(c)) for c in raw["chat_id"].to_list()]
    df = raw.with_columns(
        pl.col("chat_id").alias("request_id"),
        pl.col("timestamp").alias("timestamp_s"),
        chain_column(raw["hash_ids"]),
        pl.lit(BAILIAN_BLOCK_SIZE, dtype=pl.Int32).alias("block_size"),
        (pl.lit(traffic_class) if traffic_class else pl.col("type").fill_null("default")).alias("traffic_class"),
        pl.Series("session_id", sessions, dtype=pl.Utf8),
        pl.col("turn").cast(pl.Int32),
    )
    check_lengths(df, path, rows_are_lines=True, strict_ceil=False)
    return finish(df, str(path))

