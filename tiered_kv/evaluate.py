"""Does the model use its context? Held-out loss, the long-context gain, and loss against context.

Why these three numbers: the workbench's replay and FP4 experiments only mean something on a
model that needs its window and looks beyond it. A model at the level of a byte bigram model
(about 2.4 nats/byte on Python source) would make any replay look exact.

- ``heldout_nats_per_byte``: mean next-byte loss over random held-out windows (full context
  inside each window).
- ``long_context_gain_nats``: for 4,096-byte held-out windows, the loss of the last 256 bytes
  given the 3,840 bytes before them, against the *same* bytes given only the 512 before them
  (so the difference is what the extra 3,328 bytes of context bought, never what the targets
  are). Per-sample differences give a 95% interval.
- ``gain_decomposition``: the gain again with the far global KV swapped for another window's
  and with the global KV round-tripped through FP4: does the gain live in what the tiers hold?
- ``context_curve``: the same 256 target bytes scored after 64 .. 16,384 bytes of context:
  where the model stops gaining.
- ``copy_probe``: a diagnostic of the mechanism the gain needs. A 128-byte held-out span is
  repeated ``d`` bytes after it ends; the loss on the repeat (all but its first byte) against
  the loss on its first occurrence says whether the model copies from ``d`` bytes back. A
  model with an induction mechanism scores the repeat far below the first occurrence; one
  without scores them alike, whatever its loss.

Everything is computed with the batched training path (:meth:`EncoderDecoder.forward_batched`,
banded window attention), which tests check equals the inference path, ``batch`` windows at a
time (memory, not the result). Each measurement draws its windows with its own ``seed``.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from tiered_kv.bounded_replay_error import mean_ci95
from tiered_kv.keys import FORMATS
from tiered_kv.model import EncoderDecoder
from tiered_kv.train import document_tokens, loss_on

CONTEXTS = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
TARGET_BYTES = 256
#: Tokens per chunk in :func:`gain_decomposition`'s FP4 round trip (NVFP4 scales per chunk).
FP4_BLOCK_TOKENS = 64


def read_text_files(paths) -> torch.Tensor:
    """BOS/EOS-delimited byte stream of text files; a file that is not text is refused by name."""
    parts = []
    for path in map(Path, paths):
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such file")
        data = path.read_bytes()
        if b"\0" in data[:65536]:
            raise ValueError(f"{path}: not a text file (contains NUL bytes); eval scores text only")
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path}: not a UTF-8 text file (byte {exc.start}); eval scores text only") from None
        parts.append(document_tokens(data))
    if not parts:
        raise ValueError("eval: no text files given")
    return torch.cat(parts)


def _starts(stream: torch.Tensor, n: int, before: int, after: int, seed: int) -> list[int]:
    """``n`` evenly spread positions s with ``before`` tokens before and ``after`` from s."""
    lo, hi = before, stream.numel() - after
    if hi <= lo:
        raise ValueError(f"held-out text has {stream.numel()} tokens; need more than {before + after} "
                         "for this measurement")
    g = torch.Generator().manual_seed(seed)
    span = (hi - lo) / n
    return [lo + int(i * span + float(torch.rand(1, generator=g)) * max(1.0, span - 1)) for i in range(n)]


@torch.no_grad()
def target_losses(model: EncoderDecoder, stream: torch.Tensor, starts: list[int], context: int,
                  target: int = TARGET_BYTES, batch: int = 8, kv_edit=None) -> torch.Tensor:
    """Per-sample mean loss (nats/byte) of ``stream[s:s+target]`` given ``context`` bytes before s.

    ``kv_edit(kv, indices)``, when given, replaces the global KV [B,T,2,Hkv,D] of the batch
    holding samples ``indices`` before the decoder reads it (an FP4 round trip, a swap).
    """
    out = []
    for i in range(0, len(starts), batch):
        seqs = torch.stack([stream[s - context: s + target].long() for s in starts[i:i + batch]])
        rt = None if kv_edit is None else (lambda kv, idx=range(i, i + seqs.shape[0]): kv_edit(kv, idx))
        # inputs seqs[:, :-1] predict seqs[:, 1:]; the last ``target`` predictions are the targets
        logits = model.forward_batched(seqs[:, :-1], kv_roundtrip=rt, last=target)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), seqs[:, -target:].flatten(), reduction="none")
        out.append(loss.view(-1, target).mean(1))
    return torch.cat(out)


@torch.no_grad()
def heldout_loss(model: EncoderDecoder, stream: torch.Tensor, n: int = 32, seq_len: int = 512,
                 seed: int = 1, batch: int = 8) -> float:
    """Mean next-byte loss over ``n`` held-out windows of ``seq_len`` bytes."""
    starts = _starts(stream, n, 0, seq_len + 1, seed)
    losses = []
    for i in range(0, n, batch):
        w = torch.stack([stream[s:s + seq_len + 1].long() for s in starts[i:i + batch]])
        losses.append(loss_on(model, w).item() * w.shape[0])
    return sum(losses) / n


def long_context_gain(model: EncoderDecoder, stream: torch.Tensor, *, window: int = 4096, short: int = 512,
                      target: int = TARGET_BYTES, n: int = 64, seed: int = 2) -> dict:
    """Loss of the last ``target`` bytes of ``window``-byte windows: short context minus full context."""
    full = window - target
    starts = _starts(stream, n, full, target, seed)
    served = _gain_row("as served", target_losses(model, stream, starts, full, target),
                       target_losses(model, stream, starts, short, target))
    return _gain_summary(served, full, short, target, n)


def _gain_summary(served: dict, full: int, short: int, target: int, samples: int) -> dict:
    """:func:`long_context_gain`'s fields from the losses as served (a :func:`_gain_row`) and the
    windows' sizes in bytes."""
    return {"long_context_gain_nats": served["gain_nats"], "long_context_gain_ci95": served["ci95"],
            "full_context_bytes": full, "short_context_bytes": short, "target_bytes": target,
            "window_bytes": full + target, "samples": samples,
            "full_context_nats_per_byte": served["full_context_nats_per_byte"],
            "short_context_nats_per_byte": served["short_context_nats_per_byte"]}


