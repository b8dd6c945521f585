"""Retention policies, registered by name: ``lru``, ``ttl``, ``watermark``, ``belady`` and the zoo.

:mod:`.registry` sits at the bottom (the :class:`Policy` protocol, :class:`PolicyRun`, the
registry, capacities) and imports no policy; :mod:`.blockwise` holds what the zoo shares. Above
them, one module per policy family, each with the numba kernel it runs; :mod:`.admission` holds
the filters any zoo policy takes, :mod:`.plugin` the small-class API for user policies
(docs/policies.md). Importing this package registers every family. This package may import
:mod:`tiered_kv.sim.trace_replay` and :mod:`tiered_kv.units`, nothing else of the simulator.
"""

from tiered_kv.sim.policies.admission import AdmitAll, AllOf, SecondSighting, WritePoints, get_admission
from tiered_kv.sim.policies.belady import Belady, BeladyNoBypass, next_use
from tiered_kv.sim.policies.blockwise import BlockPolicy, leading_runs, wear
from tiered_kv.sim.policies.collectors import GCLRU, Collector, GCQuotas, GCTTLPriority, GCWeighted, Watermark
from tiered_kv.sim.policies.fifo import FIFO, S3FIFO, Sieve
from tiered_kv.sim.policies.frequency import GDSF, LFU
from tiered_kv.sim.policies.lru import LRU, TTL, retention_quantiles, run_cache_kernel
from tiered_kv.sim.policies.plugin import (
    PluginPolicy,
    load_policy_file,
    make_policy,
    parse_policy_spec,
    plugin_parameters,
)
from tiered_kv.sim.policies.registry import (
    Policy,
    PolicyRun,
    capacity_blocks,
    capacity_tokens_from,
    check_capacity,
    get_policy,
    policy_names,
    register_policy,
)
from tiered_kv.sim.policies.segmented import ARC, SLRU, TwoQ
from tiered_kv.sim.policies.weighted import ClassLRU

#: The zoo's registered names, in the order tables and charts list them.
ZOO = ("fifo", "lfu", "arc", "slru", "2q", "s3fifo", "sieve", "gdsf", "class-lru")

__all__ = [
    "ARC", "AdmitAll", "AllOf", "Belady", "BeladyNoBypass", "BlockPolicy", "ClassLRU", "Collector",
    "FIFO", "GCLRU", "GCQuotas", "GCTTLPriority", "GCWeighted", "GDSF", "LFU",
    "LRU", "PluginPolicy", "Policy", "PolicyRun", "S3FIFO", "SLRU", "SecondSighting", "Sieve", "TTL",
    "TwoQ", "Watermark", "WritePoints", "ZOO", "capacity_blocks", "capacity_tokens_from",
    "check_capacity", "get_admission", "get_policy", "leading_runs", "load_policy_file", "make_policy",
    "next_use", "parse_policy_spec", "plugin_parameters", "policy_names", "register_policy",
    "retention_quantiles", "run_cache_kernel", "wear",
]
