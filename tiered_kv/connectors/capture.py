"""Trace capture: one JSONL line per request the connector looked up, in the simulator's format.

Each line is a generic trace record (:mod:`tiered_kv.sim.traces.generic`): ``timestamp_s`` (when
the scheduler first looked the request up), ``input_length`` (prompt tokens), ``block_ids`` (the
request's chained tier keys, full blocks only, as 63-bit integers: the same identity the tier
uses, so two requests share an id exactly when they share a stored chunk), ``block_size``,
``traffic_class``, and what the connector measured: ``hit_tokens`` (the tier's prefix hit at
lookup), ``local_tokens`` (vLLM's own prefix cache) and ``loaded_tokens`` (what it loaded from
the tier beyond that). The simulator ignores the measured fields; replaying the file with the
tier's capacity and policy must predict ``hit_tokens`` line for line.

A line is written with one ``write`` of a whole line in append mode, so a killed engine leaves at
most a torn last line, which the loader names by file and line.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass


@dataclass(frozen=True, kw_only=True)
class CapturedRequest:
    vllm_request_id: str
    timestamp_s: float
    input_length: int
    block_ids: list[int]
    block_size: int
    traffic_class: str
    hit_tokens: int
    local_tokens: int
    loaded_tokens: int


class TraceRecorder:
    """Appends :class:`CapturedRequest` lines to ``path`` (created with its folder if missing)."""

    def __init__(self, path: str) -> None:
        self.path = path
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)

    def record(self, request: CapturedRequest) -> None:
        line = json.dumps(asdict(request), separators=(",", ":")) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
