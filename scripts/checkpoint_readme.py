"""Write data/checkpoints/README.md from a checkpoint's training record and its eval JSON.

    python scripts/checkpoint_readme.py data/checkpoints/small.json data/checkpoints/small.eval.json \
        [data/checkpoints/small-base.eval.json]

Every number in the README comes from those files (written by `tiered-kv train` and
`tiered-kv eval --json`), never typed by hand. A checkpoint trained in two stages (``--init``)
carries its first stage's record; the optional third file is the first stage's own eval, for a
before/after table.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

#: Targets of the served checkpoint: held-out loss, long-context gain (nats/byte), the share of
#: the gain that swapping the far global KV must remove (the gain lives in the KV), and the
#: share of the gain an MXFP4 round trip of the global KV may cost.
TARGET_LOSS, TARGET_GAIN, TARGET_SWAP_REMOVES, TARGET_FP4_COSTS = 1.3, 0.08, 0.75, 0.10


def _scalar_lr(t: dict) -> str:
    mult = t.get("scalar_lr_mult", 1.0)
    return f"; parameters of at most 8 entries at {mult:g}x the learning rate" if mult != 1.0 else ""


def _added(prev: dict, m: dict) -> str:
    """What the second stage's model adds over the first's (modules that start fresh)."""
    names = {"cross_recency": "the cross-attention's distance penalty"}
    added = [text for key, text in names.items() if m.get(key) and not prev.get(key)]
    return " and ".join(added) or "nothing"


def _stage(t: dict, m: dict, tokens: float, seconds: float) -> str:
    phases = ", ".join(f"{length:,} bytes from step {int(frac * t['steps'])}" for frac, length in t["curriculum"]) \
        or f"{t['seq_len']:,} bytes"
    return f"""- Training: {t['steps']:,} steps of {t['batch'] * t['seq_len']:,} tokens ({tokens / 1e6:.1f} M
  tokens); sequence length curriculum {phases} (the batch shrinks as sequences grow); AdamW
  (lr {t['lr']:g}, betas 0.9/0.95, weight decay {t['weight_decay']:g}, {t['warmup']} warm-up steps, cosine
  to 10%{_scalar_lr(t)}), grad clip {t['grad_clip']:g}, seed {t['seed']}, {t['threads']} torch threads, bf16 autocast:
  {t['amp']}. Wall time {seconds / 60:.0f} min on this 2-core machine.
- **Augmentation** (it rewards long-range recall, and the eval below is on unaugmented text):
  each of {t.get('recall_copies', 1)} independent draw(s) per sequence copies, in {t['recall_prob']:.0%} of the training
  sequences, a span of {t['recall_span'][0]}-{t['recall_span'][1]} bytes of real text from at least {t['recall_distance']} bytes earlier in the
  same sequence (beyond the window W={m['window']}), so predicting it needs the decoder's
  cross-attention to the global KV; the loss on a copy's predictable bytes is weighted
  {t.get('recall_weight', 1.0):g}x in the batch mean. The rest of every sequence is unmodified text."""


def _training(record: dict, m: dict) -> str:
    """One paragraph per stage; a two-stage record carries its first stage's."""
    prev = record.get("previous_stage")
    this = _stage(record["train"], m, record["tokens_seen"], record["seconds"])
    if prev is None:
        return this
    first = _stage(prev["train"], prev["model"], prev["tokens_seen"], prev["seconds"])
    total = (prev["seconds"] + record["seconds"]) / 60
    return (f"- **Two stages, {total:.0f} min of wall time in all** "
            f"({record['tokens_seen_all_stages'] / 1e6:.1f} M tokens). Stage 1 (`{prev.get('command', '')}`, "
            f"without {_added(prev['model'], m)}):\n  " + first.lstrip("- ").replace("\n- ", "\n  - ") +
            f"\n- Stage 2 (`{record.get('command', '')}`): every weight of stage 1, plus {_added(prev['model'], m)} "
            f"(fresh), trained together:\n  " + this.lstrip("- ").replace("\n- ", "\n  - "))


def _command(record: dict, name: str) -> str:
    prev = record.get("previous_stage")
    cmd = record.get("command", "tiered-kv train --preset " + record["model"]["name"])
    if prev is None:
        return cmd
    base = record.get("init_from", "BASE.pt")
    return (f"{prev.get('command', '')} --out {base}   # stage 1 (record: {Path(base).with_suffix('.json').name})\n"
            f"{cmd} --out data/checkpoints/{name}.pt")


