"""Retention and accounting of an SSD-tier store: per-class TTLs, watermark LRU eviction, GC, and
the usage estimate and stats that eviction decides by. All time comes from the injected clock.
"""

from __future__ import annotations

import math

import torch
from zarr.core.sync import sync

from tiered_kv.keys import block_keys
from tiered_kv.testing.store_suite.base import Clock, SuiteBase, make_kv
from tiered_kv.tiers.ssd import layout
from tiered_kv.units import DAY_S


class RetentionTests(SuiteBase):
    """TTL, eviction, GC and the usage accounting behind them."""

    def test_per_class_ttl_from_last_access(self, make_store):
        clock = Clock()
        t = self.tier(make_store(), clock, ttl={"agent": "3d", "chatbot": "7d"})
        agent, chat, both = torch.arange(16), torch.arange(100, 116), torch.arange(200, 216)
        t.put(agent, make_kv(16), "agent")
        t.put(chat, make_kv(16), "chatbot")
        t.put(both, make_kv(16), "agent")
        clock.advance(2 * DAY_S)
        t.get_prefix(both, "chatbot")  # now also chatbot traffic: keeps the longer retention
        t.get_prefix(agent, "agent")  # refresh: 3 days from now
        clock.advance(4 * DAY_S)  # agent read 4d ago -> expired; chat put 6d ago -> kept
        report = t.gc()
        assert report["expired_chunks"] == 2 and report["expired_by_class"] == {"agent": 2}
        assert t.get_prefix(agent).blocks == 0 and t.get_prefix(chat).blocks == 2
        assert t.get_prefix(both).blocks == 2
        clock.advance(7 * DAY_S + 1)
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
        clock.advance(2 * DAY_S)
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
        from tiered_kv.tiers.ssd import maintenance

        clock = Clock()
        t = self.tier(make_store(), clock, ttl="1h")
        old, fresh = torch.arange(16), torch.arange(100, 116)
        t.put(old, make_kv(16), "c")
        t.put(fresh, make_kv(16), "c")
        clock.advance(7200)  # both expired when GC scans
        real = maintenance.scan.scan_records

        def reader_in_between(backend):
            assert t.get_prefix(fresh, "c").blocks == 2  # a reader returns it between scan and delete
            return real(backend)

        monkeypatch.setattr(maintenance.scan, "scan_records", reader_in_between)
        report = t.gc()
        assert report["removed_chunks"] == 2 and report["spared_by_fresh_access"] == 2
        monkeypatch.undo()
        assert t.get_prefix(fresh).blocks == 2 and t.get_prefix(old).blocks == 0

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
        clock.advance(2 * DAY_S)
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
