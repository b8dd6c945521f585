"""The served model reads its context only through the KV the tiers hold.

A pointer over earlier token ids (the old copy head) gave the model a path from the prompt's
tokens to the output that bypassed the global KV, so FP4 or replay error in that KV could not
move the long-context gain. These tests pin the served configuration: with the global KV and
the last R tokens fixed, the output cannot depend on any other token id.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tiered_kv.evaluate import gain_decomposition, long_context_gain
from tiered_kv.model import EncoderDecoder, preset
from tiered_kv.testing.models import scaled_tiny_model

ROOT = Path(__file__).resolve().parents[1]


def _served_config_dict() -> dict:
    return json.loads((ROOT / "data/checkpoints/small.json").read_text())["model"]


def test_served_checkpoint_loads_strictly_and_a_token_pointer_is_refused(tmp_path):
    """Every tensor of the served checkpoint is one of the model's, and a checkpoint that carries
    a pointer over token ids (a copy head's setting or weights) does not load: there is no code
    path that could serve it."""
    from tiered_kv.model import load_checkpoint

    served = ROOT / "data/checkpoints/small.pt"
    model, _ = load_checkpoint(served)
    assert model.cfg.to_dict() == _served_config_dict()
    blob = torch.load(served, map_location="cpu", weights_only=True)
    with_weights = {**blob, "state_dict": {**blob["state_dict"], "copy.wq.weight": torch.zeros(4, 192)}}
    torch.save(with_weights, tmp_path / "weights.pt")
    with pytest.raises(ValueError, match=r"unexpected \['copy\.wq\.weight'\]"):
        load_checkpoint(tmp_path / "weights.pt")
    torch.save({**blob, "config": {**blob["config"], "copy_head_dim": 32}}, tmp_path / "config.pt")
    with pytest.raises(ValueError, match="does not know: \\['copy_head_dim'\\]"):
        load_checkpoint(tmp_path / "config.pt")


@torch.no_grad()
def test_served_architecture_output_depends_on_tokens_only_through_kv_and_windows():
    """Two prompts that differ everywhere except their last R tokens, decoded by bounded replay
    over the *same* global KV, give identical first-token logits: no token id before the last
    R reaches the output except through the KV."""
    torch.manual_seed(0)
    cfg = preset("small", window=32, replay=16, max_seq_len=4096)
    model = EncoderDecoder(cfg).eval()
    n, r = 96, cfg.replay
    a = torch.randint(0, 256, (n,))
    b = torch.randint(0, 256, (n,))
    b[-r:] = a[-r:]
    kv_a, _ = model.encode(a, 0)
    logits_a, _ = model.first_token_logits(a, kv_a, r)
    logits_b, _ = model.first_token_logits(b, kv_a, r)
    assert torch.equal(logits_a, logits_b)
    # and the KV does carry the context: another prompt's KV changes the output
    kv_b, _ = model.encode(b, 0)
    assert not torch.allclose(model.first_token_logits(b, kv_b, r)[0], logits_b)


@torch.no_grad()
def test_gain_decomposition_rows_follow_their_definitions():
    model = scaled_tiny_model(scale=2.0)
    stream = torch.randint(0, 256, (3000,), generator=torch.Generator().manual_seed(1)).to(torch.int16)
    kw = dict(window=256, short=64, target=32, seed=3)
    served = long_context_gain(model, stream, n=3, **kw)
    dec = gain_decomposition(model, stream, n=3, **kw)
    rows = {r["variant"]: r for r in dec["variants"]}
    assert set(rows) == {"as served", "far global KV swapped", "mxfp4 round trip", "nvfp4 round trip"}
    assert rows["as served"]["gain_nats"] == pytest.approx(served["long_context_gain_nats"], abs=1e-9)
    assert dec["far_positions"] == 256 - 32 - 64
    # swapping changes the full-context loss (the far KV is read) but never the short one
    swap = rows["far global KV swapped"]
    assert swap["short_context_nats_per_byte"] == rows["as served"]["short_context_nats_per_byte"]
    assert swap["full_context_nats_per_byte"] != rows["as served"]["full_context_nats_per_byte"]
    assert dec["swap_removes_share"] == pytest.approx(1 - swap["gain_nats"] / rows["as served"]["gain_nats"])
    # FP4 is lossy: both contexts move, but only a little on a random tiny model
    for fmt in ("mxfp4", "nvfp4"):
        q = rows[f"{fmt} round trip"]
        assert q["full_context_nats_per_byte"] != rows["as served"]["full_context_nats_per_byte"]
        assert abs(q["full_context_nats_per_byte"] - rows["as served"]["full_context_nats_per_byte"]) < 0.5


@torch.no_grad()
def test_swap_with_a_single_window_is_its_own_donor():
    """With one window, the donor of its far KV is itself: the swap must change nothing."""
    model = scaled_tiny_model(scale=2.0)
    stream = torch.randint(0, 256, (1000,), generator=torch.Generator().manual_seed(2)).to(torch.int16)
    dec = gain_decomposition(model, stream, n=1, window=256, short=64, target=32, seed=3, formats=())
    served, swap = dec["variants"]
    assert swap["full_context_nats_per_byte"] == pytest.approx(served["full_context_nats_per_byte"], abs=1e-6)