def _before_after(ev: dict, base: dict | None, base_name: str = "stage 1") -> str:
    if base is None:
        return ""
    rows = [("held-out loss (nats/byte)", base["heldout_nats_per_byte"], ev["heldout_nats_per_byte"]),
            ("long-context gain (nats/byte)", base["long_context_gain_nats"], ev["long_context_gain_nats"])]
    for a, b in zip(base.get("copy_probe", []), ev.get("copy_probe", []), strict=False):
        rows.append((f"copy gain at {b['distance_bytes']:,} bytes (nats/byte)", a["copy_gain_nats"], b["copy_gain_nats"]))
    body = "\n".join(f"| {k} | {a:.3f} | {b:.3f} | {b - a:+.3f} |" for k, a, b in rows)
    return f"""
Stage 1 alone (`{base_name}`, its weights evaluated by the same command) against the final checkpoint:

| measure | stage 1 | final | change |
|---|---:|---:|---:|
{body}
"""


def render(record: dict, ev: dict, name: str, base_ev: dict | None = None) -> str:
    m, c = record["model"], record["corpus"]
    training = _training(record, m)
    curve = "\n".join(f"| {r['context_bytes']:,} | {r['nats_per_byte']:.3f} | [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}] |"
                      for r in ev["context_curve"])
    held = ev["heldout_nats_per_byte"]
    gain = ev["long_context_gain_nats"]
    lo, hi = ev["long_context_gain_ci95"]
    probe = "\n".join(f"| {r['distance_bytes']:,} | {r['first_nats_per_byte']:.3f} | {r['repeat_nats_per_byte']:.3f} | "
                      f"{r['copy_gain_nats']:.3f} [{r['copy_gain_ci95'][0]:.3f}, {r['copy_gain_ci95'][1]:.3f}] |"
                      for r in ev.get("copy_probe", []))
    toy_note = ("What kept copying from forming in earlier checkpoints was narrowed down on a toy copy task "
                "(16 random\nsymbols, loss on the copy only): `induction_toy.md` beside this file (written by "
                "`scripts/induction_toy.py\n--render` from its JSON).")
    probe_section = f"""
Copy probe (does it copy? a {ev['copy_probe'][0]['span_bytes']}-byte held-out span repeated d bytes after it
ends; loss of the repeat's bytes after its first against the same bytes the first time;
{ev['copy_probe'][0]['samples']} spans per distance):

| distance d (bytes) | first occurrence (nats/byte) | repeat (nats/byte) | copy gain, 95% interval |
|---:|---:|---:|---|
{probe}

{toy_note}
""" if ev.get("copy_probe") else ""
    options = _options(m)
    hc = "\n".join(f"| {h['step']:,} | {h['tokens'] / 1e6:.2f} M | {h['heldout_nats_per_byte']:.3f} |"
                   for h in record.get("heldout_curve", []))
    return f"""# Trained checkpoints

Written by `scripts/checkpoint_readme.py` from `{name}.json` (the training record) and
`{name}.eval.json` (`tiered-kv eval --checkpoint data/checkpoints/{name}.pt --json`).

## `{name}.pt` (+ `{name}.json`: the full training record, loss per step)

The `{m['name']}` preset of `tiered_kv.model` (YOCO-style encoder-decoder: {m['enc_layers']} sliding-window
encoder layers, one global K/V per token, {m['dec_layers']} decoder layers with sliding-window
self-attention and cross-attention to the global KV; d_model {m['d_model']}, {m['n_heads']} query heads,
{m['kv_heads']} KV heads of dim {m['head_dim']}, SwiGLU {m['mlp_hidden']}, W={m['window']}, R={m['replay']};
**{record['params']:,} parameters**), weights stored in bf16. {options}

Produced by exactly:

```bash
{_command(record, name)}
```

- Corpus: {c['source']}; Python {c['python']}: {c['files']:,} files, {c['bytes']:,} bytes, read in
  sorted relative-path order; byte-level tokens (256 bytes + BOS/EOS delimiting each file).
  Held out: {c['heldout_rule']} ({c['heldout_files']} files). Licence: the Python Software
  Foundation License of the interpreter's own standard library.
{training}

## Evaluation on the held-out files (`tiered-kv eval --json`)

| measure | value | target | met |
|---|---|---|---|
| held-out loss (32 windows of 512 bytes) | {held:.3f} nats/byte | <= {TARGET_LOSS} | {'yes' if held <= TARGET_LOSS else 'no'} |
| long-context gain: last {ev['target_bytes']} of {ev['window_bytes']:,}-byte windows, {ev['short_context_bytes']} vs {ev['full_context_bytes']:,} bytes of context ({ev['samples']} windows) | {gain:.3f} nats/byte (95% [{lo:.3f}, {hi:.3f}]) | >= {TARGET_GAIN} | {'yes' if gain >= TARGET_GAIN else 'no'} |

Loss of the same 256 held-out bytes against the context before them:

| context (bytes) | loss (nats/byte) | 95% interval |
|---:|---:|---|
{curve}
{_decomposition(ev)}{_before_after(ev, base_ev, record.get('init_from', 'stage 1'))}{probe_section}
Held-out loss during training{' (stage 2)' if record.get('previous_stage') else ''} (32 windows of 512 bytes, seed 1):

| step | tokens seen | held-out (nats/byte) |
|---:|---:|---:|
{hc}
"""


