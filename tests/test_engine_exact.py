"""The exact-prefix SSD tier stays exact, and decoder windows are reusable for any block size and R."""

import numpy as np
import pytest
import torch

from tiered_kv.engine import Engine, fp4_roundtrip, namespace_for
from tiered_kv.model import EncoderDecoder, preset
from tiered_kv.testing.models import scaled_tiny_model
from tiered_kv.tiers.host import HostTier
from tiered_kv.tiers.ssd import SSDConfig, SSDTier


@pytest.fixture(scope="module")
def model():
    return scaled_tiny_model()


def _tokens(n, seed=1):
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed))


def _chunks(ssd, tokens, n_blocks):
    """The stored KV of the first ``n_blocks`` blocks of ``tokens``, as raw FP4 bytes."""
    hit = ssd.get_prefix(tokens[: n_blocks * ssd.namespace.block_size])
    assert hit.hit_tokens == n_blocks * ssd.namespace.block_size
    q = hit.kv(torch.float32)
    return q.numpy().tobytes()


def _conversation(model, ssd_path, writes, block=16, replay=8, turns=3, seed=3):
    """Each turn on a new machine (no host state): every turn's new blocks come from a replay."""
    ns = namespace_for(model, block_size=block)
    ssd = SSDTier(str(ssd_path), namespace=ns, config=SSDConfig(background_touch=False))
    t = _tokens(16 + 40 * turns, seed)
    results = []
    for k in range(turns):
        e = Engine(model, ssd, HostTier("16MiB"), replay=replay, ssd_writes=writes, name=f"m{k}")
        results.append(e.prefill(t[: 16 + 40 * (k + 1)]))
    return ns, ssd, t, results


def test_host_miss_turn_stores_exact_blocks(model, tmp_path):
    """After host-miss turns, every stored block is byte-identical to an uncached prefill's."""
    ns, ssd, t, results = _conversation(model, tmp_path / "exact", "exact")
    assert not results[1].encoder_exact and results[1].computed_tokens["store_catch_up"] > 0
    n_blocks = (16 + 40 * 3) // 16
    ref_ssd = SSDTier(str(tmp_path / "ref"), namespace=ns, config=SSDConfig(background_touch=False))
    Engine(model, ref_ssd, HostTier("16MiB")).prefill(t[: 16 + 40 * 3])
    assert _chunks(ssd, t, n_blocks) == _chunks(ref_ssd, t, n_blocks)


def test_approximate_writes_differ_and_skip_writes_nothing(model, tmp_path):
    """The alternatives are real: 'approximate' stores different bytes, 'skip' stores no new block."""
    ns, ssd, t, _ = _conversation(model, tmp_path / "approx", "approximate")
    n_blocks = (16 + 40 * 3) // 16
    ref_ssd = SSDTier(str(tmp_path / "ref"), namespace=ns, config=SSDConfig(background_touch=False))
    Engine(model, ref_ssd, HostTier("16MiB")).prefill(t[: 16 + 40 * 3])
    assert _chunks(ssd, t, n_blocks) != _chunks(ref_ssd, t, n_blocks)
    _, ssd_skip, _, res = _conversation(model, tmp_path / "skip", "skip")
    assert res[0].stored_blocks > 0 and res[1].stored_blocks == 0
    assert ssd_skip.get_prefix(t).hit_tokens == res[0].stored_blocks * 16


def test_bad_ssd_writes_setting_is_named(model, tmp_path):
    ns = namespace_for(model, block_size=16)
    with pytest.raises(ValueError, match="ssd_writes"):
        Engine(model, SSDTier(str(tmp_path / "s"), namespace=ns, config=SSDConfig(background_touch=False)),
               ssd_writes="maybe")


def test_decoder_windows_reused_with_block_256_and_replay_128(model, tmp_path):
    """Block size 256 > R = 128, on a model whose window makes R=128 approximate (W=100)."""
    m = model.with_settings(window=100)
    assert m.cfg.exact_replay_tokens > 128
    ns = namespace_for(m, block_size=256)
    ssd = SSDTier(str(tmp_path / "d"), namespace=ns, config=SSDConfig(background_touch=False))
    e = Engine(m, ssd, HostTier("64MiB"), replay=128, reuse_decoder_windows=True)
    t = _tokens(420, seed=6)
    first = e.prefill(t[:300])
    assert first.stored_blocks == 1 and not first.decoder_from_host
    res = e.prefill(t)
    assert res.hit_tokens == {"ssd": 256, "host": 256}
    assert res.decoder_from_host and res.computed_tokens["decoder"] == 420 - 256
    ref = m.forward(t, lambda kv: fp4_roundtrip(kv, ns))[-1].detach()
    torch.testing.assert_close(res.logits, ref, rtol=0, atol=1e-5)
    # Bounded replay alone (a machine without the host entry) is approximate here.
    other = Engine(m, ssd, HostTier("64MiB"), replay=128, reuse_decoder_windows=True, name="b").prefill(t, store=False)
    assert not other.decoder_from_host
    assert float((other.logits - ref).abs().max()) > 1e-4
    assert np.isfinite(other.logits.numpy()).all()


@pytest.mark.parametrize("fmt", ["fp32", "bf16"])
def test_unquantized_global_kv_ablation(model, tmp_path, fmt):
    """Raw chunks: the SSD tier returns the KV cast to the format, and a cached prefill equals
    the uncached forward with that cast (no FP4 anywhere)."""
    ns = namespace_for(model, fmt=fmt, block_size=16)
    ssd = SSDTier(str(tmp_path / fmt), namespace=ns, config=SSDConfig(background_touch=False))
    t = _tokens(100, seed=9)
    e = Engine(model, ssd, HostTier("16MiB"), replay=model.cfg.exact_replay_tokens)
    e.prefill(t[:70])
    kv, _ = model.encode(t[:64], 0)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[fmt]
    hit = ssd.get_prefix(t)
    assert hit.hit_tokens == 64
    assert torch.equal(hit.kv(torch.float32), kv.detach().to(dtype).float())
    res = e.prefill(t)
    ref = model.forward(t, lambda x: x.detach().to(dtype).to(x.dtype))[-1].detach()
    torch.testing.assert_close(res.logits, ref, rtol=0, atol=1e-5)


def test_catch_up_is_byte_identical_at_the_small_presets_shapes(tmp_path):
    """W=512 and 64-token blocks (the tiny model's calls are a single chunk and hide this): the
    same function in a differently shaped call can differ in its last bits, enough to move an
    FP4 code; the engine encodes block by block, so a catch-up stores an uncached prefill's bytes.
    The global KV is stored unquantized here, so a last-bit difference cannot hide in rounding."""
    torch.manual_seed(0)
    model = EncoderDecoder(preset("small")).eval()
    ns = namespace_for(model, fmt="fp32", block_size=64)
    t = _tokens(2200, seed=5)
    ssd = SSDTier(str(tmp_path / "shared"), namespace=ns, config=SSDConfig(background_touch=False))
    Engine(model, ssd, HostTier("1GiB"), name="a").prefill(t[:1600])
    res = Engine(model, ssd, HostTier("1GiB"), name="b").prefill(t)  # no host state: replay + catch-up
    assert res.hit_tokens["ssd"] == 1600 and res.computed_tokens["store_catch_up"] > 0
    ref = SSDTier(str(tmp_path / "ref"), namespace=ns, config=SSDConfig(background_touch=False))
    Engine(model, ref, HostTier("1GiB"), name="uncached").prefill(t)
    n_blocks = 2200 // 64
    assert _chunks(ssd, t, n_blocks) == _chunks(ref, t, n_blocks)
