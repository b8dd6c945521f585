"""``load_trace``: detect a trace file's format and read it into the validated frame.

Bad input raises ``ValueError`` naming the file, the line (or row) and the field. Out-of-order
timestamps are sorted (stable) with a warning; ``request_id`` keeps the file order, which is
what ``ReplayOptions(order="file")`` replays.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from tiered_kv.sim.traces._reading import check_utf8
from tiered_kv.sim.traces.bailian import load_bailian
from tiered_kv.sim.traces.generic import load_generic
from tiered_kv.sim.traces.mooncake import load_mooncake

FORMATS = ("auto", "mooncake", "bailian", "generic")


def detect_format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in (".parquet", ".pq", ".csv"):
        return "generic"
    check_utf8(path)
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                try:
                    keys = set(json.loads(line))
                except (json.JSONDecodeError, TypeError):
                    raise ValueError(f"{path}:1: first record is not a JSON object; cannot detect the "
                                     "format (pass format=...)") from None
                break
        else:
            raise ValueError(f"{path}: the trace is empty (no requests)")
    if {"chat_id", "parent_chat_id", "hash_ids"} <= keys:
        return "bailian"
    if {"hash_ids", "timestamp", "input_length"} <= keys:
        return "mooncake"
    if keys & {"token_ids", "block_ids"}:
        return "generic"
    raise ValueError(f"{path}: cannot detect the trace format from fields {sorted(keys)}; "
                     "expected Mooncake (timestamp, input_length, hash_ids), Bailian (chat_id, "
                     "parent_chat_id, hash_ids) or generic (token_ids or block_ids)")


def load_trace(path: str | Path, format: str = "auto", traffic_class: str | None = None,
               *, block_size: int | None = None) -> pl.DataFrame:
    """Read a trace file into the :data:`SCHEMA` frame, sorted by time, validated.

    ``traffic_class`` overrides the class of every request (Mooncake files carry none: the
    class then follows the file name, conversation = chatbot). ``block_size`` is needed only
    for generic files without a ``block_size`` column.
    """
    path = Path(path)
    if format not in FORMATS:
        raise ValueError(f"trace format: must be one of {list(FORMATS)}, got {format!r}")
    if not path.exists():
        raise FileNotFoundError(f"trace file not found: {path}")
    if path.is_dir():
        raise ValueError(f"{path}: is a folder, expected a trace file")
    fmt = detect_format(path) if format == "auto" else format
    if fmt == "mooncake":
        return load_mooncake(path, traffic_class)
    if fmt == "bailian":
        return load_bailian(path, traffic_class)
    return load_generic(path, traffic_class, block_size)
