"""KV bytes/token from architecture parameters reproduce the published numbers."""

import json
import subprocess
import sys

import pytest

from tiered_kv.arch import (
    DEEPSEEK_67B,
    DEEPSEEK_V2,
    DEEPSEEK_V3,
    Arch,
    fp4_bits,
    kv_table,
    project_arch,
    ratios,
)
from tiered_kv.model import preset


def test_deepseek_67b_gqa_bf16():
    assert DEEPSEEK_67B.bytes_per_token(16) == 389_120  # 2 * 95 * 8 * 128 * 2 bytes


def test_headline_ratios():
    r = ratios()
    assert round(r["ratio_67b_vs_890"]) == 437
    assert round(r["deepseek_v2_reduction_vs_67b"] * 100, 1) == 93.3
    assert DEEPSEEK_V2.bytes_per_token(16) == 60 * 576 * 2
    assert DEEPSEEK_V3.bytes_per_token(16) == 61 * 576 * 2


def test_the_torch_free_deepseek_v3_constants_are_the_architectures():
    from tiered_kv.units import DEEPSEEK_V3_KV_ELEMENTS, DEFAULT_BYTES_PER_TOKEN

    assert DEEPSEEK_V3.bytes_per_token(8) == DEEPSEEK_V3_KV_ELEMENTS
    assert DEEPSEEK_V3.bytes_per_token(16) == DEFAULT_BYTES_PER_TOKEN


def test_fp4_formats_use_kernel_accounting():
    assert fp4_bits("mxfp4") == 4.25 and fp4_bits("nvfp4") == 4.5
    small = project_arch(preset("small"))
    assert small.bytes_per_token(fp4_bits("mxfp4")) == 2 * 2 * 32 * 4.25 / 8


def test_changing_a_parameter_changes_the_answer():
    a = Arch("x", "gqa", layers=95, kv_heads=8, head_dim=128)
    b = Arch("x", "gqa", layers=94, kv_heads=8, head_dim=128)
    assert a.bytes_per_token(16) - b.bytes_per_token(16) == 2 * 8 * 128 * 2


def test_bad_arch():
    with pytest.raises(ValueError, match="kind"):
        Arch("x", "moe", layers=1, kv_heads=1, head_dim=1)
    with pytest.raises(ValueError, match="MLA"):
        Arch("x", "mla", layers=1)
    with pytest.raises(ValueError, match="bits"):
        DEEPSEEK_67B.bytes_per_token(0)


def test_table_and_cli_json():
    rows = kv_table()
    assert {"DeepSeek-LLM-67B", "DeepSeek-V2", "DeepSeek-V3", "YOCO-3B", "tiered-kv small"} <= {r["arch"] for r in rows}
    out = subprocess.run([sys.executable, "-m", "tiered_kv.cli", "arch", "--json"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["ratios"]["deepseek_67b_bytes_per_token"] == 389_120
