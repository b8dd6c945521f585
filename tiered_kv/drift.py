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

import itertools
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
    exact_cache: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
    rows = []
    with tempfile.TemporaryDirectory(prefix="tkv-drift-") as root:
        for c, mode in itertools.product(range(len(conversations)), ("exact", "approximate")):
            conv = conversations[c].long()
            ssd = SSDTier(f"{root}/{c}-{mode}", namespace=ns, config=SSDConfig(background_touch=False))
            for k in range(turns):
                n = first + k * step
                prompt = conv[:n]
                if (c, k) not in exact_cache:
                    kv, _ = model.encode(prompt, 0)
                    logits, _ = model.decode(prompt, 0, fp4_roundtrip(kv, ns))
                    # what an uncached prefill through the engine stores: the reference for the SSD tier
                    ref_root = f"{root}/uncached-{c}-{k}"
                    ref_ssd = SSDTier(ref_root, namespace=ns, config=SSDConfig(background_touch=False))
                    Engine(model, ref_ssd, HostTier("1GiB"), name="uncached").prefill(prompt)
                    exact_cache[(c, k)] = (logits[-1], ref_ssd.get_prefix(prompt).kv(torch.float32))
                    shutil.rmtree(ref_root, ignore_errors=True)
                ref_logits, ref_kv = exact_cache[(c, k)]
                engine = Engine(model, ssd, HostTier("1GiB"), ssd_writes=mode, name=f"turn{k}")
                res = engine.prefill(prompt)
                stored = ssd.get_prefix(prompt)
                err, differing = 0.0, 0
                if stored.hit_tokens:
                    diff = stored.kv(torch.float32) - ref_kv[: stored.hit_tokens]
                    err, differing = float(diff.abs().max()), int((diff != 0).sum())
                rows.append({"conversation": c, "mode": mode, "turn": k + 1, "prompt_tokens": n,
                             "ssd_hit_tokens": res.hit_tokens["ssd"], "stored_tokens": stored.hit_tokens,
                             "kl_nats": compare_logits([ref_logits], [res.logits])["kl_nats"], "kv_max_abs_error": err,
                             "kv_values_differing": differing, "kv_values": stored.hit_tokens * ref_kv[0].numel(),
                             "store_catch_up_tokens": res.computed_tokens["store_catch_up"]})
    return pl.DataFrame(rows)


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
