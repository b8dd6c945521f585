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
``link_bandwidth=`` (``--link shared``: one token bucket for reads and writes, as the latency
model's one queue) or ``read_bandwidth=``/``write_bandwidth=`` (``--link split``).

How a request runs (the structure of :func:`tiered_kv.sim.cluster.latency.simulate_queue`): at
arrival, its prefix lookup is issued at once (a reader thread; the read waits its turn on the
link); when it completes, the request joins its engine's FIFO compute queue; the engine prefills
it; its new blocks are written behind the first token (a writer thread, through the link).
TTFT = first token - arrival. With admission on, a restore is instead recomputed whole when
:func:`~tiered_kv.sim.cluster.contention.recompute_is_sooner` says so: its queued read time
(the link's queue, read from the token bucket at arrival, plus its own transfer) plus its
restore compute exceeds the recompute estimate (while its engine is idle; the engine's queue is
tracked as the model does).

Calibration, in the same run: a few requests of each class alone, at unlimited bandwidth, give
the compute model ``c + a*n + b*n^2`` (``c`` per prefill; fitted to the model's formulas for
misses and restores, used
both by the admission estimates and by the model), the raw read speed and the store's bytes per
token. The default bandwidths are 1, 3 and 10 times the *break-even* bandwidth (where reading a
median restore's prefix alone takes as long as the compute it saves); the loads are fractions of
this process's compute capacity (``load * min(streams, CPUs) / mean isolated compute`` requests
per second). The (bandwidth, load) pairs run in a seeded shuffled order (``points[].run_order``),
each pair's admission settings back to back, so a drift of the machine's load does not line up
with a setting. Every point is also run through the latency model with the same arrivals,
streams, lengths and decision rule: ``points[].model`` beside ``points[].measured``.

Caveat the JSON records: the model gives each stream its own machine; here the streams share
this process's CPUs (and whatever else runs on them), reported as ``compute_slowdown`` (measured
compute over the isolated fit, median over the point's requests) per point; ``model_slowed`` is
the model again with the fit times that slowdown, which takes the CPU sharing out of the
comparison and leaves the link and the queues.
"""

from __future__ import annotations

import argparse
import math
import os
import queue
import shutil
import statistics
import tempfile
import threading
import time

import numpy as np

from tiered_kv.sim.cluster import contention as C

NAME = "contention"
HELP = ("p50/p99 TTFT of restores and misses sharing one store link at several bandwidths, loads, "
        "with and without admission; measured with the engine beside the latency model")

DEFAULT_BANDWIDTH_FACTORS = (1.0, 3.0, 10.0)  # x the break-even bandwidth
DEFAULT_LOADS = (0.3, 0.7)
LINKS = ("shared", "split")
ADMISSION = {"both": (False, True), "on": (True,), "off": (False,)}
PRESETS = ("tiny", "small")


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
    parser.add_argument("--admission", choices=sorted(ADMISSION), default="both",
                        help="run with admission control (recompute when sooner), without, or both")
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


# ---------------------------------------------------------------------------------- settings

def parse_bandwidth(value) -> float:
    """Bytes/s from '256KiB/s', a number or 'inf' (no limit: math.inf)."""
    from tiered_kv.tiers.ssd_bandwidth import parse_rate

    if isinstance(value, str) and value.strip().lower() in ("inf", "none", "unlimited"):
        return math.inf
    if isinstance(value, float) and math.isinf(value):
        return math.inf
    try:
        return parse_rate(value, name="--bandwidths")
    except ValueError as exc:
        raise ValueError(f"--bandwidths: each must be a rate > 0 ('256KiB/s', bytes/s) or 'inf', got {value!r} "
                         f"({exc})") from None


def check_settings(*, loads, calibration: int = 6, calibration_repeats: int = 2, threads: int = 1) -> None:
    for x in loads:
        C._check("--loads", x, 0.0, 4.0, lo_open=True)
    C._check("--calibration", calibration, 2, 64, integer=True)
    C._check("--calibration-repeats", calibration_repeats, 1, 10, integer=True)
    C._check("--threads", threads, 1, 64, integer=True)


def scenario_from(**kw) -> C.ContentionScenario:
    """A scenario whose errors name the command-line flag (``--streams: must be ...``)."""
    flags = {"suffix_tokens": "--suffix"}
    try:
        return C.ContentionScenario(**kw)
    except ValueError as exc:
        field, _, rest = str(exc).partition(":")
        raise ValueError(f"{flags.get(field, '--' + field.replace('_', '-'))}:{rest}") from None


def load_model(preset_name: str | None = None, checkpoint: str | None = None):
    """(model, description): a checkpoint, the committed small one, or the tiny preset (random)."""
    from pathlib import Path

    import torch

    from tiered_kv.model import EncoderDecoder, default_checkpoint, load_checkpoint, preset

    if checkpoint:
        if not Path(checkpoint).is_file():
            raise FileNotFoundError(f"--checkpoint: {checkpoint}: no such file")
        model, _ = load_checkpoint(checkpoint, expect_preset=preset_name)
        return model, str(checkpoint)
    name = preset_name or "small"
    path = default_checkpoint(name)
    if path.is_file():
        from tiered_kv import REPO_ROOT

        model, _ = load_checkpoint(path)
        return model, str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)
    torch.manual_seed(0)
    return EncoderDecoder(preset(name)).eval(), f"random weights ({name} preset, no checkpoint)"


def request_tokens(i: int, n: int, seed: int):
    """Prompt ``i``: ``n`` byte-level token ids, its own seeded stream (unique prefixes)."""
    import torch

    g = torch.Generator().manual_seed(seed * 1_000_003 + i + 1)
    return torch.randint(0, 256, (int(n),), generator=g)


# ---------------------------------------------------------------------------------- engines

class _StreamView:
    """What one stream's engine sees of the shared tier: the lookup its reader already did
    (``hit``), and writes handed to the writer thread (behind the first token)."""

    def __init__(self, tier, writer) -> None:
        self.tier = tier
        self.namespace = tier.namespace
        self.writer = writer
        self.hit = None

    def get_prefix(self, tokens, traffic_class=None):
        hit, self.hit = self.hit, None
        return hit

    def put(self, tokens, kv, traffic_class: str = "default", *, kv_offset: int = 0) -> int:
        bs = self.namespace.block_size
        self.writer(tokens, kv, traffic_class, kv_offset)
        return len(tokens) // bs - kv_offset // bs


def _empty_hit(ns):
    from tiered_kv.tiers.ssd import Hit

    return Hit(ns, [], [])


def _seed_store(model, root: str, ns, work: dict, tokens: list, progress: bool) -> float:
    """Write every restore's prefix blocks (what a miss of the prefix would write); mean bytes per
    chunk (headers differ by a few bytes: index and creation time are in them)."""
    import torch
    from tqdm.auto import tqdm

    from tiered_kv.tiers.ssd import SSDTier

    tier = SSDTier(root, namespace=ns, background_touch=False)
    idx = np.flatnonzero(work["restore"])
    with torch.no_grad():
        for i in tqdm(idx, desc="contention: seeding restores", unit="prefix", disable=not progress, leave=False):
            h = int(work["cached"][i])
            kv, _ = model.encode(tokens[i][:h], 0, None)
            tier.put(tokens[i][:h], kv, "default")
    stored = sum(tier.get_prefix(tokens[i][: int(work["cached"][i])]).nbytes for i in idx)
    chunk = stored / int(work["blocks"][idx].sum()) if idx.size else 0.0
    if not chunk:  # no restores: size one chunk anyway (misses write them)
        h = ns.block_size
        probe = request_tokens(-1, h, 12345)
        with torch.no_grad():
            kv, _ = model.encode(probe, 0, None)
        tier.put(probe, kv, "default")
        chunk = tier.get_prefix(probe).nbytes
        tier.delete(probe)
    tier.close()
    return float(chunk)


def _calibrate(model, ns, root: str, work: dict, tokens: list, count: int, repeats: int, chunk_bytes: float,
               progress: bool) -> dict:
    """Isolated prefills at unlimited bandwidth (nothing stored): the compute fit and the raw read speed."""
    from tqdm.auto import tqdm

    from tiered_kv.engine import Engine
    from tiered_kv.tiers.host import HostTier
    from tiered_kv.tiers.ssd import SSDTier

    tier = SSDTier(root, namespace=ns, background_touch=False)
    engine = Engine(model, tier, HostTier("1GiB", name="calibration"), name="calibration")
    chosen = []
    for mask, want in ((work["restore"], count - count // 2), (~work["restore"], count // 2)):
        idx = np.flatnonzero(mask)
        idx = idx[np.argsort(work["n"][idx], kind="stable")]
        if idx.size:
            take = np.unique(np.round(np.linspace(0, idx.size - 1, min(want, idx.size))).astype(int))
            chosen += [int(i) for i in idx[take]]
    if not chosen:
        raise ValueError("contention: no requests to calibrate on")
    for i in chosen[:1] + chosen[-1:]:  # warm-up: allocators, lazy kernels; not kept
        engine.prefill(tokens[i], store=False)
    times: dict[int, list] = {i: [] for i in chosen}
    loads, read_bytes = [], 0
    jobs = [(r, i) for r in range(repeats) for i in chosen]
    for _, i in tqdm(jobs, desc="contention: calibration", unit="prefill", disable=not progress, leave=False):
        res = engine.prefill(tokens[i], store=False)
        if res.hit_tokens["ssd"] != int(work["cached"][i]):
            raise RuntimeError(f"contention: request {i} hit {res.hit_tokens['ssd']} tokens, "
                               f"expected {int(work['cached'][i])}")
        times[i].append(res.ttft_s - res.timings_s.get("load", 0.0))
        if res.hit_tokens["ssd"]:
            loads.append(res.timings_s.get("load", 0.0))
            read_bytes += res.hit_tokens["ssd"] // ns.block_size * chunk_bytes
    tier.close()
    idx = np.array(chosen)
    measured = np.array([statistics.median(times[i]) for i in chosen])
    c, a, b = C.fit_compute(work["n"][idx], work["cached"][idx], model.cfg.replay, measured)
    fitted = C.compute_seconds(c, a, b, work["n"][idx], work["cached"][idx], model.cfg.replay)
    per_class = {}
    for cls, mask in (("restore", work["restore"][idx]), ("miss", ~work["restore"][idx])):
        if mask.any():
            per_class[cls] = {"requests": int(mask.sum()), "measured_median_ms": float(np.median(measured[mask]) * 1e3),
                              "fitted_median_ms": float(np.median(fitted[mask]) * 1e3),
                              "median_abs_rel_error": float(np.median(np.abs(fitted[mask] / measured[mask] - 1)))}
    raw = read_bytes / sum(loads) if loads and sum(loads) > 0 else math.inf
    return {"fixed_s": c, "a_s_per_token": a, "b_s_per_token2": b, "requests": [int(i) for i in chosen], "repeats": repeats,
            "prompt_tokens": [int(work["n"][i]) for i in chosen],
            "compute_ms": [float(x * 1e3) for x in measured], "fitted_ms": [float(x * 1e3) for x in fitted],
            "median_abs_rel_error": float(np.median(np.abs(fitted / measured - 1))), "classes": per_class,
            "raw_read_bytes_per_s": raw}


# ---------------------------------------------------------------------------------- one point

def run_point(model, ns, seed_root: str, root: str, work: dict, tokens: list, arrival: np.ndarray, *,
              bandwidth: float, link: str, admission: bool, restore_s: np.ndarray, recompute_s: np.ndarray,
              raw_read_bytes_per_s: float, chunk_bytes: float) -> dict:
    """One (bandwidth, load, admission) point: every request of the scenario, measured.

    Returns per-request arrays (seconds from the first arrival): ``ttft_s``, ``ready_s`` (prefix
    read or lookup done), ``start_s``, ``compute_s``, ``recomputed``; and the link's traffic.
    """
    from tiered_kv.engine import Engine
    from tiered_kv.tiers.host import HostTier
    from tiered_kv.tiers.ssd import SSDTier

    shutil.copytree(seed_root, root)
    limit = None if math.isinf(bandwidth) else bandwidth
    kw = {"link_bandwidth": limit} if link == "shared" else {"read_bandwidth": limit, "write_bandwidth": limit}
    tier = SSDTier(root, namespace=ns, **kw)
    bucket = tier.read_limit
    count, streams = len(tokens), int(work["stream"].max()) + 1
    ready = np.full(count, math.nan)
    start = np.full(count, math.nan)
    done = np.full(count, math.nan)
    compute = np.full(count, math.nan)
    dispatched = np.full(count, math.nan)
    recomputed = np.zeros(count, dtype=bool)
    read_bytes = np.zeros(count, dtype=np.int64)
    writes: list[tuple[float, float, int]] = []  # (submitted, done, bytes) per put
    errors: list[BaseException] = []
    lock = threading.Lock()
    clock = time.monotonic
    t0 = clock() + 0.05

    write_q: queue.Queue = queue.Queue()

    def writer_loop() -> None:
        while (job := write_q.get()) is not None:
            submitted, args = job
            try:
                written = tier.put(*args[:3], kv_offset=args[3])
            except BaseException as exc:  # noqa: BLE001 - reported after the point
                errors.append(exc)
                written = 0
            with lock:
                writes.append((submitted, clock() - t0, written * chunk_bytes))

    def submit_write(tokens_, kv, cls, offset) -> None:
        write_q.put((clock() - t0, (tokens_, kv.detach(), cls, offset)))

    ready_q = [queue.Queue() for _ in range(streams)]
    views = [_StreamView(tier, submit_write) for _ in range(streams)]
    engines = [Engine(model, views[s], HostTier("1GiB", name=f"stream{s}"), name=f"stream{s}") for s in range(streams)]

    def stream_loop(s: int) -> None:
        while (job := ready_q[s].get()) is not None:
            i, hit = job
            views[s].hit = hit
            begin = clock() - t0
            try:
                res = engines[s].prefill(tokens[i], store=True)
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)
                continue
            end = clock() - t0 - res.store_s
            start[i], done[i], compute[i] = begin, end, res.ttft_s

    def read(i: int) -> None:
        try:
            hit = tier.get_prefix(tokens[i])
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
            hit = _empty_hit(ns)
        ready[i] = clock() - t0
        read_bytes[i] = hit.nbytes
        ready_q[int(work["stream"][i])].put((i, hit))

    threads = [threading.Thread(target=stream_loop, args=(s,), name=f"stream{s}", daemon=True) for s in range(streams)]
    threads.append(threading.Thread(target=writer_loop, name="write-behind", daemon=True))
    for th in threads:
        th.start()
    readers = []
    est_free = np.zeros(streams)  # the dispatcher's view of each engine's queue (as the model keeps it)
    for i in range(count):
        delay = t0 + arrival[i] - clock()
        if delay > 0:
            time.sleep(delay)
        now = clock() - t0
        dispatched[i] = now
        s = int(work["stream"][i])
        if work["restore"][i]:
            nbytes = int(int(work["blocks"][i]) * chunk_bytes)
            queued = (bucket.predict(nbytes) if bucket is not None else 0.0) + nbytes / raw_read_bytes_per_s
            if admission and C.recompute_is_sooner(queued_read_s=queued, restore_compute_s=restore_s[i],
                                                   recompute_s=recompute_s[i], compute_wait_s=est_free[s] - now):
                recomputed[i] = True
                ready[i] = now
                est_free[s] = max(est_free[s], now) + recompute_s[i]
                ready_q[s].put((i, _empty_hit(ns)))
                continue
            est_free[s] = max(est_free[s], now + queued) + restore_s[i]
        else:
            est_free[s] = max(est_free[s], now) + recompute_s[i]
        th = threading.Thread(target=read, args=(i,), name=f"read{i}", daemon=True)
        th.start()
        readers.append(th)
    for th in readers:
        th.join()
    for s in range(streams):
        ready_q[s].put(None)
    for th in threads[:-1]:
        th.join()
    write_q.put(None)
    threads[-1].join()
    tier.close()
    shutil.rmtree(root, ignore_errors=True)
    if errors:
        raise errors[0]
    used = np.flatnonzero(read_bytes > 0)
    link_bytes = int(read_bytes.sum() + sum(w[2] for w in writes))
    events = [(dispatched[i], ready[i]) for i in used] + [(w[0], w[1]) for w in writes if w[2]]
    window = (max(e[1] for e in events) - min(e[0] for e in events)) if events else 0.0
    return {"ttft_s": done - arrival, "ready_s": ready, "start_s": start, "done_s": done, "compute_s": compute,
            "dispatched_s": dispatched, "recomputed": recomputed, "read_bytes": read_bytes,
            "written_bytes": int(sum(w[2] for w in writes)), "link_bytes": link_bytes, "link_window_s": window,
            "link_throughput_bytes_per_s": link_bytes / window if window > 0 else math.nan,
            "dispatch_lateness_max_s": float(np.max(dispatched - arrival)),
            "bucket_waited_s": float(bucket.waited_s) if bucket is not None else 0.0}


# ---------------------------------------------------------------------------------- the benchmark

def run_order(bandwidths, loads, admission, seed: int) -> list[tuple[float, float, bool]]:
    """The points in the order they run: (bandwidth, load) pairs in a seeded shuffle, so a drift
    of the machine's load over the run does not line up with a bandwidth or a load; the
    admission settings of a pair run back to back, in alternating order."""
    pairs = [(bw, ld) for bw in bandwidths for ld in loads]
    order = np.random.default_rng([seed, 4]).permutation(len(pairs))
    out = []
    for k, i in enumerate(order):
        adm = list(admission) if k % 2 == 0 else list(admission)[::-1]
        out += [(*pairs[i], a) for a in adm]
    return out


def _bandwidth_label(b: float) -> str:
    if math.isinf(b):
        return "unlimited"
    for unit, size in (("MiB/s", 2**20), ("KiB/s", 2**10)):
        if b >= size:
            return f"{b / size:.3g} {unit}"
    return f"{b:.3g} B/s"


def measure_contention(scenario: C.ContentionScenario, *, model=None, model_source: str = "", bandwidths=None,
                       loads=DEFAULT_LOADS, admission=(False, True), link: str = "shared", calibration: int = 6,
                       calibration_repeats: int = 2, progress: bool = True, store_dir: str | None = None,
                       raw: bool = False) -> dict:
    """Run the scenario at every (bandwidth, load, admission) and the latency model beside it.

    ``bandwidths``: bytes/s (``math.inf``: no limit); None: 1, 3 and 10 times the break-even
    bandwidth measured here. ``loads``: fractions of compute capacity. Returns the JSON dict of
    ``tiered-kv bench contention``.
    """
    import torch
    from tqdm.auto import tqdm

    from tiered_kv.engine import namespace_for

    if link not in LINKS:
        raise ValueError(f"--link: must be one of {list(LINKS)}, got {link!r}")
    check_settings(loads=loads, calibration=calibration, calibration_repeats=calibration_repeats)
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
    R = model.cfg.replay
    points = []
    with tempfile.TemporaryDirectory(prefix="tkv-contention-", dir=store_dir) as tmp:
        seed_root = os.path.join(tmp, "seed")
        chunk_bytes = _seed_store(model, seed_root, ns, work, tokens, progress)
        bpt = chunk_bytes / scenario.block_size
        calib_root = os.path.join(tmp, "calibration")
        shutil.copytree(seed_root, calib_root)
        cal = _calibrate(model, ns, calib_root, work, tokens, calibration, calibration_repeats, chunk_bytes, progress)
        shutil.rmtree(calib_root, ignore_errors=True)
        c, a, b = cal["fixed_s"], cal["a_s_per_token"], cal["b_s_per_token2"]
        restore_s = C.compute_seconds(c, a, b, work["n"], work["cached"], R)
        recompute_s = C.compute_seconds(c, a, b, work["n"], 0 * work["n"], R)
        isolated = np.where(work["restore"], restore_s, recompute_s)
        break_even = C.break_even_bandwidth(bpt, a, b, work["n"], work["cached"], R)
        if bandwidths is None:
            if not math.isfinite(break_even):
                raise ValueError("--bandwidths: no restores to derive the default from; give the rates")
            bandwidths = [f * break_even for f in DEFAULT_BANDWIDTH_FACTORS]
        capacity = min(scenario.streams, cpus)
        mean_link = float(np.mean(work["n"] - work["n"] % scenario.block_size)) * bpt  # read or written per request
        grid = run_order(bandwidths, loads, admission, scenario.seed)
        bar = tqdm(grid, desc="contention", unit="point", disable=not progress)
        for k, (bw, ld, adm) in enumerate(bar):
            bar.set_postfix_str(f"{_bandwidth_label(bw)}, load {ld:g}, admission {'on' if adm else 'off'}")
            rate = ld * capacity / float(np.mean(isolated))
            arrival = C.arrivals(work["gaps"], rate)
            t_point = time.perf_counter()
            m = run_point(model, ns, seed_root, os.path.join(tmp, f"point{k}"), work, tokens, arrival,
                          bandwidth=bw, link=link, admission=adm, restore_s=restore_s, recompute_s=recompute_s,
                          raw_read_bytes_per_s=cal["raw_read_bytes_per_s"], chunk_bytes=chunk_bytes)
            wall = time.perf_counter() - t_point
            model_bw = cal["raw_read_bytes_per_s"] if math.isinf(bw) else bw
            cfg = C.latency_config(bytes_per_token=bpt, bandwidth_bytes_per_s=model_bw, c=c, a=a, b=b,
                                   replay_tokens=R, write_back=link == "shared")
            mod = C.model_point(cfg, work, arrival, admission=adm)
            est = np.where(m["recomputed"] | ~work["restore"], recompute_s, restore_s)
            slowdown = float(np.median(m["compute_s"] / est))
            slowed = C.model_point(cfg.with_(prefill_fixed_s=c * slowdown, prefill_a_s_per_token=a * slowdown,
                                             prefill_b_s_per_token2=b * slowdown), work, arrival, admission=adm)
            point = {
                "run_order": k,
                "bandwidth_bytes_per_s": None if math.isinf(bw) else bw, "bandwidth": _bandwidth_label(bw),
                "bandwidth_over_break_even": bw / break_even if math.isfinite(break_even) else None,
                "load": ld, "rate_per_s": rate, "admission": adm,
                "offered_link_utilisation": rate * mean_link / bw if math.isfinite(bw) else 0.0,
                "measured": C.class_percentiles(m["ttft_s"], work["restore"], m["recomputed"]),
                "model": C.class_percentiles(mod["ttft_s"], work["restore"], mod["recomputed"]),
                "model_slowed": C.class_percentiles(slowed["ttft_s"], work["restore"], slowed["recomputed"],
                                                    interval=False),
                "decisions_agree": float(np.mean(m["recomputed"] == mod["recomputed"])),
                "link_bytes": m["link_bytes"], "written_bytes": m["written_bytes"],
                "link_window_s": m["link_window_s"], "link_throughput_bytes_per_s": m["link_throughput_bytes_per_s"],
                "compute_slowdown": slowdown,
                "dispatch_lateness_max_s": m["dispatch_lateness_max_s"], "wall_s": wall,
            }
            if raw:
                point["requests"] = [
                    {"request": i, "class": "restore" if work["restore"][i] else "miss", "prompt_tokens": int(work["n"][i]),
                     "arrival_s": float(arrival[i]), "ready_s": float(m["ready_s"][i]),
                     "start_s": float(m["start_s"][i]), "ttft_ms": float(m["ttft_s"][i] * 1e3),
                     "compute_ms": float(m["compute_s"][i] * 1e3), "recomputed": bool(m["recomputed"][i]),
                     "model_ttft_ms": float(mod["ttft_s"][i] * 1e3), "model_recomputed": bool(mod["recomputed"][i])}
                    for i in range(scenario.requests)]
            points.append(point)
    torch_threads = torch.get_num_threads()
    points.sort(key=lambda p: (math.inf if p["bandwidth_bytes_per_s"] is None else p["bandwidth_bytes_per_s"],
                               p["load"], p["admission"]))
    return {
        "benchmark": NAME, "model": model_source, "preset": model.cfg.name, "params": model.num_params,
        "window_tokens": model.cfg.window, "replay_tokens": R, "fmt": ns.fmt, "block_size_tokens": scenario.block_size,
        "chunk_bytes": chunk_bytes, "kv_bytes_per_token": bpt, "link": link,
        "scenario": scenario.to_dict(),
        "lengths": {"prompt_tokens": [int(x) for x in work["n"]], "restore": [bool(x) for x in work["restore"]],
                    "median": float(np.median(work["n"])), "p90": float(np.percentile(work["n"], 90)),
                    "max": int(work["n"].max()), "restores": int(work["restore"].sum())},
        "calibration": cal, "break_even_bandwidth_bytes_per_s": break_even,
        "compute_capacity": capacity, "cpus": cpus, "torch_threads": torch_threads,
        "load_average_start": list(load_avg_start), "load_average_end": list(os.getloadavg()),
        "points": points, "summary": summarize(points), "wall_s": time.perf_counter() - t_start,
    }


def summarize(points: list[dict]) -> dict:
    """Model over measured p50 and p99 per class (median and range over points; ``model``: the
    isolated compute fit, ``model_slowed``: that fit times each point's measured compute
    slowdown), and what admission did to each class's p99 at each (bandwidth, load)."""
    out: dict = {"model_over_measured": {}, "model_slowed_over_measured": {}, "admission_p99_ratio": []}
    for src in ("model", "model_slowed"):
        for cls in C.CLASSES:
            d = {}
            for q in ("p50", "p99"):
                r = [p[src][cls][f"{q}_ms"] / p["measured"][cls][f"{q}_ms"] for p in points
                     if p["measured"][cls].get(f"{q}_ms")]
                if r:
                    d[q] = {"median": float(np.median(r)), "min": float(np.min(r)), "max": float(np.max(r))}
            out[f"{src}_over_measured"][cls] = d
    keyed = {(p["bandwidth"], p["load"], p["admission"]): p for p in points}
    for (bw, ld, adm), p in keyed.items():
        other = keyed.get((bw, ld, False))
        if not adm or other is None:
            continue
        row = {"bandwidth": bw, "load": ld}
        for cls in C.CLASSES:
            for src in ("measured", "model"):
                on, off = p[src][cls].get("p99_ms"), other[src][cls].get("p99_ms")
                if on and off:
                    row[f"{cls}_{src}"] = on / off
        out["admission_p99_ratio"].append(row)
    return out


def run(args: argparse.Namespace) -> dict:
    import torch

    check_settings(loads=args.loads, calibration=args.calibration, calibration_repeats=args.calibration_repeats,
                   threads=args.threads)
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
                              admission=ADMISSION[args.admission], link=args.link, calibration=args.calibration,
                              calibration_repeats=args.calibration_repeats, progress=not args.no_progress,
                              store_dir=args.store_dir, raw=args.raw)
