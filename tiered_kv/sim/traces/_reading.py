"""What the format loaders share: the fast polars read with an exact slow pass that names the
bad line and field, block-id chaining, the length check, and the final cast-sort-validate."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import polars as pl

from tiered_kv.sim.traces.schema import SCHEMA, validate_frame

INT64_MAX = 2**63 - 1
#: List fields that, when present, must hold integers >= 0 (generic traces have one of them).
ID_LISTS = ("token_ids", "block_ids", "hash_ids")


def check_utf8(path: Path) -> None:
    """A text trace that is not UTF-8 is refused with its file, line and column."""
    data = Path(path).read_bytes()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ValueError(f"{path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at column {col})") from None


def is_count(value) -> bool:
    """An integer >= 0, and not a bool (JSON's true and false are ints to Python)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def first_line(exc: Exception) -> str:
    """Polars' own message is a multi-line traceback: its first line names the cause."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def scan_jsonl_for_error(path: Path, required: dict[str, type | tuple[type, ...]]) -> None:
    """Slow exact pass: raise a ValueError naming file, line and field of the first bad record."""
    check_utf8(path)
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
            if not isinstance(rec, dict):
                raise ValueError(f"{path}:{lineno}: expected a JSON object, got {type(rec).__name__}")
            for field in ID_LISTS:
                value = rec.get(field)
                if field not in required and value is not None and (not isinstance(value, list) or not all(
                        is_count(v) and v <= INT64_MAX for v in value)):
                    raise ValueError(f"{path}:{lineno}: field {field!r} must be a list of integers >= 0, "
                                     f"got {str(value)[:60]}")
            for field, value in rec.items():
                if isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT64_MAX:
                    raise ValueError(f"{path}:{lineno}: field {field!r} is out of range: {value} "
                                     f"(must be below 2**63)")
            for field, kinds in required.items():
                if field not in rec:
                    raise ValueError(f"{path}:{lineno}: field {field!r} is missing")
                value = rec[field]
                if isinstance(value, bool) or not isinstance(value, kinds):
                    raise ValueError(f"{path}:{lineno}: field {field!r} has the wrong type: {value!r}")
                if isinstance(value, list) and not all(is_count(v) for v in value):
                    raise ValueError(f"{path}:{lineno}: field {field!r} must hold integers >= 0")
                if isinstance(value, (int, float)) and (not math.isfinite(value) or value < 0) \
                        and field not in ("parent_chat_id",):
                    raise ValueError(f"{path}:{lineno}: field {field!r} must be a finite number >= 0, "
                                     f"got {value!r}")


def line_of_row(path: Path, row: int) -> int:
    """1-based line number of the ``row``-th non-blank line of a JSONL file."""
    seen = -1
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if line.strip():
                seen += 1
                if seen == row:
                    return lineno
    return row + 1


def read_jsonl(path: Path, schema: dict[str, pl.DataType] | None, required: dict) -> pl.DataFrame:
    """Fast polars read (``schema`` None: inferred from every line); on any failure, locate the
    bad line with the exact slow pass."""
    if path.stat().st_size == 0:
        raise ValueError(f"{path}: the trace is empty (no requests)")
    try:
        df = pl.read_ndjson(path, **({"schema": schema} if schema else {"infer_schema_length": None}))
    except Exception as exc:  # polars reports no line numbers: find the line ourselves
        scan_jsonl_for_error(path, required)
        raise ValueError(f"{path}: cannot read as JSONL ({exc})") from None
    for field in required:
        if df[field].null_count():
            scan_jsonl_for_error(path, required)
            row = int(df.with_row_index("_r").filter(pl.col(field).is_null())["_r"][0])
            raise ValueError(f"{path}:{line_of_row(path, row)}: field {field!r} is missing")
    return df


def chain_column(per_block: pl.Series) -> pl.Series:
    """Chained ids from per-block ids (list[int] per row) via :func:`tiered_kv.keys.chain_ids`."""
    from tqdm import tqdm

    from tiered_kv.keys import chain_ids

    rows = per_block.to_list()
    out = [chain_ids(ids) for ids in tqdm(rows, desc="chaining block ids", unit="req", delay=2, leave=False)]
    return pl.Series("block_ids", out, dtype=pl.List(pl.UInt64()))


def check_lengths(df: pl.DataFrame, path: Path, *, rows_are_lines: bool, strict_ceil: bool,
                  field: str = "hash_ids") -> None:
    """Name the line whose block-id count disagrees with input_length and block_size."""
    n = df["block_ids"].list.len().cast(pl.Int64).to_numpy()
    length = df["input_length"].to_numpy()
    bs = df["block_size"].cast(pl.Int64).to_numpy()
    ceil_n = -(-length // bs)
    ok = (n == ceil_n) if strict_ceil else ((n == ceil_n) | (n == length // bs))
    ok &= length >= 1
    if not ok.all():
        row = int(np.flatnonzero(~ok)[0])
        where = f"{path}:{line_of_row(path, row)}" if rows_are_lines else f"{path}: row {row}"
        if length[row] < 1:
            raise ValueError(f"{where}: field 'input_length' must be >= 1 token, got {length[row]}")
        want = f"ceil({length[row]}/{bs[row]}) = {ceil_n[row]}"
        if not strict_ceil and ceil_n[row] != length[row] // bs[row]:  # full blocks only is accepted too
            want += f" or floor({length[row]}/{bs[row]}) = {length[row] // bs[row]}"
        raise ValueError(f"{where}: field {field!r} has {n[row]} block ids, inconsistent with "
                         f"input_length {length[row]} and block size {bs[row]} (expected {want})")


def finish(df: pl.DataFrame, source: str) -> pl.DataFrame:
    """Cast to SCHEMA, sort by time (stable, with a warning), validate."""
    df = df.select([pl.col(c).cast(t) for c, t in SCHEMA.items()])
    ts = df["timestamp_s"].to_numpy()
    if ts.size and np.any(np.diff(ts) < 0):
        n_back = int(np.sum(np.diff(ts) < 0))
        warnings.warn(f"{source}: timestamps out of order at {n_back} places; sorted by time "
                      "(stable; request_id keeps the file order)", stacklevel=3)
        df = df.sort("timestamp_s", maintain_order=True)
    return validate_frame(df, source=source)

