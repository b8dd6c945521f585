"""A DeepSeek-scale day: generate it to sharded Parquet, replay it through LRU and per-class TTLs.

DeepSeek reported 608 B input tokens in 24 hours, 56% of them served from disk. `generate`
draws such a day with the calibrated synthetic workload (tiered_kv/sim/day/shards.py) in parallel
parts, straight to ROOT/hour=HHHH/part-NNNNN.parquet; `replay` reads the hours back with polars
lazy scans and replays every policy in one pass (tiered_kv/sim/day/stream.py), reporting the
disk-served share, its times and peak memory; `markdown` turns a recorded JSON into the
BENCHMARKS section (scripts/record_day.sh does both).

Examples:
  tiered-kv day generate /data/day --workers 2                      # 608 B tokens, ~1.2 G accesses
  tiered-kv day replay /data/day --record benchmarks/results/deepseek_day.json
  tiered-kv day generate /tmp/small --tokens 6e9 --days 8 --warmup-days 7   # a steady-state day, 1/100
  tiered-kv day replay /tmp/small --capacity 10TiB --ttl agent=3d,chatbot=7d --ttl 1h
"""

from __future__ import annotations

import argparse
import json
import math

from tiered_kv.units import DEEPSEEK_TTL_SPEC

NAME = "day"
HELP = "a DeepSeek-scale day (608 B tokens): generate sharded Parquet, replay LRU + per-class TTLs, report"
DEFAULT_CAPACITIES = ("1PiB", "4PiB", "16PiB", "100PiB")
DEFAULT_TTLS = (DEEPSEEK_TTL_SPEC,)
GIB = 2**30


def register(parser: argparse.ArgumentParser) -> None:
    from tiered_kv.cli_args import int_at_least

    sub = parser.add_subparsers(dest="day_command", metavar="ACTION", required=True)
    g = sub.add_parser("generate", help="draw the day into ROOT (resumes: finished parts are kept)")
    g.add_argument("root", metavar="ROOT")
    g.add_argument("--tokens", type=float, default=608e9, help="input tokens per day (default 608e9, DeepSeek's)")
    g.add_argument("--days", type=float, default=1.0, help="days generated (default 1)")
    g.add_argument("--warmup-days", type=float, default=0.0,
                   help="of those, days that only warm the cache (default 0: one cold day)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--workers", type=int_at_least(1, "processes"), default=2, help="parallel processes (default 2)")
    g.add_argument("--tokens-per-part", type=float, default=8e9, help="input tokens per part and day (default 8e9)")
    g.add_argument("--no-progress", action="store_true")
    r = sub.add_parser("replay", help="replay ROOT through LRU capacities and per-class TTLs in one pass")
    r.add_argument("root", metavar="ROOT")
    r.add_argument("--capacity", action="append", default=None, metavar="BYTES|inf",
                   help=f"LRU capacity (repeatable; default {', '.join(DEFAULT_CAPACITIES)} and unlimited)")
    r.add_argument("--ttl", action="append", default=None, metavar="CLASS=DUR,...|DUR",
                   help=f"per-class TTL without a capacity (repeatable; default {DEEPSEEK_TTL_SPEC})")
    r.add_argument("--bytes-per-token", type=float, default=70_272.0,
                   help="KV bytes per token that turn capacities into blocks (default DeepSeek-V3 MLA bf16, 70,272)")
    r.add_argument("--record", default=None, metavar="PATH", help="also write the result JSON here")
    r.add_argument("--json", action="store_true", help="print the JSON instead of a table")
    r.add_argument("--no-progress", action="store_true")
    md = sub.add_parser("markdown", help="the BENCHMARKS section of a recorded replay JSON")
    md.add_argument("json_path", metavar="JSON")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tiered_kv.commands._common import to_json

    if args.day_command == "generate":
        from tiered_kv.sim.day import DayConfig, generate_day

        cfg = DayConfig(input_tokens_per_day=args.tokens, days=args.days, warmup_days=args.warmup_days,
                        seed=args.seed, tokens_per_part=args.tokens_per_part)
        m = generate_day(args.root, cfg, workers=args.workers, progress=not args.no_progress)
        print(f"{m['requests']:,} requests, {m['accesses']:,} block accesses, {m['input_tokens']:,} input tokens "
              f"in {len(m['parts'])} parts; generated in {m['generation_s'] or float('nan'):.0f} s, "
              f"peak RSS {m['generation_peak_rss_bytes'] / GIB:.2f} GiB")
        return 0
    if args.day_command == "markdown":
        print(markdown(json.loads(Path(args.json_path).read_text())))
        return 0
    from tiered_kv.sim.day import replay_day
    from tiered_kv.sim.day.stream import day_policies

    caps, ttls = day_policies(args.capacity or [*DEFAULT_CAPACITIES, "inf"], args.ttl or list(DEFAULT_TTLS),
                              args.bytes_per_token)
    res = replay_day(args.root, capacities=caps, ttls=ttls, progress=not args.no_progress)
    res["bytes_per_token"] = args.bytes_per_token
    text = to_json(res)
    if args.record:
        Path(args.record).write_text(text + "\n", encoding="utf-8")
    if args.json:
        print(text)
        return 0
    print(f"{res['requests']:,} requests, {res['input_tokens']:,} input tokens counted")
    for name, p in res["policies"].items():
        by = "  ".join(f"{c} {v:.1%}" for c, v in p["by_class"].items())
        print(f"  {name:<28} disk share {p['disk_token_fraction']:.2%}   ({by})")
    print(f"replay {res['replay_s']:.0f} s (read {res['read_s']:.0f} s, kernel {res['kernel_s']:.0f} s), "
          f"peak RSS {res['replay_peak_rss_bytes'] / GIB:.2f} GiB")
    return 0


