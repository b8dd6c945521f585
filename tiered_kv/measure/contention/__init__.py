"""Tail latency under contention: restores and misses sharing one store link, measured and modelled.

:func:`measure_contention` runs a :class:`~tiered_kv.sim.cluster.contention.ContentionScenario`
with the real engine at every (bandwidth, load, admission policy) point, ``repeats`` interleaved
rounds, and returns the JSON that ``tiered-kv bench contention`` records (its ``--help`` tells the
scenario, the calibration and the repeats flag by flag) and figure 18 draws. Here: the run of the
grid and what every point shares (:class:`_Context`); below it :mod:`.settings` (checks and order),
:mod:`.engines` (the measured side) and :mod:`.report` (the model beside it, and the record).
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time

import numpy as np

from tiered_kv.measure import load_model
from tiered_kv.measure.contention.engines import calibrate, run_point, seed_store
from tiered_kv.measure.contention.report import (
    model_beside,
    point_record,
    rate_label,
    raw_requests,
    repeat_record,
    summarize,
)
from tiered_kv.measure.contention.settings import (
    DEFAULT_BANDWIDTH_FACTORS,
    DEFAULT_LOADS,
    check_settings,
    parse_bandwidth,
    request_tokens,
    run_order,
)
from tiered_kv.sim.cluster import contention as C
from tiered_kv.sim.cluster.shared_compute import POLICIES


def measure_contention(scenario: C.ContentionScenario, *, model=None, model_source: str = "", bandwidths=None,
                       loads=DEFAULT_LOADS, policies=POLICIES, link: str = "shared", calibration: int = 6,
                       calibration_repeats: int = 2, repeats: int = 1, progress: bool = True,
                       store_dir: str | None = None, raw: bool = False) -> dict:
    """Run the scenario at every (bandwidth, load, policy), ``repeats`` interleaved rounds, and
    the queue model beside it; the JSON dict of ``tiered-kv bench contention``.

    ``bandwidths``: bytes/s (``math.inf``: no limit); None: 1, 3 and 10 times the break-even
    bandwidth measured here. ``loads``: fractions of compute capacity. ``policies``: admission
    policies of :data:`~tiered_kv.sim.cluster.shared_compute.POLICIES`.
    """
    from tiered_kv.engine import namespace_for

    check_settings(loads=loads, calibration=calibration, calibration_repeats=calibration_repeats, repeats=repeats,
                   link=link, policies=policies)
    if bandwidths is not None:
        bandwidths = [parse_bandwidth(b) for b in bandwidths]
    if model is None:
        model, model_source = load_model()
    if scenario.max_tokens > model.cfg.max_seq_len:
        raise ValueError(f"--max-tokens: must be in [{scenario.block_size + scenario.suffix_tokens}, "
                         f"{model.cfg.max_seq_len}] for this model (max_seq_len), got {scenario.max_tokens}")
    t_start = time.perf_counter()
    load_avg_start = os.getloadavg()
    work = C.workload(scenario)
    tokens = [request_tokens(i, n, scenario.seed) for i, n in enumerate(work["n"])]
    ns = namespace_for(model, block_size=scenario.block_size)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    with tempfile.TemporaryDirectory(prefix="tkv-contention-", dir=store_dir) as tmp:
        seed_root = os.path.join(tmp, "seed")
        chunk_bytes = seed_store(model, seed_root, ns, work, tokens, progress)
        calib_root = os.path.join(tmp, "calibration")
        shutil.copytree(seed_root, calib_root)
        cal = calibrate(model, ns, calib_root, work, tokens, calibration, calibration_repeats, chunk_bytes, progress)
        shutil.rmtree(calib_root, ignore_errors=True)
        ctx = _Context(model=model, ns=ns, seed_root=seed_root, tmp=tmp, work=work, tokens=tokens, cal=cal,
                       chunk_bytes=chunk_bytes, scenario=scenario, capacity=min(scenario.streams, cpus), link=link)
        if bandwidths is None:
            if not math.isfinite(ctx.break_even):
                raise ValueError("--bandwidths: no restores to derive the default from; give the rates")
            bandwidths = [f * ctx.break_even for f in DEFAULT_BANDWIDTH_FACTORS]
        points = _run_grid(ctx, bandwidths, loads, policies, repeats, progress, raw)
    points.sort(key=lambda p: (math.inf if p["bandwidth_bytes_per_s"] is None else p["bandwidth_bytes_per_s"],
                               p["load"], POLICIES.index(p["policy"])))
    return _result(ctx, model_source, points, repeats=repeats, policies=policies, cpus=cpus,
                   load_avg_start=load_avg_start, wall=time.perf_counter() - t_start)


def _result(ctx, model_source: str, points: list[dict], *, repeats: int, policies, cpus: int, load_avg_start,
            wall: float) -> dict:
    import torch

    model, sc, work = ctx.model, ctx.scenario, ctx.work
    return {
        "benchmark": "contention", "model": model_source, "preset": model.cfg.name, "params": model.num_params,
        "window_tokens": model.cfg.window, "replay_tokens": model.cfg.replay, "fmt": ctx.ns.fmt,
        "block_size_tokens": sc.block_size, "chunk_bytes": ctx.chunk_bytes, "kv_bytes_per_token": ctx.bpt,
        "link": ctx.link, "scenario": sc.to_dict(), "repeats": repeats, "policies": list(policies),
        "lengths": {"prompt_tokens": [int(x) for x in work["n"]], "restore": [bool(x) for x in work["restore"]],
                    "median": float(np.median(work["n"])), "p90": float(np.percentile(work["n"], 90)),
                    "max": int(work["n"].max()), "restores": int(work["restore"].sum())},
        "calibration": ctx.cal, "break_even_bandwidth_bytes_per_s": ctx.break_even,
        "compute_capacity": ctx.capacity, "cpus": cpus, "torch_threads": torch.get_num_threads(),
        "load_average_start": list(load_avg_start), "load_average_end": list(os.getloadavg()),
        "points": points, "summary": summarize(points), "wall_s": wall,
    }


class _Context:
    """What every point of a run shares: the model, the seeded store, the workload, the compute
    fit and the estimates derived from it."""

    def __init__(self, *, model, ns, seed_root, tmp, work, tokens, cal, chunk_bytes, scenario, capacity, link):
        self.model, self.ns, self.seed_root, self.tmp = model, ns, seed_root, tmp
        self.work, self.tokens, self.cal, self.chunk_bytes = work, tokens, cal, chunk_bytes
        self.scenario, self.capacity, self.link = scenario, capacity, link
        self.fit = (cal["fixed_s"], cal["a_s_per_token"], cal["b_s_per_token2"])
        R = model.cfg.replay
        self.restore_s = C.compute_seconds(*self.fit, work["n"], work["cached"], R)
        self.recompute_s = C.compute_seconds(*self.fit, work["n"], 0 * work["n"], R)
        self.isolated = np.where(work["restore"], self.restore_s, self.recompute_s)
        self.bpt = chunk_bytes / scenario.block_size
        self.break_even = C.break_even_bandwidth(self.bpt, self.fit[1], self.fit[2], work["n"], work["cached"], R)
        # bytes read or written per request
        self.mean_link = float(np.mean(work["n"] - work["n"] % scenario.block_size)) * self.bpt

    def rate(self, load: float) -> float:
        return load * self.capacity / float(np.mean(self.isolated))


def _run_grid(ctx: _Context, bandwidths, loads, policies, repeats: int, progress: bool, raw: bool) -> list[dict]:
    """Every (bandwidth, load, policy) point, ``repeats`` rounds, each round in its own shuffled
    order; then each point's repeats folded into one record."""
    from tqdm.auto import tqdm

    runs: dict[tuple, list] = {}
    grid = [(r, *pt) for r in range(repeats) for pt in run_order(bandwidths, loads, policies, ctx.scenario.seed, r)]
    bar = tqdm(grid, desc="contention", unit="point", disable=not progress)
    for k, (rnd, bw, ld, pol) in enumerate(bar):
        bar.set_postfix_str(f"round {rnd + 1}/{repeats}, {rate_label(bw)}, load {ld:g}, {pol}")
        arrival = C.arrivals(ctx.work["gaps"], ctx.rate(ld))
        t_point = time.perf_counter()
        m = run_point(ctx.model, ctx.ns, ctx.seed_root, os.path.join(ctx.tmp, f"point{k}"), ctx.work, ctx.tokens,
                      arrival, bandwidth=bw, link=ctx.link, policy=pol, cores=ctx.capacity, restore_s=ctx.restore_s,
                      recompute_s=ctx.recompute_s, raw_read_bytes_per_s=ctx.cal["raw_read_bytes_per_s"],
                      chunk_bytes=ctx.chunk_bytes)
        runs.setdefault((bw, ld, pol), []).append((m, k, time.perf_counter() - t_point))
    points = []
    for (bw, ld, pol), got in runs.items():
        arrival = C.arrivals(ctx.work["gaps"], ctx.rate(ld))
        models = model_beside(ctx.work, arrival, bandwidth=bw, policy=pol, link=ctx.link, bytes_per_token=ctx.bpt,
                              fit=ctx.fit, replay_tokens=ctx.model.cfg.replay, block_size=ctx.scenario.block_size,
                              raw_read_bytes_per_s=ctx.cal["raw_read_bytes_per_s"], cores=ctx.capacity)
        reps = [repeat_record(m, models, ctx.work, ctx.restore_s, ctx.recompute_s, run_order=k, wall=w)
                for m, k, w in got]
        pooled = np.concatenate([m["ttft_s"] for m, _, _ in got])
        pooled_rec = np.concatenate([m["recomputed"] for m, _, _ in got])
        points.append(point_record(reps, pooled, pooled_rec, models, ctx.work, arrival, bandwidth=bw, load=ld,
                                   rate=ctx.rate(ld), policy=pol, break_even=ctx.break_even,
                                   mean_link=ctx.mean_link,
                                   raw=[raw_requests(m, models, ctx.work, arrival) for m, _, _ in got] if raw else None))
    return points
