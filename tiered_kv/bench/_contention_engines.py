"""The measured side of ``tiered-kv bench contention``: the store, the calibration, one point.

:func:`_seed_store` writes every restore's prefix (as another machine would have);
:func:`_calibrate` times isolated prefills at unlimited bandwidth for the compute fit and the raw
read speed; :func:`run_point` runs every request of the scenario at one (bandwidth, load,
admission policy): a Poisson dispatcher on this thread, a reader thread per lookup through the
link's token bucket, one engine thread per stream (each engine sees the shared tier through a
:class:`_StreamView`) and one write-behind thread. The dispatcher decides restores from the
measured queue state (:class:`_Streams`, updated by the engine threads) with the model's rule.
The latency model's view of the same point is in :mod:`._contention_report`.
"""

from __future__ import annotations

import math
import queue
import shutil
import statistics
import threading
import time

import numpy as np

from tiered_kv.bench._contention_settings import request_tokens
from tiered_kv.sim.cluster import contention as C
from tiered_kv.sim.cluster.shared_compute import sharing_factor


class _StreamView:
    """What one stream's engine sees of the shared tier: the lookup its reader already did
    (``hit``), and writes handed to the writer thread (behind the first token)."""

    def __init__(self, tier, writer) -> None:
        self.tier = tier
        self.namespace = tier.namespace
        self.writer = writer
        self.hit = None

    def get_prefix_keys(self, keys, traffic_class=None):
        hit, self.hit = self.hit, None
        return hit

    def put_keys(self, keys, kv, traffic_class: str = "default", *, kv_offset: int = 0) -> int:
        self.writer(keys, kv, traffic_class, kv_offset)
        return len(keys) - kv_offset // self.namespace.block_size


def _empty_hit(ns):
    from tiered_kv.tiers.ssd import Hit

    return Hit(ns, [], [])


def _seed_store(model, root: str, ns, work: dict, tokens: list, progress: bool) -> float:
    """Write every restore's prefix blocks (what a miss of the prefix would write); mean bytes per
    chunk (headers differ by a few bytes: index and creation time are in them)."""
    import torch
    from tqdm.auto import tqdm

    from tiered_kv.tiers.ssd import SSDConfig, SSDTier

    tier = SSDTier(root, namespace=ns, config=SSDConfig(background_touch=False))
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
    from tiered_kv.tiers.ssd import SSDConfig, SSDTier

    tier = SSDTier(root, namespace=ns, config=SSDConfig(background_touch=False))
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

class _Streams:
    """The dispatcher's measured view of the engines: which requests each stream still has to run
    (dispatched, not done: reading, queued or running) and when its running one started. The
    engine threads update it; :meth:`state` is what the admission rule reads."""

    def __init__(self, streams: int, cores: float) -> None:
        self.cores = cores
        self.lock = threading.Lock()
        self.unfinished: list[dict[int, float]] = [{} for _ in range(streams)]  # request -> isolated seconds
        self.running: list[tuple[int, float] | None] = [None] * streams  # (request, start)

    def add(self, s: int, i: int, seconds: float) -> None:
        with self.lock:
            self.unfinished[s][i] = seconds

    def started(self, s: int, i: int, t: float) -> None:
        with self.lock:
            self.running[s] = (i, t)

    def finished(self, s: int, i: int) -> None:
        with self.lock:
            self.unfinished[s].pop(i, None)
            self.running[s] = None

    def state(self, s: int, now: float, queued_read_s: float) -> C.QueueState:
        """The queue state at ``now`` for a restore on stream ``s``: its backlog is the isolated
        compute of its unfinished requests less what the running one has done (its elapsed time
        over the sharing of the streams busy now)."""
        with self.lock:
            busy = sum(1 for u in self.unfinished if u)
            others = busy - (1 if self.unfinished[s] else 0)
            backlog = sum(self.unfinished[s].values())
            if self.running[s] is not None:
                i, t = self.running[s]
                done = (now - t) / sharing_factor(max(busy, 1), self.cores)
                backlog -= min(done, self.unfinished[s].get(i, 0.0))
        return C.QueueState(queued_read_s=max(queued_read_s, 0.0), stream_backlog_s=max(backlog, 0.0),
                            busy_streams=others, cores=self.cores)


def run_point(model, ns, seed_root: str, root: str, work: dict, tokens: list, arrival: np.ndarray, *,
              bandwidth: float, link: str, policy: str, cores: float, restore_s: np.ndarray,
              recompute_s: np.ndarray, raw_read_bytes_per_s: float, chunk_bytes: float) -> dict:
    """One (bandwidth, load, policy) point: every request of the scenario, measured.

    Admission reads the measured queue state (:class:`_Streams`; the link's debt from its token
    bucket) and decides with :func:`~tiered_kv.sim.cluster.contention.decide`, the model's rule.

    Returns per-request arrays (seconds from the first arrival): ``ttft_s``, ``ready_s`` (prefix
    read or lookup done), ``start_s``, ``compute_s``, ``recomputed``; and the link's traffic.
    """
    from tiered_kv.engine import Engine
    from tiered_kv.tiers.host import HostTier
    from tiered_kv.tiers.ssd import SSDConfig, SSDTier

    shutil.copytree(seed_root, root)
    limit = None if math.isinf(bandwidth) else bandwidth
    kw = {"link_bandwidth": limit} if link == "shared" else {"read_bandwidth": limit, "write_bandwidth": limit}
    tier = SSDTier(root, namespace=ns, config=SSDConfig(**kw))
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
                written = tier.put_keys(*args[:3], kv_offset=args[3])
            except BaseException as exc:  # noqa: BLE001 - reported after the point
                errors.append(exc)
                written = 0
            with lock:
                writes.append((submitted, clock() - t0, written * chunk_bytes))

    def submit_write(keys, kv, cls, offset) -> None:
        write_q.put((clock() - t0, (keys, kv.detach(), cls, offset)))

    view = _Streams(streams, cores)
    ready_q = [queue.Queue() for _ in range(streams)]
    views = [_StreamView(tier, submit_write) for _ in range(streams)]
    engines = [Engine(model, views[s], HostTier("1GiB", name=f"stream{s}"), name=f"stream{s}") for s in range(streams)]

    def stream_loop(s: int) -> None:
        while (job := ready_q[s].get()) is not None:
            i, hit = job
            views[s].hit = hit
            begin = clock() - t0
            view.started(s, i, begin)
            try:
                res = engines[s].prefill(tokens[i], store=True)
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)
                view.finished(s, i)
                continue
            view.finished(s, i)
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
            if policy != "load" and C.decide(policy, view.state(s, now, queued), restore_compute_s=restore_s[i],
                                             recompute_s=recompute_s[i]):
                recomputed[i] = True
                ready[i] = now
                view.add(s, i, recompute_s[i])
                ready_q[s].put((i, _empty_hit(ns)))
                continue
            view.add(s, i, restore_s[i])
        else:
            view.add(s, i, recompute_s[i])
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
