"""Prefill FLOPs of the encoder-decoder against a decoder-only baseline, counted, not estimated.

Why counted: the layer-token model ``(L_e*N + L_d*R) / ((L_e+L_d)*N)`` ignores that the
replayed decoder still cross-attends to all N global keys and that attention grows with N.
``torch.utils.flop_counter.FlopCounterMode`` on meta tensors counts every matmul and
attention of the real modules, so a 32K-token prefill costs no compute to count. Used by the
TTFT benchmark, figure 04 and the replay-error measurement (the FLOPs each R costs).
"""

from __future__ import annotations


def prefill_flops(n: int, cfg=None, replays=None) -> dict:
    """FLOPs of prefilling N tokens with ``cfg``'s replay R, counted by FlopCounterMode on meta tensors.

    ``replays`` (a list of R) adds ``ratios_by_replay``: the bounded-replay ratio for each R,
    counting the encoder and the baseline once (the decoder over R tokens is all that varies).
    """
    from dataclasses import replace

    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from tiered_kv.model import DecoderOnly, EncoderDecoder, preset

    cfg = cfg or preset("small")
    r = cfg.replay
    if n > cfg.max_seq_len:
        cfg = replace(cfg, max_seq_len=n)
    with torch.device("meta"):
        base, encdec = DecoderOnly(cfg), EncoderDecoder(cfg)
        tokens = torch.zeros(n, dtype=torch.long)

    def count(fn) -> tuple[int, object]:
        with torch.no_grad(), FlopCounterMode(display=False) as fc:
            result = fn()
        return int(fc.get_total_flops()), result

    enc, (kv, _) = count(lambda: encdec.encode(tokens, 0))

    def decoder_over(rr: int) -> int:
        return count(lambda: encdec.first_token_logits(tokens, kv, rr))[0]

    baseline = count(lambda: base(tokens))[0]
    full_dec = count(lambda: encdec.decode(tokens, 0, kv))[0]
    out = {"tokens": n, "replay_tokens": r,
           "baseline_decoder_only": baseline,
           "encdec_full_decoder": enc + full_dec,
           "encdec_bounded_replay": enc + decoder_over(r)}
    out["prefill_flops_ratio"] = out["encdec_bounded_replay"] / out["baseline_decoder_only"]
    out["full_decoder_ratio"] = out["encdec_full_decoder"] / out["baseline_decoder_only"]
    out["layer_token_ratio"] = (cfg.enc_layers * n + cfg.dec_layers * min(r, n)) / (
        (cfg.enc_layers + cfg.dec_layers) * n)
    if replays:
        out["ratios_by_replay"] = {int(rr): (enc + decoder_over(int(rr))) / baseline for rr in replays}
    return out