def _decomposition(ev: dict) -> str:
    """Where the gain lives: as served, with the far global KV swapped, through FP4."""
    d = ev.get("gain_decomposition")
    if not d:
        return ""
    served = d["variants"][0]
    defined = served["ci95"][0] > 0  # a share of a gain indistinguishable from zero means nothing
    share_col = ("| share of the served gain ", "---:|") if defined else ("", "")

    def row(r: dict) -> str:
        share = f"{r['share_of_served_gain']:.0%} | " if defined else ""
        return (f"| {r['variant']} | {r['gain_nats']:.3f} [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}] | {share}"
                f"{r['full_context_nats_per_byte']:.3f} |")

    head = f"""
Where the gain lives (`gain_decomposition` of the same JSON, the same {d['samples']} windows): the
model reads earlier bytes only through the global KV the SSD tier holds and the window caches of
the host tier (no copy head, no other path from earlier token ids to the output). Swapping the
far global KV (positions more than {d['short_context_bytes']} bytes before the targets, {d['far_positions']:,}
positions) for another window's, or storing it in FP4 ({d['fp4_block_tokens']}-token chunks, both contexts), gives:

| variant | gain (nats/byte), 95% interval {share_col[0]}| full-context loss (nats/byte) |
|---|---|{share_col[1]}---:|
""" + "\n".join(row(r) for r in d["variants"])
    if not defined:
        return head + (f"\n\nShares of the gain (swap removes >= {TARGET_SWAP_REMOVES:.0%}, MXFP4 costs <= "
                       f"{TARGET_FP4_COSTS:.0%}): not defined: the served gain's 95% interval "
                       f"[{served['ci95'][0]:.3f}, {served['ci95'][1]:.3f}] includes 0.\n")
    swap, mx = d["swap_removes_share"], d["fp4_costs_share"].get("mxfp4", float("nan"))
    return head + f"""

| target | value | met |
|---|---:|---|
| swapping the far KV removes >= {TARGET_SWAP_REMOVES:.0%} of the gain | {swap:.0%} | {'yes' if swap >= TARGET_SWAP_REMOVES else 'no'} |
| an MXFP4 round trip costs <= {TARGET_FP4_COSTS:.0%} of the gain | {mx:.0%} | {'yes' if mx <= TARGET_FP4_COSTS else 'no'} |
"""


def _options(m: dict) -> str:
    """The copy-mechanism options of the config, in words (absent fields: the old defaults)."""
    parts = []
    if m.get("cross_smear"):
        parts.append("smeared keys on the cross-attention (each decoder layer matches a learned per-head mix "
                     "of the stored global keys at j and j-1, so one layer can copy)")
    if m.get("qk_norm"):
        parts.append("QK-norm in every attention")
    if m.get("cross_logit_scale"):
        parts.append(f"a learnable per-head scale on the cross-attention logits (from {m['cross_logit_scale']:g})")
    parts.append("rotary positions on the cross-attention" if m.get("cross_rope", True)
                 else "no rotary positions on the cross-attention")
    parts.append("an untied output head" if m.get("untied_output") else "the output tied to the token embedding")
    parts.append(f"token embedding initialized at std {m.get('embed_init_std', 0.02):g}")
    if m.get("cross_recency"):
        parts.append("a learned per-head linear penalty on distance in the cross-attention (ALiBi), from 0")
    return "Options: " + "; ".join(parts) + "."


def main(argv: list[str]) -> int:
    rec_path, eval_path = map(Path, argv[1:3])
    record = json.loads(rec_path.read_text())
    ev = json.loads(eval_path.read_text())
    base_ev = json.loads(Path(argv[3]).read_text()) if len(argv) > 3 else None
    out = rec_path.parent / "README.md"
    out.write_text(render(record, ev, rec_path.stem, base_ev))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
