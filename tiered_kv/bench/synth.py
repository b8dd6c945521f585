"""Synthetic multi-day workload: generation speed of the ``mixed`` preset and the calibration
table (:mod:`tiered_kv.sim.workload.calibration`) as JSON.

- ``generate``: wall seconds of ``generate(PRESETS["mixed"], --days, seed)`` for every seed of
  ``--seeds``, in ``--repeat`` rounds that go through the seeds in turn (interleaved, so load
  from other jobs on a shared machine spreads over all of them); the median over every timed
  call and every call itself are reported, with requests, block accesses and accesses/s;
- ``calibration``: :func:`~tiered_kv.sim.workload.calibration.calibration_report` of each of
  ``--calibration-seeds`` (full size unless ``--quick-calibration``): every statistic beside
  its target and tolerance, and whether it is within.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from tiered_kv.bench._pages import Page, Row, brief, clocked, sec, spread
from tiered_kv.rusage import peak_rss_bytes

NAME = "synth"
HELP = "synthetic workload: generation speed of the 14-day mixed preset and the calibration table"


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--days", type=float, default=14.0, help="days to generate (default 14)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds timed (default 0 1 2)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds over the seeds (default 1)")
    parser.add_argument("--calibration-seeds", type=int, nargs="*", default=[0, 1, 2],
                        help="seeds of the calibration table (default 0 1 2; none skips it)")
    parser.add_argument("--quick-calibration", action="store_true",
                        help="calibration at reduced sizes (calibration_report(quick=True))")


def run(args: argparse.Namespace) -> dict[str, Any]:
    from tiered_kv.sim.workload.calibration import calibration_report
    from tiered_kv.sim.workload.synth import PRESETS, generate

    if args.days <= 0:
        raise ValueError(f"--days: must be > 0, got {args.days}")
    if args.repeat < 1 or not args.seeds:
        raise ValueError("synth: need --repeat >= 1 and at least one --seeds value")
    generate(PRESETS["mixed"], 0.01, 0)  # imports and first-call costs, not timed
    calls: list[dict[str, Any]] = []
    for r in range(args.repeat):
        for seed in args.seeds:
            df, s = clocked(generate, PRESETS["mixed"], args.days, seed)
            n = int(df["block_ids"].list.len().sum())
            calls.append({"round": r, "seed": seed, "seconds": s, "requests": int(df.height),
                          "block_accesses": n, "accesses_per_s": n / s})
            del df
    secs = [c["seconds"] for c in calls]
    out: dict[str, Any] = {
        "preset": "mixed", "days": args.days, "seeds": list(args.seeds), "repeat": args.repeat,
        "generate": {"seconds": statistics.median(secs), "seconds_all": secs,
                     **{k: statistics.median(c[k] for c in calls) for k in ("accesses_per_s", "block_accesses",
                                                                             "requests")},
                     "calls": calls, "peak_rss_mib": peak_rss_bytes() / 2**20},
    }
    reports = []
    for seed in args.calibration_seeds:
        rows, s = clocked(lambda seed=seed: calibration_report(seed, quick=args.quick_calibration).to_dicts())
        reports.append({"seed": seed, "seconds": s, "rows": rows})
    if reports:
        out["calibration"] = {"quick": bool(args.quick_calibration), "reports": reports,
                              "all_within": all(r["within"] for rep in reports for r in rep["rows"])}
    return out


# ------------------------------------------------------------------------------------ the record
def _calibration(cal: dict) -> list[str]:
    from tiered_kv.sim.workload.calibration import markdown_table

    reps = cal["reports"]
    took = ", ".join(f"seed {p['seed']} in {sec(p['seconds'])}" for p in reps)
    return ["", f"Calibration table ({'reduced sizes' if cal['quick'] else 'full size'}; "
            f"`calibration_report(seed)`, {took}):", "",
            markdown_table([p["rows"] for p in reps], [p["seed"] for p in reps]),
            "", f"Every statistic within its tolerance on every seed: **{cal['all_within']}**."]


def render_record(r: dict) -> str:
    """The synth section from the JSON of one ``tiered-kv bench synth --json`` run."""
    g = r["generate"]
    lines = [f"`generate(PRESETS['{r['preset']}'], {r['days']:g} days, seed)` for seeds {r['seeds']}, "
             f"{r['repeat']} round(s) through the seeds:", "",
             "| seconds per trace | block accesses (median) | requests (median) | accesses/s | peak RSS |",
             "|---|---:|---:|---|---:|",
             f"| {spread(g['seconds_all'], sec)} | {g['block_accesses']:,.0f} | {g['requests']:,.0f} | "
             f"{spread([c['accesses_per_s'] for c in g['calls']], lambda x: f'{x / 1e6:.2f} M')} | "
             f"{g['peak_rss_mib']:,.0f} MiB |"]
    return "\n".join(lines + (_calibration(r["calibration"]) if r.get("calibration") else []))


def _summary(s: dict) -> tuple[str, str]:
    g = s["generate"]
    m = (f"{g['block_accesses'] / 1e6:.1f} M block accesses in {brief(g['seconds'])} (median of "
         f"{len(g['seconds_all'])})")
    cal = s.get("calibration")
    if not cal:
        return m, "-"
    seeds = ", ".join(str(p["seed"]) for p in cal["reports"])
    out = [f"{r['traffic_class']} {r['metric']} (seed {p['seed']}: {r['achieved']:.4g}, target {r['target']:.4g})"
           for p in cal["reports"] for r in p["rows"] if not r["within"]]
    met = "yes" if cal["all_within"] else "no: outside " + ", ".join(out)
    return m + f"; calibration {'(reduced) ' if cal['quick'] else ''}seeds {seeds}", met


PAGES = (Page("synth", render_record, "tiered-kv bench synth --json",
              title="Synthetic multi-day workload: generation speed and calibration (`tiered-kv bench synth`)"),)
SUMMARY = (Row("synthetic 14-day workload generation and calibration", ("synth",),
               lambda *_: "every calibration statistic within tolerance (issue 14)", _summary),)
