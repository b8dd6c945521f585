"""Generic traces: JSONL, CSV or Parquet.

Fields: ``timestamp_s`` (or ``timestamp``, seconds), and either ``token_ids`` (list of ints;
block ids are computed from full and partial blocks) or ``block_ids`` (per-block ids, chained
here) with ``block_size``; optional ``request_id``, ``input_length``, ``output_length``,
``traffic_class``, ``session_id``, ``turn``. Parquet is read with polars' lazy scanner, so only
the needed columns are materialised.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl

from tiered_kv.sim.traces import _reading

Where = Callable[[int], str]  # a row index -> "file:line" (JSONL) or "file: row N" (CSV, Parquet)


def _csv_line(path: Path, row: int) -> int:
    """The file line where data row ``row`` (0-based, after the header) starts: a quoted field
    may span lines, so it is counted by a CSV reader (only when there is an error to report)."""
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        reader = csv.reader(f)
        start = 1
        for i, _ in enumerate(reader):  # i = 0: the header
            if i == row + 1:
                return start
            start = reader.line_num + 1
    return start


def _check_csv_fields(path: Path, raw: pl.DataFrame) -> None:
    """Name the CSV line and field of the first value that is not a number (or a list of ids)."""
    numeric = ("timestamp_s", "timestamp", "input_length", "output_length", "block_size", "turn")
    for col in raw.columns:
        if col in numeric and raw.schema[col] == pl.Utf8:
            bad = raw.with_row_index("_r").filter(pl.col(col).is_not_null()
                                                  & pl.col(col).cast(pl.Float64, strict=False).is_null())
            if bad.height:
                r = int(bad["_r"][0])
                raise ValueError(f"{path}:{_csv_line(path, r)}: field {col!r} is not a number: {bad[col][0]!r}")
        if col in ("token_ids", "block_ids") and raw.schema[col] == pl.Utf8:
            for r, value in enumerate(raw[col].to_list()):
                parts = [x for x in str(value or "").strip("[] ").replace(",", " ").split(" ") if x]
                if not all(x.isdigit() for x in parts):
                    raise ValueError(f"{path}:{_csv_line(path, r)}: field {col!r} must hold integers >= 0, got {value!r}")


def _first_bad_id_row(ids: pl.Series) -> int | None:
    """The first row of a list column holding anything but integers >= 0 (None: every row is fine)."""
    inner = ids.dtype.inner if isinstance(ids.dtype, pl.List) else None
    if inner is not None and inner.is_integer():
        bad = (ids.list.min() < 0).fill_null(False) | ids.list.eval(pl.element().is_null()).list.any().fill_null(False)
        return int(np.flatnonzero(bad.to_numpy())[0]) if bad.any() else None
    for r, values in enumerate(ids.to_list()):
        if not isinstance(values, list) or not all(_reading.is_count(v) for v in values):
            return r
    return None


def _refuse_ids(path: Path, jsonl: bool, where: Where, ids: pl.Series) -> None:
    """Raise naming the first line whose ``token_ids``/``block_ids`` are not integers >= 0, if any.

    Why the slow pass for JSONL: polars infers one type for the whole column, so a string or a
    float on line 2 turns line 1's integers into strings or floats too; only the raw JSON of
    each line says which line is wrong.
    """
    row = _first_bad_id_row(ids)
    if row is None:
        return
    if jsonl:
        _reading.scan_jsonl_for_error(path, {})  # names the true line when the column's type hid it
    raise ValueError(f"{where(row)}: field {ids.name!r} must hold integers >= 0")


_PARQUET_COLUMNS = ("request_id", "timestamp_s", "timestamp", "input_length", "output_length", "token_ids",
                    "block_ids", "block_size", "traffic_class", "session_id", "turn")


def _read_parquet(path: Path) -> pl.DataFrame:
    """Only the trace's columns, through the lazy scanner (a Parquet file may hold many more)."""
    try:
        lf = pl.scan_parquet(path)
        names = lf.collect_schema().names()
        return lf.select([c for c in _PARQUET_COLUMNS if c in names]).collect()
    except Exception as exc:
        raise ValueError(f"{path}: not a readable Parquet trace ({_reading.first_line(exc)})") from None


def _read_csv(path: Path) -> pl.DataFrame:
    """The CSV with its quoted id lists (space- or comma-separated) parsed into integer lists."""
    _reading.check_utf8(path)
    try:
        raw = pl.read_csv(path)
    except Exception as exc:
        raise ValueError(f"{path}: not a readable CSV trace ({_reading.first_line(exc)})") from None
    _check_csv_fields(path, raw)
    for col in ("token_ids", "block_ids"):
        if col in raw.columns and raw.schema[col] == pl.Utf8:
            raw = raw.with_columns(pl.col(col).str.strip_chars("[] ").str.replace_all(",", " ")
                                   .str.split(" ").list.eval(pl.element().filter(pl.element() != "")
                                                             .cast(pl.Int64)))
    return raw


