"""The model options that let a copy mechanism form: smeared keys, QK-norm, an untied head,
and a learned distance penalty (ALiBi) on the cross-attention.

Each must keep every contract the tiers rely on: the training and inference paths compute the
same function, chunked continuation from window state is exact, bounded replay is exact at
its bound, the stored global KV is still one K/V per token from the encoder alone, and
checkpoints saved before the options existed load as they were trained.
"""

import math

import pytest
import torch

from tiered_kv.model import EncoderDecoder, ModelConfig, load_checkpoint, preset, save_checkpoint

OPTIONS = dict(cross_smear=True, qk_norm=True, cross_logit_scale=2.0, untied_output=True, embed_init_std=1.0,
               cross_rope=False, cross_recency=True)


def _tokens(n, seed=0):
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed))


def _model(**over):
    torch.manual_seed(0)
    m = EncoderDecoder(preset("tiny", **{**OPTIONS, **over})).eval()
    with torch.no_grad():  # untrained gains are 1 and smear 0.5: move them so the test can tell
        for p in m.parameters():
            if p.ndim > 1:
                p.mul_(8)
            else:
                p.add_(torch.randn_like(p) * 0.5)
        for layer in m.decoder:  # slopes of +-0.05 nats per position: visible over 100 tokens
            if layer.cross is not None and layer.cross.recency is not None:
                layer.cross.recency.copy_(torch.randn(m.cfg.n_heads) * 50)
    return m


@torch.no_grad()
@pytest.mark.parametrize("over", [{}, {"cross_rope": True}, {"cross_smear": False}, {"qk_norm": False},
                                  {"cross_logit_scale": 0.0}, {"cross_recency": False}])
def test_paths_agree_and_continuation_is_exact(over):
    m = _model(**over)
    t = _tokens(83, seed=3)
    full = m.forward(t)
    torch.testing.assert_close(m.forward_batched(t[None])[0], full, rtol=0, atol=1e-4)
    kv, _ = m.encode(t, 0)
    for split in (1, 17, 40):
        kv1, s1 = m.encode(t[:split], 0)
        kv2, _ = m.encode(t[split:], split, s1)
        torch.testing.assert_close(torch.cat([kv1, kv2]), kv, rtol=0, atol=1e-5)
        _, d1 = m.decode(t[:split], 0, kv)
        logits, _ = m.decode(t[split:], split, kv, d1, all_logits=True)
        torch.testing.assert_close(logits, full[split:], rtol=0, atol=1e-4)


@torch.no_grad()
def test_replay_bound_unchanged_by_smeared_keys():
    """The smear reads the stored global KV of j-1, which the decoder always has: the replay
    bound L*(W-1)+1 stays exact."""
    m = _model()
    t = _tokens(120, seed=9)
    kv, _ = m.encode(t, 0)
    full = m.forward(t)[-1]
    at_bound, _ = m.first_token_logits(t, kv, m.cfg.exact_replay_tokens)
    torch.testing.assert_close(at_bound[0], full, rtol=0, atol=1e-4)
    below, _ = m.first_token_logits(t, kv, 4)
    assert (below[0] - full).abs().max().item() > 1e-4


@torch.no_grad()
def test_smeared_keys_mix_the_previous_position():
    """With all weight on the previous key, position j's key is exactly the stored key of j-1."""
    m = _model(qk_norm=False, cross_recency=False)
    layer = m.decoder[0].cross
    layer.smear.fill_(40.0)  # sigmoid -> 1
    gk = torch.randn(9, m.cfg.kv_heads, m.cfg.head_dim)
    k = layer._k(gk)
    torch.testing.assert_close(k[1:], gk[:-1])
    assert k[0].abs().max().item() == 0.0  # no predecessor for position 0


@torch.no_grad()
def test_untied_head_is_its_own_weight_and_round_trips(tmp_path):
    m = _model()
    assert m.head is not None and m.head.weight.data_ptr() != m.embed.weight.data_ptr()
    path = tmp_path / "opt.pt"
    save_checkpoint(m, path, dtype=torch.float32)
    loaded, _ = load_checkpoint(path)
    t = _tokens(40)
    torch.testing.assert_close(loaded.forward(t), m.forward(t), rtol=0, atol=1e-5)


