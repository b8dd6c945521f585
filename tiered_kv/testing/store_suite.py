"""The test suite every SSD-tier backend must pass, plus fault-injecting store wrappers.

Use it like zarr's ``StoreTests``: subclass :class:`SSDTierSuite` in a test module and give it
a ``make_store`` fixture returning a fresh, empty zarr v3 Store (``tests/test_ssd_store.py``
runs it for MemoryStore and LocalStore). Every test drives time through an injected clock.
"""

from __future__ import annotations

import errno
import math
import re
import warnings

import pytest
import torch
from zarr.core.sync import sync
from zarr.storage import WrapperStore

from tiered_kv.keys import Namespace, block_keys
from tiered_kv.tiers import ssd_layout as layout
from tiered_kv.tiers.ssd import SSDTier, StoreFullWarning

BS = 8
DAY = 86400.0


class Clock:
    """A settable clock (seconds) to inject into SSDTier."""

    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


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

    async def set_if_not_exists(self, key, value) -> None:
        if not await self._store.exists(key):
            await self.set(key, value)


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


def namespace(fmt: str = "mxfp4") -> Namespace:
    return Namespace(model="suite-model", fmt=fmt, block_size=BS, kv_heads=2, head_dim=32)


def make_kv(n: int, seed: int = 0, dtype=torch.float32) -> torch.Tensor:
    """KV with magnitudes spread over tokens (what breaks a per-tensor NVFP4 scale)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, 2, 32, generator=g)
    return (x * torch.logspace(-2, 2, n)[:, None, None, None]).to(dtype)


def reference_kv(kv: torch.Tensor, fmt: str) -> torch.Tensor:
    """Block-by-block FP4 round trip: what the tier must return, bit for bit."""
    from tiered_kv.kernels import fp4

    return torch.cat([fp4.dequantize(fp4.quantize(kv[i:i + BS].contiguous(), fmt))
                      for i in range(0, kv.shape[0] - kv.shape[0] % BS, BS)])


class SSDTierSuite:
    """Behaviour every backend must show. Subclasses provide the ``make_store`` fixture."""

    @pytest.fixture
    def make_store(self):  # pragma: no cover - overridden
        raise NotImplementedError

    def tier(self, store, clock=None, fmt="mxfp4", **kw) -> SSDTier:
        return SSDTier(store, namespace=namespace(fmt), clock=clock or Clock(), background_touch=False, **kw)

    # ---------------------------------------------------------------- round trip and prefixes

    @pytest.mark.parametrize("fmt", ["mxfp4", "nvfp4"])
    @pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
    def test_round_trip_is_the_fp4_reference(self, make_store, fmt, dtype):
        t = self.tier(make_store(), fmt=fmt)
        toks = torch.arange(37)
        kv = make_kv(37, dtype=dtype)
        assert t.put(toks, kv, "chat") == 4  # 37 tokens -> 4 full blocks, tail not stored
        hit = t.get_prefix(toks)
        assert (hit.hit_tokens, hit.blocks) == (32, 4)
        assert torch.equal(hit.kv(), reference_kv(kv, fmt))
        assert hit.kv(torch.bfloat16).dtype == torch.bfloat16
        assert len(hit.chunks()) == 4 and hit.chunks()[0].fmt == fmt
        assert t.put(toks, kv, "chat") == 0  # everything present: nothing written

    @pytest.mark.parametrize("io_threads", [0, 3])
    def test_async_and_threaded_io_agree(self, make_store, io_threads):
        t = self.tier(make_store(), io_threads=io_threads)
        toks = torch.arange(80)
        kv = make_kv(80)
        assert t.put(toks, kv, "c") == 10
        assert torch.equal(t.get_prefix(toks).kv(), reference_kv(kv, "mxfp4"))
        t.delete(block_keys(toks, t.namespace)[6])
        assert t.get_prefix(toks).blocks == 6 and not t.contains(toks)
        assert t.put(toks, kv, "c") == 1
        t.close()

    def test_longest_exact_prefix(self, make_store):
        t = self.tier(make_store())
        toks = torch.arange(40)
        t.put(toks, make_kv(40), "chat")
        for diverge, blocks in [(0, 0), (3, 0), (8, 1), (17, 2), (39, 4)]:
            other = toks.clone()
            other[diverge] = 999
            assert t.get_prefix(other).blocks == blocks
        assert t.get_prefix(torch.arange(100)).hit_tokens == 40
        assert t.get_prefix(torch.arange(7)).hit_tokens == 0
        assert t.get_prefix([]).kv().shape == (0, 2, 2, 32)

    def test_kv_offset_stores_only_the_new_suffix(self, make_store):
        t = self.tier(make_store())
        toks = torch.arange(32)
        kv = make_kv(32)
        assert t.put(toks[:16], kv[:16], "chat") == 2
        assert t.put(toks, kv[16:], "chat", kv_offset=16) == 2
        assert torch.equal(t.get_prefix(toks).kv(), reference_kv(kv, "mxfp4"))

    def test_contains_touch_delete(self, make_store):
        t = self.tier(make_store())
        toks = torch.arange(24)
        t.put(toks, make_kv(24), "chat")
        keys = block_keys(toks, t.namespace)
        assert t.contains(toks) and t.contains(keys[1])
        assert not t.contains(torch.arange(32))
        assert t.delete(keys[2]) == 1
        assert not t.contains(toks) and t.get_prefix(toks).blocks == 2
        assert t.delete(toks) == 2 and t.get_prefix(toks).blocks == 0

    def test_namespaces_do_not_share_chunks(self, make_store):
        store = make_store()
        a = self.tier(store, fmt="mxfp4")
        b = self.tier(store, fmt="nvfp4")
        toks = torch.arange(16)
        a.put(toks, make_kv(16), "chat")
        assert b.get_prefix(toks).blocks == 0
        assert b.put(toks, make_kv(16), "chat") == 2
        assert a.stats()["chunks"] == 4 and len(a.stats()["by_namespace"]) == 2

    # ---------------------------------------------------------------- retention

    def test_per_class_ttl_from_last_access(self, make_store):
        clock = Clock()
        t = self.tier(make_store(), clock, ttl={"agent": "3d", "chatbot": "7d"})
        agent, chat, both = torch.arange(16), torch.arange(100, 116), torch.arange(200, 216)
        t.put(agent, make_kv(16), "agent")
        t.put(chat, make_kv(16), "chatbot")
        t.put(both, make_kv(16), "agent")
        clock.advance(2 * DAY)
        t.get_prefix(both, "chatbot")  # now also chatbot traffic: keeps the longer retention
        t.get_prefix(agent, "agent")  # refresh: 3 days from now
        clock.advance(4 * DAY)  # agent read 4d ago -> expired; chat put 6d ago -> kept
        report = t.gc()
        assert report["expired_chunks"] == 2 and report["expired_by_class"] == {"agent": 2}
        assert t.get_prefix(agent).blocks == 0 and t.get_prefix(chat).blocks == 2
        assert t.get_prefix(both).blocks == 2
        clock.advance(7 * DAY + 1)
        t.gc()
        assert t.stats()["chunks"] == 0

    def test_ttl_boundary_is_inclusive(self, make_store):
        clock = Clock()
        t = self.tier(make_store(), clock, ttl="1h")
        t.put(torch.arange(8), make_kv(8), "x")
        assert t.gc(now=clock.t + 3600)["removed_chunks"] == 0
        assert t.gc(now=clock.t + 3600.001)["removed_chunks"] == 1

    def test_watermark_lru_evicts_oldest_tails_first(self, make_store):
        clock = Clock()
        store = make_store()
        probe = self.tier(store, clock)
        probe.put(torch.arange(8), make_kv(8), "c")
        chunk = probe.stats()["bytes"]
        probe.delete(torch.arange(8))
        t = self.tier(store, clock, capacity_bytes=int(9.5 * chunk), high_watermark=0.9, low_watermark=0.5,
                      auto_gc=False)
        prefixes = [torch.arange(i * 1000, i * 1000 + 24) for i in range(3)]  # 3 x 3 chunks
        for p in prefixes:
            t.put(p, make_kv(24), "c")
            clock.advance(60)
        t.get_prefix(prefixes[0][:8], "c")  # only block 0 of the oldest prefix is fresh now
        report = t.gc()
        assert report["bytes_after"] <= 0.5 * 9.5 * chunk and report["evicted_chunks"] == 5
        # survivors: block 0 of prefix 0 (touched), prefix 2 (newest), prefix 1's block 0 is LRU
        assert [t.get_prefix(p).blocks for p in prefixes] == [1, 0, 3]
        assert t.stats()["chunks"] == 4

    def test_auto_gc_keeps_usage_under_the_high_watermark(self, make_store):
        clock = Clock()
        t = self.tier(make_store(), clock, capacity_bytes="64KiB")
        for i in range(12):
            t.put(torch.arange(i * 1000, i * 1000 + 64), make_kv(64, seed=i), "c")
            clock.advance(1)
        s = t.stats()
        assert s["bytes"] <= 0.9 * 64 * 1024 and s["chunks"] > 0
        assert t.get_prefix(torch.arange(11_000, 11_064)).blocks == 8  # newest survives

    def test_gc_dry_run_changes_nothing(self, make_store):
        clock = Clock()
        t = self.tier(make_store(), clock, ttl="1d")
        t.put(torch.arange(16), make_kv(16), "c")
        clock.advance(2 * DAY)
        assert t.gc(dry_run=True)["expired_chunks"] == 2
        assert t.stats()["chunks"] == 2
        assert t.gc()["expired_chunks"] == 2 and t.stats()["chunks"] == 0

    def test_orphans_are_collected(self, make_store):
        clock = Clock()
        t = self.tier(make_store(), clock)
        toks = torch.arange(24)
        t.put(toks, make_kv(24), "c")
        t.delete(block_keys(toks, t.namespace)[0])
        assert t.gc()["orphan_chunks"] == 0  # within the grace period: a put may be in flight
        clock.advance(3600)
        assert t.gc()["orphan_chunks"] == 2 and t.stats()["chunks"] == 0

    def test_gc_instances_split_the_key_space(self, make_store):
        clock = Clock()
        store = make_store()
        t = self.tier(store, clock, ttl="1h")
        for i in range(4):
            t.put(torch.arange(i * 1000, i * 1000 + 24), make_kv(24), "c")
        clock.advance(7200)
        first = t.gc(part="1/2")  # shards 0-7
        left = sync(layout.list_keys(store, layout.CHUNKS))
        assert first["part"] == "1/2" and all(layout.shard_of(k) in "89abcdef" for k in left)
        second = t.gc(part=(2, 2))
        assert first["removed_chunks"] + second["removed_chunks"] == 12 and t.stats()["chunks"] == 0
        assert len(first["expired_by_class"]) <= 1 and second["bytes_after"] == 0

    def test_gc_spares_chunks_read_after_its_scan(self, make_store, monkeypatch):
        from tiered_kv.tiers import ssd_maintenance

        clock = Clock()
        t = self.tier(make_store(), clock, ttl="1h")
        old, fresh = torch.arange(16), torch.arange(100, 116)
        t.put(old, make_kv(16), "c")
        t.put(fresh, make_kv(16), "c")
        clock.advance(7200)  # both expired when GC scans
        real = ssd_maintenance.layout.scan_records

        def reader_in_between(store):
            assert t.get_prefix(fresh, "c").blocks == 2  # a reader returns it between scan and delete
            return real(store)

        monkeypatch.setattr(ssd_maintenance.layout, "scan_records", reader_in_between)
        report = t.gc()
        assert report["removed_chunks"] == 2 and report["spared_by_fresh_access"] == 2
        monkeypatch.undo()
        assert t.get_prefix(fresh).blocks == 2 and t.get_prefix(old).blocks == 0

    # ---------------------------------------------------------------- reliability

    @pytest.mark.parametrize("damage", ["flip_payload", "flip_header", "truncate", "empty", "swap"])
    def test_corruption_is_a_counted_miss_and_removed(self, make_store, damage):
        store = make_store()
        t = self.tier(store)
        toks = torch.arange(24)
        t.put(toks, make_kv(24), "c")
        keys = block_keys(toks, t.namespace)
        path = layout.chunk_path(keys[1])
        import zarr.core.sync as zs

        data = bytearray(zs.sync(store.get(path, prototype=layout.default_buffer_prototype())).to_bytes())
        if damage == "flip_payload":
            data[-10] ^= 0x01
        elif damage == "flip_header":
            data[40] ^= 0x20
        elif damage == "truncate":
            data = data[: len(data) // 2]
        elif damage == "empty":
            data = bytearray()
        else:  # a valid chunk under the wrong key
            data = bytearray(zs.sync(store.get(layout.chunk_path(keys[2]), layout.default_buffer_prototype())).to_bytes())
        zs.sync(store.set(path, layout.buffer(bytes(data))))
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
        import zarr.core.sync as zs

        path = layout.chunk_path(block_keys(torch.arange(24), t.namespace)[2])
        data = bytearray(zs.sync(store.get(path, prototype=layout.default_buffer_prototype())).to_bytes())
        data[-1] ^= 0xFF
        zs.sync(store.set(path, layout.buffer(bytes(data))))
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
        assert hit.blocks == 2 and torch.equal(hit.kv(), reference_kv(make_kv(32)[:16], "mxfp4"))

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
        assert torch.equal(t.get_prefix(torch.arange(16)).kv(), reference_kv(make_kv(16), "mxfp4"))

    @pytest.mark.parametrize("wrapper", [FullDiskStore, SyncFullDiskStore])
    def test_full_disk_never_fails_a_read(self, make_store, wrapper):
        base = make_store()
        self.tier(base).put(torch.arange(24), make_kv(24), "c")
        t = self.tier(wrapper(base, budget=0))  # background_touch=False: the record is written inline
        with pytest.warns(StoreFullWarning, match="access record"):
            hit = t.get_prefix(torch.arange(24), "c")
        assert hit.blocks == 3 and torch.equal(hit.kv(), reference_kv(make_kv(24), "mxfp4"))
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

    def test_paths_are_hashes_only(self, make_store):
        store = make_store()
        ns = Namespace(model="../../etc/passwd", fmt="mxfp4", block_size=BS, kv_heads=2, head_dim=32)
        t = SSDTier(store, namespace=ns, clock=Clock(), background_touch=False)
        t.put(torch.arange(16), make_kv(16), "../evil class/..")
        t.get_prefix(torch.arange(16), "../evil class/..")
        import zarr.core.sync as zs

        async def listing():
            return [k async for k in store.list()]

        ok = re.compile(r"zarr\.json|namespaces/[0-9a-f]{32}/zarr\.json|chunks/[0-9a-f]/[0-9a-f]{32}"
                        r"|access/[0-9a-f]/[0-9a-f]{32}\.[0-9a-f]{16}|usage/(w-[0-9a-f]{16}-[0-9]+|s-([0-9a-f]|all))")
        keys = zs.sync(listing())
        assert keys and all(ok.fullmatch(k) for k in keys), keys

    @pytest.mark.parametrize("kwargs, setting", [
        (dict(high_watermark=0.5, low_watermark=0.7), "low_watermark"),
        (dict(high_watermark=1.5), "high_watermark"),
        (dict(ttl={"agent": "-1d"}), "ttl"),
        (dict(ttl="soon"), "ttl"),
        (dict(capacity_bytes=0), "capacity_bytes"),
        (dict(capacity_bytes="lots"), "capacity_bytes"),
        (dict(traffic_classes=["agent"], ttl={"chatbot": "1d"}), "ttl"),
        (dict(gc_interval="-5s"), "gc_interval"),
    ])
    def test_bad_settings_name_the_setting(self, make_store, kwargs, setting):
        with pytest.raises(ValueError, match=setting):
            self.tier(make_store(), **kwargs)

    def test_bad_put_inputs_name_the_argument(self, make_store):
        t = self.tier(make_store(), traffic_classes=["agent", "chatbot"])
        toks = torch.arange(16)
        with pytest.raises(ValueError, match="kv.*shape"):
            t.put(toks, torch.zeros(16, 2, 4, 32), "agent")
        with pytest.raises(ValueError, match="kv.*dtype"):
            t.put(toks, torch.zeros(16, 2, 2, 32, dtype=torch.int32), "agent")
        with pytest.raises(ValueError, match="kv: covers"):
            t.put(toks, torch.zeros(12, 2, 2, 32), "agent")
        with pytest.raises(ValueError, match="traffic_class.*declared"):
            t.put(toks, make_kv(16), "batch")
        with pytest.raises(ValueError, match="kv_offset"):
            t.put(toks, make_kv(13), "agent", kv_offset=3)
        with pytest.raises(ValueError, match="tokens"):
            t.get_prefix(torch.zeros(2, 8, dtype=torch.long))
        with pytest.raises(ValueError, match=r"kv: requires grad.*detach"):
            t.put(toks, make_kv(16).requires_grad_(), "agent")
        with pytest.raises(ValueError, match="kv: is on the meta device"):
            t.put(toks, torch.empty(16, 2, 2, 32, device="meta"), "agent")
        with pytest.raises(ValueError, match=r"chunks\[0\]: must be a tiered_kv.kernels.fp4.FP4Tensor"):
            t.put_quantized(toks, [make_kv(8), make_kv(8)], "agent")
        with pytest.raises(ValueError, match="chunks: must be a list"):
            t.put_quantized(toks, make_kv(16), "agent")
        assert t.stats()["chunks"] == 0

    # ---------------------------------------------------------------- zarr and maintenance

    def test_root_is_a_zarr_group_describing_the_layout(self, make_store):
        import zarr

        store = make_store()
        t = self.tier(store)
        t.put(torch.arange(8), make_kv(8), "c")
        g = zarr.open_group(store, mode="r")
        assert g.attrs["tiered_kv"]["layout"] == layout.LAYOUT
        ns = zarr.open_group(store, path=f"namespaces/{t.namespace.digest.hex()}", mode="r")
        assert ns.attrs["tiered_kv_namespace"]["block_size"] == BS

    @pytest.mark.parametrize("garbage", [b"\x00garbage{", b'{"zarr_format": 2}', b"[]"])
    def test_garbage_root_zarr_json_is_detected_and_rewritten(self, make_store, garbage):
        import zarr

        from tiered_kv.tiers.ssd import store_verify

        store = make_store()
        self.tier(store).put(torch.arange(16), make_kv(16), "c")
        sync(store.set("zarr.json", layout.buffer(garbage)))
        report = store_verify(store, repair=False)
        assert report["problems"] == 1 and report["metadata"][0][0] == "zarr.json"
        report = store_verify(store)
        assert report["problems"] == 1 and store_verify(store)["problems"] == 0
        assert zarr.open_group(store, mode="r").attrs["tiered_kv"]["layout"] == layout.LAYOUT
        sync(store.set("zarr.json", layout.buffer(garbage)))
        with pytest.warns(RuntimeWarning, match="repaired zarr.json"):
            t = self.tier(store)  # a tier opening the store repairs it too
        assert t.counters["repaired"] == 1 and t.get_prefix(torch.arange(16)).blocks == 2
        assert zarr.open_group(store, mode="r").attrs["tiered_kv"]["layout"] == layout.LAYOUT

    def test_usage_estimate_sees_every_writer(self, make_store):
        store = make_store()
        a = self.tier(store, capacity_bytes="10MiB")
        b = self.tier(store, capacity_bytes="10MiB")
        a.put(torch.arange(32), make_kv(32), "c")
        stored = a.stats()["bytes"]
        assert b.usage.estimate() >= stored  # b wrote nothing but sees a's chunks
        b.put(torch.arange(100, 132), make_kv(32), "c")
        both = a.stats()["bytes"]
        assert a.usage.estimate() >= both > stored
        b.gc()  # measures the store: the estimate becomes exact
        assert a.usage.estimate() == both == a.stats()["usage_estimate_bytes"]

    def test_stats_counts_classes_and_ages(self, make_store):
        clock = Clock()
        t = self.tier(make_store(), clock)
        t.put(torch.arange(16), make_kv(16), "agent")
        clock.advance(2 * DAY)
        t.put(torch.arange(100, 108), make_kv(8), "chatbot")
        s = t.stats()
        assert s["chunks"] == 3 and s["tokens"] == 24
        assert s["by_class"]["agent"]["chunks"] == 2 and s["by_class"]["chatbot"]["chunks"] == 1
        assert s["age_since_last_access"]["1d-3d"] == 2 and s["age_since_last_access"]["<1h"] == 1
        assert s["bytes"] == sum(c["bytes"] for c in s["by_class"].values())
        assert math.isclose(s["payload_bytes"] / s["tokens"], 2 * 2 * 32 * (0.5 + 1 / 32))

    def test_background_gc_thread(self, make_store):
        import time

        clock = Clock()
        t = self.tier(make_store(), clock, ttl="1h", gc_interval="0.05s")
        try:
            t.put(torch.arange(8), make_kv(8), "c")
            clock.advance(7200)
            deadline = time.time() + 10
            while t.contains(torch.arange(8)) and time.time() < deadline:
                time.sleep(0.02)
            assert not t.contains(torch.arange(8))
        finally:
            t.close()


# ---------------------------------------------------------------------- multi-process workers
# Module-level so that ``multiprocessing`` (spawn) can import them. Used by
# tests/test_ssd_reliability.py: several processes share one LocalStore directory.

STRESS_PROMPTS = 6


def stress_tokens(i: int) -> torch.Tensor:
    """Prompt ``i``: prompts share leading blocks (a system prompt), then diverge."""
    shared = torch.arange(2 * BS)
    own = torch.arange(BS * (2 + i % 4)) + 1000 * (i + 1)
    return torch.cat([shared, own])


def stress_kv(tokens: torch.Tensor) -> torch.Tensor:
    """KV that depends only on (position, token), so every writer stores the same bytes per key."""
    pos = torch.arange(len(tokens), dtype=torch.float32)
    base = torch.sin(tokens.to(torch.float32)[:, None] * 0.37 + pos[:, None] * 0.11 + torch.arange(128) * 0.05)
    return (base * (1 + pos[:, None] % 7)).reshape(len(tokens), 2, 2, 32)


def stress_references() -> dict[int, torch.Tensor]:
    """FP4 round trip of every stress prompt's KV (what a reader must get back, bit for bit)."""
    from tiered_kv import codec

    ns = namespace()
    out = {}
    for i in range(STRESS_PROMPTS):
        kv = stress_kv(stress_tokens(i))
        out[i] = codec.dequantize_chunks(codec.quantize_blocks(kv, ns), torch.float32)
    return out


