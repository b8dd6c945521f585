"""Models for tests: the tiny preset with weights scaled so attention is far from uniform.

Why scaled: at its initialisation a transformer's attention is close to uniform, and then an
approximate window (bounded replay) differs from the exact one by almost nothing, so a test of
replay exactness, drift or engine equality could pass for the wrong reason. Multiplying every
matrix by 8 makes the scores sharp and the differences visible, and costs no training.
"""

from __future__ import annotations

import torch

from tiered_kv.model import EncoderDecoder, preset


def scaled_tiny_model(scale: float = 8.0, seed: int = 0, **settings) -> EncoderDecoder:
    """The tiny preset (with ``settings`` replaced) in eval mode, seeded, with every weight
    matrix multiplied by ``scale``."""
    torch.manual_seed(seed)
    model = EncoderDecoder(preset("tiny", **settings)).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim > 1:
                p.mul_(scale)
    return model
