"""How much does bounded replay (and FP4) change what the model says? Measured, on held-out text.

Replay error: for a held-out prefix of P tokens, "exact" decoding has the true window caches at
P (the encoder runs from position 0, the decoder from as far back as its windows can reach);
"replayed" decoding rebuilds them by running the encoder and the decoder over only the last R
prefix tokens from empty windows, as the engine does on a host-tier miss. Both use the same
global KV of the prefix (the SSD tier's, FP4 round-tripped). Then both decode the same 32
held-out continuation tokens (teacher forcing, so the two runs see identical inputs) and we
compare their next-token distributions at each step: argmax agreement and KL(exact || replayed)
in nats. Replay through L layers of window W is exact once R >= L*(W-1)+1; below it the gap is
what this module measures.

FP4 error: same exact windows, global KV in fp32 vs through each FP4 format.

Attention locality: the share of sliding-window attention probability that falls on the most
recent 128 positions, for queries with a full window: why a 512-token window's useful range is
much smaller than its size, and so why a short replay is nearly exact.

Random weights say nothing about where attention looks; use the trained checkpoint.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from tiered_kv.attention import band_mask
from tiered_kv.keys import DEFAULT_FORMAT, FORMATS
from tiered_kv.model import EncoderDecoder, need_ints
from tiered_kv.train import load_corpus

WINDOWS = (128, 256, 512)
REPLAYS = (16, 32, 64, 128, 256, 512, 1024)
#: A replay is called near-exact when the upper 95% bound of its KL is below this (nats/step).
NEAR_EXACT_KL = 1e-3


@dataclass(frozen=True)
class ReplaySettings:
    """One replay-error measurement: the grid, how many held-out sequences, and their shape.

    Figure 09, notebook 01 and ``bench ttft --replay-quality`` all take their numbers from
    one of :data:`SETTINGS`, so the same setting gives the same number everywhere.
    """

    windows: tuple[int, ...] = WINDOWS
    replays: tuple[int, ...] = REPLAYS
    samples: int = 64
    prefix: int = 1600  # > the exact bound 1,534 at W=512, so every R up to it is a real replay
    steps: int = 32
    block_size: int = 64
    heldout_bytes: int | None = None

    def __post_init__(self) -> None:
        need_ints(self, ("samples", "prefix", "steps", "block_size"))
        if not self.windows or min(self.windows) < 2 or not self.replays or min(self.replays) < 1:
            raise ValueError("ReplaySettings.windows must be >= 2 tokens and replays >= 1 token")


SETTINGS = {
    "full": ReplaySettings(),
    "quick": ReplaySettings(windows=(128, 512), replays=(16, 128), samples=2, prefix=576, steps=8,
                            heldout_bytes=400_000),
}


#: The format the replay grid stores its global KV in (the SSD tier's default).
REPLAY_FMT = DEFAULT_FORMAT


def measure(model: EncoderDecoder, settings: ReplaySettings, *, flops_length=None):
    """Replay error (W x R) and FP4 error on held-out text under ``settings``: two polars frames
    and the sequences.

    The sequences are encoded once at the model's own W: that global KV feeds both the replay
    grid's exact runs there and :func:`fp4_error`'s, and the grid's runs at that W (in
    :data:`REPLAY_FMT`) are fp4_error's row for that format (the same bits either way; here they
    are computed once).
    """
    seqs = sample_sequences(load_heldout(settings.heldout_bytes), settings.samples,
                            settings.prefix + settings.steps, seed=0)
    w, bs = model.cfg.window, settings.block_size
    kvs = _global_kvs(model, seqs)
    exact = {w: _exact_runs(model, seqs, settings.prefix, _roundtrip(REPLAY_FMT, bs, model), kvs)}
    rep = replay_error(model, seqs, windows=settings.windows, replays=settings.replays, steps=settings.steps,
                       prefix=settings.prefix, block_size=bs, flops_length=flops_length, exact_runs=exact)
    fp4 = fp4_error(model, seqs, steps=settings.steps, prefix=settings.prefix, block_size=bs,
                    known={REPLAY_FMT: [logits for _, logits in exact[w]]}, kvs=kvs)
    return rep, fp4, seqs


def mean_ci95(values) -> tuple[float, float, float]:
    """Mean and a normal-approximation 95% interval over per-sample values."""
    v = [float(x) for x in values]
    m = sum(v) / len(v)
    if len(v) < 2:
        return m, float("nan"), float("nan")
    sd = math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1))
    half = 1.96 * sd / math.sqrt(len(v))
    return m, m - half, m + half


def compare_logits(exact: list[torch.Tensor], other: list[torch.Tensor]) -> dict:
    """Per-sample KL(exact || other) and argmax agreement, as means with 95% intervals."""
    kls, agrees = [], []
    for e, o in zip(exact, other, strict=True):
        lp, lq = F.log_softmax(e.double(), -1), F.log_softmax(o.double(), -1)
        kls.append(float((lp.exp() * (lp - lq)).sum(-1).mean()))
        agrees.append(float((e.argmax(-1) == o.argmax(-1)).double().mean()))
    (kl, kl_lo, kl_hi), (ag, ag_lo, ag_hi) = mean_ci95(kls), mean_ci95(agrees)
    return {"kl_nats": kl, "kl_ci95_low": kl_lo, "kl_ci95_high": kl_hi,
            "agreement": ag, "agreement_ci95_low": ag_lo, "agreement_ci95_high": ag_hi}


def _roundtrip(fmt: str | None, block_size: int, model: EncoderDecoder):
    if fmt is None:
        return lambda kv: kv
    from tiered_kv.engine import fp4_roundtrip, namespace_for

    ns = namespace_for(model, fmt=fmt, block_size=block_size)
    return lambda kv: fp4_roundtrip(kv, ns)


#: Sequences per batched forward: all samples of a (W, R) cell go through the model together, a
#: batch at a time (one sequence at a time leaves a CPU's matrix units mostly idle).
BATCH = 16


def _batches(sequences: list[torch.Tensor]):
    for i in range(0, len(sequences), BATCH):
        yield i, torch.stack(sequences[i:i + BATCH])


@torch.no_grad()
def _global_kvs(model: EncoderDecoder, sequences: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each sequence's global KV from position 0, encoded a batch at a time."""
    return [kv for _, toks in _batches(sequences) for kv in model.global_kv_batched(toks).unbind()]


