"""LMCache lookup-hash JSONL: write a trace in it, read a live server's logs into a trace frame.

LMCache's ``LookupHashLoggingSubscriber`` writes one line per ``MP_LOOKUP`` event to rotating
files ``lookup_hashes_<utc>_<n>.jsonl``::

    {"timestamp": 1711929600.123, "request_id": "req-abc", "model_name": "DeepSeek-V3",
     "chunk_size": 256, "seq_len": 1024, "dtypes": ["float8_e4m3fn"],
     "shapes": [[32, 256, 128]], "chunk_hashes": ["0xab...", ...]}

``chunk_hashes`` are LMCache's chained prefix hashes of the *complete* chunks only (a partial
tail is never stored), so ``len(chunk_hashes) == seq_len // chunk_size``. One chunk weighs
``sum(prod(shape) * bytes(dtype))`` bytes; LMCache's simulator turns a byte capacity into
``bytes // bytes_per_chunk`` chunks.

Writing: :func:`write_lookup_jsonl` exports any trace frame, so LMCache's own simulator can be
run on tiered-kv traces (``tiered-kv bench peers`` does). Reading: :func:`read_lookup_logs`
turns a user's logs (files or directories) into the frame of :mod:`tiered_kv.sim.traces`, so
every policy and curve here runs on a live LMCache server's traffic; replay them with
``--semantics lmcache`` to count as LMCache does.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # polars is imported by the functions that build or read frames
    import polars as pl

#: Bytes per element of the dtypes LMCache logs (the same table as its simulator).
DTYPE_BYTES: dict[str, int] = {"float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1,
                               "float8_e5m2": 1, "int8": 1, "int32": 4, "int64": 8}
_U64 = (1 << 64) - 1


def bytes_per_chunk(shapes: list[list[int]], dtypes: list[str]) -> int:
    """KV bytes of one chunk: the sum over its tensors of elements x bytes per element."""
    unknown = sorted({d for d in dtypes if d not in DTYPE_BYTES})
    if unknown:
        raise ValueError(f"dtypes: unknown {unknown}; known: {sorted(DTYPE_BYTES)}")
    if len(shapes) != len(dtypes):  # one dtype per tensor, or the sum would silently drop tensors
        raise ValueError(f"dtypes: {len(dtypes)} for {len(shapes)} tensor shapes; give one per tensor")
    return int(sum(math.prod(s) * DTYPE_BYTES[d] for s, d in zip(shapes, dtypes, strict=True)))


def chunk_layout(chunk_size: int, bytes_per_token: int, dtype: str = "bfloat16") -> tuple[list, list]:
    """(shapes, dtypes) describing one chunk of ``chunk_size`` tokens at ``bytes_per_token``."""
    per = DTYPE_BYTES[dtype]
    if bytes_per_token % per:
        raise ValueError(f"bytes_per_token: {bytes_per_token} is not a multiple of {dtype}'s {per} bytes")
    return [[int(chunk_size), int(bytes_per_token // per)]], [dtype]


def hash_to_u64(text: str) -> int:
    """A logged chunk hash as a 64-bit id: the value itself when it fits, else a blake2b digest."""
    try:
        value = int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        value = -1
    if 0 <= value <= _U64:
        return value
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def write_lookup_jsonl(df: pl.DataFrame, path: str | Path, *, model_name: str = "tiered-kv",
                       bytes_per_token: int = 2, dtype: str = "bfloat16",
                       epoch_s: float = 0.0) -> Path:
    """Write a trace frame as LMCache lookup-hash JSONL (one event per request, frame order).

    Only complete chunks are listed (as a real server logs them); the chained block ids become
    ``0x``-hex hashes; ``timestamp`` is ``epoch_s + timestamp_s``. ``bytes_per_token`` and
    ``dtype`` set the ``shapes``/``dtypes`` fields and so the bytes per chunk LMCache derives.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    cols = df.select("request_id", "timestamp_s", "input_length", "block_size", "block_ids")
    with path.open("w", encoding="utf-8") as fh:
        for rid, ts, length, bs, ids in cols.iter_rows():
            shapes, dtypes = chunk_layout(bs, bytes_per_token, dtype)
            full = int(length) // int(bs)
            fh.write(json.dumps({
                "timestamp": float(epoch_s + ts), "request_id": str(rid), "model_name": model_name,
                "chunk_size": int(bs), "seq_len": int(length), "dtypes": dtypes, "shapes": shapes,
                "chunk_hashes": [hex(int(h)) for h in ids[:full]],
            }) + "\n")
    return path


def _log_files(paths: Iterable[str | Path]) -> list[Path]:
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.glob("lookup_hashes_*.jsonl"))
            if not found:
                raise FileNotFoundError(f"{p}: no lookup_hashes_*.jsonl files in this directory")
            files += found
        elif p.exists():
            files.append(p)
        else:
            raise FileNotFoundError(f"{p}: no such file or directory")
    return files


