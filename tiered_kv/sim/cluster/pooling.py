"""One shared SSD pool against per-machine SSD caches of the same total size, under every routing.

Figure 08 draws it over several total sizes and the cluster record tables it at one; both read
the rows of :func:`pool_vs_split`, so the comparison is defined once, below both.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any


def pool_vs_split(totals: Iterable[int], nodes: int = 10, unlimited: bool = False, trace: Any = None) -> list[dict]:
    """Per total SSD size (tokens) and routing: a shared pool of ``total`` tokens, ``nodes``
    per-machine caches of ``total // nodes`` each and (``unlimited``) an unlimited shared pool,
    on ``trace`` (default: the shipped Mooncake conversation trace). No GPU or host tier."""
    from tiered_kv.sim.cluster.model import ROUTINGS, ClusterConfig, simulate_cluster
    from tiered_kv.sim.trace_replay import compile_trace
    from tiered_kv.sim.traces import load_trace, shipped_trace

    trace = trace if trace is not None else compile_trace(load_trace(shipped_trace("conversation")))
    rows = []
    for total in totals:
        for routing in ROUTINGS:
            pools = [("shared", total), ("per-machine", total // nodes)] + [("shared", math.inf)] * unlimited
            for ssd, cap in pools:
                s = simulate_cluster(trace, ClusterConfig(nodes=nodes, routing=routing, ssd=ssd,
                                                          ssd_capacity_tokens=cap)).summary()
                rows.append({"total_ssd_tokens": total, "routing": routing, "ssd": ssd,
                             "ssd_capacity_tokens": None if math.isinf(cap) else cap,
                             "token_hit_rate": s["token_hit_rate"], "machine_load_imbalance": s["machine_load_imbalance"]})
    return rows
