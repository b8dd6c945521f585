"""Drift of an exact-prefix cache: what writing approximate KV under exact keys does over turns.

The SSD tier is keyed by exact token prefix, so blocks computed from bounded-replay windows and
written anyway (``ssd_writes="approximate"``, :mod:`tiered_kv.engine`) hand their error to the
next turn, on another machine, which replays again and adds its own: the error can only
accumulate along the conversation. With the default ``"exact"`` each turn carries only its own
replay error.

The experiment: one conversation of ``turns`` turns (each prompt extends the previous one by
``step`` tokens of held-out text), every turn on a fresh machine sharing one SSD tier, and for
each turn the first-token distribution compared with an uncached, all-exact forward pass of
the same prompt (same FP4 round trip): KL(exact || served) in nats, plus how the KV the SSD
tier holds for that prompt's blocks differs from what an uncached prefill through the engine
stores (the largest absolute error, and how many stored values differ at all).
"""

from __future__ import annotations

import shutil
import tempfile

import torch

from tiered_kv.bounded_replay_error import compare_logits, mean_ci95
from tiered_kv.engine import Engine, fp4_roundtrip, namespace_for
from tiered_kv.model import EncoderDecoder
from tiered_kv.tiers.host import HostTier
from tiered_kv.tiers.ssd import SSDConfig, SSDTier


@torch.no_grad()
def prefix_drift(model: EncoderDecoder, conversations: list[torch.Tensor], *, turns: int = 20, first: int = 512,
                 step: int = 192, block_size: int = 64):
    """Polars frame: conversation, mode, turn, prompt_tokens, kl_nats, kv_max_abs_error, kv_values_differing, ...

    The engines replay the model's own R (``model.with_settings(replay=...)`` for another) and
    store MXFP4, as the SSD tier does by default."""
    import polars as pl

    for name, value in (("turns", turns), ("first", first), ("step", step)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"prefix_drift {name}: must be an integer >= 1, got {value!r}")
    need = first + (turns - 1) * step
    for i, conv in enumerate(conversations):
        if conv.numel() < need:
            raise ValueError(f"prefix_drift: conversation {i} has {conv.numel()} tokens, needs {need}")
    ns = namespace_for(model, block_size=block_size)
    lengths = [first + k * step for k in range(turns)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="tkv-drift-") as root:
        for c, conv in enumerate(conversations):
            conv = conv[:lengths[-1]].long()
            refs = _exact_references(model, conv, lengths, ns, f"{root}/uncached-{c}")
            for mode in ("exact", "approximate"):
                ssd = SSDTier(f"{root}/{c}-{mode}", namespace=ns, config=SSDConfig(background_touch=False))
                for k, (n, ref) in enumerate(zip(lengths, refs, strict=True)):
                    engine = Engine(model, ssd, HostTier("1GiB"), ssd_writes=mode, name=f"turn{k}")
                    rows.append({"conversation": c, "mode": mode, "turn": k + 1, "prompt_tokens": n,
                                 **_turn(engine, conv[:n], *ref)})
    return pl.DataFrame(rows)


def _turn(engine: Engine, prompt: torch.Tensor, ref_logits: torch.Tensor, ref_kv: torch.Tensor) -> dict:
    """One turn's prefill through ``engine`` against the exact references: first-token KL and
    how the KV its SSD tier now holds for the prompt differs from an uncached prefill's."""
    res = engine.prefill(prompt)
    stored = engine.ssd.get_prefix(prompt)
    err, differing = 0.0, 0
    if stored.hit_tokens:
        diff = stored.kv(torch.float32) - ref_kv[: stored.hit_tokens]
        err, differing = float(diff.abs().max()), int((diff != 0).sum())
    return {"ssd_hit_tokens": res.hit_tokens["ssd"], "stored_tokens": stored.hit_tokens,
            "kl_nats": compare_logits([ref_logits], [res.logits])["kl_nats"], "kv_max_abs_error": err,
            "kv_values_differing": differing, "kv_values": stored.hit_tokens * ref_kv[0].numel(),
            "store_catch_up_tokens": res.computed_tokens["store_catch_up"]}


def _exact_references(model: EncoderDecoder, conv: torch.Tensor, lengths: list[int], ns,
                      root: str) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per prompt ``conv[:n]``: the exact first-token logits (uncached, global KV through the FP4
    round trip) and the KV an uncached prefill through the engine stores for it.

    Why one pass over the longest prompt: the prompts extend each other, and the encoder is
    causal with its chunks counted from position 0, so a prompt's global KV and the blocks an
    uncached prefill stores for it are the first n positions of the longest prompt's, bit for
    bit (a test checks both). So is its FP4 round trip where the format's scales are per row
    (MXFP4) or the prompt ends on a block boundary; a prompt that ends inside a block in a
    format with per-block scales (NVFP4) is refused rather than compared with the wrong KV. The
    decoder carries its exact windows from one length to the next instead of starting again at
    0 once per turn.
    """
    raw = model.encode(conv, 0)[0]
    kv = fp4_roundtrip(raw, ns)
    for n in lengths:
        if n % ns.block_size and not torch.equal(fp4_roundtrip(raw[:n], ns), kv[:n]):
            raise ValueError(f"prefix_drift: a {n}-token prompt ends inside a {ns.block_size}-token block, where "
                             f"{ns.fmt}'s round trip differs from the longest prompt's; use first and step that "
                             "are multiples of block_size")
    ssd = SSDTier(root, namespace=ns, config=SSDConfig(background_touch=False))
    Engine(model, ssd, HostTier("1GiB"), name="uncached").prefill(conv)
    stored = ssd.get_prefix(conv).kv(torch.float32)
    shutil.rmtree(root, ignore_errors=True)
    out, state, start = [], None, 0
    for n in lengths:
        logits, state = model.decode(conv[start:n], start, kv, state)
        out.append((logits[-1], stored[:n]))
        start = n
    return out


def drift_summary(frame):
    """Per mode and turn (a polars frame): mean KL over conversations with a 95% interval, worst KV error."""
    import polars as pl

    rows = []
    for (mode, turn), sub in sorted(frame.group_by("mode", "turn"), key=lambda g: (g[0][0], g[0][1])):
        m, lo, hi = mean_ci95(sub["kl_nats"].to_list())
        rows.append({"mode": mode, "turn": turn, "kl_nats": m, "kl_ci95_low": lo, "kl_ci95_high": hi,
                     "kv_max_abs_error": float(sub["kv_max_abs_error"].max()),
                     "conversations": sub.height})
    return pl.DataFrame(rows)
