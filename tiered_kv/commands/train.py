"""Train the byte-level encoder-decoder on the Python standard library's own sources.

The corpus is read from the running interpreter's stdlib (sorted files, every 20th held out),
seeds are fixed, and the checkpoint is written in bf16 with its config, corpus description and
final train / held-out losses. ``tiered-kv train --preset small`` produced the committed
``data/checkpoints/small.pt``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

NAME = "train"
HELP = "train the encoder-decoder (byte-level, stdlib sources) and save a checkpoint"
#: Flags that override the TrainConfig field of the same name (``--steps`` -> ``steps``); since a
#: flag's dest is the field's name, cli_args.name_flags names the flag in a field's error.
OVERRIDES = ("steps", "seed", "threads")


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="small", help="training preset: tiny, small (stage 1 of the default checkpoint), small-kv (stage 2, "
                             "with --init)")
    parser.add_argument("--steps", type=int, default=None, help="override the preset's step count")
    parser.add_argument("--seed", type=int, default=None, help="override the seed (default 0)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: the preset's, 2 for small)")
    parser.add_argument("--out", type=Path, default=None,
                        help="checkpoint path (default data/checkpoints/PRESET.pt)")
    parser.add_argument("--init", type=Path, default=None,
                        help="start from this checkpoint's weights (a second stage, e.g. --preset small-kv "
                             "--init data/checkpoints/small-base.pt; modules the stage adds start fresh)")
    parser.add_argument("--no-resume", action="store_true",
                        help="start from scratch even if OUT.partial.pt (saved every few steps) exists")


def run(args: argparse.Namespace) -> int:
    from tiered_kv.model import default_checkpoint, save_checkpoint
    from tiered_kv.train import MODEL_OF, TRAIN_PRESETS, partial_path, train_preset

    if args.preset not in TRAIN_PRESETS:
        raise ValueError(f"--preset: must be one of {sorted(TRAIN_PRESETS)}, got {args.preset!r}")
    overrides = {k: getattr(args, k) for k in OVERRIDES if getattr(args, k) is not None}
    out = args.out or default_checkpoint(MODEL_OF[args.preset])
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = partial_path(out)
    if args.no_resume and partial.exists():
        partial.unlink()
    model, record = train_preset(args.preset, resume_from=out, init_from=args.init, **overrides)
    argv = ["--preset", args.preset] + (["--init", str(args.init)] if args.init else [])
    record["command"] = "tiered-kv train " + " ".join(argv + [f"--{k} {v}" for k, v in overrides.items()])
    save_checkpoint(model, out, meta=record)
    partial.unlink(missing_ok=True)
    summary = {k: v for k, v in record.items() if k != "loss_history"}
    out.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB)")
    return 0

