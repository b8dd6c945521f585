"""The measured side of the contention measurement: the seeded store, the calibration, one point.

A point runs a Poisson dispatcher on this thread, a reader thread per lookup through the link's
token bucket, one engine thread per stream and one write-behind thread; the latency model's view
of the same point is in :mod:`.report`.
"""

from __future__ import annotations

import math
import queue
import shutil
import statistics
import threading
import time

import numpy as np

from tiered_kv.measure.contention.settings import request_tokens
from tiered_kv.sim.cluster import contention as C
from tiered_kv.sim.cluster.shared_compute import QueueState, decide, sharing_factor


class _StreamView:
    """What one stream's engine sees of the shared tier: the lookup its reader already did
    (``hit``), and writes handed to the writer thread (behind the first token)."""

    def __init__(self, tier, writer) -> None:
        self.namespace, self.writer, self.hit = tier.namespace, writer, None

    def get_prefix_keys(self, keys, traffic_class=None):
        hit, self.hit = self.hit, None
        return hit

    def put_keys(self, keys, kv, traffic_class: str = "default", *, kv_offset: int = 0) -> int:
        self.writer(keys, kv, traffic_class, kv_offset)
        return len(keys) - kv_offset // self.namespace.block_size


def _empty_hit(ns):
    from tiered_kv.tiers.ssd import Hit

    return Hit(ns, [], [])


def seed_store(model, root: str, ns, work: dict, tokens: list, progress: bool) -> float:
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


