"""The recompute-vs-load crossover as the CPU engine measured it (``tiered-kv bench ttft``).

A short prompt is faster recomputed than loaded from the SSD tier; the latency model says where
(:func:`tiered_kv.sim.cluster.latency.recompute_crossover_tokens`), and this module reads where
the benchmark found it: the median miss and cold SSD hit per prompt length of a ``bench ttft
--json`` record, and the length at which the two cross
(:func:`~tiered_kv.sim.cluster.latency.measured_crossover_tokens`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl

from tiered_kv import REPO_ROOT

#: The CPU engine's TTFT measurement (``tiered-kv bench ttft --json``, recorded by
#: ``tiered-kv bench record ttft``).
TTFT_JSON = REPO_ROOT / "benchmarks" / "results" / "ttft.json"
#: The same benchmark at short prompts (64-1,024 tokens, 32-token chunks and suffix), the run made
#: for the crossover: :func:`measured_crossover` reads it first when it exists.
TTFT_SHORT_JSON = TTFT_JSON.with_name("ttft_short.json")


def measured_crossover(path: Path | str | None = None) -> tuple[pl.DataFrame, str]:
    """(the CPU engine's median miss and cold SSD hit TTFT per prompt length, ms; a line with the
    crossover). The line says when a hit already wins at the shortest measured length (the
    crossover then lies below it). Without ``path``: the short-prompt run (:data:`TTFT_SHORT_JSON`)
    when there is one, else :data:`TTFT_JSON`."""
    if path is None:
        path = TTFT_SHORT_JSON if TTFT_SHORT_JSON.exists() else TTFT_JSON
    path = Path(path)
    if not path.exists():
        return pl.DataFrame(schema={"prompt_tokens": pl.Int64, "miss_ms": pl.Float64, "ssd_cold_hit_ms": pl.Float64}), \
            f"no measurement at {path} (run `tiered-kv bench ttft --json`)"
    return crossover_from_record(json.loads(path.read_text()), path.name)


def crossover_from_record(rec: dict, source: str) -> tuple[pl.DataFrame, str]:
    """:func:`measured_crossover` of a ``bench ttft --json`` record already read (``source`` names it)."""
    from tiered_kv.sim.cluster import latency as L

    table = pl.DataFrame([{"prompt_tokens": int(k), "miss_ms": v["miss_ms"], "ssd_cold_hit_ms": v["ssd_cold_hit_ms"]}
                          for k, v in rec["lengths"].items()]).sort("prompt_tokens")
    n = L.measured_crossover_tokens(table["prompt_tokens"], table["miss_ms"], table["ssd_cold_hit_ms"])
    first = int(table["prompt_tokens"][0])
    if math.isinf(n):
        line = "a cold SSD hit is never faster than a miss at the measured lengths"
    elif n <= first:
        line = (f"a cold SSD hit is already faster at the shortest measured prompt ({first:,} tokens): "
                f"the crossover lies below {first:,} tokens (not measured in this run)")
    else:
        line = f"crossover at about {n:,.0f} tokens (interpolated in log length)"
    lens = ", ".join(f"{int(n):,}" for n in table["prompt_tokens"])
    setup = (f"{rec.get('params', 0):,} parameters, {rec.get('fmt', '?')} KV in {rec.get('block_size_tokens', '?')}-token "
             f"chunks, prompts of {lens} tokens, medians of {rec.get('repeats', '?')} interleaved repeats; {source}")
    return table, f"CPU engine ({setup}): {line}"
