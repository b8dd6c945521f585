"""The test suite every SSD-tier backend must pass, plus fault-injecting store wrappers.

Use it like zarr's ``StoreTests``: subclass :class:`SSDTierSuite` in a test module and give it
a ``make_store`` fixture returning a fresh, empty zarr v3 Store (``tests/test_ssd_store.py``
runs it for MemoryStore and LocalStore, ``tests/test_ssd_s3.py`` for S3). Every test drives
time through an injected clock.

One idea per module; this package puts the parts together and re-exports every public name,
so ``from tiered_kv.testing.store_suite import ...`` reaches all of them:

- :mod:`.base`: the clock, namespace, KV and FP4 reference, and the ``make_store`` fixture;
- :mod:`.contract`: round trip, longest prefix, namespaces, layout, bad settings and inputs;
- :mod:`.retention`: TTLs, watermark eviction, GC and the usage accounting;
- :mod:`.faults` with :mod:`.faulty_stores`: corruption, a full disk, chunks vanishing mid-read;
- :mod:`.workers`: what the multi-process tests (several writers, readers and GC instances on one
  store; a writer killed mid-put; a capacity bound; a shared bandwidth limit) run in children.
"""

from __future__ import annotations

from tiered_kv.testing.store_suite.base import (
    BS,
    DAY,
    Clock,
    SuiteBase,
    make_kv,
    make_tier,
    namespace,
    reference_kv,
)
from tiered_kv.testing.store_suite.contract import ContractTests
from tiered_kv.testing.store_suite.faults import FaultTests
from tiered_kv.testing.store_suite.faulty_stores import (
    FullDiskStore,
    SyncFullDiskStore,
    SyncVanishingStore,
    VanishingStore,
)
from tiered_kv.testing.store_suite.retention import RetentionTests
from tiered_kv.testing.store_suite.workers import (
    CAPACITY_BLOCKS,
    STRESS_PROMPTS,
    bandwidth_reader,
    capacity_namespace,
    capacity_writer,
    kill_namespace,
    kill_target,
    open_spec,
    stress_kv,
    stress_references,
    stress_tokens,
    stress_worker,
)


class SSDTierSuite(FaultTests, RetentionTests, ContractTests):
    """Behaviour every backend must show. Subclasses provide the ``make_store`` fixture.

    (pytest collects base classes' tests in reverse MRO order: contract, retention, faults.)
    """


__all__ = [
    "BS", "CAPACITY_BLOCKS", "DAY", "STRESS_PROMPTS", "Clock", "ContractTests", "FaultTests", "FullDiskStore",
    "RetentionTests", "SSDTierSuite", "SuiteBase", "SyncFullDiskStore", "SyncVanishingStore", "VanishingStore",
    "bandwidth_reader", "capacity_namespace", "capacity_writer", "kill_namespace", "kill_target", "make_kv", "make_tier",
    "namespace", "open_spec", "reference_kv", "stress_kv", "stress_references", "stress_tokens", "stress_worker",
]
