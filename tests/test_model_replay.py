"""The encoder-decoder: cached continuation, bounded replay exactness, configs (tiny preset)."""

import pytest
import torch

from tiered_kv.model import DecoderOnly, EncoderDecoder, ModelConfig, preset
from tiered_kv.tiers.host import HostEntry, HostTier


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = EncoderDecoder(preset("tiny")).eval()
    with torch.no_grad():
        for p in m.parameters():
            if p.ndim > 1:
                p.mul_(8)
    return m


def _tokens(n, seed=0):
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def test_batched_training_path_equals_inference_path(model):
    t = _tokens(77)
    torch.testing.assert_close(model.forward_batched(t[None])[0], model.forward(t), rtol=0, atol=1e-4)


@torch.no_grad()
def test_cross_attention_without_rotary_positions_is_consistent_and_different():
    """``cross_rope=False``: the three paths still agree, chunked continuation stays exact,
    and the global keys are the unrotated projection (so the model is a different function)."""
    torch.manual_seed(0)
    m = EncoderDecoder(preset("tiny", cross_rope=False)).eval()
    with_rope = EncoderDecoder(preset("tiny")).eval()
    with_rope.load_state_dict(m.state_dict())
    t = _tokens(77)
    torch.testing.assert_close(m.forward_batched(t[None])[0], m.forward(t), rtol=0, atol=1e-4)
    kv, _ = m.encode(t, 0)
    kv1, s1 = m.encode(t[:30], 0)
    kv2, _ = m.encode(t[30:], 30, s1)
    torch.testing.assert_close(torch.cat([kv1, kv2]), kv, rtol=0, atol=1e-5)
    _, d1 = m.decode(t[:30], 0, kv)
    logits, _ = m.decode(t[30:], 30, kv, d1, all_logits=True)
    torch.testing.assert_close(logits, m.forward(t)[30:], rtol=0, atol=1e-5)
    kv_rope, _ = with_rope.encode(t, 0)
    torch.testing.assert_close(kv[..., 1, :, :], kv_rope[..., 1, :, :])  # values never rotate
    assert not torch.allclose(kv[1:, 0], kv_rope[1:, 0])  # keys: rotated only with cross_rope


@torch.no_grad()
@pytest.mark.parametrize("split", [1, 15, 16, 17, 40])
def test_window_state_continuation_is_exact(model, split):
    t = _tokens(70, seed=split)
    kv, _ = model.encode(t, 0)
    kv1, s1 = model.encode(t[:split], 0)
    kv2, _ = model.encode(t[split:], split, s1)
    torch.testing.assert_close(torch.cat([kv1, kv2]), kv, rtol=0, atol=1e-5)
    full = model.forward(t)
    _, d1 = model.decode(t[:split], 0, kv)
    logits, _ = model.decode(t[split:], split, kv, d1, all_logits=True)
    torch.testing.assert_close(logits, full[split:], rtol=0, atol=1e-5)


@torch.no_grad()
def test_replay_exact_at_bound_and_approximate_below(model):
    cfg = model.cfg
    L, W = max(cfg.enc_layers, cfg.dec_layers), cfg.window
    bound = L * (W - 1) + 1
    assert bound == cfg.exact_replay_tokens
    t = _tokens(120, seed=9)
    kv, _ = model.encode(t, 0)
    full = model.forward(t)[-1]
    # decoder bounded replay over the last R tokens
    at_bound, _ = model.first_token_logits(t, kv, bound)
    torch.testing.assert_close(at_bound[0], full, rtol=0, atol=1e-5)
    errs = [(model.first_token_logits(t, kv, r)[0][0] - full).abs().max().item() for r in (bound - 1, W, 4)]
    assert min(errs) > 1e-4, errs
    # encoder window rebuild: exact state from L_e*(W-1) tokens, not from fewer
    _, exact_state = model.encode(t[:100], 0)
    rebuilt = model.replay_encoder(t, 100, cfg.enc_layers * (W - 1))
    for a, b in zip(rebuilt.layers, exact_state.layers, strict=True):
        torch.testing.assert_close(a.k, b.k, rtol=0, atol=1e-5)
    short = model.replay_encoder(t, 100, W)
    assert max((a.k - b.k).abs().max().item() for a, b in zip(short.layers, exact_state.layers, strict=True)) > 1e-4


@torch.no_grad()
def test_decoder_only_baseline_runs(model):
    base = DecoderOnly(model.cfg)
    assert len(base.layers) == model.cfg.enc_layers + model.cfg.dec_layers
    assert base(_tokens(40)).shape == (1, model.cfg.vocab_size)


