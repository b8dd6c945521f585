"""Time to first token on this machine, with the trained model and real tiers, and prefill FLOPs.

For each prompt length N (held-out stdlib text), three cases, each a real prefill through
:class:`tiered_kv.engine.Engine`:

- ``miss``: empty SSD and host tiers; the encoder runs over all N tokens.
- ``ssd_hit``: a previous turn of N - ``suffix`` tokens was prefilled by *another* engine
  sharing the SSD tier; this machine's host tier is empty, so the encoder windows are rebuilt
  by bounded replay of R tokens, and only the new tokens go through the encoder.
- ``ssd_host_hit``: the same, on the machine that served the previous turn (its host tier
  holds the encoder windows at the prefix boundary: no replay).

All cases run the decoder over the last R tokens (bounded replay). Reported per case:
``ttft_ms`` and per-stage times; per length, ``speedup_ssd_hit_vs_miss``. The SSD tier is a
Zarr v3 store on local disk (a temporary folder); the page cache is warm (the chunks were just
written), so load times are a lower bound for a cold SSD.

FLOPs (``torch.utils.flop_counter.FlopCounterMode`` on meta tensors, so 32K costs no compute):
a decoder-only baseline of the same depth (L_e+L_d sliding-window layers) over all N tokens,
the encoder-decoder with its decoder over all N tokens, and with bounded replay (decoder over
R tokens); ``prefill_flops_ratio`` = bounded replay / baseline.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

NAME = "ttft"
HELP = "measured TTFT (miss / SSD hit / SSD+host hit) and prefill FLOPs of the encoder-decoder"

LENGTHS = (1024, 4096, 16384, 32768)
CASES = ("miss", "ssd_hit", "ssd_host_hit")


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS), help="prompt lengths (tokens)")
    parser.add_argument("--checkpoint", default=None, help="model checkpoint (default data/checkpoints/small.pt)")
    parser.add_argument("--repeats", type=int, default=1, help="timed repeats per case (median reported)")
    parser.add_argument("--suffix", type=int, default=64, help="new tokens after the cached previous turn")
    parser.add_argument("--block-size", type=int, default=256, help="SSD chunk size in tokens")
    parser.add_argument("--fmt", default="mxfp4", help="FP4 format of the global KV (mxfp4 or nvfp4)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (1: on shared, oversubscribed cores 2 threads is slower)")
    parser.add_argument("--flops-length", type=int, default=32768, help="N for prefill_flops_ratio")
    parser.add_argument("--replay-quality", action="store_true",
                        help="also measure replay error (W x R grid), FP4 error and attention locality "
                             "on held-out text (slow: minutes)")
    parser.add_argument("--samples", type=int, default=6, help="held-out sequences for --replay-quality")


def load_model(checkpoint=None):
    """The trained small model (or a random one, flagged, when no checkpoint exists)."""
    from pathlib import Path

    from tiered_kv.model import EncoderDecoder, default_checkpoint, load_checkpoint, preset

    path = Path(checkpoint) if checkpoint else default_checkpoint("small")
    if path.exists():
        model, _ = load_checkpoint(path)
        return model, str(path)
    if checkpoint:
        raise FileNotFoundError(f"checkpoint {path} not found")
    import torch

    torch.manual_seed(0)
    return EncoderDecoder(preset("small")).eval(), "random weights (no checkpoint found)"


def _engines(model, store_root: str, ns, name: str):
    from tiered_kv.engine import Engine
    from tiered_kv.tiers.host import HostTier
    from tiered_kv.tiers.ssd import SSDTier

    ssd = SSDTier(f"{store_root}/{name}", namespace=ns, background_touch=False)
    return ssd, Engine(model, ssd, HostTier("4GiB", name=f"{name}-a"), name=f"{name}-a"), \
        Engine(model, ssd, HostTier("4GiB", name=f"{name}-b"), name=f"{name}-b")


def measure_ttft(lengths=LENGTHS, *, model=None, checkpoint=None, repeats: int = 1, suffix: int = 64,
                 block_size: int = 256, fmt: str = "mxfp4", tokens=None, progress: bool = True):
    """Measured TTFT per (length, case): a polars frame with ``ttft_ms`` and per-stage ms.

    ``model`` defaults to the trained checkpoint; ``tokens`` to held-out stdlib text. Small
    lengths (say 256, 512) with the ``tiny`` preset make this a CI-sized measurement.
    """
    import polars as pl
    import torch

    from tiered_kv.engine import STAGES, namespace_for

    if model is None:
        model, _ = load_model(checkpoint)
    lengths = [int(n) for n in lengths]
    for n in lengths:
        if n <= suffix or n > model.cfg.max_seq_len:
            raise ValueError(f"lengths: each must be in ({suffix}, {model.cfg.max_seq_len}] tokens, got {n}")
    if tokens is None:
        from tiered_kv.replay_quality import load_heldout

        tokens = load_heldout()
    tokens = torch.as_tensor(tokens).long()
    need = max(lengths)
    if tokens.numel() < need:
        tokens = tokens.repeat(need // tokens.numel() + 1)
    ns = namespace_for(model, fmt=fmt, block_size=block_size)
    rows = []
    jobs = [(n, r) for n in lengths for r in range(repeats)]
    it = jobs
    if progress:
        from tqdm import tqdm

        it = tqdm(jobs, desc="ttft", unit="length")
    with tempfile.TemporaryDirectory(prefix="tkv-ttft-") as root:
        def cases(n: int, tag: str) -> dict:
            prompt = tokens[:n]
            _, fresh, _ = _engines(model, root, ns, f"miss-{tag}")
            _, a, b = _engines(model, root, ns, f"hit-{tag}")
            a.prefill(prompt[: n - suffix])  # the previous turn, served by machine a (not timed)
            # The hit cases store nothing, so each sees exactly the previous turn's cached state.
            return {"miss": fresh.prefill(prompt), "ssd_hit": b.prefill(prompt, store=False),
                    "ssd_host_hit": a.prefill(prompt, store=False)}

        # Warm-up: every code path once at the smallest length (allocators, lazy kernels); not kept.
        cases(min(lengths), "warm")
        for n, rep in it:
            results = cases(n, f"{n}-{rep}")
            for case, res in results.items():
                row = {"length_tokens": n, "case": case, "repeat": rep, "ttft_ms": res.ttft_s * 1e3,
                       "ssd_hit_tokens": res.hit_tokens["ssd"], "host_hit_tokens": res.hit_tokens["host"],
                       "encoder_tokens": res.computed_tokens["encoder_suffix"],
                       "encoder_replay_tokens": res.computed_tokens["encoder_replay"],
                       "decoder_tokens": res.computed_tokens["decoder"], "store_ms": res.store_s * 1e3}
                row.update({f"{s}_ms": res.timings_s.get(s, 0.0) * 1e3 for s in STAGES})
                rows.append(row)
    df = pl.DataFrame(rows)
    return (df.group_by("length_tokens", "case", maintain_order=True)
            .agg(pl.all().exclude("repeat").median()).sort("length_tokens"))


def prefill_flops(n: int, cfg=None, replay: int | None = None) -> dict:
    """FLOPs of prefilling N tokens, counted by FlopCounterMode on meta tensors."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from tiered_kv.model import DecoderOnly, EncoderDecoder, preset

    cfg = cfg or preset("small")
    r = cfg.replay if replay is None else replay
    if n > cfg.max_seq_len:
        cfg = type(cfg)(**{**cfg.to_dict(), "max_seq_len": n})
    with torch.device("meta"):
        base, encdec = DecoderOnly(cfg), EncoderDecoder(cfg)
        tokens = torch.zeros(n, dtype=torch.long)

    def count(fn) -> int:
        with torch.no_grad(), FlopCounterMode(display=False) as fc:
            fn()
        return int(fc.get_total_flops())

    def full():
        kv, _ = encdec.encode(tokens, 0)
        encdec.decode(tokens, 0, kv)

    def bounded():
        kv, _ = encdec.encode(tokens, 0)
        encdec.first_token_logits(tokens, kv, r)

    out = {"tokens": n, "replay_tokens": r,
           "baseline_decoder_only": count(lambda: base(tokens)),
           "encdec_full_decoder": count(full),
           "encdec_bounded_replay": count(bounded)}
    out["prefill_flops_ratio"] = out["encdec_bounded_replay"] / out["baseline_decoder_only"]
    out["full_decoder_ratio"] = out["encdec_full_decoder"] / out["baseline_decoder_only"]
    # Layer-token model of DESIGN.md: (L_e*N + L_d*R) / ((L_e+L_d)*N)
    out["layer_token_ratio"] = (cfg.enc_layers * n + cfg.dec_layers * min(r, n)) / (
        (cfg.enc_layers + cfg.dec_layers) * n)
    return out


