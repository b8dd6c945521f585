"""Traces: read a request trace once, check it once, and hand the simulator one polars frame.

Every loader produces the frame of :data:`SCHEMA` (one row per request, chained block ids;
:mod:`.schema`), validated by :func:`validate_frame`; everything downstream trusts that frame.
One module per format: :mod:`.mooncake` (Mooncake FAST'25 JSONL), :mod:`.bailian` (Alibaba
Bailian JSONL), :mod:`.generic` (JSONL, CSV or Parquet with token or block ids); :mod:`.load`
detects the format (:func:`load_trace`), :mod:`.shipped` names the traces in ``data/traces``,
:mod:`.examples` draws small random traces for tests, :mod:`.transforms` changes a trace's prompt
layout (a volatile per-call line at depth d: :func:`insert_volatile_block`). This package may import
:mod:`tiered_kv.keys` and :data:`tiered_kv.DATA_DIR`, nothing else of ``tiered_kv``: it is the
bottom of :mod:`tiered_kv.sim`. Its names load on first use (polars only with the first frame),
so resolving a shipped trace's path costs no polars import.
"""

from __future__ import annotations

import importlib

#: Public name -> the module of this package that defines it.
_EXPORTS = {
    "random_trace": "examples",
    "FORMATS": "load", "detect_format": "load", "load_trace": "load",
    "SCHEMA": "schema", "validate_frame": "schema",
    "insert_volatile_block": "transforms",
    "SHIPPED": "shipped", "default_class_for": "shipped", "resolve_trace_path": "shipped", "shipped_trace": "shipped",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
