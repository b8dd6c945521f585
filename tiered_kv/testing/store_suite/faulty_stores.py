"""Fault-injecting store wrappers (a disk that fills up, objects that vanish before a read), and
raw object access for damaging chunks.

They wrap any zarr v3 Store, so the fault tests (:mod:`.faults`) run on every backend the
suite runs on; the ``Sync*`` variants add zarr's sync API so the tier's sync path is faulted too.
"""

from __future__ import annotations

import errno

from zarr.core.sync import sync
from zarr.storage import WrapperStore

from tiered_kv.tiers.ssd import layout


def read_object(store, path: str) -> bytes:
    """An object's bytes straight from the zarr store (what a fault test then damages)."""
    return sync(store.get(path, prototype=layout.default_buffer_prototype())).to_bytes()


def write_object(store, path: str, data: bytes) -> None:
    sync(store.set(path, layout.buffer(bytes(data))))


class FullDiskStore(WrapperStore):
    """Raises ENOSPC on any write once ``budget`` payload bytes have been written."""

    def __init__(self, store, budget: int) -> None:
        super().__init__(store)
        self.budget = budget

    async def set(self, key, value) -> None:
        if len(value) > self.budget:
            raise OSError(errno.ENOSPC, "No space left on device", key)
        self.budget -= len(value)
        await self._store.set(key, value)


class VanishingStore(WrapperStore):
    """Deletes an object right before it is read, as a concurrent GC would."""

    def __init__(self, store, victims: set[str]) -> None:
        super().__init__(store)
        self.victims = victims

    async def get(self, key, prototype=None, byte_range=None):
        if key in self.victims:
            await self._store.delete(key)
        return await self._store.get(key, prototype, byte_range)


class _SyncAPI:
    """Adds zarr's sync API (SupportsSyncStore) to a wrapper, so the tier's sync path runs."""

    def get_sync(self, key, *, prototype=None, byte_range=None):
        return sync(self.get(key, prototype, byte_range))

    def set_sync(self, key, value) -> None:
        sync(self.set(key, value))

    def delete_sync(self, key) -> None:
        sync(self.delete(key))


class SyncFullDiskStore(_SyncAPI, FullDiskStore):
    pass


class SyncVanishingStore(_SyncAPI, VanishingStore):
    pass
