"""Retention policies, registered by name: ``lru``, ``ttl``, ``watermark``, ``belady``.

:mod:`.registry` sits at the bottom: the :class:`Policy` protocol, :class:`PolicyRun`, the
registry (:func:`register_policy`, :func:`get_policy`, :func:`policy_names`) and capacity
parsing; it imports no policy. Above it, one module per policy family, each with the numba
kernel it runs: :mod:`.lru` (``lru``, ``ttl``, ``watermark``: one kernel) and :mod:`.belady`
(MIN with bypass). Importing this package registers both families; plug-ins defined elsewhere
(kvcache.ai's prefix-trie policies in :mod:`tiered_kv.sim.peers`) register themselves into the
same registry. This package may import :mod:`tiered_kv.sim.replay` and :mod:`tiered_kv.units`,
nothing else of the simulator.
"""

from tiered_kv.sim.policies.belady import Belady, next_use
from tiered_kv.sim.policies.lru import LRU, TTL, Watermark, retention_quantiles, run_cache_kernel, ttl_vector
from tiered_kv.sim.policies.registry import (
    DEFAULT_BYTES_PER_TOKEN,
    Policy,
    PolicyRun,
    capacity_blocks,
    capacity_tokens_from,
    check_capacity,
    get_policy,
    policy_names,
    register_policy,
)

__all__ = [
    "DEFAULT_BYTES_PER_TOKEN", "LRU", "TTL", "Belady", "Policy", "PolicyRun", "Watermark", "capacity_blocks",
    "capacity_tokens_from", "check_capacity", "get_policy", "next_use", "policy_names", "register_policy",
    "retention_quantiles", "run_cache_kernel", "ttl_vector",
]
