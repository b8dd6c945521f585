"""The cluster: machines with three KV tiers under a routing policy, and what a request waits for.

:mod:`.model` replays a trace request by request over ``nodes`` machines, each with a GPU
prefix tier and a host window tier, and an SSD tier shared by all (or one per machine);
:mod:`.lru_tiers` holds its numba kernels (many LRU caches over one slot pool). :mod:`.latency`
turns hits into time and money (TTFT, one shared read queue, admission, cost per million tokens).
:mod:`.contention` is the scenario of ``tiered-kv bench contention`` and the model's prediction of
it; :mod:`.shared_compute` the queue model whose streams share cores (processor sharing) and the
admission rules it and the benchmark's dispatcher call; :mod:`.tail_stats` the statistics of
repeated runs; :mod:`.pooling` and :mod:`.disk_day` the runs that a figure and the cluster record
both read. This package may import :mod:`tiered_kv.sim.trace_replay` and :mod:`tiered_kv.sim.heap`
(and run any policy object of :mod:`tiered_kv.sim.policies` it is given); nothing below it imports
it.
"""

from tiered_kv.sim.cluster.model import (
    ROUTINGS,
    V3_KV_BYTES_PER_TOKEN,
    ClusterConfig,
    cluster_run,
    over_time,
    simulate_cluster,
    summarize,
)

__all__ = [
    "ROUTINGS", "V3_KV_BYTES_PER_TOKEN", "ClusterConfig", "cluster_run", "over_time", "simulate_cluster", "summarize",
]
