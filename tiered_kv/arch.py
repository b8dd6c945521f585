"""KV-cache bytes per token, computed from published architecture parameters.

Why: every capacity and bandwidth number of the tiers scales with bytes/token, and the
headline reductions (437x, 93.3%) are ratios of such numbers. They are computed here from
layers, heads, head dims and bits per element, never typed in, so a changed parameter changes
the answer.

Formulas (per token, one sequence):

- MHA/GQA: ``2 * layers * kv_heads * head_dim * bits / 8`` (a K and a V per layer and KV head).
- MLA: ``layers * (kv_lora_rank + qk_rope_head_dim) * bits / 8`` (one compressed latent plus
  the decoupled rotary key per layer; no separate V).
- YOCO-style (this project and YOCO): one global K/V shared by every cross-decoder layer:
  ``2 * kv_heads * head_dim * bits / 8``; the sliding-window caches are a constant per
  sequence, not per token, and live in the host tier.
- FP4 formats use :func:`tiered_kv.keys.bytes_per_element` (MXFP4 4.25 bits, NVFP4 4.5).

Published parameters (sources):

- DeepSeek-LLM-67B: 95 layers, 64 query heads, 8 KV heads (GQA), head_dim 128, bf16
  (DeepSeek LLM, arXiv:2401.02954, Table 2).
- DeepSeek-V2: 60 layers, MLA with kv_lora_rank 512 and qk_rope_head_dim 64 (arXiv:2405.04434,
  Section 3.1 / config.json); the paper's 93.3% KV reduction vs 67B comes with KV quantized to
  about 6 bits per element in deployment (Section 3.2).
- DeepSeek-V3: 61 layers, the same MLA shape (kv_lora_rank 512, rope 64) (arXiv:2412.19437).
- YOCO-3B: 26 layers, hidden 3072, 24 heads of dim 128 (arXiv:2405.05254, Table 9). The
  number of global-KV heads is not in that table; 8 (GQA) is our assumption, marked below.
- The 890 B/token reference is the per-token cache size DeepSeek reports for its tiered-cache
  model (the number set against 67B's 389,120 B/token for the 437x ratio); it is an input
  here, not something this module derives.
"""

from __future__ import annotations

from dataclasses import dataclass

from tiered_kv.keys import FORMATS, bytes_per_element
from tiered_kv.model import PRESETS, ModelConfig, need

BF16_BITS = 16.0
DEEPSEEK_MLA_BITS = 6.0  #: "about 6 bits per element" KV quantization (DeepSeek-V2, Sec. 3.2)
REFERENCE_CACHE_BYTES_PER_TOKEN = 890.0  #: DeepSeek's published tiered-cache size (input)


def fp4_bits(fmt: str) -> float:
    """Bits per element of an FP4 format, from the kernels' own accounting."""
    return 8.0 * bytes_per_element(fmt)


@dataclass(frozen=True)
class Arch:
    """Architecture parameters that determine per-token KV size."""

    name: str
    kind: str  # "gqa", "mla" or "global" (YOCO-style one shared K/V)
    layers: int
    kv_heads: int = 0
    head_dim: int = 0
    kv_lora_rank: int = 0
    rope_dim: int = 0
    source: str = ""
    note: str = ""

    def __post_init__(self) -> None:
        need(self, self.kind in ("gqa", "mla", "global"), "kind", "gqa, mla or global")
        need(self, self.layers >= 1, "layers", ">= 1")
        if self.kind == "mla" and (self.kv_lora_rank < 1 or self.rope_dim < 0):
            raise ValueError("Arch: MLA needs kv_lora_rank >= 1 and rope_dim >= 0")
        if self.kind != "mla" and (self.kv_heads < 1 or self.head_dim < 1):
            raise ValueError(f"Arch {self.name}: kv_heads and head_dim must be >= 1")

    @property
    def elements_per_token(self) -> int:
        if self.kind == "gqa":
            return 2 * self.layers * self.kv_heads * self.head_dim
        if self.kind == "mla":
            return self.layers * (self.kv_lora_rank + self.rope_dim)
        return 2 * self.kv_heads * self.head_dim  # one global K/V for all decoder layers

    def bytes_per_token(self, bits: float) -> float:
        if bits <= 0:
            raise ValueError(f"bits per element: must be > 0, got {bits}")
        return self.elements_per_token * bits / 8.0


