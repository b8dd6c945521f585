"""Retention economics: hit tokens against stored byte-days, the oracle frontier, the best TTLs.

:mod:`.gaps` holds the cost model (a chunk costs its bytes times the time it is kept) and the one
pass over reuse gaps that the rest reads; :mod:`.ttl` answers per-class TTL curves for every
TTL at once and chooses the best per-class (or shared) TTLs for an SSD capacity; :mod:`.frontier`
is the offline-optimal retention frontier (exact at its breakpoints, with the proof);
:mod:`.occupancy` counts peak stored bytes and the watermark view; :mod:`.settings` evaluates any
per-class TTL / capacity / watermark setting from one table (the retention dashboard's sliders);
:mod:`.report` runs one whole analysis for the CLI, the benchmark and figure 11; :mod:`.one_watermark`
what one watermark collector does to each class; :mod:`.write_points` where to write. This
package may import :mod:`tiered_kv.sim.trace_replay` and the LRU kernel, ``leading_runs`` and
``watermark`` collector of :mod:`tiered_kv.sim.policies`; nothing below it imports it.
"""

from tiered_kv.sim.retention.frontier import Frontier, oracle_frontier
from tiered_kv.sim.retention.gaps import StorageModel, default_bytes_per_token, reuse_gaps
from tiered_kv.sim.retention.ttl import TTLChoice, TTLModel, best_shared_ttl, evaluate, optimal_ttls
from tiered_kv.units import DAY_S

__all__ = [
    "DAY_S", "Frontier", "StorageModel", "TTLChoice", "TTLModel", "best_shared_ttl", "default_bytes_per_token",
    "evaluate", "optimal_ttls", "oracle_frontier", "reuse_gaps",
]
