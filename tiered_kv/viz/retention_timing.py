"""How long a slider move of the retention dashboard takes: ``tiered-kv bench widgets``.

Target: a slider move redraws in under 200 ms, on the real Mooncake conversation trace. Measured:
``build``, the one-time scan (:func:`tiered_kv.sim.retention.settings.build_table`, numba warm-up
timed apart as ``jit_warmup_s``); ``move``, one slider move end to end in the kernel (evaluate the
setting, hand the chart's data to the widget; the browser's own render is not included); and the
baseline of a dashboard without the table: event replays through the simulator's TTL policy, one
for the point and one per point of the curves it draws. ``speedup`` = baseline view / evaluate.
Its record is rendered by :mod:`tiered_kv.bench.widgets`.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

NAME = "widgets"
HELP = "retention dashboard: slider redraw time on the real trace vs one event replay per move"


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace", default="conversation", help="trace path or shipped name (default: conversation)")
    parser.add_argument("--moves", type=int, default=24, help="slider moves to time (default 24)")


def _ms(values: list[float]) -> dict:
    a = np.asarray(values) * 1e3
    return {"p50_ms": float(np.percentile(a, 50)), "p95_ms": float(np.percentile(a, 95)), "max_ms": float(a.max()),
            "n": int(a.size)}


def run(args: argparse.Namespace) -> dict:
    from pathlib import Path

    from tiered_kv.sim.retention import settings as R
    from tiered_kv.sim.traces import load_trace, shipped_trace

    path = Path(args.trace) if Path(args.trace).exists() else shipped_trace(args.trace)
    frame = load_trace(path)
    t0 = time.perf_counter()
    R.build_table(frame.head(200))  # the replay engine's numba kernels: compile or load from the cache
    jit = time.perf_counter() - t0
    t0 = time.perf_counter()
    table = R.build_table(frame)
    build = time.perf_counter() - t0
    move, ev, base, view = (_ms(t) for t in _time_moves(table, frame, args.moves))
    return {
        "trace": str(path.name), "requests": int(frame.height), "block_lookups": int(table.touch_start.size),
        "table_rows": int(table.weight.size), "jit_warmup_s": jit, "build_s": build,
        "move": move, "evaluate": ev, "baseline_one_replay": base, "baseline_view_by_replays": view,
        "view_points": int(1 + len(R.ttl_grid(table)) + len(R.capacity_grid(table))),
        "speedup_view_evaluate_vs_replays": view["p50_ms"] / ev["p50_ms"] if ev["p50_ms"] else math.nan,
        "target_ms": 200.0, "meets_target_p95": move["p95_ms"] < 200.0,
    }


def _time_moves(table, frame, n_moves: int) -> tuple[list[float], list[float], list[float], list[float]]:
    """Seconds of each slider move, of each evaluate alone, of one replay, and of a whole view by replays.

    The sweep moves the first class's TTL slider down from the trace's duration, then the capacity
    slider down from the footprint to 16 blocks.
    """
    from tqdm import tqdm

    from tiered_kv.sim.policies import TTL
    from tiered_kv.sim.retention import settings as R
    from tiered_kv.sim.trace_replay import compile_trace, replay
    from tiered_kv.viz.retention import RetentionDashboard, evaluate

    dash = RetentionDashboard(table, title="bench")
    cls = table.classes[0]
    hi_ttl, footprint = table.duration_s, float(table.distinct_blocks * table.block_size)
    ttls = np.geomspace(5.0, hi_ttl, max(n_moves // 2, 2))[::-1]
    caps = np.geomspace(footprint, 16 * table.block_size, max(n_moves - len(ttls), 2))
    moves, evals, baseline, views = [], [], [], []
    compiled = compile_trace(frame)
    for i, value in enumerate(tqdm([*[("ttl", t) for t in ttls], *[("cap", c) for c in caps]],
                                   desc="slider moves", unit="move")):
        kind, v = value
        slider = dash.ttl_sliders[cls] if kind == "ttl" else dash.capacity_slider
        t0 = time.perf_counter()
        slider.value = float(v)  # observe -> refresh: evaluate + chart + widget spec
        moves.append(time.perf_counter() - t0)
        setting = dash.setting()
        t0 = time.perf_counter()
        evaluate(table, setting)
        evals.append(time.perf_counter() - t0)
        cap = None if math.isinf(setting.capacity_tokens) else int(setting.capacity_blocks(table.block_size)
                                                                   * table.block_size)
        if i % 4 == 0:  # one replay per point is slow; a quarter of the settings is enough
            t0 = time.perf_counter()
            replay(compiled, TTL(ttl_seconds={cls: setting.ttl_s[0]}, capacity_tokens=cap))
            baseline.append(time.perf_counter() - t0)
        if i in (0, len(ttls)):  # the whole view by replays: point + TTL curve + capacity curve
            t0 = time.perf_counter()
            for ttl in R.ttl_grid(table):
                replay(compiled, TTL(ttl_seconds={cls: float(ttl)}, capacity_tokens=cap))
            for c in R.capacity_grid(table):
                replay(compiled, TTL(ttl_seconds={cls: setting.ttl_s[0]}, capacity_tokens=int(c)))
            views.append(time.perf_counter() - t0 + baseline[-1] if baseline else 0.0)
    return moves, evals, baseline, views
