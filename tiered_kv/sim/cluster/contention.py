"""Restores and misses contending for one store: the scenario, the admission rule, the model's view.

This is the simulator's half of ``tiered-kv bench contention`` (:mod:`tiered_kv.bench.contention`
measures the same scenario with the real engine): everything here is numpy, so the measurement
and the model read one definition of the workload and of the admission decision.

The scenario (:class:`ContentionScenario`, :func:`workload`): ``requests`` prompts of lognormal
length (``median_tokens``, ``sigma``), drawn once from ``seed``, so every bandwidth, load and
admission setting sees the *same* prompts. A prompt is ``blocks`` full blocks plus a
``suffix_tokens`` tail shorter than a block. A fraction ``restore_fraction`` of them are
*restores*: their blocks are on the store (another machine prefilled them) and only the tail is
new, so they read ``blocks`` chunks and write nothing. The rest are *misses*: nothing cached, they
compute the whole prompt and write their ``blocks`` chunks back. Requests arrive as a Poisson
stream (unit-rate gaps drawn once from the seed, divided by the rate of each load) and go round
robin to ``streams`` machines, each with its own compute queue; all of them share one link to
the store.

Admission (:func:`recompute_is_sooner`): when a restore arrives, recompute it instead of
loading when that finishes sooner: when the queued read time (the wait on the link plus its own
transfer) plus its restore compute exceeds the recompute estimate. This is the inequality of
:func:`tiered_kv.sim.cluster.latency.simulate_queue`'s admission, written once here for the
benchmark's dispatcher (a test checks the two agree).

The model's view (:func:`model_point`): the same requests through ``simulate_queue`` with a
:class:`~tiered_kv.sim.cluster.latency.LatencyConfig` whose compute coefficients ``c`` (fixed per
prefill), ``a``, ``b`` were fitted (:func:`fit_compute`) to the engine's isolated prefills on this
machine, whose bytes per token are the store's, and whose read bandwidth is the link's limit.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from tiered_kv.sim.cluster import latency as L

CLASSES = ("restore", "miss")
#: Most concurrent streams a run may have (the issue's N up to 16).
MAX_STREAMS = 16
#: Percentiles reported per class.
QUANTILES = (25, 50, 75, 90, 99)


def _check(name: str, value, lo: float, hi: float, *, integer: bool = False, lo_open: bool = False) -> None:
    ok = isinstance(value, (int, np.integer)) if integer else isinstance(value, (int, float, np.number))
    if isinstance(value, bool) or not ok or (not integer and math.isnan(value)) or value > hi or value < lo \
            or (lo_open and value == lo):
        kind = "an integer" if integer else "a number"
        raise ValueError(f"{name}: must be {kind} in {'(' if lo_open else '['}{lo:g}, {hi:g}], got {value!r}")


@dataclass(frozen=True)
class ContentionScenario:
    """N request streams against one store; see the module docstring. Errors name the field."""

    streams: int = 4
    requests: int = 48
    restore_fraction: float = 0.5
    median_tokens: int = 512
    sigma: float = 0.6
    max_tokens: int = 2048
    block_size: int = 64
    suffix_tokens: int = 32
    seed: int = 0

    def __post_init__(self) -> None:
        _check("streams", self.streams, 1, MAX_STREAMS, integer=True)
        _check("requests", self.requests, 2, 100_000, integer=True)
        _check("restore_fraction", self.restore_fraction, 0.0, 1.0)
        _check("block_size", self.block_size, 1, 1 << 20, integer=True)
        _check("suffix_tokens", self.suffix_tokens, 1, self.block_size - 1, integer=True)
        _check("max_tokens", self.max_tokens, self.block_size + self.suffix_tokens, 1 << 24, integer=True)
        _check("median_tokens", self.median_tokens, self.block_size, self.max_tokens, integer=True)
        _check("sigma", self.sigma, 0.0, 3.0)
        _check("seed", self.seed, 0, 2**32 - 1, integer=True)

    def to_dict(self) -> dict:
        return asdict(self)


def workload(sc: ContentionScenario) -> dict[str, np.ndarray]:
    """The scenario's requests, the same for every load, bandwidth and admission setting.

    Keys: ``n`` (prompt tokens), ``blocks`` (full blocks), ``cached`` (tokens on the store:
    ``blocks * block_size`` for restores, 0 for misses), ``restore`` (bool), ``stream``
    (round robin), ``gaps`` (unit-rate exponential inter-arrival gaps; :func:`arrivals`).
    """
    bs = sc.block_size
    max_blocks = (sc.max_tokens - sc.suffix_tokens) // bs
    lengths = np.random.default_rng([sc.seed, 1]).lognormal(math.log(sc.median_tokens), sc.sigma, sc.requests)
    blocks = np.clip(np.round(lengths / bs), 1, max_blocks).astype(np.int64)
    restore = np.random.default_rng([sc.seed, 2]).random(sc.requests) < sc.restore_fraction
    gaps = np.random.default_rng([sc.seed, 3]).exponential(1.0, sc.requests)
    n = blocks * bs + sc.suffix_tokens
    return {"n": n, "blocks": blocks, "cached": np.where(restore, blocks * bs, 0), "restore": restore,
            "stream": np.arange(sc.requests) % sc.streams, "gaps": gaps}


def arrivals(gaps: np.ndarray, rate_per_s: float) -> np.ndarray:
    """Arrival times (s) of a Poisson stream of ``rate_per_s``: the first at 0."""
    _check("rate", rate_per_s, 0.0, math.inf, lo_open=True)
    t = np.cumsum(np.asarray(gaps, dtype=np.float64)) / rate_per_s
    return t - t[0]


# --- compute: the latency model's formulas, fitted to this machine ---------------------------

def compute_regressors(n, cached, replay_tokens: int) -> np.ndarray:
    """Columns (1, x_a, x_b) with compute = c + a*x_a + b*x_b, as :func:`~.latency.simulate_queue`
    prices it (``c`` is ``prefill_fixed_s``): a miss ``c + a*n + b*n^2``; a restore of ``h``
    cached tokens the suffix ``[h, n)`` plus the bounded replay of ``[h - R, h)`` (no window
    state on the machine)."""
    n = np.asarray(n, dtype=np.float64)
    h = np.asarray(cached, dtype=np.float64)
    lo = np.maximum(h - replay_tokens, 0.0)
    replay = h > 0
    xa = (n - h) + np.where(replay, h - lo, 0.0)
    xb = (n * n - h * h) + np.where(replay, h * h - lo * lo, 0.0)
    return np.stack([np.ones_like(n), xa, xb], axis=1)


def fit_compute(n, cached, replay_tokens: int, seconds) -> tuple[float, float, float]:
    """Least-squares (c, a, b) >= 0 of ``seconds ~ c + a*x_a + b*x_b``, relative error weighted
    (each request counts alike whatever its length); the best of the non-negative fits over
    every subset of the three terms."""
    x = compute_regressors(n, cached, replay_tokens)
    y = np.asarray(seconds, dtype=np.float64)
    if x.shape[0] != y.size or y.size == 0:
        raise ValueError("fit_compute: need one time per request, at least one")
    w = 1.0 / np.maximum(y, 1e-9)
    best = None
    for cols in ((0, 1, 2), (0, 1), (0, 2), (1, 2), (0,), (1,), (2,)):
        coef, *_ = np.linalg.lstsq(x[:, cols] * w[:, None], y * w, rcond=None)
        if np.any(coef < 0):
            continue
        full = np.zeros(3)
        full[list(cols)] = coef
        err = float(np.sum(((x @ full - y) * w) ** 2))
        if best is None or err < best[0] - 1e-12 * abs(best[0]):
            best = (err, full)
    if best is None or not np.any(best[1] > 0):
        raise ValueError("fit_compute: no non-negative fit (are the times positive?)")
    return float(best[1][0]), float(best[1][1]), float(best[1][2])


def compute_seconds(c: float, a: float, b: float, n, cached, replay_tokens: int) -> np.ndarray:
    """The fitted compute time of each request (cached=0: recomputing it whole)."""
    return compute_regressors(n, cached, replay_tokens) @ np.array([c, a, b])


def break_even_bandwidth(bytes_per_token: float, a: float, b: float, n, cached, replay_tokens: int) -> float:
    """Link bytes/s at which reading the median restore's prefix, alone, takes as long as the
    compute that loading it saves (recompute minus restore compute; the fixed term cancels):
    below it, admission recomputes every restore even on an idle link."""
    h = np.asarray(cached, dtype=np.float64)
    keep = h > 0
    if not keep.any():
        return math.nan
    n = np.asarray(n, dtype=np.float64)[keep]
    saved = compute_seconds(0.0, a, b, n, 0 * n, replay_tokens) - compute_seconds(0.0, a, b, n, h[keep], replay_tokens)
    return float(np.median(h[keep] * bytes_per_token / np.maximum(saved, 1e-12)))


# --- admission ------------------------------------------------------------------------------

def recompute_is_sooner(*, queued_read_s: float, restore_compute_s: float, recompute_s: float,
                        compute_wait_s: float = 0.0) -> bool:
    """True when a restore should be recomputed instead of loaded.

    ``queued_read_s``: from now until its prefix would be read (the link's queue ahead of it
    plus its own transfer); ``restore_compute_s``: compute after loading (suffix and replay);
    ``recompute_s``: computing the whole prompt; ``compute_wait_s``: until its machine is free.
    Loading finishes at ``max(wait, queued_read) + restore_compute``, recomputing at
    ``wait + recompute``; on an idle machine, recompute when the queued read time exceeds the
    recompute estimate less the restore's own compute. Ties load.
    """
    wait = max(compute_wait_s, 0.0)
    return wait + recompute_s < max(wait, queued_read_s) + restore_compute_s


# --- the model's view -----------------------------------------------------------------------

def latency_config(*, bytes_per_token: float, bandwidth_bytes_per_s: float, c: float, a: float, b: float,
                   replay_tokens: int, write_back: bool) -> L.LatencyConfig:
    """The latency model with this machine's compute fit, the store's bytes/token and the link."""
    return L.LatencyConfig(kv_bytes_per_token=bytes_per_token, read_bandwidth_bytes_per_s=bandwidth_bytes_per_s,
                           prefill_a_s_per_token=a, prefill_b_s_per_token2=b, prefill_fixed_s=c,
                           replay_tokens=replay_tokens, write_back=write_back)


def model_point(cfg: L.LatencyConfig, work: dict, arrival_s: np.ndarray, *, admission: bool) -> dict:
    """TTFT (s) and admission decisions of the scenario's requests under the latency model."""
    r = L.simulate_queue(cfg, arrival_s, work["stream"], work["n"], work["cached"], admission=admission)
    return {"ttft_s": r.ttft_s, "recomputed": r.recomputed, "load_s": r.load_s, "compute_s": r.compute_s}


