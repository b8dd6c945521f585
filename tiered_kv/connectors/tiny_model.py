"""A small random Llama written to disk, so an engine can start with no download.

The weights are random (seeded), the architecture is a real ``LlamaForCausalLM``: vLLM loads it
through its ordinary model loader, runs its ordinary attention backend and fills its ordinary KV
cache, which is all a KV connector can see. Prompts are token ids (the engine is started with
``skip_tokenizer_init=True``), so no tokenizer is needed either.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, kw_only=True)
class TinyLlama:
    """Shape of the model: head_dim = hidden / heads (64 by default, a multiple of 32 for MXFP4)."""

    layers: int = 2
    hidden: int = 256
    heads: int = 4
    kv_heads: int = 2
    vocab: int = 1024
    max_positions: int = 32768
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "kv_heads", "vocab", "max_positions"):
            if getattr(self, name) < 1:
                raise ValueError(f"TinyLlama.{name}: must be >= 1, got {getattr(self, name)}")
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise ValueError(f"TinyLlama: hidden ({self.hidden}) must divide by heads ({self.heads}) and heads "
                             f"by kv_heads ({self.kv_heads})")


def build_tiny_llama(path: str | Path, shape: TinyLlama | None = None) -> Path:
    """Write the model to ``path`` (kept if it is already there with a config); return the path."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    shape = shape or TinyLlama()
    path = Path(path)
    if (path / "config.json").exists():
        return path
    torch.manual_seed(shape.seed)
    config = LlamaConfig(vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=2 * shape.hidden,
                         num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
                         num_key_value_heads=shape.kv_heads, max_position_embeddings=shape.max_positions,
                         torch_dtype="bfloat16", tie_word_embeddings=False)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    with torch.no_grad():  # wider logits than the default init: greedy tokens then differ across prompts
        model.lm_head.weight.mul_(8.0)
    model.save_pretrained(path)
    return path