def _gain_row(variant: str, lf: torch.Tensor, ls: torch.Tensor) -> dict:
    gain, lo, hi = mean_ci95((ls - lf).tolist())
    return {"variant": variant, "gain_nats": gain, "ci95": [lo, hi],
            "full_context_nats_per_byte": float(lf.mean()), "short_context_nats_per_byte": float(ls.mean())}


def gain_decomposition(model: EncoderDecoder, stream: torch.Tensor, *, window: int = 4096, short: int = 512,
                       target: int = TARGET_BYTES, n: int = 64, seed: int = 2, formats=FORMATS) -> dict:
    """Where the long-context gain lives: the gain as served, with the far global KV swapped
    for another window's, and with the global KV round-tripped through FP4 as the SSD tier
    stores it.

    Why: a gain that survives swapping the far KV (positions more than ``short`` bytes before
    the targets) does not come from what the tiers hold, and then FP4 or replay error in that
    KV could destroy long-range information without the gain moving. Sample ``i`` reads the
    far KV of sample ``i+1`` (mod n), a window of other text at the same positions, so the
    KV keeps its statistics and only its content changes; the near KV, the tokens and every
    window cache are its own. The windows are those of :func:`long_context_gain` (same seed).
    An FP4 round trip applies to both contexts, so its row is the gain the model keeps when
    every read of the global KV goes through the store's format.
    """
    from tiered_kv.engine import fp4_roundtrip, namespace_for

    full = window - target
    far = full - short  # positions [0, far) of a full-context input are the far KV
    starts = _starts(stream, n, full, target, seed)
    far_kv: dict[int, torch.Tensor] = {}  # each sample's far KV, kept from its full-context run for the swap

    def keep_far(kv: torch.Tensor, idx) -> torch.Tensor:
        far_kv.update(zip(idx, kv[:, :far].clone().unbind(), strict=True))
        return kv

    lf = target_losses(model, stream, starts, full, target, kv_edit=keep_far)
    ls = target_losses(model, stream, starts, short, target)

    def swap(kv: torch.Tensor, idx) -> torch.Tensor:
        out = kv.clone()
        out[:, :far] = torch.stack([far_kv[(j + 1) % n] for j in idx]).to(kv.dtype)
        return out

    rows = [_gain_row("as served", lf, ls),
            _gain_row("far global KV swapped", target_losses(model, stream, starts, full, target, kv_edit=swap), ls)]
    for fmt in formats:
        ns = namespace_for(model, fmt=fmt, block_size=FP4_BLOCK_TOKENS)

        def fp4(kv: torch.Tensor, idx, ns=ns) -> torch.Tensor:
            return torch.stack([fp4_roundtrip(kv[b].float(), ns).to(kv.dtype) for b in range(kv.shape[0])])

        rows.append(_gain_row(f"{fmt} round trip", target_losses(model, stream, starts, full, target, kv_edit=fp4),
                              target_losses(model, stream, starts, short, target, kv_edit=fp4)))
    gain = rows[0]["gain_nats"]
    for row in rows:
        row["share_of_served_gain"] = row["gain_nats"] / gain if gain else float("nan")
    return {"variants": rows, "samples": n, "far_positions": far, "short_context_bytes": short,
            "full_context_bytes": full, "target_bytes": target, "fp4_block_tokens": FP4_BLOCK_TOKENS,
            "swap_removes_share": 1 - rows[1]["share_of_served_gain"] if gain else float("nan"),
            "fp4_costs_share": {r["variant"].split()[0]: 1 - r["share_of_served_gain"] for r in rows[2:]}}


