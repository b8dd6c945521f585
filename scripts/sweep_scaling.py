"""Measure a sweep on 1 worker against 2 (pool, and Ray with --ray), record JSON, render markdown.

    .venv/bin/python scripts/sweep_scaling.py [--config sweeps/scaling16.toml] [--ray]
    .venv/bin/python scripts/sweep_scaling.py --markdown-only     # re-render from the JSON

Writes benchmarks/results/sweep.json (every number) and benchmarks/results/sweep.md (from the
JSON only), then run scripts/assemble_benchmarks.sh. Each run starts from an empty output folder,
so every point is computed (no resume) and each worker process generates the workload once.
With --ray, Ray runs 1 and 2 local CPUs too; its start-up is timed apart from the sweep.

Every row carries the digest of the simulator source it was computed with (``code_digest``):
the JSON records each run's, so rows that differ because the checkout was edited between runs
are told apart from nondeterminism (run_sweep itself stops when it changes during a run).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JSON = ROOT / "benchmarks" / "results" / "sweep.json"
MD = ROOT / "benchmarks" / "results" / "sweep.md"


def measure(config: Path, backend: str, workers: int) -> dict:
    """One timed run of the whole sweep into an empty folder. For Ray, the local node is
    started (and timed, ``startup_s``) before the sweep, which then joins it."""
    from tiered_kv.sim.sweep import SweepConfig, run_sweep

    cfg = SweepConfig.from_toml(config)
    out = Path(tempfile.mkdtemp(prefix=f"sweep-{backend}{workers}-"))
    startup = 0.0
    if backend == "ray":
        import ray

        t0 = time.perf_counter()
        for attempt in (1, 2):  # a loaded machine can miss the raylet's fixed 30 s start-up limit once
            try:
                ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, configure_logging=False)
                break
            except Exception:  # noqa: BLE001 - whatever Ray raises, the node did not start
                ray.shutdown()
                if attempt == 2:
                    raise
        startup = time.perf_counter() - t0
    try:
        t0 = time.perf_counter()
        df = run_sweep(cfg, out=out, backend=backend, workers=workers, progress=True)
        wall = time.perf_counter() - t0
    finally:
        if backend == "ray":
            ray.shutdown()
        shutil.rmtree(out, ignore_errors=True)
    rows = df.drop("elapsed_s").sort("point_id")
    return {"backend": backend, "workers": workers, "points": len(df), "wall_s": wall, "startup_s": startup,
            "point_elapsed_s_sum": float(df["elapsed_s"].sum()),
            "point_elapsed_s_median": float(df["elapsed_s"].median()),
            "point_elapsed_s_max": float(df["elapsed_s"].max()),
            "children_peak_rss_bytes": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024,
            "code_digests": sorted(set(df["code_digest"].to_list())),
            "_rows": rows}


def compare(runs: list[dict]) -> None:
    """Rows of every run against the first (pool, 1 worker): equal, the columns that differ,
    and whether the code did (then a difference is an edit, not nondeterminism)."""
    first = runs[0]
    for x in runs:
        rows = x.pop("_rows") if x is not first else first["_rows"]
        x["rows_equal_to_first"] = bool(rows.equals(first["_rows"]))
        x["columns_differing_from_first"] = [c for c in first["_rows"].columns
                                             if c not in rows.columns or not rows[c].equals(first["_rows"][c])]
        x["code_equal_to_first"] = x["code_digests"] == first["code_digests"]
    first.pop("_rows")


def describe(config: Path) -> str:
    """The sweep's workload and axes in words, from the config (e.g. "14 days of the `mixed`
    workload; 2 policies x 4 shared-pool sizes x 2 machine counts x 1 seed")."""
    from tiered_kv.sim.sweep import SweepConfig

    pts = SweepConfig.from_toml(config).points
    days = ", ".join(f"{d:g}" for d in sorted({p.days for p in pts}))
    presets = ", ".join(f"`{x}`" for x in sorted({p.preset for p in pts}))
    axes = [("policy", "policies", {p.label for p in pts}),
            ("shared-pool size", "shared-pool sizes", {p.capacity_tokens for p in pts}),
            ("machine count", "machine counts", {p.nodes for p in pts}),
            ("routing", "routings", {p.routing for p in pts}), ("seed", "seeds", {p.seed for p in pts})]
    grid = " x ".join(f"{len(v)} {many if len(v) > 1 else one}" for one, many, v in axes)
    return f"{days} days of the {presets} workload; {grid}"


def _speedup(x: dict, runs: list[dict]) -> str:
    """Wall time of the same backend's 1-worker run over this run's."""
    base = next((y for y in runs if y["backend"] == x["backend"] and y["workers"] == 1), None)
    return f"{base['wall_s'] / x['wall_s']:.2f}x" if base else "-"


