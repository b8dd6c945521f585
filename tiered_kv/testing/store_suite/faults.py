"""Faults an SSD-tier store must survive: corruption, a full disk, chunks vanishing mid-read.

The faults come from wrappers around any zarr v3 Store, so they run on every backend. They keep
keys (``keeps_keys``), so a faulted LocalStore still opens as the local-directory backend, and
the ``Sync*`` variants add zarr's sync API, so the tier's sync path is faulted too. Processes
killed mid-write and several processes at once are in the tests that spawn :mod:`.workers`.
"""

from __future__ import annotations

import errno
import warnings

import pytest
import torch
from zarr.core.sync import sync
from zarr.storage import WrapperStore

from tiered_kv.keys import DEFAULT_FORMAT, block_keys
from tiered_kv.testing.store_suite.base import SuiteBase, make_kv, namespace, reference_kv
from tiered_kv.tiers.ssd import StoreFullWarning, layout


def read_object(store, path: str) -> bytes:
    """An object's bytes straight from the zarr store (what a fault test then damages)."""
    return sync(store.get(path, prototype=layout.default_buffer_prototype())).to_bytes()


def write_object(store, path: str, data: bytes) -> None:
    sync(store.set(path, layout.buffer(bytes(data))))


class FullDiskStore(WrapperStore):
    """Raises ENOSPC on any write once ``budget`` payload bytes have been written."""

    keeps_keys = True  # every key passes on unchanged (tiered_kv.tiers.ssd.backend._local_root)

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

    keeps_keys = True

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


class FaultTests(SuiteBase):
    """Corruption, full disks, vanishing chunks and a damaged root."""

    @pytest.mark.parametrize("damage", ["flip_payload", "flip_header", "truncate", "empty", "swap"])
    def test_corruption_is_a_counted_miss_and_removed(self, make_store, damage):
        store = make_store()
        t = self.tier(store)
        toks = torch.arange(24)
        t.put(toks, make_kv(24), "c")
        keys = block_keys(toks, t.namespace)
        path = layout.chunk_path(keys[1])
        data = bytearray(read_object(store, path))
        if damage == "flip_payload":
            data[-10] ^= 0x01
        elif damage == "flip_header":
            data[40] ^= 0x20
        elif damage == "truncate":
            data = data[: len(data) // 2]
        elif damage == "empty":
            data = bytearray()
        else:  # a valid chunk under the wrong key
            data = read_object(store, layout.chunk_path(keys[2]))
        write_object(store, path, data)
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            assert t.get_prefix(toks).blocks == 1
        assert t.counters["corrupt_removed"] == 1
        assert not t.contains(keys[1])
        assert t.put(toks, make_kv(24), "c") == 1  # healed by the next put
        assert t.get_prefix(toks).blocks == 3

    def test_verify_finds_and_removes_corruption(self, make_store):
        store = make_store()
        t = self.tier(store)
        t.put(torch.arange(24), make_kv(24), "c")
        path = layout.chunk_path(block_keys(torch.arange(24), t.namespace)[2])
        data = bytearray(read_object(store, path))
        data[-1] ^= 0xFF
        write_object(store, path, data)
        report = t.verify()
        assert report["chunks_ok"] == 2 and [p for p, _ in report["corrupt"]] == [path]
        assert t.verify()["corrupt"] == []

    @pytest.mark.parametrize("wrapper", [VanishingStore, SyncVanishingStore])
    def test_chunk_evicted_while_reading_is_a_miss(self, make_store, wrapper):
        store = make_store()
        toks = torch.arange(32)
        self.tier(store).put(toks, make_kv(32), "c")
        keys = block_keys(toks, namespace())
        t = self.tier(wrapper(store, {layout.chunk_path(keys[2])}))
        hit = t.get_prefix(toks)
        assert hit.blocks == 2 and torch.equal(hit.kv(), reference_kv(make_kv(32)[:16], DEFAULT_FORMAT))

    @pytest.mark.parametrize("wrapper", [FullDiskStore, SyncFullDiskStore])
    def test_enospc_warns_and_keeps_what_was_stored(self, make_store, wrapper):
        base = make_store()
        good = self.tier(base)
        good.put(torch.arange(16), make_kv(16), "c")
        one = good.stats()["bytes"] // 2
        full = wrapper(base, budget=int(2.5 * one))
        t = self.tier(full)
        toks = torch.arange(16, 80)  # 8 blocks, room for 2
        with pytest.warns(StoreFullWarning, match="full"):
            written = t.put(toks, make_kv(64), "c")
        assert written <= 2 and t.get_prefix(toks).blocks == written
        assert t.stats()["chunks"] == 2 + written  # nothing unreachable left behind
        assert torch.equal(t.get_prefix(torch.arange(16)).kv(), reference_kv(make_kv(16), DEFAULT_FORMAT))

    @pytest.mark.parametrize("wrapper", [FullDiskStore, SyncFullDiskStore])
    def test_full_disk_never_fails_a_read(self, make_store, wrapper):
        base = make_store()
        self.tier(base).put(torch.arange(24), make_kv(24), "c")
        t = self.tier(wrapper(base, budget=0))  # background_touch=False: the record is written inline
        with pytest.warns(StoreFullWarning, match="access record"):
            hit = t.get_prefix(torch.arange(24), "c")
        assert hit.blocks == 3 and torch.equal(hit.kv(), reference_kv(make_kv(24), DEFAULT_FORMAT))
        assert t.counters["touch_errors"] == 1
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert t.get_prefix(torch.arange(100, 108)).blocks == 0  # a miss writes nothing

    @pytest.mark.parametrize("wrapper", [FullDiskStore, SyncFullDiskStore])
    def test_new_namespace_on_a_full_disk_warns(self, make_store, wrapper):
        base = make_store()
        self.tier(base).put(torch.arange(16), make_kv(16), "c")
        with pytest.warns(StoreFullWarning, match="metadata of namespace"):
            t = self.tier(wrapper(base, budget=0), fmt="nvfp4")
        assert t.get_prefix(torch.arange(16)).blocks == 0
        with pytest.warns(StoreFullWarning, match="full"):
            assert t.put(torch.arange(16), make_kv(16), "c") == 0
        assert self.tier(base).get_prefix(torch.arange(16)).blocks == 2  # the other namespace is intact

    @pytest.mark.parametrize("garbage", [b"\x00garbage{", b'{"zarr_format": 2}', b"[]"])
    def test_garbage_root_zarr_json_is_detected_and_rewritten(self, make_store, garbage):
        import zarr

        from tiered_kv.tiers.ssd import open_backend, store_verify

        store = make_store()
        self.tier(store).put(torch.arange(16), make_kv(16), "c")
        write_object(store, "zarr.json", garbage)
        backend = open_backend(store)
        report = store_verify(backend, repair=False)
        assert report["problems"] == 1 and report["metadata"][0][0] == "zarr.json"
        report = store_verify(backend)
        assert report["problems"] == 1 and store_verify(backend)["problems"] == 0
        assert zarr.open_group(store, mode="r").attrs["tiered_kv"]["layout"] == layout.LAYOUT
        write_object(store, "zarr.json", garbage)
        with pytest.warns(RuntimeWarning, match="repaired zarr.json"):
            t = self.tier(store)  # a tier opening the store repairs it too
        assert t.counters["repaired"] == 1 and t.get_prefix(torch.arange(16)).blocks == 2
        assert zarr.open_group(store, mode="r").attrs["tiered_kv"]["layout"] == layout.LAYOUT