def markdown(r: dict) -> str:
    """The BENCHMARKS.md section of one recorded run (every number from the JSON)."""
    from tiered_kv.sim.day.shards import DEEPSEEK_INPUT_TOKENS_PER_DAY

    cfg = r["generated"]["config"]
    lines = [*_md_intro(r), "", *_md_steps(r), "", *_md_shares(r)]
    if r["input_tokens"] < 0.95 * DEEPSEEK_INPUT_TOKENS_PER_DAY * (cfg["days"] - cfg["warmup_days"]):
        lines += ["", _md_scaled(r)]
    if r.get("note"):
        lines += ["", r["note"]]
    if not cfg["warmup_days"]:
        lines += ["", "A day that starts with an empty cache: a TTL of days never expires within it (the TTL row "
                  "equals the unlimited cache), and returns to KV written before the day count as misses, so "
                  "this is a lower bound of a live service's share; figure 15 (REPORT.md) sets a steady-state "
                  "day (seven warm-up days, scaled down) beside the published 56%."]
    return "\n".join(lines)


def _md_intro(r: dict) -> list[str]:
    """What was generated, against DeepSeek's reported day, and the commands that recorded it."""
    g = r["generated"]
    cfg = g["config"]
    return [
        "# A DeepSeek-scale day (`tiered-kv day`, issue 16)",
        "",
        f"{g['input_tokens'] / 1e9:,.1f} B input tokens over {cfg['days']:g} day(s) "
        f"({cfg['warmup_days']:g} of them warm-up), {g['requests']:,} requests, {g['accesses']:,} block accesses "
        f"(512 tokens), {g['n_ids']:,} distinct blocks, in {r['parts']} parts of the calibrated two-class "
        "synthetic workload (seed "
        f"{cfg['seed']}). DeepSeek reported 608 B input tokens in 24 hours, 56% served from disk.",
        "",
        "```bash",
        f"tiered-kv day generate ROOT --tokens {cfg['input_tokens_per_day']:.4g} --days {cfg['days']:g} "
        f"--warmup-days {cfg['warmup_days']:g} --workers {g['generation_workers']}",
        "tiered-kv day replay ROOT --record benchmarks/results/deepseek_day.json",
        "scripts/record_day.sh   # this section, from that JSON",
        "```",
    ]


