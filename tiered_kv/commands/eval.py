"""Evaluate a checkpoint: held-out loss, long-context gain, and loss against context length.

The long-context gain is the loss of the last 256 bytes of 4,096-byte windows given only the
512 bytes before them minus their loss given all 3,840 before them: what looking beyond the
window buys. The context curve scores the same 256 bytes after 64 .. 16,384 bytes of context.
By default the held-out files of the training corpus are used (every 20th stdlib file);
``--text`` scores other text files (each must be UTF-8 text).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

NAME = "eval"
HELP = "held-out loss, long-context gain and loss-vs-context curve of a checkpoint"


def register(parser: argparse.ArgumentParser) -> None:
    from tiered_kv.cli_args import int_at_least

    parser.add_argument("--checkpoint", type=Path, default=None, help="checkpoint (default data/checkpoints/small.pt)")
    parser.add_argument("--preset", default=None, help="refuse a checkpoint of another preset (tiny, small)")
    parser.add_argument("--text", type=Path, nargs="+", default=None,
                        help="score these text files instead of the held-out stdlib files")
    parser.add_argument("--samples", type=int_at_least(2, "windows"), default=64,
                        help="4,096-byte windows for the gain (>= 2)")
    parser.add_argument("--curve-samples", type=int_at_least(2, "target spans"), default=16,
                        help="target spans per context length (>= 2)")
    parser.add_argument("--threads", type=int_at_least(1, "threads"), default=2, help="torch CPU threads")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace) -> int:
    import torch

    from tiered_kv.evaluate import evaluate_checkpoint, read_text_files
    from tiered_kv.model import default_checkpoint, load_checkpoint

    torch.set_num_threads(args.threads)
    path = args.checkpoint or default_checkpoint("small")
    model, meta = load_checkpoint(path, expect_preset=args.preset)
    if args.text:
        stream, source = read_text_files(args.text), [str(p) for p in args.text]
    else:
        from tiered_kv.bounded_replay_error import load_heldout

        stream, source = load_heldout(), "held-out stdlib files (every 20th, sorted order)"
    result = {"checkpoint": str(path), "preset": model.cfg.name, "text": source, "tokens": int(stream.numel()),
              **evaluate_checkpoint(model, stream, samples=args.samples, curve_samples=args.curve_samples,
                                    progress=not args.json)}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{path}: held-out {result['heldout_nats_per_byte']:.3f} nats/byte; long-context gain "
              f"{result['long_context_gain_nats']:.3f} nats/byte (last 256 of 4,096 bytes: "
              f"{result['short_context_bytes']} vs {result['full_context_bytes']} bytes of context)")
        for row in result["context_curve"]:
            print(f"  context {row['context_bytes']:>6} bytes: {row['nats_per_byte']:.3f} nats/byte")
    return 0
