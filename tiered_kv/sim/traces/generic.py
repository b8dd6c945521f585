"""Generic traces: JSONL, CSV or Parquet.

Fields: ``timestamp_s`` (or ``timestamp``, seconds), and either ``token_ids`` (list of ints;
block ids are computed from full and partial blocks) or ``block_ids`` (per-block ids, chained
here) with ``block_size``; optional ``request_id``, ``input_length``, ``output_length``,
``traffic_class``, ``session_id``, ``turn``. Parquet is read with polars' lazy scanner, so only
the needed columns are materialised.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from tiered_kv.sim.traces._reading import chain_column, check_utf8, finish, line_of_row, scan_jsonl_for_error


def _check_csv_fields(path: Path, raw: pl.DataFrame) -> None:
    """Name the CSV line and field of the first value that is not a number (or a list of ids)."""
    numeric = ("timestamp_s", "timestamp", "input_length", "output_length", "block_size", "turn")
    for col in raw.columns:
        if col in numeric and raw.schema[col] == pl.Utf8:
            bad = raw.with_row_index("_r").filter(pl.col(col).is_not_null()
                                                  & pl.col(col).cast(pl.Float64, strict=False).is_null())
            if bad.height:
                r = int(bad["_r"][0])
                raise ValueError(f"{path}:{r + 2}: field {col!r} is not a number: {bad[col][0]!r}")
        if col in ("token_ids", "block_ids") and raw.schema[col] == pl.Utf8:
            for r, value in enumerate(raw[col].to_list()):
                parts = [x for x in str(value or "").strip("[] ").replace(",", " ").split(" ") if x]
                if not all(x.isdigit() for x in parts):
                    raise ValueError(f"{path}:{r + 2}: field {col!r} must hold integers >= 0, got {value!r}")


def _first_bad_id_row(ids: pl.Series) -> int | None:
    """The first row of a list column holding anything but integers >= 0 (None: every row is fine)."""
    inner = ids.dtype.inner if isinstance(ids.dtype, pl.List) else None
    if inner is not None and inner.is_integer():
        bad = (ids.list.min() < 0).fill_null(False) | ids.list.eval(pl.element().is_null()).list.any().fill_null(False)
        return int(np.flatnonzero(bad.to_numpy())[0]) if bad.any() else None
    for r, values in enumerate(ids.to_list()):
        if not isinstance(values, list) or any(isinstance(v, bool) or not isinstance(v, int) or v < 0
                                               for v in values):
            return r
    return None


def _refuse_ids(path: Path, jsonl: bool, where, ids: pl.Series) -> None:
    """Raise naming the first line whose ``token_ids``/``block_ids`` are not integers >= 0, if any.

    Why the slow pass for JSONL: polars infers one type for the whole column, so a string or a
    float on line 2 turns line 1's integers into strings or floats too; only the raw JSON of
    each line says which line is wrong.
    """
    row = _first_bad_id_row(ids)
    if row is None:
        return
    if jsonl:
        scan_jsonl_for_error(path, {})  # names the true line when the column's type hid it
    raise ValueError(f"{where(row)}: field {ids.name!r} must hold integers >= 0")


def load_generic(path: Path, traffic_class: str | None, block_size: int | None) -> pl.DataFrame:
    suffix = path.suffix.lower()
    if suffix in (".parquet", ".pq"):
        try:
            lf = pl.scan_parquet(path)
            names = lf.collect_schema().names()
            keep = [c for c in ("request_id", "timestamp_s", "timestamp", "input_length", "output_length",
                                "token_ids", "block_ids", "block_size", "traffic_class", "session_id", "turn")
                    if c in names]
            raw = lf.select(keep).collect()
        except Exception as exc:  # polars' own message is a multi-line traceback: one line instead
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ValueError(f"{path}: not a readable Parquet trace ({first})") from None
    elif suffix == ".csv":
        check_utf8(path)
        try:
            raw = pl.read_csv(path)
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ValueError(f"{path}: not a readable CSV trace ({first})") from None
        _check_csv_fields(path, raw)
        for col in ("token_ids", "block_ids"):  # lists in CSV: space- or comma-separated in quotes
            if col in raw.columns and raw.schema[col] == pl.Utf8:
                raw = raw.with_columns(pl.col(col).str.strip_chars("[] ").str.replace_all(",", " ")
                                       .str.split(" ").list.eval(pl.element().filter(pl.element() != "")
                                                                 .cast(pl.Int64)))
    else:
        if path.stat().st_size == 0:
            raise ValueError(f"{path}: the trace is empty (no requests)")
        try:
            raw = pl.read_ndjson(path, infer_schema_length=None)
        except Exception as exc:
            scan_jsonl_for_error(path, {})
            raise ValueError(f"{path}: cannot read as JSONL ({exc})") from None
    if raw.height == 0:
        raise ValueError(f"{path}: the trace is empty (no requests)")
    jsonl = suffix not in (".parquet", ".pq", ".csv")
    where = (lambda r: f"{path}:{line_of_row(path, r)}") if jsonl else (lambda r: f"{path}: row {r}")
    ts_col = "timestamp_s" if "timestamp_s" in raw.columns else "timestamp" if "timestamp" in raw.columns else None
    if ts_col is None:
        raise ValueError(f"{path}: field 'timestamp_s' (seconds) is missing")
    if "token_ids" not in raw.columns and "block_ids" not in raw.columns:
        raise ValueError(f"{path}: needs a 'token_ids' or a 'block_ids' field")
    for col in (ts_col, "token_ids" if "token_ids" in raw.columns else "block_ids"):
        if raw[col].null_count():
            row = int(raw.with_row_index("_r").filter(pl.col(col).is_null())["_r"][0])
            raise ValueError(f"{where(row)}: field {col!r} is missing")
    if "block_size" in raw.columns:
        bs_col = raw["block_size"].cast(pl.Int64)
    elif block_size is not None:
        bs_col = pl.Series("block_size", [int(block_size)] * raw.height, dtype=pl.Int64)
    else:
        raise ValueError(f"{path}: field 'block_size' is missing (or pass block_size=...)")
    if (bs_col < 1).any():
        row = int(np.flatnonzero((bs_col < 1).to_numpy())[0])
        raise ValueError(f"{where(row)}: field 'block_size' must be >= 1")
    from tiered_kv.keys import chain_ids

    _refuse_ids(path, jsonl, where, raw["token_ids" if "token_ids" in raw.columns else "block_ids"])
    if "token_ids" in raw.columns:
        tokens = raw["token_ids"].to_list()
        bss = bs_col.to_list()
        chained, lengths = [], []
        for i, (toks, bs) in enumerate(zip(tokens, bss, strict=True)):
            if not toks:
                raise ValueError(f"{where(i)}: field 'token_ids' is empty")
            chained.append(chain_ids([toks[j:j + bs] for j in range(0, len(toks), bs)]))
            lengths.append(len(toks))
        blocks = pl.Series("block_ids", chained, dtype=pl.List(pl.UInt64()))
        input_length = pl.Series("input_length", lengths, dtype=pl.Int64)
        if "input_length" in raw.columns:
            given = raw["input_length"].cast(pl.Int64)
            bad = (given != input_length).fill_null(False)
            if bad.any():
                row = int(np.flatnonzero(bad.to_numpy())[0])
                raise ValueError(f"{where(row)}: field 'input_length' ({given[row]}) disagrees with "
                                 f"len(token_ids) ({lengths[row]})")
    else:
        ids = raw["block_ids"]
        blocks = chain_column(ids)
        if "input_length" in raw.columns:
            input_length = raw["input_length"].cast(pl.Int64)
        else:  # full blocks only
            input_length = (ids.list.len().cast(pl.Int64) * bs_col).alias("input_length")
    n = raw.height
    cols = {
        "request_id": raw["request_id"].cast(pl.Int64) if "request_id" in raw.columns
        else pl.Series("request_id", np.arange(n, dtype=np.int64)),
        "timestamp_s": raw[ts_col].cast(pl.Float64),
        "input_length": input_length,
        "output_length": raw["output_length"].cast(pl.Int64) if "output_length" in raw.columns
        else pl.Series("output_length", np.zeros(n, dtype=np.int64)),
        "block_ids": blocks,
        "block_size": bs_col.cast(pl.Int32),
        "traffic_class": (pl.Series("traffic_class", [traffic_class] * n, dtype=pl.Utf8) if traffic_class
                          else raw["traffic_class"].cast(pl.Utf8) if "traffic_class" in raw.columns
                          else pl.Series("traffic_class", ["default"] * n, dtype=pl.Utf8)),
        "session_id": raw["session_id"].cast(pl.Utf8) if "session_id" in raw.columns
        else pl.Series("session_id", [None] * n, dtype=pl.Utf8),
        "turn": raw["turn"].cast(pl.Int32) if "turn" in raw.columns
        else pl.Series("turn", [None] * n, dtype=pl.Int32),
    }
    df = pl.DataFrame({k: v.alias(k) for k, v in cols.items()})
    lens = df["block_ids"].list.len().cast(pl.Int64).to_numpy()
    length = df["input_length"].to_numpy()
    bs = df["block_size"].cast(pl.Int64).to_numpy()
    ok = (length >= 1) & ((lens == -(-length // bs)) | (lens == length // bs))
    if not ok.all():
        row = int(np.flatnonzero(~ok)[0])
        raise ValueError(f"{where(row)}: field 'block_ids' has {lens[row]} ids, inconsistent with "
                         f"input_length {length[row]} and block_size {bs[row]}")
    return finish(df, str(path))

