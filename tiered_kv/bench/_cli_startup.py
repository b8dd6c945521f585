"""Whole-process start-up of the simulator commands, warm and cold: ``tiered-kv bench sim`` calls
:func:`run_cli_bench` and reports ``cli_warm_s`` and ``cli_cold_s`` (the slower command's medians)
with the per-command figures under ``"cli"``.

Each figure is the wall time of one ``tiered-kv curves|simulate --trace ... --json`` process,
output discarded: *warm* with private numba and compiled-trace caches filled by one unmeasured
run of each command, *cold* with a fresh empty ``NUMBA_CACHE_DIR`` (and ``TIERED_KV_TRACE_CACHE``)
for every run. Runs are interleaved round after round so that a burst of load on a shared machine
hits all of them alike. A warm start rests on supported mechanisms only: numba's on-disk cache,
lazy imports, the compiled trace loaded with numpy. The baselines in the same rounds are processes
that only import numpy (``numpy_imports_s``) or numpy and numba (``imports_s``). Python's bytecode
cache is on, as in a normal install (``PYTHONDONTWRITEBYTECODE`` is dropped from the environment).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: The two commands the start-up goal is about, as run on the trace named by ``--trace``.
COMMANDS = {
    "curves": ["curves", "--json"],
    "simulate": ["simulate", "--policy", "lru", "--capacity", "10000000", "--json"],
}
#: Warm: a command a user retypes; cold: every kernel compiled (an empty numba cache).
TARGETS = {"cli_warm_s": 0.8, "cli_cold_s": 2.0}


def _cli() -> list[str]:
    """The ``tiered-kv`` console script beside this interpreter, else ``python -m tiered_kv.cli``."""
    script = Path(sys.executable).with_name("tiered-kv")
    return [str(script)] if script.exists() else [sys.executable, "-m", "tiered_kv.cli"]


def _wall(argv: list[str], cache_dir: str) -> float:
    """Seconds of one process with numba's and the compiled-trace cache in ``cache_dir``."""
    env = {**os.environ, "NUMBA_CACHE_DIR": cache_dir, "TIERED_KV_TRACE_CACHE": os.path.join(cache_dir, "traces")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=600)
    return time.perf_counter() - t0


def _rounds(argv: dict[str, list[str]], repeat: int) -> dict[str, list[float]]:
    """Every run's seconds, interleaved round by round: baselines, then each command warm and cold."""
    baselines = {"imports": [sys.executable, "-c", "import numpy, numba"],
                 "numpy_imports": [sys.executable, "-c", "import numpy"]}
    times: dict[str, list[float]] = {k: [] for k in baselines}
    times.update({f"{n}_{k}": [] for n in argv for k in ("warm", "cold")})
    with tempfile.TemporaryDirectory(prefix="tiered-kv-numba-warm-", ignore_cleanup_errors=True) as warm_dir:
        for a in argv.values():  # fill the warm cache (compiles every kernel once)
            _wall(a, warm_dir)
        for _ in range(repeat):
            for key, a in baselines.items():
                times[key].append(_wall(a, warm_dir))
            for name, a in argv.items():
                times[f"{name}_warm"].append(_wall(a, warm_dir))
                with tempfile.TemporaryDirectory(prefix="tiered-kv-numba-cold-", ignore_cleanup_errors=True) as cold:
                    times[f"{name}_cold"].append(_wall(a, cold))
    return times


def run_cli_bench(trace: str, repeat: int) -> dict[str, Any]:
    """Median whole-process seconds per command, warm and cold, and the import-only baselines."""
    cli = _cli()
    argv = {name: [*cli, cmd[0], "--trace", trace, *cmd[1:]] for name, cmd in COMMANDS.items()}
    repeat = max(repeat, 1)
    times = _rounds(argv, repeat)
    med = {k: statistics.median(v) for k, v in times.items()}
    out: dict[str, Any] = {
        "cli_warm_s": max(med[f"{n}_warm"] for n in argv),
        "cli_cold_s": max(med[f"{n}_cold"] for n in argv),
    }
    out["cli"] = {
        "commands": {n: " ".join(["tiered-kv", *a[len(cli):]]) for n, a in argv.items()},
        **{n: {"warm_s": med[f"{n}_warm"], "cold_s": med[f"{n}_cold"],
               "warm_runs_s": times[f"{n}_warm"], "cold_runs_s": times[f"{n}_cold"]} for n in argv},
        "imports_s": med["imports"],
        "imports_runs_s": times["imports"],
        "numpy_imports_s": med["numpy_imports"],
        "numpy_imports_runs_s": times["numpy_imports"],
        "repeat": repeat,
        "load_average_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "targets": dict(TARGETS),
        "meets_targets": {k: out[k] <= v for k, v in TARGETS.items()},
    }
    return out
