"""The decoder-only baseline: the same depth of sliding-window layers, each with its own KV.

Why it exists: the encoder-decoder's point is one global KV per token shared by every decoder
layer; :mod:`tiered_kv.flops` compares its prefill work with this plain stack of L_e + L_d
layers built from the same blocks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tiered_kv.model import ModelConfig, SWALayer


class DecoderOnly(nn.Module):
    """Plain decoder-only baseline of the same depth: L_e+L_d SWA layers, each with its own KV."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(SWALayer(cfg, cross=False) for _ in range(cfg.enc_layers + cfg.dec_layers))
        self.norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Prefill of all N tokens; returns the last position's logits."""
        x = self.embed(tokens)
        for layer in self.layers:
            x, _ = layer(x, 0, None, self.cfg.window, 0)
        return F.linear(self.norm(x[-1:]), self.embed.weight)