def test_config_validation_names_the_setting():
    with pytest.raises(ValueError, match="ModelConfig.window"):
        ModelConfig(window=1)
    with pytest.raises(ValueError, match="ModelConfig.n_heads"):
        ModelConfig(n_heads=5, kv_heads=2)
    with pytest.raises(ValueError, match="preset"):
        preset("huge")
    assert preset("small", window=256).window == 256


@torch.no_grad()
def test_state_position_mismatch_is_an_error(model):
    t = _tokens(20)
    _, s = model.encode(t[:10], 0)
    with pytest.raises(ValueError, match="cannot continue at 12"):
        model.encode(t[12:], 12, s)


@torch.no_grad()
def test_host_tier_evicts_lru_by_bytes(model):
    states = []
    for i in range(4):
        _, s = model.encode(_tokens(32, seed=i), 0)
        states.append(HostEntry(s))
    size = states[0].nbytes
    host = HostTier(capacity_bytes=int(size * 2.5))
    for i, e in enumerate(states[:3]):
        assert host.put(bytes([i]) * 16, e)
    assert len(host) == 2 and bytes([0]) * 16 not in host  # oldest evicted
    assert host.used_bytes == 2 * size <= host.capacity_bytes
    assert host.get(bytes([1]) * 16) is not None  # touch 1: now 2 is least recent
    host.put(bytes([3]) * 16, states[3])
    assert host.keys() == [bytes([1]) * 16, bytes([3]) * 16]
    assert host.stats["evictions"] == 2 and host.stats["evicted_bytes"] == 2 * size
    tiny = HostTier(capacity_bytes=size - 1)
    assert not tiny.put(b"k" * 16, states[0]) and len(tiny) == 0
    n, entry = host.lookup([bytes([9]) * 16, bytes([3]) * 16], block_size=16)
    assert n == 32 and entry is not None
    with pytest.raises(ValueError, match="host capacity_bytes"):
        HostTier("lots")


@pytest.mark.parametrize("tq,offset", [(1, 0), (7, 10), (130, 900), (1500, 700)])
def test_cpu_cross_attention_fast_path_matches_masked_reference(tq, offset):
    from tiered_kv.attention import _cross_attention_cpu, _swa_reference

    g = torch.Generator().manual_seed(tq)
    q = torch.randn(tq, 6, 32, generator=g)
    k, v = torch.randn(offset + tq, 2, 32, generator=g), torch.randn(offset + tq, 2, 32, generator=g)
    fast = _cross_attention_cpu(q, k, v, offset, chunk=1024)
    ref = _swa_reference(q, k, v, offset + tq + 1, offset, k_offset=0)
    torch.testing.assert_close(fast, ref, rtol=0, atol=1e-5)


@torch.no_grad()
@pytest.mark.parametrize("settings", [{}, {"cross_rope": False, "cross_recency": True, "qk_norm": True}])
def test_batched_bounded_replay_equals_the_inference_paths_replay(settings):
    """``global_kv_batched``/``decode_batched`` from ``start`` > 0 are the inference path's bounded
    replay (encoder windows rebuilt from the last R tokens, decoder run from ``start``) for a batch,
    and a tail decode from start + L_d*(W-1) on is the full decode."""
    torch.manual_seed(1)
    m = EncoderDecoder(preset("tiny", **settings)).eval()
    seqs = torch.stack([_tokens(101, seed=s) for s in range(3)])
    prefix, replay = 80, 9
    s = prefix - replay
    for b in range(3):
        seq = seqs[b]
        kv_full, _ = m.encode(seq, 0)
        state = m.replay_encoder(seq, prefix, replay)
        kv_cont, _ = m.encode(seq[prefix:], prefix, state)
        kv = torch.cat([kv_full[:prefix], kv_cont])
        want, _ = m.decode(seq[s:], s, kv, all_logits=True)
        got_kv = m.global_kv_batched(seqs[b:b + 1, s:], start=s)[0, prefix - s:]
        torch.testing.assert_close(got_kv, kv_cont, rtol=0, atol=1e-5)
        got = m.decode_batched(seqs[b:b + 1, s:], s, kv[None])[0]
        torch.testing.assert_close(got, want, rtol=0, atol=1e-4)
    full = m.forward_batched(seqs)
    start = seqs.shape[1] - 10 - m.cfg.decoder_reach
    tail = m.decode_batched(seqs[:, start:], start, m.global_kv_batched(seqs))[:, -10:]
    assert torch.equal(m.forward_batched(seqs, last=10), tail)
    torch.testing.assert_close(tail, full[:, -10:], rtol=0, atol=1e-4)
    assert not torch.allclose(m.decode_batched(seqs[:, start + 5:], start + 5, m.global_kv_batched(seqs))[:, -10:],
                              full[:, -10:], atol=1e-4)  # a shorter tail is a real approximation
