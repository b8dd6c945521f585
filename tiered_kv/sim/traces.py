"""Load and validate request traces into one polars frame that the whole simulator reads.

Every trace, whatever its source, becomes a frame with the fixed :data:`SCHEMA`: one row per
request, ``block_ids`` holding *chained* ids (equal id <=> equal whole prefix up to and
including that block). Validation happens once, here; policies, curves and the cluster model
trust the frame (vidur's habit: clean once, then only read the frame).

Formats
-------
``mooncake``
    Mooncake FAST'25 JSONL: ``timestamp`` (ms), ``input_length``, ``output_length``,
    ``hash_ids`` (chained ids of 512-token blocks, ``ceil(input_length/512)`` of them). The ids
    are already chained and are kept as they are (so numbers match other tools on the file).
``bailian``
    Alibaba Bailian usage-trace JSONL: ``chat_id``, ``parent_chat_id`` (-1 for a first turn),
    ``timestamp`` (s), ``input_length``, ``output_length``, ``type``, ``turn``, ``hash_ids`` of
    16-token blocks compared by longest prefix, i.e. per-block content ids. They are chained
    here with :func:`tiered_kv.keys.chain_ids`. ``type`` is the traffic class; the session is the
    root of the ``parent_chat_id`` chain.
``generic``
    JSONL, CSV or Parquet with ``timestamp_s`` (or ``timestamp``, seconds), and either
    ``token_ids`` (list of ints; block ids are computed from full and partial blocks) or
    ``block_ids`` (per-block ids, chained here) with ``block_size``; optional ``request_id``,
    ``input_length``, ``output_length``, ``traffic_class``, ``session_id``, ``turn``. Parquet
    is read with polars' lazy scanner, so only the needed columns are materialised.

Bad input raises ``ValueError`` naming the file, the line (or row) and the field. Out-of-order
timestamps are sorted (stable) with a warning; ``request_id`` keeps the file order, which is
what ``ReplayOptions(order="file")`` replays.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import polars as pl

from tiered_kv import DATA_DIR

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

FORMATS = ("auto", "mooncake", "bailian", "generic")
MOONCAKE_BLOCK_SIZE = 512
BAILIAN_BLOCK_SIZE = 16
_SHIPPED = {
    "conversation": ("mooncake/conversation_trace.jsonl", "chatbot"),
    "synthetic": ("mooncake/synthetic_trace.jsonl", "synthetic"),
}


def shipped_trace(name: str = "conversation") -> Path:
    """Path of a trace shipped in ``data/traces`` (``conversation`` or ``synthetic``)."""
    if name not in _SHIPPED:
        raise ValueError(f"shipped trace: must be one of {sorted(_SHIPPED)}, got {name!r}")
    path = DATA_DIR / "traces" / _SHIPPED[name][0]
    if not path.exists():
        raise FileNotFoundError(f"shipped trace {name!r} missing at {path} (see data/traces/README.md)")
    return path


def default_class_for(path: Path) -> str:
    """Traffic class implied by a shipped file name (conversation = chatbot), else ``default``."""
    stem = path.name.lower()
    if "conversation" in stem:
        return "chatbot"
    if "agent" in stem or "tool" in stem:
        return "agent"
    if "synthetic" in stem:
        return "synthetic"
    return "default"


# --------------------------------------------------------------------------------------------
# validation


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


# --------------------------------------------------------------------------------------------
# helpers


def _scan_jsonl_for_error(path: Path, required: dict[str, type | tuple[type, ...]]) -> None:
    """Slow exact pass: raise a ValueError naming file, line and field of the first bad record."""
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
            for field, kinds in required.items():
                if field not in rec:
                    raise ValueError(f"{path}:{lineno}: field {field!r} is missing")
                value = rec[field]
                if isinstance(value, bool) or not isinstance(value, kinds):
                    raise ValueError(f"{path}:{lineno}: field {field!r} has the wrong type: {value!r}")
                if isinstance(value, list) and not all(
                    isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
                ):
                    raise ValueError(f"{path}:{lineno}: field {field!r} must hold integers >= 0")
                if isinstance(value, (int, float)) and (not math.isfinite(value) or value < 0) \
                        and field not in ("parent_chat_id",):
                    raise ValueError(f"{path}:{lineno}: field {field!r} must be a finite number >= 0, "
                                     f"got {value!r}")


def _line_of_row(path: Path, row: int) -> int:
    """1-based line number of the ``row``-th non-blank line of a JSONL file."""
    seen = -1
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if line.strip():
                seen += 1
                if seen == row:
                    return lineno
    return row + 1


def _read_jsonl(path: Path, schema: dict[str, pl.DataType], required: dict) -> pl.DataFrame:
    """Fast polars read; on any failure, locate the bad line with the exact slow pass."""
    if path.stat().st_size == 0:
        raise ValueError(f"{path}: the trace is empty (no requests)")
    try:
        df = pl.read_ndjson(path, schema=schema, ignore_errors=False)
    except Exception as exc:  # polars reports no line numbers: find the line ourselves
        _scan_jsonl_for_error(path, required)
        raise ValueError(f"{path}: cannot read as JSONL ({exc})") from None
    for field in required:
        if df[field].null_count():
            _scan_jsonl_for_error(path, required)
            row = int(df.with_row_index("_r").filter(pl.col(field).is_null())["_r"][0])
            raise ValueError(f"{path}:{_line_of_row(path, row)}: field {field!r} is missing")
    return df


def _chain_column(per_block: pl.Series) -> pl.Series:
    """Chained ids from per-block ids (list[int] per row) via :func:`tiered_kv.keys.chain_ids`."""
    from tqdm import tqdm

    from tiered_kv.keys import chain_ids

    rows = per_block.to_list()
    out = [chain_ids(ids) for ids in tqdm(rows, desc="chaining block ids", unit="req", delay=2, leave=False)]
    return pl.Series("block_ids", out, dtype=pl.List(pl.UInt64()))


def _check_lengths(df: pl.DataFrame, path: Path, *, rows_are_lines: bool, strict_ceil: bool) -> None:
    """Name the line whose block-id count disagrees with input_length and block_size."""
    n = df["block_ids"].list.len().cast(pl.Int64).to_numpy()
    length = df["input_length"].to_numpy()
    bs = df["block_size"].cast(pl.Int64).to_numpy()
    ceil_n = -(-length // bs)
    ok = (n == ceil_n) if strict_ceil else ((n == ceil_n) | (n == length // bs))
    ok &= length >= 1
    if not ok.all():
        row = int(np.flatnonzero(~ok)[0])
        where = f"{path}:{_line_of_row(path, row)}" if rows_are_lines else f"{path}: row {row}"
        if length[row] < 1:
            raise ValueError(f"{where}: field 'input_length' must be >= 1 token, got {length[row]}")
        want = f"ceil({length[row]}/{bs[row]}) = {ceil_n[row]}"
        raise ValueError(f"{where}: field 'hash_ids' has {n[row]} block ids, inconsistent with "
                         f"input_length {length[row]} and block size {bs[row]} (expected {want})")


def _finish(df: pl.DataFrame, source: str) -> pl.DataFrame:
    """Cast to SCHEMA, sort by time (stable, with a warning), validate."""
    df = df.select([pl.col(c).cast(t) for c, t in SCHEMA.items()])
    ts = df["timestamp_s"].to_numpy()
    if ts.size and np.any(np.diff(ts) < 0):
        n_back = int(np.sum(np.diff(ts) < 0))
        warnings.warn(f"{source}: timestamps out of order at {n_back} places; sorted by time "
                      "(stable; request_id keeps the file order)", stacklevel=3)
        df = df.sort("timestamp_s", maintain_order=True)
    return validate_frame(df, source=source)


# --------------------------------------------------------------------------------------------
# formats


def _detect(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in (".parquet", ".pq", ".csv"):
        return "generic"
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


def _load_mooncake(path: Path, traffic_class: str | None) -> pl.DataFrame:
    schema = {"timestamp": pl.Float64(), "input_length": pl.Int64(), "output_length": pl.Int64(),
              "hash_ids": pl.List(pl.Int64())}
    required = {"timestamp": (int, float), "input_length": int, "output_length": int, "hash_ids": list}
    raw = _read_jsonl(path, schema, required)
    if (raw["hash_ids"].explode().drop_nulls() < 0).any() or (raw["input_length"] < 1).any() \
            or (raw["timestamp"] < 0).any() or (raw["output_length"] < 0).any():
        _scan_jsonl_for_error(path, required)
    df = raw.with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("request_id"),
        (pl.col("timestamp") / 1000.0).alias("timestamp_s"),
        pl.col("hash_ids").cast(pl.List(pl.UInt64())).alias("block_ids"),
        pl.lit(MOONCAKE_BLOCK_SIZE, dtype=pl.Int32).alias("block_size"),
        pl.lit(traffic_class or default_class_for(path)).alias("traffic_class"),
        pl.lit(None, dtype=pl.Utf8).alias("session_id"),
        pl.lit(None, dtype=pl.Int32).alias("turn"),
    )
    _check_lengths(df, path, rows_are_lines=True, strict_ceil=True)
    return _finish(df, str(path))


def _load_bailian(path: Path, traffic_class: str | None) -> pl.DataFrame:
    schema = {"chat_id": pl.Int64(), "parent_chat_id": pl.Int64(), "timestamp": pl.Float64(),
              "input_length": pl.Int64(), "output_length": pl.Int64(), "type": pl.Utf8(),
              "turn": pl.Int64(), "hash_ids": pl.List(pl.Int64())}
    required = {"chat_id": int, "parent_chat_id": int, "timestamp": (int, float), "input_length": int,
                "output_length": int, "hash_ids": list}
    raw = _read_jsonl(path, schema, required)
    if raw["chat_id"].n_unique() != raw.height:
        dup = raw.with_row_index("_r").filter(pl.col("chat_id").is_duplicated())["_r"][1]
        raise ValueError(f"{path}:{_line_of_row(path, int(dup))}: field 'chat_id' repeats an earlier id")
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
        _chain_column(raw["hash_ids"]),
        pl.lit(BAILIAN_BLOCK_SIZE, dtype=pl.Int32).alias("block_size"),
        (pl.lit(traffic_class) if traffic_class else pl.col("type").fill_null("default")).alias("traffic_class"),
        pl.Series("session_id", sessions, dtype=pl.Utf8),
        pl.col("turn").cast(pl.Int32),
    )
    _check_lengths(df, path, rows_are_lines=True, strict_ceil=False)
    return _finish(df, str(path))


def _load_generic(path: Path, traffic_class: str | None, block_size: int | None) -> pl.DataFrame:
    suffix = path.suffix.lower()
    if suffix in (".parquet", ".pq"):
        lf = pl.scan_parquet(path)
        names = lf.collect_schema().names()
        keep = [c for c in ("request_id", "timestamp_s", "timestamp", "input_length", "output_length",
                            "token_ids", "block_ids", "block_size", "traffic_class", "session_id", "turn")
                if c in names]
        raw = lf.select(keep).collect()
    elif suffix == ".csv":
        raw = pl.read_csv(path)
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
            _scan_jsonl_for_error(path, {})
            raise ValueError(f"{path}: cannot read as JSONL ({exc})") from None
    if raw.height == 0:
        raise ValueError(f"{path}: the trace is empty (no requests)")
    where = (lambda r: f"{path}:{_line_of_row(path, r)}") if suffix not in (".parquet", ".pq", ".csv") \
        else (lambda r: f"{path}: row {r}")
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

    if "token_ids" in raw.columns:
        tokens = raw["token_ids"].to_list()
        bss = bs_col.to_list()
        chained, lengths = [], []
        for i, (toks, bs) in enumerate(zip(tokens, bss, strict=True)):
            if not toks:
                raise ValueError(f"{where(i)}: field 'token_ids' is empty")
            if any((not isinstance(t, int)) or t < 0 for t in toks):
                raise ValueError(f"{where(i)}: field 'token_ids' must hold integers >= 0")
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
        if (ids.explode().drop_nulls().cast(pl.Int64, strict=False) < 0).any():
            raise ValueError(f"{path}: field 'block_ids' must hold integers >= 0")
        blocks = _chain_column(ids)
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
    return _finish(df, str(path))


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
    fmt = _detect(path) if format == "auto" else format
    if fmt == "mooncake":
        return _load_mooncake(path, traffic_class)
    if fmt == "bailian":
        return _load_bailian(path, traffic_class)
    return _load_generic(path, traffic_class, block_size)


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
    rows = {c: [] for c in SCHEMA}
    t = 0
    for r in range(n_requests):
        t += int(rng.integers(0, max_gap_s + 1))
        nb = int(rng.integers(1, max_blocks + 1))
        content = tuple(int(x) for x in rng.integers(0, alphabet, nb))
        chain = [ids.setdefault(content[: k + 1], len(ids)) for k in range(nb)]
        rows["request_id"].append(r)
        rows["timestamp_s"].append(float(t))
        rows["input_length"].append((nb - 1) * block_size + int(rng.integers(1, block_size + 1)))
        rows["output_length"].append(int(rng.integers(0, 10)))
        rows["block_ids"].append(chain)
        rows["block_size"].append(block_size)
        rows["traffic_class"].append(classes[int(rng.integers(0, len(classes)))])
        rows["session_id"].append(None)
        rows["turn"].append(None)
    return validate_frame(pl.DataFrame(rows, schema=SCHEMA), source=f"random_trace(seed={seed})")