# --- statistics -----------------------------------------------------------------------------

def bootstrap_interval(values, q: float, *, level: float = 0.9, resamples: int = 2000, seed: int = 0):
    """(lo, hi): the ``level`` percentile-bootstrap interval of the ``q``-th percentile."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    stats = np.percentile(v[rng.integers(0, v.size, (resamples, v.size))], q, axis=1)
    tail = (1 - level) / 2 * 100
    return float(np.percentile(stats, tail)), float(np.percentile(stats, 100 - tail))


def class_percentiles(ttft_s, restore, recomputed=None, *, interval: bool = True) -> dict:
    """Per class (``restore``, ``miss``, ``all``): count, mean, p25..p99 and max of TTFT in ms,
    with bootstrap 90% intervals of p50 and p99 (``interval``) and the recomputed fraction."""
    t = np.asarray(ttft_s, dtype=np.float64) * 1e3
    restore = np.asarray(restore, dtype=bool)
    rec = np.zeros(t.size, dtype=bool) if recomputed is None else np.asarray(recomputed, dtype=bool)
    out = {}
    for cls, mask in (("restore", restore), ("miss", ~restore), ("all", np.ones(t.size, dtype=bool))):
        v = t[mask]
        d: dict = {"count": int(v.size)}
        if v.size:
            d["mean_ms"] = float(v.mean())
            d.update({f"p{q}_ms": float(np.percentile(v, q)) for q in QUANTILES})
            d["max_ms"] = float(v.max())
            d["recomputed_fraction"] = float(rec[mask].mean())
            if interval:
                for q in (50, 99):
                    d[f"p{q}_ms_ci90"] = list(bootstrap_interval(v, q, seed=q))
        out[cls] = d
    return out
