"""KV bytes per token of named architectures, computed from their published parameters.

DeepSeek-LLM-67B (GQA, bf16), DeepSeek-V2/V3 (MLA, bf16 and ~6 bits), YOCO-3B and this
project's presets (bf16, MXFP4, NVFP4), plus the ratios between them (437x vs 890 B/token,
DeepSeek-V2's 93.3% reduction). See ``tiered_kv/arch.py`` for the formulas and sources.
"""

from __future__ import annotations

import argparse
import json

NAME = "arch"
HELP = "KV bytes/token of named architectures and the ratios between them"


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from tiered_kv.arch import kv_table, ratios

    rows, r = kv_table(), ratios()
    if args.json:
        print(json.dumps({"architectures": rows, "ratios": r}, indent=2))
        return 0
    print(f"{'architecture':<36} {'precision':<12} {'elements':>10} {'bytes/token':>14}")
    for row in rows:
        print(f"{row['arch']:<36} {row['precision']:<12} {row['elements_per_token']:>10,} "
              f"{row['bytes_per_token']:>14,.1f}")
    print()
    for key, value in r.items():
        print(f"{key:<40} {value:,.4g}")
    return 0
