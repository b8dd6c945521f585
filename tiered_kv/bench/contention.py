"""Tail latency under contention: restores and misses sharing one store link, measured and modelled.

The question (a reader of DeepSeek's account asked it): with cache restores mixed with misses
that write new blocks, and a fixed prompt-length distribution, when should admission control
recompute a prompt although its prefix is cached? This benchmark answers it on this machine
with the real engine and model, and sets the latency model's answer beside it.

Scenario (:mod:`tiered_kv.sim.cluster.contention`): ``--requests`` prompts of lognormal length
(``--median-tokens``, ``--sigma``; drawn once from ``--seed``, so every run and every point
sees the same lengths), each ``blocks`` full blocks plus a ``--suffix``-token tail. A fraction
``--restore-fraction`` are restores: their blocks were written to the store beforehand (as by
another machine), so they read them, replay R tokens and compute the tail. The others are
misses: they compute everything and write their blocks. Arrivals are a seeded Poisson stream,
dealt round robin to ``--streams`` engines (threads, each with its own host tier), which share
one :class:`~tiered_kv.tiers.ssd.SSDTier` on a local directory, whose bandwidth is limited by
``SSDConfig(link_bandwidth=)`` (``--link shared``: one token bucket for reads and writes, as the latency
model's one queue) or ``read_bandwidth=``/``write_bandwidth=`` (``--link split``).

How a request runs (the structure of the queue model in
:mod:`tiered_kv.sim.cluster.shared_compute`): at arrival, its prefix lookup is issued at once (a
reader thread; the read waits its turn on the link); when it completes, the request joins its
engine's FIFO compute queue; the engine prefills it; its new blocks are written behind the first
token (a writer thread, through the link). TTFT = first token - arrival. Under an admission
policy (``--admission``), a restore may instead be recomputed whole: ``own`` recomputes when that
alone finishes sooner than queueing on the link; ``shared`` also counts that the streams share
this machine's cores and charges the delay its extra work puts on the other busy streams. Both
read the *measured* queue state at arrival: the link's debt from its token bucket, the requests
each engine still has to run and how long its running one has run, how many engines are busy.

Calibration, in the same run: a few requests of each class alone, at unlimited bandwidth, give
the compute model ``c + a*n + b*n^2`` (``c`` per prefill; fitted to the model's formulas for
misses and restores, used both by the admission estimates and by the model), the raw read speed
and the store's bytes per token. The default bandwidths are 1, 3 and 10 times the *break-even*
bandwidth (where reading a median restore's prefix alone takes as long as the compute it saves);
the loads are fractions of this process's compute capacity (``load * min(streams, CPUs) / mean
isolated compute`` requests per second).

Repeats: the whole grid runs ``--repeats`` rounds; in each round the (bandwidth, load) pairs run
in a shuffled order seeded by the round, each pair's policies back to back, so a drift of the
machine's load lines up with no setting and the policies of a pair can be compared repeat by
repeat (``summary.admission``: paired p99 ratios, median and spread). A point records the median
of each percentile over the repeats with its spread, and the pooled requests' percentiles with
90% order-statistic intervals (:mod:`tiered_kv.sim.cluster.tail_stats`).

The model beside it: every point also runs through the queue model with the same arrivals,
streams, lengths and policy, twice: ``model_shared`` puts the streams on ``min(streams, CPUs)``
shared cores (processor sharing: recomputes and every other prefill slow each other down, as
they do here and on one GPU), ``model`` gives each stream a machine of its own (the per-machine
latency model). ``compute_slowdown`` (measured compute over the isolated fit) says how much of
the machine the point actually had.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import tempfile
import time

import numpy as np

from tiered_kv.bench._contention_engines import _calibrate, _seed_store, run_point
from tiered_kv.bench._contention_report import (
    _bandwidth_label,
    model_beside,
    point_record,
    raw_requests,
    repeat_record,
    summarize,
)
from tiered_kv.bench._contention_settings import (
    ADMISSION,
    DEFAULT_BANDWIDTH_FACTORS,
    DEFAULT_LOADS,
    LINKS,
    PRESETS,
    check_settings,
    load_model,
    parse_bandwidth,
    request_tokens,
    run_order,
    scenario_from,
)
from tiered_kv.sim.cluster import contention as C

# The modules behind this command (each says why it stands alone):
#   _contention_settings  flag checks, the points' run order, the model, the prompts' tokens
#   _contention_engines   the measured side: seeding the store, calibration, one point's threads
#   _contention_report    the latency model beside each point, the points[] record, the summary

NAME = "contention"
HELP = ("p50/p99 TTFT of restores and misses sharing one store link at several bandwidths, loads, "
        "always loading beside admission policies, repeated; measured with the engine beside the queue model")


def register(parser: argparse.ArgumentParser) -> None:
    d = C.ContentionScenario()
    parser.add_argument("--streams", type=int, default=d.streams,
                        help=f"concurrent request streams (engines on threads), 1-{C.MAX_STREAMS}")
    parser.add_argument("--requests", type=int, default=d.requests, help="requests per point (>= 2)")
    parser.add_argument("--restore-fraction", type=float, default=d.restore_fraction,
                        help="share of requests whose prefix is cached (restores), in [0, 1]")
    parser.add_argument("--median-tokens", type=int, default=d.median_tokens, help="median prompt length (tokens)")
    parser.add_argument("--sigma", type=float, default=d.sigma, help="lognormal sigma of prompt lengths, in [0, 3]")
    parser.add_argument("--max-tokens", type=int, default=None,
                        help="longest prompt (default: the model's max_seq_len, at most 4096)")
    parser.add_argument("--block-size", type=int, default=d.block_size, help="SSD chunk size (tokens)")
    parser.add_argument("--suffix", type=int, default=d.suffix_tokens,
                        help="new tokens after a restore's cached blocks, in [1, block size - 1]")
    parser.add_argument("--bandwidths", nargs="+", default=None, metavar="RATE",
                        help="link bandwidth limits ('256KiB/s', bytes/s, or 'inf'); default: 1, 3 and 10 times "
                             "the break-even bandwidth measured in the run")
    parser.add_argument("--loads", type=float, nargs="+", default=list(DEFAULT_LOADS),
                        help="offered load, fraction of compute capacity (min(streams, CPUs) / mean isolated "
                             "compute), each in (0, 4]")
    parser.add_argument("--admission", choices=sorted(ADMISSION), default="all",
                        help="admission policies beside always loading: 'own' (recompute when that alone is "
                             "sooner), 'shared' (the same with the shared cores and the delay to other streams "
                             "counted), 'all' (both), 'off' (always load only)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="rounds of the whole grid, interleaved (medians and spread over them), 1-20")
    parser.add_argument("--link", choices=LINKS, default="shared",
                        help="shared: one bucket for reads and writes (the latency model's one queue); "
                             "split: a read and a write limit of the same rate")
    parser.add_argument("--model-preset", choices=PRESETS, default=None,
                        help="model: 'small' (default; the committed checkpoint data/checkpoints/small.pt) or "
                             "'tiny' (random weights, for quick runs)")
    parser.add_argument("--checkpoint", default=None, help="a checkpoint to load instead")
    parser.add_argument("--calibration", type=int, default=6,
                        help="isolated requests (half restores, half misses) timed for the compute fit, 2-64")
    parser.add_argument("--calibration-repeats", type=int, default=2, help="repeats of each (median), 1-10")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (shared by the streams), 1-64")
    parser.add_argument("--seed", type=int, default=d.seed, help="seed of lengths, classes, arrivals and tokens")
    parser.add_argument("--store-dir", default=None, help="where the temporary stores go (default: temp dir)")
    parser.add_argument("--raw", action="store_true", help="include every request of every point in the JSON")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def measure_contention(scenario: C.ContentionScenario, *, model=None, model_source: str = "", bandwidths=None,
                       loads=DEFAULT_LOADS, policies=C.POLICIES, link: str = "shared", calibration: int = 6,
                       calibration_repeats: int = 2, repeats: int = 1, progress: bool = True,
                       store_dir: str | None = None, raw: bool = False) -> dict:
    """Run the scenario at every (bandwidth, load, policy), ``repeats`` interleaved rounds, and
    the queue model beside it.

    ``bandwidths``: bytes/s (``math.inf``: no limit); None: 1, 3 and 10 times the break-even
    bandwidth measured here. ``loads``: fractions of compute capacity. ``policies``: admission
    policies of :data:`~tiered_kv.sim.cluster.shared_compute.POLICIES`. Returns the JSON dict of
    ``tiered-kv bench contention``.
    """
    from tiered_kv.engine import namespace_for

    if link not in LINKS:
        raise ValueError(f"--link: must be one of {list(LINKS)}, got {link!r}")
    bad = [p for p in policies if p not in C.POLICIES]
    if bad or not policies:
        raise ValueError(f"--admission: policies must be among {list(C.POLICIES)}, got {list(policies)!r}")
    check_settings(loads=loads, calibration=calibration, calibration_repeats=calibration_repeats, repeats=repeats)
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
        chunk_bytes = _seed_store(model, seed_root, ns, work, tokens, progress)
        calib_root = os.path.join(tmp, "calibration")
        shutil.copytree(seed_root, calib_root)
        cal = _calibrate(model, ns, calib_root, work, tokens, calibration, calibration_repeats, chunk_bytes, progress)
        shutil.rmtree(calib_root, ignore_errors=True)
        ctx = _Context(model=model, ns=ns, seed_root=seed_root, tmp=tmp, work=work, tokens=tokens, cal=cal,
                       chunk_bytes=chunk_bytes, scenario=scenario, capacity=min(scenario.streams, cpus), link=link)
        if bandwidths is None:
            if not math.isfinite(ctx.break_even):
                raise ValueError("--bandwidths: no restores to derive the default from; give the rates")
            bandwidths = [f * ctx.break_even for f in DEFAULT_BANDWIDTH_FACTORS]
        points = _run_grid(ctx, bandwidths, loads, policies, repeats, progress, raw)
    points.sort(key=lambda p: (math.inf if p["bandwidth_bytes_per_s"] is None else p["bandwidth_bytes_per_s"],
                               p["load"], C.POLICIES.index(p["policy"])))
    return _result(ctx, model_source, points, repeats=repeats, policies=policies, cpus=cpus,
                   load_avg_start=load_avg_start, wall=time.perf_counter() - t_start)


def _result(ctx, model_source: str, points: list[dict], *, repeats: int, policies, cpus: int, load_avg_start,
            wall: float) -> dict:
    """The JSON of ``tiered-kv bench contention``."""
    import torch

    model, sc, work = ctx.model, ctx.scenario, ctx.work
    return {
        "benchmark": NAME, "model": model_source, "preset": model.cfg.name, "params": model.num_params,
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
        bar.set_postfix_str(f"round {rnd + 1}/{repeats}, {_bandwidth_label(bw)}, load {ld:g}, {pol}")
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


def run(args: argparse.Namespace) -> dict:
    import torch

    check_settings(loads=args.loads, calibration=args.calibration, calibration_repeats=args.calibration_repeats,
                   threads=args.threads, repeats=args.repeats)
    bandwidths = None if args.bandwidths is None else [parse_bandwidth(b) for b in args.bandwidths]
    settings = dict(streams=args.streams, requests=args.requests, restore_fraction=args.restore_fraction,
                    median_tokens=args.median_tokens, sigma=args.sigma, block_size=args.block_size,
                    suffix_tokens=args.suffix, seed=args.seed)
    scenario_from(max_tokens=args.max_tokens or max(4096, args.median_tokens), **settings)  # errors before loading
    torch.set_num_threads(args.threads)
    model, source = load_model(args.model_preset, args.checkpoint)
    max_tokens = args.max_tokens if args.max_tokens is not None else min(model.cfg.max_seq_len, 4096)
    sc = scenario_from(max_tokens=max_tokens, **settings)
    return measure_contention(sc, model=model, model_source=source, bandwidths=bandwidths, loads=args.loads,
                              policies=ADMISSION[args.admission], link=args.link, calibration=args.calibration,
                              calibration_repeats=args.calibration_repeats, repeats=args.repeats,
                              progress=not args.no_progress,
                              store_dir=args.store_dir, raw=args.raw)


__all__ = [
    "ADMISSION", "DEFAULT_BANDWIDTH_FACTORS", "DEFAULT_LOADS", "HELP", "LINKS", "NAME", "PRESETS", "check_settings",
    "load_model", "measure_contention", "model_beside", "parse_bandwidth", "point_record", "register",
    "repeat_record",
    "request_tokens", "run", "run_order", "run_point", "scenario_from", "summarize",
]