DEEPSEEK_67B = Arch("DeepSeek-LLM-67B", "gqa", layers=95, kv_heads=8, head_dim=128,
                    source="arXiv:2401.02954 Table 2")
DEEPSEEK_V2 = Arch("DeepSeek-V2", "mla", layers=60, kv_lora_rank=512, rope_dim=64,
                   source="arXiv:2405.04434 Sec. 3.1")
DEEPSEEK_V3 = Arch("DeepSeek-V3", "mla", layers=61, kv_lora_rank=512, rope_dim=64,
                   source="arXiv:2412.19437")
YOCO_3B = Arch("YOCO-3B", "global", layers=26, kv_heads=8, head_dim=128,
               source="arXiv:2405.05254 Table 9", note="kv_heads=8 assumed (not in the table)")


def project_arch(cfg: ModelConfig) -> Arch:
    """This project's encoder-decoder as an Arch (one global K/V per token)."""
    return Arch(f"tiered-kv {cfg.name}", "global", layers=cfg.enc_layers + cfg.dec_layers,
                kv_heads=cfg.kv_heads, head_dim=cfg.head_dim, source="tiered_kv.model.PRESETS")


def kv_table() -> list[dict]:
    """One row per (architecture, precision): elements and bytes per token."""
    fp4 = [(fmt, fp4_bits(fmt)) for fmt in FORMATS]
    mla = [("~6-bit", DEEPSEEK_MLA_BITS), *fp4]
    rows = [{"arch": arch.name, "kind": arch.kind, "precision": precision, "bits_per_element": bits,
             "elements_per_token": arch.elements_per_token, "bytes_per_token": arch.bytes_per_token(bits),
             "source": arch.source, "note": arch.note}
            for arch, quantized in ((DEEPSEEK_67B, []), (DEEPSEEK_V2, mla), (DEEPSEEK_V3, mla), (YOCO_3B, fp4),
                                    *((project_arch(cfg), fp4) for cfg in PRESETS.values()))
            for precision, bits in (("bf16", BF16_BITS), *quantized)]
    rows.append({"arch": "DeepSeek tiered cache (reference)", "kind": "published", "precision": "as published",
                 "bits_per_element": None, "elements_per_token": 0,
                 "bytes_per_token": REFERENCE_CACHE_BYTES_PER_TOKEN, "source": "published per-token size",
                 "note": "input, not derived"})
    return rows


def ratios() -> dict:
    """The headline ratios, each from bytes_per_token of the parameters above."""
    b67 = DEEPSEEK_67B.bytes_per_token(BF16_BITS)
    v2_6 = DEEPSEEK_V2.bytes_per_token(DEEPSEEK_MLA_BITS)
    v2_16 = DEEPSEEK_V2.bytes_per_token(BF16_BITS)
    small = project_arch(PRESETS["small"]).bytes_per_token(fp4_bits("mxfp4"))
    return {
        "deepseek_67b_bytes_per_token": b67,
        "ratio_67b_vs_890": b67 / REFERENCE_CACHE_BYTES_PER_TOKEN,
        "deepseek_v2_6bit_bytes_per_token": v2_6,
        "deepseek_v2_reduction_vs_67b": 1.0 - v2_6 / b67,
        "deepseek_v2_bf16_reduction_vs_67b": 1.0 - v2_16 / b67,
        "deepseek_v3_bf16_bytes_per_token": DEEPSEEK_V3.bytes_per_token(BF16_BITS),
        "small_mxfp4_bytes_per_token": small,
        "ratio_67b_vs_small_mxfp4": b67 / small,
    }