def calibrate(model, ns, root: str, work: dict, tokens: list, count: int, repeats: int, chunk_bytes: float,
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

    def state(self, s: int, now: float, queued_read_s: float) -> QueueState:
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
        return QueueState(queued_read_s=max(queued_read_s, 0.0), stream_backlog_s=max(backlog, 0.0),
                          busy_streams=others, cores=self.cores)


def run_point(model, ns, seed_root: str, root: str, work: dict, tokens: list, arrival: np.ndarray, *,
              bandwidth: float, link: str, policy: str, cores: float, restore_s: np.ndarray,
              recompute_s: np.ndarray, raw_read_bytes_per_s: float, chunk_bytes: float) -> dict:
    """One (bandwidth, load, policy) point: every request of the scenario, measured.

    Admission reads the measured queue state (:class:`_Streams`; the link's debt from its token
    bucket) and decides with :func:`~tiered_kv.sim.cluster.shared_compute.decide`, the model's rule.

    Returns per-request arrays (seconds from the first arrival): ``ttft_s``, ``ready_s`` (prefix
    read or lookup done), ``start_s``, ``compute_s``, ``recomputed``; and the link's traffic.
    """
    shutil.copytree(seed_root, root)
    point = _Point(model, ns, root, work, tokens, bandwidth=bandwidth, link=link, cores=cores,
                   chunk_bytes=chunk_bytes)
    threads = point.start()
    readers = point.dispatch(arrival, policy=policy, restore_s=restore_s, recompute_s=recompute_s,
                             raw_read_bytes_per_s=raw_read_bytes_per_s)
    point.drain(readers, threads)
    shutil.rmtree(root, ignore_errors=True)
    if point.errors:
        raise point.errors[0]
    return point.record(arrival)


class _Point:
    """The run of one point: the shared tier behind its link, the threads that use it (one per
    engine, one per prefix read, one write-behind) and what they record, in seconds from ``t0``.
    The threads record errors instead of raising; :func:`run_point` raises the first after the
    point."""

    def __init__(self, model, ns, root: str, work: dict, tokens: list, *, bandwidth: float, link: str,
                 cores: float, chunk_bytes: float) -> None:
        from tiered_kv.engine import Engine
        from tiered_kv.tiers.host import HostTier
        from tiered_kv.tiers.ssd import SSDConfig, SSDTier

        limit = None if math.isinf(bandwidth) else bandwidth
        kw = {"link_bandwidth": limit} if link == "shared" else {"read_bandwidth": limit, "write_bandwidth": limit}
        self.tier = SSDTier(root, namespace=ns, config=SSDConfig(**kw))
        self.bucket = self.tier.read_limit
        self.ns, self.work, self.tokens, self.chunk_bytes = ns, work, tokens, chunk_bytes
        count, streams = len(tokens), int(work["stream"].max()) + 1
        self.ready, self.start_s, self.done, self.compute, self.dispatched = (np.full(count, math.nan)
                                                                              for _ in range(5))
        self.recomputed = np.zeros(count, dtype=bool)
        self.read_bytes = np.zeros(count, dtype=np.int64)
        self.writes: list[tuple[float, float, int]] = []  # (submitted, done, bytes) per put
        self.errors: list[BaseException] = []
        self.lock = threading.Lock()
        self.t0 = time.monotonic() + 0.05
        self.write_q: queue.Queue = queue.Queue()
        self.queues = _Streams(streams, cores)
        self.ready_q = [queue.Queue() for _ in range(streams)]
        self.views = [_StreamView(self.tier, self.submit_write) for _ in range(streams)]
        self.engines = [Engine(model, self.views[s], HostTier("1GiB", name=f"stream{s}"), name=f"stream{s}")
                        for s in range(streams)]

    def now(self) -> float:
        return time.monotonic() - self.t0

    def submit_write(self, keys, kv, cls, offset) -> None:
        self.write_q.put((self.now(), (keys, kv.detach(), cls, offset)))

    def writer_loop(self) -> None:
        while (job := self.write_q.get()) is not None:
            submitted, args = job
            try:
                written = self.tier.put_keys(*args[:3], kv_offset=args[3])
            except BaseException as exc:  # noqa: BLE001 - reported after the point
                self.errors.append(exc)
                written = 0
            with self.lock:
                self.writes.append((submitted, self.now(), written * self.chunk_bytes))

    def stream_loop(self, s: int) -> None:
        while (job := self.ready_q[s].get()) is not None:
            i, hit = job
            self.views[s].hit = hit
            begin = self.now()
            self.queues.started(s, i, begin)
            try:
                res = self.engines[s].prefill(self.tokens[i], store=True)
            except BaseException as exc:  # noqa: BLE001
                self.errors.append(exc)
                continue
            finally:
                self.queues.finished(s, i)
            end = self.now() - res.store_s
            self.start_s[i], self.done[i], self.compute[i] = begin, end, res.ttft_s

    def read(self, i: int) -> None:
        try:
            hit = self.tier.get_prefix(self.tokens[i])
        except BaseException as exc:  # noqa: BLE001
            self.errors.append(exc)
            hit = _empty_hit(self.ns)
        self.ready[i] = self.now()
        self.read_bytes[i] = hit.nbytes
        self.ready_q[int(self.work["stream"][i])].put((i, hit))

    def start(self) -> list[threading.Thread]:
        """The engine threads, then the write-behind thread (last), started."""
        threads = [threading.Thread(target=self.stream_loop, args=(s,), name=f"stream{s}", daemon=True)
                   for s in range(len(self.engines))]
        threads.append(threading.Thread(target=self.writer_loop, name="write-behind", daemon=True))
        for th in threads:
            th.start()
        return threads

    def dispatch(self, arrival: np.ndarray, *, policy: str, restore_s: np.ndarray, recompute_s: np.ndarray,
                 raw_read_bytes_per_s: float) -> list[threading.Thread]:
        """Each request at its arrival: a restore that admission recomputes goes straight to its
        engine with no hit; every other request starts its prefix lookup on a reader thread."""
        readers = []
        for i in range(len(self.tokens)):
            delay = self.t0 + arrival[i] - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            now = self.now()
            self.dispatched[i] = now
            s, restore = int(self.work["stream"][i]), bool(self.work["restore"][i])
            if restore and policy != "load" and self._recomputes(i, s, now, policy, restore_s[i], recompute_s[i],
                                                                 raw_read_bytes_per_s):
                self.recomputed[i], self.ready[i] = True, now
                self.queues.add(s, i, recompute_s[i])
                self.ready_q[s].put((i, _empty_hit(self.ns)))
                continue
            self.queues.add(s, i, restore_s[i] if restore else recompute_s[i])
            th = threading.Thread(target=self.read, args=(i,), name=f"read{i}", daemon=True)
            th.start()
            readers.append(th)
        return readers

    def _recomputes(self, i: int, s: int, now: float, policy: str, restore_s: float, recompute_s: float,
                    raw_read_bytes_per_s: float) -> bool:
        """The model's rule on the measured state: the read's wait on the link's bucket plus its
        time at the raw read speed, and stream ``s``'s queue."""
        nbytes = int(int(self.work["blocks"][i]) * self.chunk_bytes)
        queued = (self.bucket.predict(nbytes) if self.bucket is not None else 0.0) + nbytes / raw_read_bytes_per_s
        return decide(policy, self.queues.state(s, now, queued), restore_compute_s=restore_s,
                      recompute_s=recompute_s)

    def drain(self, readers: list[threading.Thread], threads: list[threading.Thread]) -> None:
        """Wait for the reads, then the engines, then the writes behind them; close the tier."""
        for th in readers:
            th.join()
        for q in self.ready_q:
            q.put(None)
        for th in threads[:-1]:
            th.join()
        self.write_q.put(None)
        threads[-1].join()
        self.tier.close()

    def record(self, arrival: np.ndarray) -> dict:
        """The point's per-request arrays and the link's traffic over its busy window."""
        used = np.flatnonzero(self.read_bytes > 0)
        written = int(sum(w[2] for w in self.writes))
        link_bytes = int(self.read_bytes.sum() + written)
        events = [(self.dispatched[i], self.ready[i]) for i in used] + [(w[0], w[1]) for w in self.writes if w[2]]
        window = (max(e[1] for e in events) - min(e[0] for e in events)) if events else 0.0
        return {"ttft_s": self.done - arrival, "ready_s": self.ready, "start_s": self.start_s, "done_s": self.done,
                "compute_s": self.compute, "dispatched_s": self.dispatched, "recomputed": self.recomputed,
                "read_bytes": self.read_bytes, "written_bytes": written, "link_bytes": link_bytes,
                "link_window_s": window,
                "link_throughput_bytes_per_s": link_bytes / window if window > 0 else math.nan,
                "dispatch_lateness_max_s": float(np.max(self.dispatched - arrival)),
                "bucket_waited_s": float(self.bucket.waited_s) if self.bucket is not None else 0.0}