@torch.no_grad()
def test_checkpoint_saved_before_the_options_loads_as_trained(tmp_path):
    """A config without the new fields (as every earlier checkpoint has) means all of them off."""
    torch.manual_seed(1)
    old = EncoderDecoder(preset("tiny")).eval()
    path = tmp_path / "old.pt"
    blob_cfg = {k: v for k, v in old.cfg.to_dict().items()
                if k not in ("cross_smear", "qk_norm", "cross_logit_scale", "untied_output", "embed_init_std",
                             "cross_rope", "cross_recency")}
    torch.save({"config": blob_cfg, "state_dict": old.state_dict(), "meta": {}}, path)
    loaded, _ = load_checkpoint(path)
    assert not (loaded.cfg.cross_smear or loaded.cfg.qk_norm or loaded.cfg.untied_output or loaded.cfg.cross_logit_scale
                or loaded.cfg.cross_recency)
    t = _tokens(30)
    torch.testing.assert_close(loaded.forward(t), old.forward(t), rtol=0, atol=1e-6)


def test_embed_init_std_out_of_range_names_the_setting():
    with pytest.raises(ValueError, match="embed_init_std"):
        ModelConfig(embed_init_std=0.0)
    with pytest.raises(ValueError, match="cross_logit_scale"):
        ModelConfig(cross_logit_scale=-1.0)


@torch.no_grad()
def test_cross_logit_scale_multiplies_every_logit_of_its_head():
    """Doubling a head's scale equals doubling its queries: the attention gets sharper, the
    model is a different function, and a scale of 1 is no scale at all."""
    one = _model(cross_logit_scale=1.0)
    none = _model(cross_logit_scale=0.0)
    none.load_state_dict({k: v for k, v in one.state_dict().items() if "log_scale" not in k})
    for layer in one.decoder:
        layer.cross.log_scale.zero_()
    t = _tokens(50, seed=5)
    torch.testing.assert_close(one.forward(t), none.forward(t), rtol=0, atol=1e-5)
    one.decoder[0].cross.log_scale.fill_(math.log(3.0))
    assert (one.forward(t) - none.forward(t)).abs().max().item() > 1e-3


@torch.no_grad()
def test_cross_recency_is_alibi_on_the_cross_attention():
    """The extra key channel gives exactly the logits q.k/sqrt(d) - m (t - j): the layer equals
    attention with that bias written out, and a slope of 0 is the layer without the option."""
    m = _model(qk_norm=False, cross_smear=False)
    layer, d = m.decoder[0].cross, m.cfg.head_dim
    x = torch.randn(37, m.cfg.d_model)
    gk, gv = torch.randn(2, 37, m.cfg.kv_heads, d).unbind(0)
    q = layer.wq(x).unflatten(-1, (m.cfg.n_heads, d)) * layer.log_scale.exp()[:, None]
    g = m.cfg.n_heads // m.cfg.kv_heads
    k, v = gk.repeat_interleave(g, 1), gv.repeat_interleave(g, 1)
    dist = (torch.arange(37)[:, None] - torch.arange(37)[None, :]).float()
    slope = layer.recency * 1e-3
    logits = torch.einsum("thd,jhd->htj", q, k) / math.sqrt(d) - slope[:, None, None] * dist
    att = torch.softmax(logits.masked_fill(dist < 0, float("-inf")), -1)
    want = layer.wo(torch.einsum("htj,jhd->thd", att, v).flatten(-2))
    for got in (layer(x, 0, gk, gv), layer(x[None], 0, gk[None], gv[None])[0]):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-4)
    plain = _model(qk_norm=False, cross_smear=False, cross_recency=False)
    plain.load_state_dict({name: w for name, w in m.state_dict().items() if "recency" not in name})
    for dec in m.decoder:
        if dec.cross is not None:
            dec.cross.recency.zero_()
    t = _tokens(60, seed=2)
    torch.testing.assert_close(m.forward(t), plain.forward(t), rtol=0, atol=1e-5)
