"""The cluster: machines with three KV tiers under a routing policy, and what a request waits for.

:mod:`.model` replays a trace over the machines' tiers (its numba kernels: :mod:`.lru_tiers`);
:mod:`.latency` turns hits into time and money (TTFT, one shared read queue, admission, cost per
million tokens); :mod:`.contention` is the scenario of ``tiered-kv bench contention`` and the
model's prediction of it; :mod:`.shared_compute` the queue model whose streams share cores and the
admission rules it and the benchmark's dispatcher call; :mod:`.tail_stats` the statistics of
repeated runs; :mod:`.pooling` and :mod:`.disk_day` the runs that a figure and the cluster record
both read. This package may import :mod:`tiered_kv.sim.trace_replay` and :mod:`tiered_kv.sim.heap`
(and run any policy object of :mod:`tiered_kv.sim.policies` it is given); nothing below it imports it.
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
