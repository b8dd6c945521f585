#!/usr/bin/env python3
"""Write benchmarks/results/sim_cli.md from the JSON of `tiered-kv bench sim --json` (issue 13).

Every number in the page comes from the JSON file, so the record and the run cannot drift:

    tiered-kv bench sim --json --no-cluster --scales 1 --cli-repeat 5 > benchmarks/results/sim_cli.json
    .venv/bin/python scripts/sim_cli_record.py            # -> benchmarks/results/sim_cli.md
    scripts/assemble_benchmarks.sh                        # -> BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMAND = "tiered-kv bench sim --json --no-cluster --scales 1 --cli-repeat 5"


def _s(x: float) -> str:
    return f"{x:.2f} s"


def _t(x: float) -> str:
    """Seconds, or milliseconds below one second (the work itself is milliseconds)."""
    return f"{x:.2f} s" if x >= 1 else f"{1e3 * x:.1f} ms"


def _runs(xs: list[float]) -> str:
    return ", ".join(f"{x:.2f}" for x in xs)


def _yes(ok: bool) -> str:
    return "yes" if ok else "**no**"


def render(r: dict, command: str) -> str:
    cli, conv = r["cli"], r["conversation"]
    targets, meets = cli["targets"], cli["meets_targets"]
    rows = [f"| `{cli['commands'][name]}` | {_s(cli[name]['warm_s'])} ({_runs(cli[name]['warm_runs_s'])}) | "
            f"{_s(cli[name]['cold_s'])} ({_runs(cli[name]['cold_runs_s'])}) | "
            f"{_s(cli[name]['cold_jit_s'])} ({_runs(cli[name]['cold_jit_runs_s'])}) |" for name in ("curves", "simulate")]
    aot = ("present and fresh: the warm and cold runs took their kernels from it and never imported numba"
           if cli["aot_build"] else "**absent or stale**: every run compiled or loaded its kernels with numba")
    load = cli.get("load_average_1m")
    load_text = f"{load:.1f}" if load is not None else "not available"
    return f"""# CLI start-up of the simulator commands (`tiered-kv bench sim`: `cli_warm_s`, `cli_cold_s`)

Written by `scripts/sim_cli_record.py` from `benchmarks/results/sim_cli.json`, the JSON of one run of:

```bash
{command}
```

Whole processes, output discarded, median of {cli['repeat']} interleaved runs (every run in
brackets). *Warm*: numba's cache holds every kernel and the compiled-trace cache holds the trace
(both filled by one unmeasured run). *Cold*: a fresh empty `NUMBA_CACHE_DIR` and trace cache for
every run, so the trace is read from its file and each kernel the command needs comes from the
ahead-of-time build made at install (`python -m tiered_kv.sim.aot`, run by `scripts/setup_env.sh`)
or, where the build does not serve it, is compiled. The build was {aot}. *Cold, numba*: the same
with the build switched off (`TIERED_KV_AOT=0`): what a machine without it (no C compiler at
install) gets, each kernel compiled by numba (Belady's on the second core meanwhile); not a target.
Machine load (1-minute load average) when the run ended: {load_text}, on the 2-core development
machine shared with the other jobs described in the summary above.

| command | warm | cold | cold, numba |
|---|---:|---:|---:|
{chr(10).join(rows)}

| figure | measured | target | met? |
|---|---:|---:|---|
| `cli_warm_s` (slower command, warm) | {_s(r['cli_warm_s'])} | <= {_s(targets['cli_warm_s'])} | {_yes(meets['cli_warm_s'])} |
| `cli_cold_s` (slower command, cold) | {_s(r['cli_cold_s'])} | <= {_s(targets['cli_cold_s'])} | {_yes(meets['cli_cold_s'])} |
| baseline: a process that only imports numpy (`numpy_imports_s`) | {_s(cli['numpy_imports_s'])} ({_runs(cli['numpy_imports_runs_s'])}) | | |
| baseline: a process that only imports numpy and numba (`imports_s`) | {_s(cli['imports_s'])} ({_runs(cli['imports_runs_s'])}) | | |

The work itself, in the same run (median of {r['repeat']} after a warm-up call, conversation trace):
LRU + TTL curves at {conv['lru_capacities']} + {conv['ttl_points']} points {_t(conv['curves_s'])}; the Belady curve at
the same {conv['lru_capacities']} capacities in one stack pass {_t(conv['belady_curve_s'])} (one Belady replay at one
capacity: {_t(conv['belady_one_capacity_s'])}); one LRU replay {_t(conv['lru_replay_s'])}. Trace load
{_t(r['load_trace_s'])}, compile {_t(r['compile_trace_s'])}; first kernel calls (warm-up) in that process {_t(r['jit_warmup_s'])}.

What a warm start consists of, with the build: Python and numpy (the first baseline row), the
command's modules (numba is not imported: `tiered_kv.sim.aot`'s `njit` defers it until a call does
not fit the build), the extension (a fraction of a millisecond) and the compiled trace (loaded with
numpy; polars is imported only when a trace file is read), then the work. Without the build:
numba too (the second baseline row), its one-time set-up of its compiler context when the first
cached kernel loads, and the cached kernels. A cold run with the build adds only reading the trace
file (polars) and compiling it. The subcommand's own module is the only command module imported (`tiered_kv.cli`), and no
torch, altair, zarr or widgets (`tests/test_sim_cli.py`).
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("json", nargs="?", default=str(ROOT / "benchmarks" / "results" / "sim_cli.json"))
    parser.add_argument("--command", default=COMMAND, help="the command that wrote the JSON")
    args = parser.parse_args(argv)
    r = json.loads(Path(args.json).read_text())
    out = ROOT / "benchmarks" / "results" / "sim_cli.md"
    out.write_text(render(r, args.command))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
