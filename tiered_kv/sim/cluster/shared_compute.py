"""Streams that share compute: the admission rule that counts it, and the queue model that has it.

Why: :func:`~tiered_kv.sim.cluster.latency.simulate_queue` gives every stream a machine of its
own, so recomputing a restore instead of loading it costs nobody else anything. When streams
share cores (engine threads on one CPU, requests batched on one GPU) a recompute adds
``recompute - restore`` seconds to cores the others use, and under load every prefill in flight
slows down. ``tiered-kv bench contention`` measured exactly that: where the own-latency rule
recomputed a fifth to a third of the restores, their p99 rose while the per-machine model
predicted a cut.

The model (:func:`simulate_shared`): one FIFO link for reads and write-backs, one FIFO compute
queue per stream (an engine runs one prefill at a time), and ``cores`` units shared by the
running prefills by processor sharing (each of ``m`` at ``min(1, cores / m)`` of its isolated
speed): how an OS time-slices engine threads, and the first-order picture of concurrent
prefills on one accelerator.

The rule (:func:`recompute_pays`) reads a :class:`QueueState`, which the measurement
(:mod:`tiered_kv.measure.contention`) reads at a restore's arrival and the model simulates: a
recompute must finish first and also pay for the delay its extra work puts on the other busy
streams. :func:`decide` names the benchmark's policies: ``load`` (never recompute), ``own``
(:func:`recompute_is_sooner`, cores ignored) and ``shared`` (this rule).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from tiered_kv.sim.cluster.latency import check_fields

#: Admission policies, in the order the benchmark reports them.
POLICIES = ("load", "own", "shared")


@dataclass(frozen=True)
class QueueState:
    """What a dispatcher knows when a restore arrives (all times in isolated compute seconds
    except ``queued_read_s``, which is wall time on the link)."""

    queued_read_s: float  # until its prefix would be read: the link's queue ahead plus its own transfer
    stream_backlog_s: float  # compute its own stream still has to run before it (queued and running)
    busy_streams: int  # other streams with a prefill queued or running
    cores: float  # compute units the streams share

    def __post_init__(self) -> None:
        check_fields(self, [("queued_read_s", self.queued_read_s >= 0, ">= 0 s"),
                            ("stream_backlog_s", self.stream_backlog_s >= 0, ">= 0 s"),
                            ("busy_streams", self.busy_streams >= 0, ">= 0"), ("cores", self.cores > 0, "> 0")])


def sharing_factor(running: float, cores: float) -> float:
    """How much slower each of ``running`` prefills goes on ``cores`` shared units (>= 1)."""
    return max(1.0, running / cores)


def recompute_is_sooner(*, queued_read_s: float, restore_compute_s: float, recompute_s: float,
                        compute_wait_s: float = 0.0) -> bool:
    """The own-latency rule: True when recomputing this restore alone finishes sooner.

    Loading finishes at ``max(compute_wait, queued_read) + restore_compute`` (``queued_read_s``:
    the link's queue ahead plus its own transfer; ``restore_compute_s``: suffix and replay;
    ``compute_wait_s``: until its stream is free), recomputing at ``compute_wait + recompute``;
    ties load. It is the inequality of :func:`~tiered_kv.sim.cluster.latency.simulate_queue`'s
    admission (a test checks the two agree), and ignores that the extra work slows every stream
    on shared cores.
    """
    wait = max(compute_wait_s, 0.0)
    return wait + recompute_s < max(wait, queued_read_s) + restore_compute_s


def recompute_pays(state: QueueState, *, restore_compute_s: float, recompute_s: float) -> bool:
    """True when recomputing a restore beats loading it once the shared cores are counted.

    With ``f`` the sharing the request will see (its stream and the busy others on the cores),
    loading ends at ``max(f*backlog, queued_read) + f*restore`` and recomputing at
    ``f*backlog + f*recompute``. The gain must also exceed what the extra work costs the others:
    ``(recompute - restore) / cores`` for each other busy stream when the cores are saturated,
    nothing when they have room. Ties load.
    """
    f = sharing_factor(state.busy_streams + 1, state.cores)
    wait = f * state.stream_backlog_s
    gain = max(wait, state.queued_read_s) + f * restore_compute_s - (wait + f * recompute_s)
    saturated = state.busy_streams + 1 > state.cores
    delayed = state.busy_streams if saturated else 0
    return gain > max(recompute_s - restore_compute_s, 0.0) * delayed / state.cores


def decide(policy: str, state: QueueState, *, restore_compute_s: float, recompute_s: float) -> bool:
    """Recompute this restore under ``policy`` (one of :data:`POLICIES`)?"""
    if policy == "load":
        return False
    if policy == "own":
        return recompute_is_sooner(queued_read_s=state.queued_read_s, restore_compute_s=restore_compute_s,
                                   recompute_s=recompute_s, compute_wait_s=state.stream_backlog_s)
    if policy == "shared":
        return recompute_pays(state, restore_compute_s=restore_compute_s, recompute_s=recompute_s)
    raise ValueError(f"policy: must be one of {list(POLICIES)}, got {policy!r}")


@dataclass(frozen=True)
class SharedResult:
    """Per-request outcome of :func:`simulate_shared` (arrays aligned with the input)."""

    ttft_s: np.ndarray  # compute done - arrival
    start_s: np.ndarray  # when its prefill started on its stream
    recomputed: np.ndarray  # bool: the policy recomputed this restore


class _Sim:
    """The event loop's state; one instance per :func:`simulate_shared` call."""

    def __init__(self, streams: int, cores: float, requests: int) -> None:
        self.cores = cores
        self.start = np.full(requests, math.nan)  # when each request's prefill started
        self.t = 0.0
        self.link_free = 0.0
        self.queue: list[deque] = [deque() for _ in range(streams)]  # (request, isolated seconds)
        self.running = [-1] * streams
        self.rem = [0.0] * streams
        self.pending = [0.0] * streams  # isolated seconds of jobs still reading their prefix
        self.pending_n = [0] * streams

    def rate(self) -> float:
        m = sum(r >= 0 for r in self.running)
        return min(1.0, self.cores / m) if m else 0.0

    def advance(self, t: float) -> None:
        r = self.rate()
        for s, i in enumerate(self.running):
            if i >= 0:
                self.rem[s] = max(self.rem[s] - (t - self.t) * r, 0.0)
        self.t = t

    def next_completion(self) -> tuple[float, int]:
        r = self.rate()
        best = (math.inf, -1)
        for s, i in enumerate(self.running):
            if i >= 0:
                best = min(best, (self.t + self.rem[s] / r, s))
        return best

    def backlog(self, s: int) -> float:
        return (self.rem[s] if self.running[s] >= 0 else 0.0) + sum(w for _, w in self.queue[s]) + self.pending[s]

    def busy_others(self, s: int) -> int:
        return sum(1 for k in range(len(self.running)) if k != s and (self.running[k] >= 0 or self.queue[k]
                                                                       or self.pending_n[k]))

    def enqueue(self, s: int, i: int, work: float) -> None:
        self.queue[s].append((i, work))
        self.start_next(s)

    def start_next(self, s: int) -> None:
        if self.running[s] < 0 and self.queue[s]:
            i, work = self.queue[s].popleft()
            self.running[s], self.rem[s] = i, work
            self.start[i] = self.t


