"""Traces: read a request trace once, check it once, and hand the simulator one polars frame.

Every loader produces the frame of :data:`SCHEMA` (one row per request, chained block ids;
:mod:`.schema`), validated by :func:`validate_frame`; everything downstream trusts that frame.
One module per format: :mod:`.mooncake` (Mooncake FAST'25 JSONL), :mod:`.bailian` (Alibaba
Bailian JSONL), :mod:`.generic` (JSONL, CSV or Parquet with token or block ids); :mod:`.load`
detects the format (:func:`load_trace`), :mod:`.shipped` names the traces in ``data/traces``,
:mod:`.examples` draws small random traces for tests. This package may import
:mod:`tiered_kv.keys` and :data:`tiered_kv.DATA_DIR`, nothing else of ``tiered_kv``: it is the
bottom of :mod:`tiered_kv.sim`.
"""

from tiered_kv.sim.traces.bailian import BAILIAN_BLOCK_SIZE, load_bailian
from tiered_kv.sim.traces.examples import random_trace
from tiered_kv.sim.traces.generic import load_generic
from tiered_kv.sim.traces.load import FORMATS, detect_format, load_trace
from tiered_kv.sim.traces.mooncake import MOONCAKE_BLOCK_SIZE, load_mooncake
from tiered_kv.sim.traces.schema import SCHEMA, validate_frame
from tiered_kv.sim.traces.shipped import SHIPPED, default_class_for, resolve_trace_path, shipped_trace

__all__ = [
    "BAILIAN_BLOCK_SIZE", "FORMATS", "MOONCAKE_BLOCK_SIZE", "SCHEMA", "SHIPPED", "default_class_for",
    "detect_format", "load_bailian", "load_generic", "load_mooncake", "load_trace", "random_trace",
    "resolve_trace_path", "shipped_trace", "validate_frame",
]