def markdown(r: dict) -> str:
    runs = r["runs"]
    lines = [
        "# Parameter sweeps (`tiered-kv sweep`, issue 16)",
        "",
        f"Machine: {r['machine']}. Sweep: `{r['config']}`, {runs[0]['points']} points "
        f"({r.get('grid') or '14 days of the `mixed` workload'}, {r['requests']:,} requests). Every run starts "
        "from an empty output folder (no resume).",
        "",
        "```bash",
        f"tiered-kv sweep {r['config']} --backend pool --workers 1 --out /tmp/s1",
        f"tiered-kv sweep {r['config']} --backend pool --workers 2 --out /tmp/s2",
        ".venv/bin/python scripts/sweep_scaling.py" + (" --ray" if any(x["backend"] == "ray" for x in runs) else "")
        + "   # every run, timed, into this section",
        "```",
        "",
        "| backend | workers | wall time | speedup vs 1 worker (same backend) | point time (median / max) "
        "| rows equal to pool x 1 |",
        "|---|---|---|---|---|---|",
    ]
    for x in runs:
        start = f" (+{x['startup_s']:.0f} s start-up)" if x.get("startup_s") else ""
        lines.append(f"| {x['backend']} | {x['workers']} | {x['wall_s']:.0f} s{start} | {_speedup(x, runs)} | "
                     f"{x['point_elapsed_s_median']:.1f} s / {x['point_elapsed_s_max']:.1f} s | "
                     f"{'yes' if x['rows_equal_to_first'] else 'NO'} |")
    if r.get("ray_error"):
        lines += ["", f"Ray: no run ({r['ray_error']})."]
    bad = [x for x in runs if not x["rows_equal_to_first"]]
    if bad:
        cols = sorted({c for x in bad for c in x.get("columns_differing_from_first", [])})
        edited = [x for x in bad if x.get("code_equal_to_first") is False]
        lines += ["", "**Open:** the rows of " + ", ".join(f"{x['backend']} x {x['workers']}" for x in bad)
                  + " were not all equal to those of pool x 1"
                  + (f" (columns: {', '.join(cols)})" if cols else " (this run did not record which columns)")
                  + (". The simulator source differed between those runs (code_digest "
                     + ", ".join(f"{x['backend']} x {x['workers']}: {'/'.join(x['code_digests'])}" for x in edited)
                     + f" against {'/'.join(runs[0]['code_digests'])}): the checkout was edited in between"
                     if edited else "")
                  + "."]
    lines += ["", "A point's time includes generating the workload when its worker has not yet (the max); "
              "the others are one cluster replay plus the latency model. "
              + (r.get("note") or ""), "", "The cost model of a 1,000-point sweep on N machines: `docs/scaling.md`."]
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="sweeps/scaling16.toml")
    p.add_argument("--ray", action="store_true", help="also time the Ray backend on 1 and 2 local CPUs")
    p.add_argument("--markdown-only", action="store_true")
    p.add_argument("--note", default="", help="a sentence about the machine's state while measuring")
    args = p.parse_args()
    if args.markdown_only:
        MD.write_text(markdown(json.loads(JSON.read_text())))
        return 0
    os.chdir(ROOT)
    runs = [measure(Path(args.config), "pool", 1), measure(Path(args.config), "pool", 2)]
    ray_error = None
    if args.ray:
        for workers in (1, 2):
            try:
                runs.append(measure(Path(args.config), "ray", workers))
            except Exception as exc:  # noqa: BLE001 - record that Ray did not start, keep the other numbers
                ray_error = f"ray x {workers}: {type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"
                print(f"ray: {ray_error}", file=sys.stderr)
                break
    requests = int(runs[0]["_rows"]["requests"].max())
    compare(runs)
    ray = {x["workers"]: x for x in runs if x["backend"] == "ray"}
    rec = {"config": args.config, "grid": describe(Path(args.config)), "machine": f"{os.cpu_count()} cores, load average "
           f"{os.getloadavg()[0]:.1f} at the end", "runs": runs, "requests": requests,
           "speedup_2_vs_1": runs[0]["wall_s"] / runs[1]["wall_s"],
           "ray_speedup_2_vs_1": ray[1]["wall_s"] / ray[2]["wall_s"] if len(ray) == 2 else None,
           "ray_error": ray_error, "note": args.note}
    JSON.write_text(json.dumps(rec, indent=2) + "\n")
    MD.write_text(markdown(rec))
    print(json.dumps({k: v for k, v in rec.items() if k != "runs"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
