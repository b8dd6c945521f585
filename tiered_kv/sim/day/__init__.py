"""A DeepSeek-scale day: 608 B input tokens (about 1.2 billion block accesses) on one machine.

:mod:`.shards` draws the day with the calibrated synthetic workload in independent parts, in
parallel processes, straight into a Parquet dataset (one file per part and hour, with a manifest),
so the day is never whole in memory; :mod:`.stream` replays it hour by hour (polars lazy scans)
through any number of LRU capacities and per-class TTLs in one pass over shared per-block state.
This package may import :mod:`tiered_kv.sim.workload`, :mod:`tiered_kv.units` and
:mod:`tiered_kv.rusage` only.
"""

from tiered_kv.sim.day.shards import DEEPSEEK_INPUT_TOKENS_PER_DAY, DayConfig, generate_day, read_manifest
from tiered_kv.sim.day.stream import replay_day

__all__ = ["DEEPSEEK_INPUT_TOKENS_PER_DAY", "DayConfig", "generate_day", "read_manifest", "replay_day"]