def context_curve(model: EncoderDecoder, stream: torch.Tensor, contexts=CONTEXTS, *, target: int = TARGET_BYTES,
                  n: int = 16, seed: int = 3, progress: bool = False) -> list[dict]:
    """The same targets after each context length: ``[{context_bytes, nats_per_byte, ci95}]``."""
    contexts = sorted(int(c) for c in contexts)
    limit = model.cfg.max_seq_len - target
    if contexts[-1] > limit:
        raise ValueError(f"contexts: each must be <= max_seq_len - target = {limit} bytes, got {contexts[-1]}")
    starts = _starts(stream, n, contexts[-1], target, seed)
    rows = []
    for c in tqdm(contexts, desc="context curve", unit="length", disable=not progress):
        m, lo, hi = mean_ci95(target_losses(model, stream, starts, c, target, batch=max(1, 32768 // (c + target))).tolist())
        rows.append({"context_bytes": c, "nats_per_byte": m, "ci95": [lo, hi], "samples": n})
    return rows


@torch.no_grad()
def copy_probe(model: EncoderDecoder, stream: torch.Tensor, distances=(256, 1024, 2048), *, span: int = 128,
               n: int = 8, seed: int = 4) -> list[dict]:
    """Loss on a span's repeat ``d`` bytes after it against its first occurrence, per distance."""
    rows = []
    for d in distances:
        starts = _starts(stream, n, 0, d + 2 * span + 1, seed)
        first, repeat = [], []
        for s in starts:
            head = stream[s:s + span + d].long()
            seq = torch.cat([head, head[:span]])
            loss = F.cross_entropy(model.forward_batched(seq[None, :-1])[0].float(), seq[1:], reduction="none")
            first.append(loss[:span - 1].mean())  # targets 1..span-1 of the first occurrence
            repeat.append(loss[-(span - 1):].mean())  # the repeat's bytes after its first one
        f, r = torch.stack(first), torch.stack(repeat)
        gain, lo, hi = mean_ci95((f - r).tolist())
        rows.append({"distance_bytes": int(d), "span_bytes": span, "samples": n, "first_nats_per_byte": float(f.mean()),
                     "repeat_nats_per_byte": float(r.mean()), "copy_gain_nats": gain, "copy_gain_ci95": [lo, hi]})
    return rows


def evaluate_checkpoint(model: EncoderDecoder, stream: torch.Tensor, *, samples: int = 64,
                        curve_samples: int = 16, progress: bool = False) -> dict:
    """Everything ``tiered-kv eval --json`` reports."""
    limit = min(model.cfg.max_seq_len, stream.numel() - 1)  # the longest sequence a measurement may read
    contexts = [c for c in CONTEXTS if c + TARGET_BYTES <= limit]
    decomposition = gain_decomposition(model, stream, n=samples)  # its first row is long_context_gain's losses
    return {
        "heldout_nats_per_byte": heldout_loss(model, stream),
        **_gain_summary(decomposition["variants"][0], decomposition["full_context_bytes"],
                        decomposition["short_context_bytes"], decomposition["target_bytes"], samples),
        "gain_decomposition": decomposition,
        "context_curve": context_curve(model, stream, contexts, n=curve_samples, progress=progress),
        "copy_probe": copy_probe(model, stream, [d for d in (256, 1024, 2048) if d + 2 * 128 < limit]),
    }