def stress_worker(role: str, root, seconds: float, seed: int, barrier, results, refs) -> None:
    """One process of the concurrency test: 'writer', 'reader' or 'gc' ('gc1/2': GC instance 1
    of 2, owning half the key space). ``root``: a store spec (:func:`open_spec`). Reports counts."""
    import random
    import time as _time

    torch.set_num_threads(1)
    rng = random.Random(seed)
    part = role[2:] or None if role.startswith("gc") else None
    role = "gc" if role.startswith("gc") else role
    tier = SSDTier(open_spec(root), namespace=namespace(), capacity_bytes=12_000, high_watermark=0.9,
                   low_watermark=0.5, orphan_grace=0.0, auto_gc=(role == "writer"), background_touch=False)
    out = {"role": role, "ops": 0, "checked_blocks": 0, "wrong": 0, "hits": 0, "errors": ""}
    from tiered_kv import codec

    codec.dequantize_chunks(codec.quantize_blocks(stress_kv(stress_tokens(0)), namespace()), torch.float32)  # warm-up
    barrier.wait()
    stop = _time.time() + seconds
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            while _time.time() < stop:
                i = rng.randrange(STRESS_PROMPTS)
                toks = stress_tokens(i)
                if role == "writer":
                    tier.put(toks, stress_kv(toks), rng.choice(["agent", "chatbot"]))
                elif role == "reader":
                    hit = tier.get_prefix(toks, "agent")
                    if hit.blocks:
                        out["hits"] += 1
                        out["checked_blocks"] += hit.blocks
                        if not torch.equal(hit.kv(), refs[i][:hit.hit_tokens]):
                            out["wrong"] += 1
                else:
                    tier.gc(part=part)
                    _time.sleep(0.02)
                out["ops"] += 1
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the test
        import traceback

        out["errors"] = traceback.format_exc() + repr(exc)
    tier.close()
    results.put(out)


