"""The TTFT benchmark's reusable pieces on the tiny preset (CI-sized)."""

import torch

from tiered_kv.bench.ttft import measure_ttft, prefill_flops
from tiered_kv.model import EncoderDecoder, preset


def test_measure_ttft_cases_hit_the_right_tiers():
    torch.manual_seed(0)
    model = EncoderDecoder(preset("tiny")).eval()
    tokens = torch.randint(0, 256, (200,), generator=torch.Generator().manual_seed(0))
    df = measure_ttft([96, 160], model=model, block_size=16, suffix=8, tokens=tokens, progress=False)
    assert df.height == 6 and set(df["case"]) == {"miss", "ssd_hit", "ssd_host_hit"}
    rows = {(r["length_tokens"], r["case"]): r for r in df.iter_rows(named=True)}
    for n in (96, 160):
        prefix = ((n - 8) // 16) * 16
        assert rows[(n, "miss")]["ssd_hit_tokens"] == 0 and rows[(n, "miss")]["encoder_tokens"] == n
        hit, host = rows[(n, "ssd_hit")], rows[(n, "ssd_host_hit")]
        assert hit["ssd_hit_tokens"] == prefix and hit["host_hit_tokens"] == 0
        assert hit["encoder_replay_tokens"] == model.cfg.replay
        assert host["ssd_hit_tokens"] == prefix and host["host_hit_tokens"] == prefix
        assert host["encoder_replay_tokens"] == 0 and host["encoder_tokens"] == n - prefix
        for r in (hit, host, rows[(n, "miss")]):
            stages = sum(r[f"{s}_ms"] for s in ("key", "lookup", "load", "dequantize", "replay", "encoder", "decode"))
            assert abs(stages - r["ttft_ms"]) < 1e-6 * max(1.0, r["ttft_ms"])


def test_prefill_flops_bounded_replay_nearly_halves():
    f = prefill_flops(1024, preset("tiny"))
    assert f["encdec_bounded_replay"] < f["baseline_decoder_only"] < f["encdec_full_decoder"]
    # Counted FLOPs follow the layer-token model within the replay's cross-attention overhead.
    assert f["layer_token_ratio"] <= f["prefill_flops_ratio"] < f["layer_token_ratio"] + 0.05
    longer = prefill_flops(2048, preset("tiny"))
    assert longer["prefill_flops_ratio"] < f["prefill_flops_ratio"]
