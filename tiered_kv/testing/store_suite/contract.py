"""The basic contract of an SSD-tier store: what goes in comes back, by longest exact prefix,
bit for bit against the FP4 reference; every backend passes these before anything about
retention or faults matters.
"""

from __future__ import annotations

import re

import pytest
import torch
from zarr.core.sync import sync

from tiered_kv.keys import DEFAULT_FORMAT, FORMATS, Namespace, block_keys
from tiered_kv.testing.store_suite.base import BS, SuiteBase, make_kv, make_tier, reference_kv
from tiered_kv.tiers.ssd import layout


class ContractTests(SuiteBase):
    """Round trip, prefixes, namespaces, layout and input checks."""

    @pytest.mark.parametrize("fmt", FORMATS)
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
        assert torch.equal(t.get_prefix(toks).kv(), reference_kv(kv, DEFAULT_FORMAT))
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
        assert torch.equal(t.get_prefix(toks).kv(), reference_kv(kv, DEFAULT_FORMAT))

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

    def test_root_is_a_zarr_group_describing_the_layout(self, make_store):
        import zarr

        store = make_store()
        t = self.tier(store)
        t.put(torch.arange(8), make_kv(8), "c")
        g = zarr.open_group(store, mode="r")
        assert g.attrs["tiered_kv"]["layout"] == layout.LAYOUT
        ns = zarr.open_group(store, path=f"namespaces/{t.namespace.digest.hex()}", mode="r")
        assert ns.attrs["tiered_kv_namespace"]["block_size"] == BS

    def test_paths_are_hashes_only(self, make_store):
        store = make_store()
        ns = Namespace(model="../../etc/passwd", fmt=DEFAULT_FORMAT, block_size=BS, kv_heads=2, head_dim=32)
        t = make_tier(store, ns)
        t.put(torch.arange(16), make_kv(16), "../evil class/..")
        t.get_prefix(torch.arange(16), "../evil class/..")
        ok = re.compile(r"zarr\.json|namespaces/[0-9a-f]{32}/zarr\.json|chunks/[0-9a-f]/[0-9a-f]{32}"
                        r"|access/[0-9a-f]/[0-9a-f]{32}\.[0-9a-f]{16}|usage/(w-[0-9a-f]{16}-[0-9]+|s-([0-9a-f]|all))")
        keys = sync(layout.list_keys(store, ""))
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
        for match, call in [
            ("kv.*shape", lambda: t.put(toks, torch.zeros(16, 2, 4, 32), "agent")),
            ("kv.*dtype", lambda: t.put(toks, torch.zeros(16, 2, 2, 32, dtype=torch.int32), "agent")),
            ("kv: covers", lambda: t.put(toks, torch.zeros(12, 2, 2, 32), "agent")),
            ("traffic_class.*declared", lambda: t.put(toks, make_kv(16), "batch")),
            ("kv_offset", lambda: t.put(toks, make_kv(13), "agent", kv_offset=3)),
            ("tokens", lambda: t.get_prefix(torch.zeros(2, 8, dtype=torch.long))),
            (r"kv: requires grad.*detach", lambda: t.put(toks, make_kv(16).requires_grad_(), "agent")),
            ("kv: is on the meta device", lambda: t.put(toks, torch.empty(16, 2, 2, 32, device="meta"), "agent")),
            (r"chunks\[0\]: must be a tiered_kv.kernels.fp4.FP4Tensor",
             lambda: t.put_quantized(toks, [make_kv(8), make_kv(8)], "agent")),
            ("chunks: must be a list", lambda: t.put_quantized(toks, make_kv(16), "agent")),
        ]:
            with pytest.raises(ValueError, match=match):
                call()
        assert t.stats()["chunks"] == 0