def _md_steps(r: dict) -> list[str]:
    """Wall time and peak memory of generating and of replaying the day."""
    g = r["generated"]
    return [
        "| step | wall time | peak RSS |",
        "|---|---|---|",
        "| generate | "
        + (f"{g['generation_s'] / 60:.1f} min" if g["generation_s"] else "resumed")
        + f" (parts: {g['generation_part_s_sum'] / 60:.1f} min summed) | "
        f"{g['generation_peak_rss_bytes'] / GIB:.2f} GiB (largest process) |",
        f"| replay, {len(r['policies'])} policies in one pass | {r['replay_s'] / 60:.1f} min"
        + (f", {r['replay_cpu_s'] / 60:.1f} min of CPU" if r.get("replay_cpu_s") is not None else "")
        + f", load average {r.get('load_average_1m') or float('nan'):.0f} at the end "
        f"(reading shards {r['read_s'] / 60:.1f} min, kernel {r['kernel_s'] / 60:.1f} min) | "
        f"{r['replay_peak_rss_bytes'] / GIB:.2f} GiB (cache state {r['state_bytes'] / GIB:.2f} GiB) |",
    ]


def _md_shares(r: dict) -> list[str]:
    """The disk-served share of every policy, in total and per class."""
    classes = r["policies"][next(iter(r["policies"]))]["by_class"]
    return [
        f"Disk-served share of the counted day ({r['requests']:,} requests, capacities at "
        f"{r['bytes_per_token']:,.0f} bytes/token):",
        "",
        "| policy | disk share | " + " | ".join(classes) + " |",
        "|---|---|" + "---|" * len(classes),
        *(f"| {name} | {p['disk_token_fraction']:.2%} | " + " | ".join(f"{v:.2%}" for v in p["by_class"].values())
          + " |" for name, p in r["policies"].items()),
    ]


def _md_scaled(r: dict) -> str:
    """A run below DeepSeek's volume: which share of the day it holds, and its costs scaled up to 608 B tokens."""
    from tiered_kv.sim.day.shards import DEEPSEEK_INPUT_TOKENS_PER_DAY

    g = r["generated"]
    cfg = g["config"]
    k = DEEPSEEK_INPUT_TOKENS_PER_DAY * (cfg["days"] - cfg["warmup_days"]) / r["input_tokens"]
    n_parts = math.ceil(DEEPSEEK_INPUT_TOKENS_PER_DAY / cfg["tokens_per_part"])
    return (f"**This run holds {r['parts']} of the {n_parts} parts of DeepSeek's day "
            f"({1 / k:.1%} of its volume)**, every part a whole day of its share of the traffic, so the "
            "shares above are those of a complete day at that volume. Scaled linearly to 608 B tokens "
            "(replay time and cache state grow with accesses and blocks): replay about "
            + (f"{r['replay_cpu_s'] * k / 60:.0f} min of CPU ({r['replay_s'] * k / 60:.0f} min of wall time "
               "at this run's share of the machine)" if r.get("replay_cpu_s") else
               f"{r['replay_s'] * k / 60:.0f} min")
            + f" at {r['state_bytes'] * k / GIB:.1f} GiB of cache state "
            f"(+ one hour of shards, about {(r['replay_peak_rss_bytes'] - r['state_bytes']) / GIB:.1f} GiB "
            f"here); generation {g['generation_part_s_sum'] / r['parts']:.0f} s of wall time per part here, "
            f"so about {g['generation_part_s_sum'] / r['parts'] * n_parts / 2 / 60:.0f} min for "
            f"{n_parts} parts on 2 processes at this run's share of the machine.")
