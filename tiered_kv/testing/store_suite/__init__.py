"""The test suite every SSD-tier backend must pass, plus fault-injecting store wrappers.

Use it like zarr's ``StoreTests``: subclass :class:`SSDTierSuite` and give it a ``make_store``
fixture returning a fresh, empty zarr v3 Store (``tests/test_ssd_store.py``, ``tests/test_ssd_s3.py``).
Every test drives time through an injected clock; every public name of the parts is re-exported here.
"""

from __future__ import annotations

from tiered_kv.testing.store_suite.base import (
    BS,
    Clock,
    SuiteBase,
    make_kv,
    make_tier,
    namespace,
    reference_kv,
)
from tiered_kv.testing.store_suite.contract import ContractTests
from tiered_kv.testing.store_suite.faults import (
    FaultTests,
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
    "BS", "CAPACITY_BLOCKS", "STRESS_PROMPTS", "Clock", "ContractTests", "FaultTests", "FullDiskStore",
    "RetentionTests", "SSDTierSuite", "SuiteBase", "SyncFullDiskStore", "SyncVanishingStore", "VanishingStore",
    "bandwidth_reader", "capacity_namespace", "capacity_writer", "kill_namespace", "kill_target", "make_kv", "make_tier",
    "namespace", "open_spec", "reference_kv", "stress_kv", "stress_references", "stress_tokens", "stress_worker",
]