def kill_namespace(kv_heads: int = 8, head_dim: int = 256) -> Namespace:
    return Namespace(model="kill", fmt="mxfp4", block_size=64, kv_heads=kv_heads, head_dim=head_dim)


def kill_target(root, ready_path: str, kv_heads: int = 8, head_dim: int = 256) -> None:
    """Puts large chunks forever (killed with SIGKILL by the test mid-write); ``root``: a spec."""
    from pathlib import Path

    torch.set_num_threads(1)
    ns = kill_namespace(kv_heads, head_dim)
    tier = SSDTier(open_spec(root), namespace=ns, background_touch=False, io_threads=4)
    kv = torch.randn(64 * 16, 2, kv_heads, head_dim)
    i = 0
    while True:
        tier.put(torch.arange(64 * 16) + 100_000 * i, kv, "agent")
        if i == 0:
            Path(ready_path).write_text("ready")
        i += 1


# ---------------------------------------------------------------------- capacity bound under writers

def capacity_namespace() -> Namespace:
    """Mid-size chunks (32 tokens x 2 x 4 x 64, MXFP4: about 8.9 KB) for the capacity test."""
    return Namespace(model="capacity", fmt="mxfp4", block_size=32, kv_heads=4, head_dim=64)


CAPACITY_BLOCKS = 8  # blocks per put: one writer's batch


