"""Measurements that the benchmarks and the figures share.

A benchmark (``tiered_kv.bench``) records a measurement as JSON and renders its page; a figure
(``tiered_kv.viz``) may take the same measurement live or read the recorded JSON. What both need
sits here, below both, so neither imports the other: the TTFT of real prefills through the engine
(:mod:`.ttft`), the recompute-vs-load crossover read from its record (:mod:`.crossover`), and
tail latency when restores and misses contend for one store link (:mod:`.contention`), and the
model they measure (:func:`load_model`).
"""

from __future__ import annotations


def load_model(preset_name: str | None = None, checkpoint: str | None = None):
    """(model, description): a checkpoint, the committed small one, or the tiny preset (random)."""
    from pathlib import Path

    import torch

    from tiered_kv.model import EncoderDecoder, default_checkpoint, load_checkpoint, preset

    if checkpoint:
        if not Path(checkpoint).is_file():
            raise FileNotFoundError(f"--checkpoint: {checkpoint}: no such file")
        model, _ = load_checkpoint(checkpoint, expect_preset=preset_name)
        return model, str(checkpoint)
    name = preset_name or "small"
    path = default_checkpoint(name)
    if path.is_file():
        from tiered_kv import REPO_ROOT

        model, _ = load_checkpoint(path)
        return model, str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)
    torch.manual_seed(0)
    return EncoderDecoder(preset(name)).eval(), f"random weights ({name} preset, no checkpoint)"
