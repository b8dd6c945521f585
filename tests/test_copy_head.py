"""The copy head (a pointer over the prefix, keyed by the stored global KV).

It must keep every contract the tiers rely on, like the other model options: the training and
inference paths compute the same function, chunked continuation is exact given the prefix's
tokens, bounded replay is exact at its bound, a cached prefill equals an uncached one; and it
must really be a pointer: the mass it moves goes to bytes that occur in the prefix.
"""

import pytest
import torch

from tiered_kv.engine import Engine, fp4_roundtrip, namespace_for
from tiered_kv.model import EncoderDecoder, load_checkpoint, preset, save_checkpoint
from tiered_kv.testing.models import scaled_tiny_model
from tiered_kv.tiers.host import HostTier
from tiered_kv.tiers.ssd import SSDConfig, SSDTier
from tiered_kv.train import _load_init, loss_on

DIM = 16


def _tokens(n, seed=0, hi=256):
    return torch.randint(0, hi, (n,), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def model():
    return scaled_tiny_model(copy_head_dim=DIM)


@torch.no_grad()
def test_paths_agree_and_output_is_a_distribution(model):
    t = _tokens(83, seed=3)
    full = model.forward(t)
    torch.testing.assert_close(model.forward_batched(t[None])[0], full, rtol=0, atol=1e-4)
    torch.testing.assert_close(torch.logsumexp(full, -1), torch.zeros(83), rtol=0, atol=1e-5)
    # position 0 has nothing to copy: the vocabulary softmax alone
    plain = EncoderDecoder(model.cfg)
    plain.load_state_dict(model.state_dict())
    plain.copy_head = None
    torch.testing.assert_close(full[0], torch.log_softmax(plain.forward(t)[0], -1), rtol=0, atol=1e-5)
    assert (full[1:] - torch.log_softmax(plain.forward(t)[1:], -1)).abs().max() > 1e-2  # the head acts


@torch.no_grad()
def test_target_path_equals_the_full_distribution(model):
    w = torch.stack([_tokens(41, seed=s, hi=12) for s in range(3)])  # few distinct bytes: many matches
    full = model.forward_batched(w[:, :-1])
    at = model.forward_batched(w[:, :-1], targets=w[:, 1:])
    torch.testing.assert_close(at, full.gather(-1, w[:, 1:, None]).squeeze(-1), rtol=0, atol=1e-5)
    assert abs(float(loss_on(model, w)) + float(at.mean())) < 1e-5
    with pytest.raises(ValueError, match="targets="):
        scaled_tiny_model().forward_batched(w[:, :-1], targets=w[:, 1:])


@torch.no_grad()
@pytest.mark.parametrize("split", [1, 17, 40])
def test_continuation_is_exact_with_history(model, split):
    t = _tokens(83, seed=4)
    full = model.forward(t)
    kv, _ = model.encode(t, 0)
    _, d1 = model.decode(t[:split], 0, kv)
    logits, _ = model.decode(t[split:], split, kv, d1, all_logits=True, history=t[:split])
    torch.testing.assert_close(logits, full[split:], rtol=0, atol=1e-4)
    longer, _ = model.decode(t[split:], split, kv, d1, all_logits=True, history=t)  # a longer history is cut
    torch.testing.assert_close(longer, logits, rtol=0, atol=0)
    with pytest.raises(ValueError, match=rf"history=.*positions \[0, {split}\)"):
        model.decode(t[split:], split, kv, d1)


@torch.no_grad()
def test_chunked_queries_equal_one_chunk(model):
    t = _tokens(60, seed=5)
    kv, _ = model.encode(t, 0)
    h = torch.randn(60, model.cfg.d_model)
    logits = torch.randn(60, model.cfg.vocab_size)
    one = model.copy_head.decode_mix(logits, h, kv, t, 60, chunk=1024)
    torch.testing.assert_close(model.copy_head.decode_mix(logits, h, kv, t, 60, chunk=7), one, rtol=0, atol=1e-5)
    torch.testing.assert_close(model.copy_head.decode_mix(logits[-5:], h[-5:], kv, t, 60, chunk=2), one[-5:],
                               rtol=0, atol=1e-5)


@torch.no_grad()
def test_pointer_mass_goes_to_bytes_of_the_prefix(model):
    """With the gate closed on the vocabulary, all mass at t lies on the bytes at positions 1..t."""
    m = scaled_tiny_model(copy_head_dim=DIM)
    m.copy_head.gate.bias.fill_(-40.0)
    t = _tokens(50, seed=6, hi=40)
    p = m.forward(t).exp()
    for pos in (1, 9, 49):
        seen = torch.zeros(m.cfg.vocab_size, dtype=torch.bool)
        seen[t[1:pos + 1]] = True
        assert float(p[pos][seen].sum()) > 1 - 1e-5
        assert float(p[pos][~seen].sum()) < 1e-5


@torch.no_grad()
def test_replay_bound_is_exact(model):
    t = _tokens(120, seed=9)
    kv, _ = model.encode(t, 0)
    full = model.forward(t)[-1]
    at_bound, _ = model.first_token_logits(t, kv, model.cfg.exact_replay_tokens)
    torch.testing.assert_close(at_bound[0], full, rtol=0, atol=1e-4)
    below, _ = model.first_token_logits(t, kv, 4)
    assert (below[0] - full).abs().max().item() > 1e-4


@torch.no_grad()
def test_engine_hits_equal_the_uncached_forward(model, tmp_path):
    """Miss, SSD+host hit and SSD-only hit, and a decode step: the copy head gets the prefix's
    tokens on every path, so an exact replay gives the uncached logits."""
    R = model.cfg.exact_replay_tokens
    ns = namespace_for(model, fmt="mxfp4", block_size=16)
    rt = lambda kv: fp4_roundtrip(kv, ns)  # noqa: E731
    t = _tokens(120, seed=2)
    ssd = SSDTier(str(tmp_path / "s"), namespace=ns, config=SSDConfig(background_touch=False))
    a = Engine(model, ssd, HostTier("16MiB"), replay=R, name="a", reuse_decoder_windows=True)
    b = Engine(model, ssd, HostTier("16MiB"), replay=R, name="b")
    a.prefill(t[:90])
    host_hit = a.prefill(t, request_id="r", keep_running=True)
    ssd_hit = b.prefill(t)
    assert host_hit.hit_tokens["host"] == 80 and ssd_hit.hit_tokens["ssd"] == 112
    ref = model.forward(t, rt)
    torch.testing.assert_close(host_hit.logits, ref[-1], rtol=0, atol=1e-4)
    torch.testing.assert_close(ssd_hit.logits, ref[-1], rtol=0, atol=1e-4)
    step = a.decode_step("r", 7)
    t2 = torch.cat([t, torch.tensor([7])])
    torch.testing.assert_close(step, model.forward(t2, rt)[-1], rtol=0, atol=1e-4)


def test_checkpoint_round_trip_and_bad_setting(model, tmp_path):
    save_checkpoint(model, tmp_path / "c.pt", dtype=torch.float32)
    back, _ = load_checkpoint(tmp_path / "c.pt")
    assert back.cfg.copy_head_dim == DIM
    t = _tokens(30)
    with torch.no_grad():
        torch.testing.assert_close(back(t), model(t), rtol=0, atol=0)
    with pytest.raises(ValueError, match="copy_head_dim"):
        preset("tiny", copy_head_dim=-1)


def test_a_stage_may_add_the_copy_head_and_nothing_else():
    """... and the cross-attention's distance penalty: the stage-addable settings."""
    base = EncoderDecoder(preset("tiny"))
    grown = EncoderDecoder(preset("tiny", copy_head_dim=DIM, cross_recency=True))
    _load_init(grown, base, "base.pt")
    for k, v in base.state_dict().items():
        torch.testing.assert_close(grown.state_dict()[k], v, rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"base.pt.*\['mlp_hidden'\]"):
        _load_init(EncoderDecoder(preset("tiny", copy_head_dim=DIM, mlp_hidden=64)), base, "base.pt")
    with pytest.raises(ValueError, match="copy_head_dim"):  # and never removes it
        _load_init(EncoderDecoder(preset("tiny")), grown, "base.pt")
    assert any(".cross.recency" in k for k in grown.state_dict())


def test_context_codes_match_exactly_when_the_bytes_do():
    """Codes of order k agree iff the k tokens ending there agree (exact up to 7 tokens; hashed
    beyond, checked here on a few thousand pairs)."""
    from tiered_kv.copy_head import ORDERS, context_codes, match_levels

    t = _tokens(400, seed=11, hi=3)  # three symbols: long matches are common
    codes = context_codes(t)
    pad = -1
    for oi, k in enumerate(ORDERS):
        ctx = [tuple(int(x) for x in t[max(0, i - k + 1): i + 1]) for i in range(len(t))]
        ctx = [((pad,) * (k - len(c))) + c for c in ctx]
        for i in range(0, 400, 7):
            for j in range(0, 400, 3):
                assert bool(codes[i, oi] == codes[j, oi]) == (ctx[i] == ctx[j]), (k, i, j)
    lv = match_levels(codes[:, None, :].expand(-1, 1, -1)[:, 0][:5], codes[:9])
    assert lv.shape == (5, 9) and float(lv.diagonal().min()) == len(ORDERS)  # a context matches itself


def test_prefill_flops_count_a_copy_head_model():
    """FLOP counting runs the model on the meta device; the copy head must run there too, and
    at the last position only it adds almost nothing to a prefill."""
    from tiered_kv.flops import prefill_flops

    with_head = prefill_flops(256, preset("tiny", copy_head_dim=DIM), replays=[8])
    without = prefill_flops(256, preset("tiny"), replays=[8])
    assert with_head["encdec_full_decoder"] > without["encdec_full_decoder"]
    assert with_head["prefill_flops_ratio"] < without["prefill_flops_ratio"] * 1.05
