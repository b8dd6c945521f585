"""Run a parameter sweep of the cluster model (Ray when installed, else a local process pool).

CONFIG.toml lists the points: a [grid] of axes (policy, capacity, ttl, nodes, routing, preset,
seed) and/or [[point]] tables, with fixed settings (days, bytes_per_token, host_capacity, out)
at the top; see tiered_kv/sim/sweep.py. Each point's result is one Parquet file under the
output directory (default: CONFIG's name beside it); a re-run skips the points already there
computed by the same simulator code (each row records its code_digest).

Examples:
  tiered-kv sweep sweeps/example.toml                       # Ray if installed, else processes
  tiered-kv sweep sweeps/example.toml --backend pool --workers 2
  tiered-kv sweep sweeps/example.toml --address ray://head:10001   # join a Ray cluster
  tiered-kv sweep sweeps/example.toml --plot --metric ttft_p99_s   # chart the results (SVG)
"""

from __future__ import annotations

import argparse
import json

NAME = "sweep"
HELP = "run a grid of cluster-model points (Ray or a process pool) into a Parquet dataset; --plot charts it"


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", metavar="CONFIG.toml", help="the sweep: [grid] and/or [[point]] tables")
    parser.add_argument("--out", default=None, metavar="DIR", help="results directory (default: from the config)")
    parser.add_argument("--backend", default="auto", choices=["auto", "ray", "pool"],
                        help="auto: Ray when installed (pip install 'tiered-kv[cluster]'), else a process pool")
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="worker processes / local Ray CPUs (default: all cores)")
    parser.add_argument("--address", default=None, metavar="ADDR",
                        help="join this Ray cluster instead of starting a local one (ray.init(address=...))")
    parser.add_argument("--plot", action="store_true",
                        help="do not run: draw the results already under the output directory as an SVG")
    parser.add_argument("--metric", default="disk_token_fraction", help="--plot: the column on the y axis")
    parser.add_argument("--svg", default=None, metavar="PATH", help="--plot: where to write (default DIR/sweep.svg)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--json", action="store_true", help="print the result rows as JSON")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tiered_kv.sim.sweep import SweepConfig, load_results, run_sweep

    cfg = SweepConfig.from_toml(args.config)
    out = Path(args.out) if args.out else cfg.out
    if args.plot:
        from tiered_kv.viz.sweep import plot, save_svg

        svg = save_svg(plot(load_results(out, cfg.points), args.metric), args.svg or out / "sweep.svg")
        print(f"wrote {svg}")
        return 0
    df = run_sweep(cfg, out=out, workers=args.workers, backend=args.backend, address=args.address,
                   progress=not args.no_progress)
    if args.json:
        print(json.dumps(df.drop("config").to_dicts(), indent=2, default=str))
        return 0
    show = [c for c in ("label", "capacity_bytes", "nodes", "routing", "preset", "seed", "token_hit_rate",
                        "ttft_p99_s", "elapsed_s") if c in df.columns]
    import polars as pl

    with pl.Config(tbl_rows=len(df), tbl_cols=len(show), tbl_width_chars=160):
        print(df.select(show))
    print(f"{len(df)} points in {out}")
    return 0
