"""Engine prefill across the tiers (tiny preset, real Zarr SSD tier, seconds on a CPU)."""

import pytest
import torch

from tiered_kv.engine import Engine, fp4_roundtrip, namespace_for
from tiered_kv.testing.models import scaled_tiny_model
from tiered_kv.tiers.host import HostTier
from tiered_kv.tiers.ssd import SSDConfig, SSDTier

BLOCK = 16


@pytest.fixture(scope="module")
def model():
    return scaled_tiny_model()


@pytest.fixture
def ns(model):
    return namespace_for(model, fmt="mxfp4", block_size=BLOCK)


def _ssd(path, ns):
    return SSDTier(str(path), namespace=ns, config=SSDConfig(background_touch=False))


def _tokens(n, seed=1):
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("prev_len,total", [(64, 100), (70, 96), (50, 64)])
def test_cached_prefill_equals_uncached(model, ns, tmp_path, prev_len, total):
    """SSD global KV + host windows: same logits as a miss (prefix ends on and off boundaries)."""
    t = _tokens(total)
    warm = Engine(model, _ssd(tmp_path / "a", ns), HostTier("16MiB"))
    warm.prefill(t[:prev_len])
    cached = warm.prefill(t)
    assert cached.hit_tokens["ssd"] == (prev_len // BLOCK) * BLOCK > 0
    assert cached.hit_tokens["host"] == cached.hit_tokens["ssd"]
    assert cached.computed_tokens["encoder_replay"] == 0
    miss = Engine(model, _ssd(tmp_path / "b", ns), HostTier("16MiB")).prefill(t)
    assert miss.hit_tokens == {"ssd": 0, "host": 0}
    torch.testing.assert_close(cached.logits, miss.logits, rtol=0, atol=1e-5)


def test_exact_replay_engine_equals_full_forward(model, ns, tmp_path):
    """With R >= L*(W-1)+1 every path (miss, SSD-only hit, SSD+host hit) equals the uncached forward."""
    R = model.cfg.exact_replay_tokens
    t = _tokens(120, seed=2)
    ref = model.forward(t, kv_roundtrip=lambda kv: fp4_roundtrip(kv, ns))[-1].detach()
    ssd = _ssd(tmp_path / "s", ns)
    a = Engine(model, ssd, HostTier("16MiB"), replay=R, name="a")
    b = Engine(model, ssd, HostTier("16MiB"), replay=R, name="b")
    miss = a.prefill(t[:90])
    torch.testing.assert_close(miss.logits, model.forward(t[:90], lambda kv: fp4_roundtrip(kv, ns))[-1].detach(),
                               rtol=0, atol=1e-5)
    host_hit = a.prefill(t)
    ssd_hit = b.prefill(t)
    assert host_hit.hit_tokens["host"] == 80 and ssd_hit.hit_tokens == {"ssd": 112, "host": 0}
    for res in (host_hit, ssd_hit):
        torch.testing.assert_close(res.logits, ref, rtol=0, atol=1e-5)


def test_second_engine_gets_global_hit_and_replays(model, ns, tmp_path):
    ssd = _ssd(tmp_path / "shared", ns)
    t = _tokens(100, seed=3)
    a = Engine(model, ssd, HostTier("16MiB"), name="a")
    first = a.prefill(t[:80], traffic_class="agent")
    assert first.stored_blocks == 5
    b = Engine(model, ssd, HostTier("16MiB"), name="b")
    res = b.prefill(t, traffic_class="agent")
    assert res.hit_tokens == {"ssd": 80, "host": 0}
    # exact SSD write of [80, 96): a block-aligned replay from s0, far enough back, then the block
    s0 = max(0, (80 - model.cfg.enc_layers * (model.cfg.window - 1 + 16)) // 16 * 16)
    assert res.computed_tokens == {"encoder_suffix": 20, "encoder_replay": model.cfg.replay,
                                   "decoder": model.cfg.replay, "store_catch_up": (80 - s0) + 16}
    assert res.stored_blocks == 1  # block [80, 96) is new
    # The short replay (R=8 < L*(W-1)+1=31) is an approximation: measurably different logits.
    exact = Engine(model, _ssd(tmp_path / "fresh", ns), HostTier("16MiB"), name="c").prefill(t)
    assert exact.hit_tokens == {"ssd": 0, "host": 0}
    assert (res.logits - exact.logits).abs().max() > 1e-4
    # Machine a's host tier has windows at 80, but the SSD now holds 96 tokens: continuing the
    # encoder over [80, 96) (16 tokens) costs more than replaying R=8, so a replays too.
    again = a.prefill(t)
    assert again.hit_tokens == {"ssd": 96, "host": 0}
    assert set(res.timings_s) == {"key", "lookup", "load", "dequantize", "replay", "encoder", "decode"}
    assert res.ttft_s > 0


def test_full_prefix_hit_needs_no_encoder(model, ns, tmp_path):
    ssd = _ssd(tmp_path / "full", ns)
    t = _tokens(64, seed=4)
    a = Engine(model, ssd, HostTier("16MiB"))
    miss = a.prefill(t)
    again = a.prefill(t)
    assert again.hit_tokens == {"ssd": 64, "host": 64}
    assert again.computed_tokens["encoder_suffix"] == 0
    torch.testing.assert_close(again.logits, miss.logits, rtol=0, atol=1e-5)


def test_decode_step_matches_forward(model, ns, tmp_path):
    """In-flight KV in the GPU tier: decoding a token equals a full forward of the longer prompt."""
    R = model.cfg.exact_replay_tokens
    e = Engine(model, _ssd(tmp_path / "g", ns), HostTier("16MiB"), replay=R)
    t = _tokens(21, seed=5)
    res = e.prefill(t[:20], keep_running=True)
    assert res.request_id in e.gpu and e.gpu.used_bytes > 0
    logits = e.decode_step(res.request_id, int(t[20]))
    ref = model.forward(t, lambda kv: fp4_roundtrip(kv, ns))[-1].detach()
    torch.testing.assert_close(logits, ref, rtol=0, atol=1e-5)
    e.release(res.request_id)
    assert e.gpu.used_bytes == 0 and len(e.gpu) == 0


def test_decoder_windows_reused_from_host(model, ns, tmp_path):
    R = model.cfg.exact_replay_tokens
    e = Engine(model, _ssd(tmp_path / "d", ns), HostTier("16MiB"), replay=R, reuse_decoder_windows=True)
    t = _tokens(40, seed=6)
    e.prefill(t[:16])  # n <= R: exact decoder windows at 16 go to the host tier
    res = e.prefill(t)
    assert res.computed_tokens["decoder"] == 24
    ref = model.forward(t, lambda kv: fp4_roundtrip(kv, ns))[-1].detach()
    torch.testing.assert_close(res.logits, ref, rtol=0, atol=1e-5)


@pytest.mark.parametrize("bad,msg", [
    (torch.zeros(0, dtype=torch.long), "empty"),
    (torch.tensor([1, 2, 300]), "token ids must be in"),
    (torch.tensor([-1, 2]), "token ids must be in"),
    (torch.zeros(3000, dtype=torch.long), "exceeds the model limit"),
    (torch.zeros(2, 3, dtype=torch.long), "1-D"),
])
def test_bad_prompts_give_clear_errors(model, ns, tmp_path, bad, msg):
    e = Engine(model, _ssd(tmp_path / "bad", ns), HostTier("1MiB"))
    with pytest.raises(ValueError, match=msg):
        e.prefill(bad)


def test_engine_rejects_mismatched_namespace(model, tmp_path):
    from tiered_kv.keys import Namespace

    ns = Namespace(model="x", fmt="mxfp4", block_size=16, kv_heads=4, head_dim=32)
    with pytest.raises(ValueError, match="does not match the model"):
        Engine(model, _ssd(tmp_path / "x", ns))
    with pytest.raises(ValueError, match="replay"):
        Engine(model, _ssd(tmp_path / "y", namespace_for(model)), replay=0)


def test_a_prompt_is_hashed_once(model, ns, tmp_path, monkeypatch):
    """The engine hashes the prompt into block keys once; the tier's lookup and write take them."""
    import tiered_kv.engine as engine_mod
    import tiered_kv.tiers.ssd.tier as tier_mod

    calls = []
    for mod in (engine_mod, tier_mod):
        real = mod.block_keys
        monkeypatch.setattr(mod, "block_keys", lambda t, n, real=real, mod=mod: calls.append(mod) or real(t, n))
    t = _tokens(80)
    e = Engine(model, _ssd(tmp_path / "h", ns), HostTier("16MiB"))
    assert e.prefill(t[:50]).stored_blocks == 3
    assert e.prefill(t).hit_tokens == {"ssd": 48, "host": 48}
    assert calls == [engine_mod, engine_mod]  # one hash per prefill, none in the tier


def test_a_weights_tag_keeps_two_checkpoints_of_one_config_apart(model, ns, tmp_path):
    """``namespace_for(tag=)``: same config, other weights, so the tier must not serve one's KV to the other."""
    tagged = namespace_for(model, fmt="mxfp4", block_size=BLOCK, tag="-stage2")
    assert tagged.model == ns.model + "-stage2" and tagged.digest != ns.digest
    t = _tokens(40)
    assert Engine(model, _ssd(tmp_path / "s", ns), HostTier("1MiB")).prefill(t).stored_blocks == 2
    assert Engine(model, _ssd(tmp_path / "s", ns), HostTier("1MiB")).prefill(t).hit_tokens["ssd"] == 32
    assert Engine(model, _ssd(tmp_path / "s", tagged), HostTier("1MiB")).prefill(t).hit_tokens["ssd"] == 0


def test_a_given_gpu_tier_holds_running_requests_under_the_callers_ids(model, ns, tmp_path):
    """``Engine(gpu_tier=)`` and ``prefill(request_id=)``: the caller's budget and names."""
    from tiered_kv.tiers.gpu import GPUTier

    gpu = GPUTier()
    e = Engine(model, _ssd(tmp_path / "g", ns), HostTier("1MiB"), gpu_tier=gpu)
    res = e.prefill(_tokens(20), keep_running=True, request_id="chat-7")
    assert res.request_id == "chat-7" and e.gpu is gpu and "chat-7" in gpu
    assert gpu.used_bytes == gpu.get("chat-7").nbytes > 0
    e.decode_step("chat-7", 3)
    assert gpu.get("chat-7").tokens.shape[0] == 21
    tight = Engine(model, _ssd(tmp_path / "t", ns), HostTier("1MiB"), gpu_tier=GPUTier(capacity_bytes=1000))
    with pytest.raises(ValueError, match="free on the GPU tier"):
        tight.prefill(_tokens(20), keep_running=True)
