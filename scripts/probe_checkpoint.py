"""A quick look at a checkpoint or a running training's partial: long-context gain and copy probe.

    python scripts/probe_checkpoint.py /work/ckpt/small.partial.pt [--windows 8] [--threads 1]

Why: a full ``tiered-kv eval`` takes minutes; while a run trains in the background this tells,
on a few held-out windows, whether the model is starting to use its long context, so a run
that is not can be stopped early. The numbers are the same functions as ``tiered-kv eval``'s
(``tiered_kv.evaluate``), on fewer samples; they are a guide, never a record.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from tiered_kv.bounded_replay_error import load_heldout
from tiered_kv.evaluate import copy_probe, long_context_gain
from tiered_kv.model import EncoderDecoder, ModelConfig, load_checkpoint


def load_any(path: Path) -> tuple[EncoderDecoder, str]:
    """A checkpoint (``tiered-kv train`` output) or a partial (``OUT.partial.pt``, saved every few steps)."""
    if path.name.endswith(".partial.pt"):
        blob = torch.load(path, map_location="cpu", weights_only=False)
        model = EncoderDecoder(ModelConfig(**blob["model"]))
        model.load_state_dict(blob["state_dict"])
        return model.eval(), f"partial at step {blob['step']}"
    model, _ = load_checkpoint(path)
    return model, "checkpoint"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", type=Path)
    ap.add_argument("--windows", type=int, default=8, help="held-out windows per measurement (default 8)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1: leave a core to training)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, what = load_any(args.path)
    stream = load_heldout()
    gain = long_context_gain(model, stream, n=args.windows)
    probe = copy_probe(model, stream, n=args.windows)
    print(json.dumps({"path": str(args.path), "what": what, "long_context_gain_nats": gain["long_context_gain_nats"],
                      "ci95": gain["long_context_gain_ci95"], "full": gain["full_context_nats_per_byte"],
                      "short": gain["short_context_nats_per_byte"],
                      "copy_gain": {r["distance_bytes"]: round(r["copy_gain_nats"], 3) for r in probe}}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