@torch.no_grad()
def _exact_runs(model: EncoderDecoder, sequences: list[torch.Tensor], prefix: int, rt,
                kvs: list[torch.Tensor] | None = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per sequence: its global KV (through ``rt``) and the exact decoder logits for steps
    [prefix-1, end-1).

    The encoder runs from position 0 (the cross-attention reads every position's KV); the
    decoder from where its windows first reach step prefix-1
    (:attr:`~tiered_kv.model.ModelConfig.decoder_reach` before it): the same logits as from
    position 0 (:meth:`~tiered_kv.model.EncoderDecoder.decode_batched`), without decoding a
    prefix whose windows never reach the scored steps. ``kvs``: the sequences' global KV before
    the round trip, when the caller has it (the encoder is deterministic, so the logits are the
    same bits as when it is computed here).
    """
    start = max(0, prefix - 1 - model.cfg.decoder_reach)
    out = []
    for i, toks in _batches(sequences):
        raw = model.global_kv_batched(toks) if kvs is None else torch.stack(kvs[i:i + BATCH])
        kv = torch.stack([rt(k) for k in raw])
        logits = model.decode_batched(toks[:, start:-1], start, kv)[:, prefix - 1 - start:].clone()
        out += zip(kv.unbind(), logits.unbind(), strict=True)
    return out


@torch.no_grad()
def _replayed_runs(model: EncoderDecoder, sequences: list[torch.Tensor], prefix: int, replay: int,
                   prefix_kv: list[torch.Tensor], rt) -> list[torch.Tensor]:
    """Logits for the same steps with both window caches rebuilt from the last R prefix tokens:
    the encoder replayed from ``prefix - R`` gives the continuation's global KV, the decoder runs
    from there over the exact prefix KV (the SSD tier's, ``prefix_kv`` per batch) and the
    continuation's."""
    s = max(0, prefix - replay)
    out = []
    for (_, toks), kv_prefix in zip(_batches(sequences), prefix_kv, strict=True):
        cont = model.global_kv_batched(toks[:, s:], start=s)[:, prefix - s:]
        kv = torch.cat([kv_prefix, torch.stack([rt(k) for k in cont])], 1)
        out += model.decode_batched(toks[:, s:-1], s, kv)[:, prefix - 1 - s:].unbind()
    return out


def sample_sequences(stream: torch.Tensor, n: int, length: int, seed: int = 0) -> list[torch.Tensor]:
    """``n`` deterministic, evenly spaced windows of ``length`` tokens from a held-out stream."""
    if stream.numel() < length + 1:
        raise ValueError(f"held-out stream has {stream.numel()} tokens, need > {length}")
    g = torch.Generator().manual_seed(seed)
    span = (stream.numel() - length) // n
    offs = [i * span + int(torch.randint(0, max(1, span), (1,), generator=g)) for i in range(n)]
    return [stream[o:o + length].long() for o in offs]


def replay_error(model: EncoderDecoder, sequences: list[torch.Tensor], *, windows=WINDOWS, replays=REPLAYS,
                 steps: int = 32, prefix: int = 1024, block_size: int = 64, progress: bool = False,
                 flops_length: int | None = None, exact_runs: dict[int, list] | None = None):
    """Polars frame: window W, replay R, exact_bound, kl_nats, agreement with 95% intervals.

    Means are over samples (each sample's value is its mean over ``steps`` decode steps); the
    interval is over samples. The global KV goes through :data:`REPLAY_FMT`, as the SSD tier stores it. R
    runs up to each W's exact bound L*(W-1)+1 (added to the grid as the row whose error must be
    zero; larger R are the same as the bound and dropped). With
    ``flops_length``, each row also carries the prefill-FLOPs ratio (bounded replay over the
    decoder-only baseline, :func:`tiered_kv.flops.prefill_flops`) at that prompt length:
    what that R costs beside the error it leaves. ``exact_runs``: the exact runs per W
    (``[(kv, logits), ...]`` over ``sequences``), read where a W is present and filled in where
    not, so a caller can share them.
    """
    import polars as pl

    rt = _roundtrip(REPLAY_FMT, block_size, model)
    grid = []
    for w in windows:
        m = model.with_settings(window=w)
        bound = m.cfg.exact_replay_tokens
        grid.append((w, m, sorted({r for r in replays if r < bound} | {bound})))
    bar = tqdm(total=sum(len(rs) for _, _, rs in grid), desc="replay quality", unit="(W,R)", disable=not progress)
    cache: dict[int, list] = {} if exact_runs is None else exact_runs
    seqs = [seq[:prefix + steps] for seq in sequences]
    rows = []
    for w, m, rs in grid:
        if w not in cache:
            cache[w] = _exact_runs(m, seqs, prefix, rt)
        exact = [logits for _, logits in cache[w]]
        prefix_kv = [torch.stack([kv[:prefix] for kv, _ in cache[w][i:i + BATCH]]) for i, _ in _batches(seqs)]
        if flops_length:
            from tiered_kv.flops import prefill_flops

            flops = prefill_flops(flops_length, m.cfg, replays=rs)["ratios_by_replay"]
        for r in rs:
            row = {"window_tokens": w, "replay_tokens": r, "exact_bound_tokens": m.cfg.exact_replay_tokens,
                   **compare_logits(exact, _replayed_runs(m, seqs, prefix, r, prefix_kv, rt)),
                   "samples": len(sequences), "steps": steps, "prefix_tokens": prefix}
            if flops_length:
                row["prefill_flops_ratio"] = flops[r]
                row["flops_length_tokens"] = flops_length
            rows.append(row)
            bar.update()
    return pl.DataFrame(rows)


def near_exact_replay(frame, window: int, threshold: float = NEAR_EXACT_KL) -> dict | None:
    """The shortest R at ``window`` whose KL's upper 95% bound is below ``threshold`` (a row)."""
    import polars as pl

    sub = frame.filter((pl.col("window_tokens") == window) & (pl.col("kl_ci95_high").fill_nan(pl.col("kl_nats"))
                                                              < threshold)).sort("replay_tokens")
    return sub.row(0, named=True) if sub.height else None


def fp4_error(model: EncoderDecoder, sequences: list[torch.Tensor], *, formats=FORMATS,
              steps: int = 32, prefix: int = 1024, block_size: int = 64, known: dict[str, list] | None = None,
              kvs: list[torch.Tensor] | None = None):
    """Polars frame: format, kl_nats, agreement (with 95% intervals) of FP4 global KV vs fp32.

    Each sequence is encoded once (``kvs``: their global KV, when the caller has it); only the
    decode runs per format. ``known``: a format's exact logits per sequence already computed
    (the replay grid's at the model's own window), not computed again.
    """
    import polars as pl

    seqs = [s[:prefix + steps] for s in sequences]
    kvs = _global_kvs(model, seqs) if kvs is None else kvs
    ref = [logits for _, logits in _exact_runs(model, seqs, prefix, _roundtrip(None, block_size, model), kvs)]
    rows = []
    for fmt in formats:
        got = (known or {}).get(fmt) or [
            logits for _, logits in _exact_runs(model, seqs, prefix, _roundtrip(fmt, block_size, model), kvs)]
        rows.append({"format": fmt, **compare_logits(ref, got), "samples": len(sequences), "steps": steps})
    return pl.DataFrame(rows)


@torch.no_grad()
def attention_locality(model: EncoderDecoder, sequences: list[torch.Tensor], recent: int = 128) -> dict:
    """Share of SWA attention mass on the most recent ``recent`` positions (queries t >= W-1).

    Averaged over heads, queries and sequences, per stack (encoder, decoder) and overall.
    """
    cfg = model.cfg
    w = cfg.window
    out = {"encoder": [], "decoder": []}
    for seq in sequences:
        n = seq.shape[0]
        if n < w + 1:
            raise ValueError(f"attention_locality: sequences need > W={w} tokens, got {n}")
        kv, _ = model.encode(seq, 0)
        for stack, layers, x in (("encoder", model.encoder, model.embed(seq)),
                                 ("decoder", model.decoder, model.embed(seq))):
            for layer in layers:
                q, k, _ = layer.attn._qkv(layer.norm1(x), 0)
                kk = k.repeat_interleave(cfg.n_heads // cfg.kv_heads, dim=1)
                # queries with a full window
                scores = torch.einsum("qhd,khd->hqk", q[w - 1:], kk) / cfg.head_dim ** 0.5
                qp, kp = torch.arange(w - 1, n), torch.arange(n)
                probs = scores.masked_fill(~band_mask(qp, kp, w), float("-inf")).softmax(-1)
                out[stack].append(float((probs * band_mask(qp, kp, recent)).sum(-1).mean()))
                x, _ = layer(x, 0, None, w, 0, kv[:, 0], kv[:, 1])  # (an encoder layer has no cross-attention)
    enc, dec = out["encoder"], out["decoder"]
    return {"window_tokens": w, "recent_tokens": recent,
            "encoder_share": sum(enc) / len(enc), "decoder_share": sum(dec) / len(dec),
            "overall_share": (sum(enc) + sum(dec)) / (len(enc) + len(dec)),
            "uniform_share": recent / w}


def load_heldout(max_bytes: int | None = None) -> torch.Tensor:
    """Held-out token stream of the training corpus (same split as training)."""
    return load_corpus(max_bytes=max_bytes, heldout_only=True).heldout