def simulate_shared(arrival_s, stream, restore, *, restore_s, recompute_s, read_s, write_s, cores: float,
                    policy: str = "load") -> SharedResult:
    """Replay requests through one FIFO link, per-stream FIFO compute queues and ``cores``
    shared compute units (processor sharing), deciding restores by ``policy``.

    ``restore_s`` / ``recompute_s``: isolated compute of each request loaded / computed whole;
    ``read_s`` / ``write_s``: its prefix's / write-back's time on the link (a write-back enters
    it when the prefill is done; 0: nothing written). Events at one instant run compute
    completions, reads done, write-backs, arrivals (then by stream or request): deterministic.
    """
    arrival = np.asarray(arrival_s, dtype=np.float64)
    stream = np.asarray(stream, dtype=np.int64)
    restore = np.asarray(restore, dtype=bool)
    count = arrival.size
    if policy not in POLICIES:
        raise ValueError(f"policy: must be one of {list(POLICIES)}, got {policy!r}")
    if not cores > 0:
        raise ValueError(f"cores: must be > 0, got {cores!r}")
    if count and np.any(np.diff(arrival) < 0):
        raise ValueError("simulate_shared: arrival_s must be sorted")
    sim = _Sim(int(stream.max()) + 1 if count else 0, float(cores), count)
    done = np.full(count, math.nan)
    recomputed = np.zeros(count, dtype=bool)
    reads: deque = deque()  # (ready time, request): the link serves reads in order
    writes: list = []  # heap of (time, request)
    a = 0
    while a < count or reads or writes or any(r >= 0 for r in sim.running):
        t_done, s_done = sim.next_completion()
        events = [(t_done, 0, s_done), (reads[0][0] if reads else math.inf, 1, 0),
                  (writes[0][0] if writes else math.inf, 2, 0), (arrival[a] if a < count else math.inf, 3, a)]
        t, kind, k = min(events)
        sim.advance(t)
        if kind == 0:
            i = sim.running[k]
            done[i], sim.running[k] = t, -1
            if write_s[i] > 0:
                heapq.heappush(writes, (t, i))
            sim.start_next(k)
        elif kind == 1:
            _, i = reads.popleft()
            s = int(stream[i])
            sim.pending[s] -= restore_s[i]
            sim.pending_n[s] -= 1
            sim.enqueue(s, i, restore_s[i])
        elif kind == 2:
            _, i = heapq.heappop(writes)
            sim.link_free = max(sim.link_free, t) + write_s[i]
        else:  # an arrival: a miss queues its compute; a restore is recomputed or its read queued
            a += 1
            s = int(stream[k])
            ready = max(sim.link_free, t) + read_s[k]
            if restore[k]:
                state = QueueState(queued_read_s=ready - t, stream_backlog_s=sim.backlog(s),
                                   busy_streams=sim.busy_others(s), cores=sim.cores)
                recomputed[k] = decide(policy, state, restore_compute_s=restore_s[k], recompute_s=recompute_s[k])
            if not restore[k] or recomputed[k]:
                sim.enqueue(s, k, recompute_s[k])
            else:
                sim.link_free = ready
                sim.pending[s] += restore_s[k]
                sim.pending_n[s] += 1
                reads.append((ready, k))
    return SharedResult(ttft_s=done - arrival, start_s=sim.start, recomputed=recomputed)