def capacity_writer(store_spec, capacity: int, seconds: float, seed: int, barrier, results) -> None:
    """Puts new prefixes (never seen before) as fast as it can into a store of ``capacity``
    bytes until it has written half of ``capacity`` itself (or ``seconds`` passed); reports its
    puts, the largest bytes one put wrote and its auto-GC count."""
    import time as _time

    torch.set_num_threads(1)
    ns = capacity_namespace()
    tier = SSDTier(open_spec(store_spec), namespace=ns, capacity_bytes=capacity, high_watermark=0.9,
                   low_watermark=0.5, orphan_grace=0.0, background_touch=False)
    from tiered_kv import codec

    g = torch.Generator().manual_seed(seed)
    kv = torch.randn(CAPACITY_BLOCKS * ns.block_size, 2, ns.kv_heads, ns.head_dim, generator=g)
    chunks = codec.quantize_blocks(kv, ns)  # once: the test is about bytes, not quantization
    out = {"puts": 0, "max_put_bytes": 0, "auto_gc": 0, "errors": ""}
    barrier.wait()
    stop = _time.time() + seconds
    try:
        i = 0
        while _time.time() < stop and tier.usage.written < capacity / 2:
            toks = torch.arange(CAPACITY_BLOCKS * ns.block_size) + 1_000_000 * (seed + 1) + 1000 * i
            before = tier.usage.written
            tier.put_quantized(toks, chunks, "c")
            out["max_put_bytes"] = max(out["max_put_bytes"], tier.usage.written - before)
            out["puts"] += 1
            i += 1
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        import traceback

        out["errors"] = traceback.format_exc() + repr(exc)
    out["auto_gc"] = tier.counters["auto_gc"]
    tier.close()
    results.put(out)


def bandwidth_reader(root: str, rate: float, n_tokens: int, reads: int, barrier, hold, results) -> None:
    """Reads the prefix ``arange(n_tokens)`` ``reads`` times through ``read_bandwidth=rate``;
    reports (bytes, monotonic start, end), then keeps its tier open until ``hold`` is set."""
    import time as _time

    tier = SSDTier(root, namespace=namespace(), clock=Clock(), background_touch=False, read_bandwidth=rate)
    toks = torch.arange(n_tokens)
    barrier.wait()
    t0, nbytes = _time.monotonic(), 0
    for _ in range(reads):
        nbytes += tier.get_prefix(toks).nbytes
    results.put((nbytes, t0, _time.monotonic()))
    hold.wait(60)
    tier.close()


def open_spec(spec):
    """A store from a picklable spec: a path, or ("s3", bucket, prefix, endpoint) for tests."""
    if isinstance(spec, tuple) and spec[0] == "s3":
        from obstore.store import S3Store

        _, bucket, prefix, endpoint = spec
        return S3Store(bucket, prefix=prefix, endpoint=endpoint, access_key_id="testing",
                       secret_access_key="testing", region="us-east-1", client_options={"allow_http": True})
    from zarr.storage import LocalStore

    return LocalStore(spec)
