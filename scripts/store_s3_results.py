#!/usr/bin/env python3
"""Write benchmarks/results/store_s3.md from the JSON of `tiered-kv bench store --local-s3 --json`.

Every number in the page comes from the JSON file, so the record and the run cannot drift:

    tiered-kv bench store --local-s3 --repeat 3 --latency-runs 5 --json > benchmarks/results/store_s3.json
    .venv/bin/python scripts/store_s3_results.py            # -> benchmarks/results/store_s3.md
    scripts/assemble_benchmarks.sh                          # -> BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMAND = "tiered-kv bench store --local-s3 --repeat 3 --latency-runs 5 --json"


def _ms(s: float) -> str:
    return f"{1e3 * s:,.0f} ms"


def _spread(xs: list[float], raw: list[float]) -> str:
    """Per-repeat ratios raw/tier (the repeats alternate the order of tier and raw)."""
    ratios = sorted(r / t for r, t in zip(raw, xs, strict=True))
    return f"{ratios[0]:.2f}-{ratios[-1]:.2f}"


def render(res: dict, machine: str) -> str:
    lines = [
        "# SSD tier on object storage (`tiered-kv bench store --local-s3`)",
        "",
        "Command (this page is written from its JSON by `scripts/store_s3_results.py`;",
        "the JSON is `benchmarks/results/store_s3.json`):",
        "",
        "```bash",
        COMMAND,
        "```",
        "",
        f"Machine: {machine}. Store: {res['store']}; {res['prefix_tokens']:,}-token prefix = "
        f"{next(iter(res['sizes'].values()))['chunks']} chunks of {res['block_size']} tokens; "
        f"{res['concurrency']} requests in flight for the tier and for raw obstore alike; medians of "
        f"{res['repeat']} repeats whose order of tier and raw alternates.",
        "",
        "What is timed: `put` = `SSDTier.put_quantized` (one HEAD of the last chunk, then one PUT per",
        "chunk with `If-None-Match: *`, each chunk packed just before its PUT) vs `raw` = `obstore.put_async`",
        "of the same packed bytes; `get` = `SSDTier.get_prefix` (sliding window of GETs, stops at the first",
        "miss, CRC32C + key + namespace check of every chunk) vs `raw` = `obstore.get_async` of the same",
        "objects, bytes kept. Ratio = raw time / tier time (above 1: the tier is faster).",
        "",
        "| size per token | chunk | put / raw | get / raw | put (tier, raw) | get (tier, raw) | per-repeat put / get ratios | get_prefix p50 / p99 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, s in res["sizes"].items():
        sec, alls = s["seconds"], s["all_seconds"]
        lat = s["get_prefix_latency_ms"]
        name = "this model" if label == "model" else "DeepSeek-like"
        lines.append(
            f"| {name}: {s['kv_heads']} x {s['head_dim']}, **{s['bytes_per_token']:.0f} B** | "
            f"{s['chunk_bytes'] / 1e3:.1f} KB | **{s['put_ratio_vs_raw']:.2f}** | **{s['get_ratio_vs_raw']:.2f}** | "
            f"{_ms(sec['put'])}, {_ms(sec['raw_put'])} | {_ms(sec['get'])}, {_ms(sec['raw_get'])} | "
            f"{_spread(alls['put'], alls['raw_put'])} / {_spread(alls['get'], alls['raw_get'])} | "
            f"{lat['p50_ms']:,.0f} / {lat['p99_ms']:,.0f} ms ({lat['samples']} runs) |")
    met = lambda key: "yes" if res[key] >= 0.8 else "no"
    rates = "; ".join(f"{s['chunk_bytes'] / 1e3:.0f} KB objects: {s['chunks'] / s['seconds']['raw_put']:.0f} PUTs/s "
                      f"and {s['chunks'] / s['seconds']['raw_get']:.0f} GETs/s" for s in res["sizes"].values())
    lines += [
        "",
        f"Top-level fields (worst case over the sizes): `put_ratio_vs_raw` {res['put_ratio_vs_raw']:.2f} "
        f"(goal >= 0.8: {met('put_ratio_vs_raw')}), `get_ratio_vs_raw` {res['get_ratio_vs_raw']:.2f} "
        f"(goal >= 0.8: {met('get_ratio_vs_raw')}), `get_prefix_p99_ms` {res['get_prefix_p99_ms']:,.0f}.",
        "",
        f"Raw obstore against this server ({rates}): when the rate hardly changes with the object",
        "size, the server's cost per request is the limit, not bandwidth.",
        "",
        "moto is a Python server sharing the machine's cores with the client, so absolute throughput",
        "(MB/s, latency) says more about moto than about the tier, and per-repeat ratios scatter; the",
        "tier issues the same requests as raw obstore (plus one HEAD per put) with the same concurrency,",
        "which is what the ratios compare. Against a real bucket: `tiered-kv bench store --url",
        "s3://bucket/prefix` (README, \"The SSD tier on a bucket\").",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="?", default=str(ROOT / "benchmarks/results/store_s3.json"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/store_s3.md"))
    ap.add_argument("--machine", default=f"{os.cpu_count()} CPU cores shared with other jobs, no GPU")
    args = ap.parse_args()
    res = json.loads(Path(args.json).read_text())
    Path(args.out).write_text(render(res, args.machine))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