def _block_sizes(path: Path, raw: pl.DataFrame, block_size: int | None, where: Where) -> pl.Series:
    """Each row's block size: the trace's own field, else the caller's, and never below 1."""
    if "block_size" in raw.columns:
        bs_col = raw["block_size"].cast(pl.Int64)
    elif block_size is not None:
        bs_col = pl.Series("block_size", [int(block_size)] * raw.height, dtype=pl.Int64)
    else:
        raise ValueError(f"{path}: field 'block_size' is missing (or pass block_size=...)")
    if (bs_col < 1).any():
        row = int(np.flatnonzero((bs_col < 1).to_numpy())[0])
        raise ValueError(f"{where(row)}: field 'block_size' must be >= 1")
    return bs_col


def _blocks_of_tokens(raw: pl.DataFrame, bs_col: pl.Series, where: Where) -> tuple[pl.Series, pl.Series]:
    """Chained block ids (full and partial blocks) and input lengths from ``token_ids``."""
    from tiered_kv.keys import chain_ids

    chained, lengths = [], []
    for i, (toks, bs) in enumerate(zip(raw["token_ids"].to_list(), bs_col.to_list(), strict=True)):
        if not toks:
            raise ValueError(f"{where(i)}: field 'token_ids' is empty")
        chained.append(chain_ids([toks[j:j + bs] for j in range(0, len(toks), bs)]))
        lengths.append(len(toks))
    input_length = pl.Series("input_length", lengths, dtype=pl.Int64)
    if "input_length" in raw.columns:
        given = raw["input_length"].cast(pl.Int64)
        bad = (given != input_length).fill_null(False)
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise ValueError(f"{where(row)}: field 'input_length' ({given[row]}) disagrees with "
                             f"len(token_ids) ({lengths[row]})")
    return pl.Series("block_ids", chained, dtype=pl.List(pl.UInt64())), input_length


def _blocks_of_ids(raw: pl.DataFrame, bs_col: pl.Series) -> tuple[pl.Series, pl.Series]:
    """Chained ``block_ids`` and the input lengths (full blocks only when the trace gives none)."""
    ids = raw["block_ids"]
    if "input_length" in raw.columns:
        return _reading.chain_column(ids), raw["input_length"].cast(pl.Int64)
    return _reading.chain_column(ids), (ids.list.len().cast(pl.Int64) * bs_col).alias("input_length")


def _column(raw: pl.DataFrame, name: str, dtype: pl.DataType, default: object) -> pl.Series:
    """An optional field cast to its type, or ``default`` on every row when the trace lacks it."""
    return raw[name].cast(dtype) if name in raw.columns else pl.Series(name, [default] * raw.height, dtype=dtype)


def load_generic(path: Path, traffic_class: str | None, block_size: int | None) -> pl.DataFrame:
    """Read, check and normalise a generic trace; every error names the file and the bad line or row."""
    suffix = path.suffix.lower()
    parquet = suffix in (".parquet", ".pq")
    raw = (_read_parquet(path) if parquet else _read_csv(path) if suffix == ".csv"
           else _reading.read_jsonl(path, None, {}))
    if raw.height == 0:
        raise ValueError(f"{path}: the trace is empty (no requests)")
    jsonl = not parquet and suffix != ".csv"
    where = (lambda r: f"{path}:{_reading.line_of_row(path, r)}") if jsonl else (lambda r: f"{path}: row {r}")
    ts_col = "timestamp_s" if "timestamp_s" in raw.columns else "timestamp" if "timestamp" in raw.columns else None
    if ts_col is None:
        raise ValueError(f"{path}: field 'timestamp_s' (seconds) is missing")
    if "token_ids" not in raw.columns and "block_ids" not in raw.columns:
        raise ValueError(f"{path}: needs a 'token_ids' or a 'block_ids' field")
    id_col = "token_ids" if "token_ids" in raw.columns else "block_ids"
    for col in (ts_col, id_col):
        if raw[col].null_count():
            row = int(raw.with_row_index("_r").filter(pl.col(col).is_null())["_r"][0])
            raise ValueError(f"{where(row)}: field {col!r} is missing")
    bs_col = _block_sizes(path, raw, block_size, where)
    _refuse_ids(path, jsonl, where, raw[id_col])
    blocks, input_length = (_blocks_of_tokens(raw, bs_col, where) if id_col == "token_ids"
                            else _blocks_of_ids(raw, bs_col))
    n = raw.height
    cols = {"request_id": raw["request_id"].cast(pl.Int64) if "request_id" in raw.columns
            else pl.Series("request_id", np.arange(n, dtype=np.int64)),
            "timestamp_s": raw[ts_col].cast(pl.Float64), "input_length": input_length,
            "output_length": _column(raw, "output_length", pl.Int64, 0), "block_ids": blocks,
            "block_size": bs_col.cast(pl.Int32),
            "traffic_class": (pl.Series("traffic_class", [traffic_class] * n, dtype=pl.Utf8) if traffic_class
                              else _column(raw, "traffic_class", pl.Utf8, "default")),
            "session_id": _column(raw, "session_id", pl.Utf8, None), "turn": _column(raw, "turn", pl.Int32, None)}
    df = pl.DataFrame({k: v.alias(k) for k, v in cols.items()})
    _reading.check_lengths(df, path, rows_are_lines=jsonl, strict_ceil=False, field="block_ids")
    return _reading.finish(df, str(path))

