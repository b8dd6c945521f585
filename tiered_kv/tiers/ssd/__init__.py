"""The SSD tier: global KV as prefix-keyed FP4 chunks on a local directory, a zarr store or a bucket.

One idea per module, read bottom up: :mod:`.layout` (what is stored where); :mod:`.backend` (the
one interface every store implements, and the one place a store's kind is decided), implemented
by :mod:`.zarr_backend` and :mod:`.object_backend`; :mod:`.bandwidth` (emulated link bandwidth,
a wrapper around any backend); :mod:`.usage` (the multi-writer ledger that bounds capacity);
:mod:`.retention` (what GC keeps, a pure plan), :mod:`.scan` and :mod:`.maintenance` (stats,
verify, gc of a whole store); :mod:`.config` and :mod:`.tier` (:class:`SSDTier`).
"""

from __future__ import annotations

from tiered_kv.tiers.ssd.backend import Backend, open_backend
from tiered_kv.tiers.ssd.config import SSDConfig
from tiered_kv.tiers.ssd.maintenance import store_gc, store_stats, store_verify
from tiered_kv.tiers.ssd.object_backend import StoreAccessError
from tiered_kv.tiers.ssd.retention import RetentionPolicy
from tiered_kv.tiers.ssd.tier import Hit, SSDTier, StoreFullWarning

__all__ = ["Backend", "Hit", "RetentionPolicy", "SSDConfig", "SSDTier", "StoreAccessError", "StoreFullWarning",
           "open_backend", "store_gc", "store_stats", "store_verify"]