def read_lookup_logs(paths: str | Path | Iterable[str | Path], *, model: str | None = None,
                     traffic_class: str | None = None) -> pl.DataFrame:
    """LMCache lookup-hash logs -> a validated trace frame (:data:`tiered_kv.sim.traces.SCHEMA`).

    Files are read in name order and lines in file order; ``request_id`` numbers them in that
    order, ``timestamp_s`` is relative to the earliest event (so timestamp order matches
    LMCache's sort). ``model`` keeps one ``model_name``; the traffic class is ``traffic_class``
    or the model name. Events without hashes and with ``seq_len == 0`` are skipped, as LMCache
    does. A malformed line is an error naming file, line and field.
    """
    return read_lookup_logs_counted(paths, model=model, traffic_class=traffic_class)[0]


def read_lookup_logs_counted(paths: str | Path | Iterable[str | Path], *, model: str | None = None,
                             traffic_class: str | None = None, drop_partial_hash: bool = False
                             ) -> tuple[pl.DataFrame, int]:
    """:func:`read_lookup_logs` and the number of hashes it dropped.

    ``drop_partial_hash``: an event listing one hash more than its complete chunks (a hash for
    the partial last chunk, as LMCache's converter writes in its "all" mode) loses that hash,
    which can never hit; the count is taken before the model filter (0 without the option).
    """
    import polars as pl

    from tiered_kv.sim.traces import SCHEMA, validate_frame

    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    rows, dropped = [], 0
    for where, ev in _events(paths):
        if drop_partial_hash and _has_partial_hash(ev):
            ev["chunk_hashes"] = ev["chunk_hashes"][:-1]
            dropped += 1
        if (model is None or ev.get("model_name") == model) \
                and (row := _event_row(ev, where, traffic_class)) is not None:
            rows.append(row)
    if not rows:
        raise ValueError(f"{[str(p) for p in paths]}: no lookup events (after the model filter)")
    ts = np.array([r[0] for r in rows])
    n = len(rows)
    df = pl.DataFrame({
        "request_id": np.arange(n, dtype=np.int64), "timestamp_s": ts - ts.min(),
        "input_length": [r[1] for r in rows], "output_length": [0] * n, "block_ids": [r[2] for r in rows],
        "block_size": [r[3] for r in rows], "traffic_class": [r[4] for r in rows],
        "session_id": [None] * n, "turn": [None] * n,
    }, schema=SCHEMA)
    order = np.argsort(ts, kind="stable")
    if not np.array_equal(order, np.arange(n)):
        df = df[order.tolist()]
    df = validate_frame(df, source=str(paths[0]) if len(paths) == 1 else "lmcache logs")
    return df, dropped


def _events(paths: list[Path]) -> Iterator[tuple[str, dict]]:
    """Every non-blank line of the log files as ``("file:line", event)``, files in name order."""
    for f in _log_files(paths):
        with f.open(encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, start=1):
                line = line.strip()
                if not line:
                    continue
                try:
                    ev = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{f}:{lineno}: not valid JSON ({exc.msg})") from None
                yield f"{f}:{lineno}", ev


def _event_row(ev: dict, where: str, traffic_class: str | None) -> tuple | None:
    """One checked event as (timestamp, seq_len, chunk ids, chunk size, class); None for an event
    LMCache skips too (no hashes and ``seq_len == 0``)."""
    for name in ("timestamp", "chunk_size", "seq_len", "chunk_hashes"):
        if name not in ev:
            raise ValueError(f"{where}: field {name!r} is missing")
    hashes, seq_len, cs = ev["chunk_hashes"], ev["seq_len"], ev["chunk_size"]
    if not isinstance(hashes, list):
        raise ValueError(f"{where}: field 'chunk_hashes' must be a list")
    if not isinstance(cs, int) or cs < 1:
        raise ValueError(f"{where}: field 'chunk_size' must be an integer >= 1, got {cs!r}")
    if not isinstance(seq_len, int) or seq_len < 0:
        raise ValueError(f"{where}: field 'seq_len' must be an integer >= 0, got {seq_len!r}")
    if not hashes and seq_len == 0:
        return None
    if len(hashes) != seq_len // cs:
        raise ValueError(f"{where}: field 'chunk_hashes' has {len(hashes)} hashes; "
                         f"seq_len {seq_len} // chunk_size {cs} = {seq_len // cs}")
    return (float(ev["timestamp"]), int(seq_len), [hash_to_u64(str(h)) for h in hashes],
            cs, traffic_class or str(ev.get("model_name") or "lmcache"))


def _has_partial_hash(ev) -> bool:
    if not isinstance(ev, dict):
        return False
    hashes, seq_len, cs = ev.get("chunk_hashes"), ev.get("seq_len"), ev.get("chunk_size")
    return (isinstance(hashes, list) and isinstance(seq_len, int) and isinstance(cs, int) and cs >= 1
            and seq_len % cs != 0 and len(hashes) == seq_len // cs + 1)