def run(args: argparse.Namespace) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    model, source = load_model(args.checkpoint)
    df = measure_ttft(args.lengths, model=model, repeats=args.repeats, suffix=args.suffix,
                      block_size=args.block_size, fmt=args.fmt)
    ttft, speedup, stages = {}, {}, {}
    for n in args.lengths:
        sub = {row["case"]: row for row in df.filter(df["length_tokens"] == n).iter_rows(named=True)}
        ttft[str(n)] = {c: sub[c]["ttft_ms"] for c in CASES}
        speedup[str(n)] = sub["miss"]["ttft_ms"] / sub["ssd_hit"]["ttft_ms"]
        stages[str(n)] = {c: {k: v for k, v in sub[c].items() if k.endswith("_ms") and k != "ttft_ms"}
                          for c in CASES}
    flops = prefill_flops(args.flops_length, model.cfg)
    extra = {}
    if args.replay_quality:
        from tiered_kv.replay_quality import (
            attention_locality,
            fp4_error,
            load_heldout,
            replay_error,
            sample_sequences,
        )

        seqs = sample_sequences(load_heldout(), args.samples, 1024 + 32, seed=0)
        rep = replay_error(model, seqs, progress=True)
        extra["replay_quality"] = rep.to_dicts()
        extra["fp4_error"] = fp4_error(model, seqs).to_dicts()
        extra["attention_locality"] = attention_locality(model, [q[:1024] for q in seqs])
    result = {
        "model": source, "params": model.num_params, "window_tokens": model.cfg.window,
        "replay_tokens": model.cfg.replay, "block_size_tokens": args.block_size, "fmt": args.fmt,
        "suffix_tokens": args.suffix, "threads": args.threads, "repeats": args.repeats,
        "ttft_ms": ttft, "speedup_ssd_hit_vs_miss": speedup,
        "speedup_ssd_host_hit_vs_miss": {k: ttft[k]["miss"] / ttft[k]["ssd_host_hit"] for k in ttft},
        "stages_ms": stages,
        "prefill_flops": flops, "prefill_flops_ratio": flops["prefill_flops_ratio"],
        "median_speedup_ssd_hit_vs_miss": statistics.median(speedup.values()) if speedup else None,
    }
    result.update(extra)
    return result
