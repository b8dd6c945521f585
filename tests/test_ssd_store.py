"""The shared SSD-tier suite (tiered_kv.testing.store_suite) on MemoryStore and LocalStore,
plus properties of the pure GC planner checked against a brute-force replay."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.storage import LocalStore, MemoryStore

from tiered_kv.codec import ChunkHeader
from tiered_kv.testing.store_suite import SSDTierSuite
from tiered_kv.tiers.ssd.layout import AccessRecord, access_path
from tiered_kv.tiers.ssd.retention import RetentionPolicy, plan_gc, reachable


class TestMemoryStore(SSDTierSuite):
    @pytest.fixture
    def make_store(self):
        return MemoryStore


class TestLocalStore(SSDTierSuite):
    @pytest.fixture
    def make_store(self, tmp_path):
        counter = iter(range(1000))
        return lambda: LocalStore(tmp_path / f"store{next(counter)}")


class TestFsspecMemoryStore(SSDTierSuite):
    """An fsspec store (here fsspec's in-memory file system) takes zarr's async path."""

    @pytest.fixture
    def make_store(self):
        pytest.importorskip("fsspec")
        import uuid

        from tiered_kv.tiers.ssd.backend import open_store

        return lambda: open_store(f"memory://tkv-{uuid.uuid4().hex}")


def test_a_plain_path_opens_a_local_store(tmp_path):
    import torch

    from tiered_kv.testing.store_suite import Clock, make_kv, namespace
    from tiered_kv.tiers.ssd import SSDTier

    t = SSDTier(tmp_path / "cache", namespace=namespace(), clock=Clock())
    t.put(torch.arange(8), make_kv(8), "c")
    t.close()
    assert list((tmp_path / "cache" / "chunks").rglob("*"))
    with pytest.raises(ValueError, match="store"):
        SSDTier(42, namespace=namespace())


# ------------------------------------------------------------------------ pure GC planner

def _header(key, parent, index, cls, created, nbytes=100):
    return ChunkHeader(key=key, parent=parent, index=index, ns_digest=bytes(16), fmt="mxfp4", tokens=8,
                       kv_heads=2, head_dim=32, traffic_class=cls, created=created, sections=(),
                       header_len=nbytes - 24, payload_len=0)


@st.composite
def forests(draw):
    """Random prefix trees of chunks with random creation times and access records."""
    n = draw(st.integers(1, 30))
    chunks, order = {}, []
    for i in range(n):
        key = i.to_bytes(16, "big") if i else b"\xff" * 16
        parent_i = draw(st.one_of(st.none(), st.integers(0, max(i - 1, 0)))) if i else None
        if parent_i is None or not order:
            parent, index = bytes(16), 0
        else:
            pk = order[parent_i]
            parent, index = pk, chunks[pk].index + 1
        chunks[key] = _header(key, parent, index, draw(st.sampled_from(["a", "b"])),
                              float(draw(st.integers(0, 100))))
        order.append(key)
    records = {}
    for _ in range(draw(st.integers(0, 10))):
        key = draw(st.sampled_from(order))
        cls = draw(st.sampled_from(["a", "b", None]))
        rec = AccessRecord(key, cls, float(draw(st.integers(0, 200))))
        records[access_path(key, cls)] = rec
    return chunks, records


def _brute_last_access(chunks, records):
    """Last access of each chunk = max over itself and every descendant (walk up from each)."""
    last = {k: h.created for k, h in chunks.items()}
    events = [(k, h.created) for k, h in chunks.items()] + [(r.key, r.time) for r in records.values()]
    for key, t in events:
        while key in chunks:
            last[key] = max(last[key], t)
            key = chunks[key].parent
    return last


@settings(max_examples=60, deadline=None)
@given(forests(), st.integers(100, 3000), st.floats(0.1, 1.0), st.floats(0.0, 1.0))
def test_watermark_plan_is_lru_and_prefix_closed(forest, cap, high, low_frac):
    chunks, records = forest
    policy = RetentionPolicy(capacity_bytes=cap, high_watermark=high, low_watermark=high * low_frac)
    plan = plan_gc(chunks, records, policy, now=1000.0, orphan_grace=math.inf)
    last = _brute_last_access(chunks, records)
    assert plan.last_access == last
    kept = set(chunks) - set(plan.removed)
    used = sum(chunks[k].nbytes for k in kept)
    total = sum(h.nbytes for h in chunks.values())
    if total > high * cap:
        assert used <= high * low_frac * cap
        # minimal: putting back the last evicted chunk would break the low watermark
        if plan.evicted:
            assert used + chunks[plan.evicted[-1]].nbytes > high * low_frac * cap
    else:
        assert not plan.evicted
    # LRU: nothing kept is older than anything evicted
    if plan.evicted and kept:
        assert min(last[k] for k in kept) >= max(last[k] for k in plan.evicted)
    # a parent never goes while one of its reachable children stays
    live = reachable(chunks)
    for k in kept & live:
        p = chunks[k].parent
        assert p == bytes(16) or p in kept


@settings(max_examples=60, deadline=None)
@given(forests(), st.integers(0, 400), st.integers(0, 200), st.integers(0, 200))
def test_ttl_plan_matches_brute_force(forest, now, ttl_a, ttl_b):
    chunks, records = forest
    policy = RetentionPolicy(ttl={"a": float(ttl_a), "b": float(ttl_b)})
    plan = plan_gc(chunks, records, policy, now=float(now), orphan_grace=math.inf)
    ttl = {"a": ttl_a, "b": ttl_b}
    for key in chunks:
        # brute force: every access event (by class) of this chunk or a descendant
        events = []
        for k, h in chunks.items():
            node = k
            while node in chunks and node != key:
                node = chunks[node].parent
            if node == key:
                events.append((h.traffic_class, h.created))
                events += [(r.traffic_class, r.time) for r in records.values() if r.key == k]
        classes = {c for c, _ in events if c is not None}
        anyt = max((t for c, t in events if c is None), default=-math.inf)
        keep = any(now - max(max(t for c2, t in events if c2 == c), anyt) <= ttl[c] for c in classes)
        assert (key in plan.expired) == (not keep)


def test_open_backend_decides_the_store_kind_once(tmp_path):
    """Each kind of store gets its backend, and every backend (wrapped or not) has the one interface."""
    from obstore.store import MemoryStore as ObjectMemory
    from zarr.storage import LocalStore, LoggingStore, MemoryStore, ObjectStore
    from zarr.testing.store import LatencyStore

    from tiered_kv.testing.store_suite import SyncVanishingStore
    from tiered_kv.tiers.ssd import Backend, open_backend
    from tiered_kv.tiers.ssd.bandwidth import paced
    from tiered_kv.tiers.ssd.object_backend import ObjectBackend
    from tiered_kv.tiers.ssd.zarr_backend import LocalBackend, ZarrBackend

    local = open_backend(tmp_path / "a")
    assert type(local) is LocalBackend and local.direct and local.name == str(tmp_path / "a")
    assert type(open_backend(LocalStore(tmp_path / "b"), io_threads=0)) is LocalBackend
    # through zarr's wrappers that keep keys, and no others (see test_a_store_that_maps_keys_...)
    assert type(open_backend(LatencyStore(LoggingStore(LocalStore(tmp_path / "b"))))) is LocalBackend
    faulted = open_backend(SyncVanishingStore(LocalStore(tmp_path / "b"), set()))  # keeps_keys = True
    assert type(faulted) is LocalBackend and faulted.sync_path and not faulted.direct  # reads go through it
    assert type(open_backend(MemoryStore())) is ZarrBackend
    assert type(open_backend(ObjectStore(ObjectMemory()))) is ObjectBackend
    wrapped = paced(local, 1e9, None, None)
    for b in (local, open_backend(MemoryStore()), open_backend(ObjectStore(ObjectMemory())), wrapped):
        assert isinstance(b, Backend)
    assert open_backend(wrapped) is wrapped and wrapped.read_limit.rate == 1e9 and wrapped.write_limit is None
    wrapped.close()


def test_a_store_that_maps_keys_opens_as_a_generic_zarr_store(tmp_path):
    """A LocalStore wrapper that files each key under ``p/``: the tier must go through the store's
    API, not list and read the directory as if keys were file names (it would find no chunks)."""
    import torch
    from zarr.storage import WrapperStore

    from tiered_kv.testing.store_suite import Clock, make_kv, namespace
    from tiered_kv.tiers.ssd import SSDTier
    from tiered_kv.tiers.ssd.zarr_backend import ZarrBackend

    class Prefixed(WrapperStore):
        async def get(self, key, prototype=None, byte_range=None):
            return await self._store.get("p/" + key, prototype, byte_range)

        async def set(self, key, value):
            await self._store.set("p/" + key, value)

        async def exists(self, key):
            return await self._store.exists("p/" + key)

        async def delete(self, key):
            await self._store.delete("p/" + key)

        async def list_prefix(self, prefix):
            async for k in self._store.list_prefix("p/" + prefix):
                yield k.removeprefix("p/")

    with SSDTier(Prefixed(LocalStore(tmp_path)), namespace=namespace(), clock=Clock()) as t:
        assert type(t.backend) is ZarrBackend
        t.put(torch.arange(32), make_kv(32), "c")
        assert t.stats()["chunks"] == 4 and t.verify()["problems"] == 0 and t.gc()["removed_chunks"] == 0
        assert t.get_prefix(torch.arange(32)).blocks == 4
    assert (tmp_path / "p" / "zarr.json").is_file() and not (tmp_path / "chunks").exists()


def test_settings_are_checked_and_sorted_into_config_or_retention(tmp_path):
    from tiered_kv.testing.store_suite import Clock, namespace
    from tiered_kv.tiers.ssd import SSDConfig, SSDTier

    with pytest.raises(ValueError, match="io_threads"):
        SSDConfig(io_threads=-1)
    with pytest.raises(ValueError, match="link_bandwidth"):
        SSDConfig(link_bandwidth="1MiB/s", read_bandwidth="1MiB/s")
    assert SSDConfig(gc_interval="2m", orphan_grace="1h").gc_interval == 120.0
    with pytest.raises(TypeError, match=r"'background_touch'.*config=SSDConfig"):
        SSDTier(tmp_path, namespace=namespace(), background_touch=False)
    assert RetentionPolicy.make(ttl=3600).default_ttl == 3600.0  # a number is seconds (parse_ttl refuses one)
    with pytest.raises(ValueError, match="ttl: must be a duration >= 0"):
        RetentionPolicy.make(ttl=-1)
    policy = RetentionPolicy.make(capacity_bytes="1MiB", ttl="1d")
    with pytest.raises(ValueError, match="retention: give a RetentionPolicy or its settings"):
        SSDTier(tmp_path, namespace=namespace(), retention=policy, ttl="2d")
    with SSDTier(tmp_path, namespace=namespace(), retention=policy) as t:
        assert t.policy is policy and t.usage is not None  # a finite capacity keeps a usage ledger
    with SSDTier(tmp_path, namespace=namespace(), capacity_bytes="1MiB", ttl="1d", high_watermark=0.7,
                 low_watermark=0.5, traffic_classes=["agent"], clock=Clock()) as t:
        assert t.policy.high_watermark == 0.7 and t.policy.traffic_classes == ("agent",)
    with SSDTier(tmp_path, namespace=namespace()) as t:
        assert t.usage is None  # unbounded: nothing written under usage/


def test_key_taking_calls_store_and_find_what_the_token_calls_do(tmp_path):
    """put_keys / get_prefix_keys write the same objects as put / get_prefix, from keys hashed once."""
    import os

    import torch

    from tiered_kv.keys import block_keys
    from tiered_kv.testing.store_suite import Clock, make_kv, make_tier, namespace

    toks, kv = torch.arange(40), make_kv(40)
    keys = block_keys(toks, namespace())
    by_tokens, by_keys = make_tier(tmp_path / "t", clock=Clock()), make_tier(tmp_path / "k", clock=Clock())
    assert by_tokens.put(toks[:16], kv[:16], "c") == 2 and by_keys.put_keys(keys[:2], kv[:16], "c") == 2
    assert by_tokens.put(toks, kv[16:], "c", kv_offset=16) == 3
    assert by_keys.put_keys(keys, kv[16:40], "c", kv_offset=16) == 3
    hit = by_keys.get_prefix_keys(keys, "c")
    assert hit.keys == keys and hit.raw == by_tokens.get_prefix(toks, "c").raw

    def objects(root):
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}

    assert objects(tmp_path / "t") == objects(tmp_path / "k") and len(os.listdir(tmp_path / "k" / "chunks")) > 1
    with pytest.raises(ValueError, match="keys: must be a list of 16-byte block keys"):
        by_keys.get_prefix_keys([b"short"])
    with pytest.raises(ValueError, match=r"kv: covers tokens \[16, 32\) but the 5 keys cover 40"):
        by_keys.put_keys(keys, kv[16:32], "c", kv_offset=16)
