"""Restores and misses contending for one store: the scenario, the admission rule, the model's view.

The simulator's half of ``tiered-kv bench contention`` (:mod:`tiered_kv.measure.contention`
measures the same scenario with the real engine; its ``--help`` tells the scenario flag by flag),
all numpy, so the measurement and the model read one definition of the workload and of the
admission decision (both call :mod:`.shared_compute`'s one :func:`~.shared_compute.decide`).

The scenario (:class:`ContentionScenario`, :func:`workload`) draws its prompts once from its seed,
so every bandwidth, load and admission setting sees the *same* prompts: restores read their
``blocks`` chunks and compute only a tail shorter than a block; misses compute everything and
write their blocks back; a Poisson stream of arrivals is dealt round robin to ``streams`` streams
sharing one link to the store and the machine's compute. The model's view (:func:`model_point`)
runs the same requests through :func:`~.shared_compute.simulate_shared` with compute times
fitted to the engine's isolated prefills (:func:`fit_compute`); :mod:`.tail_stats` holds the
statistics over repeated runs.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from tiered_kv.sim.cluster.shared_compute import simulate_shared

#: Most concurrent streams a run may have.
MAX_STREAMS = 16


def check_range(name: str, value, lo: float, hi: float, *, integer: bool = False,
                lo_open: bool = False) -> None:
    """Refuse ``value`` unless it is a number (``integer``: an integer) in [lo, hi] (``lo_open``: (lo, hi]).

    The error names ``name``: a field of the scenario, or the flag that fed it (``--repeats``)."""
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
        check_range("streams", self.streams, 1, MAX_STREAMS, integer=True)
        check_range("requests", self.requests, 2, 100_000, integer=True)
        check_range("restore_fraction", self.restore_fraction, 0.0, 1.0)
        check_range("block_size", self.block_size, 1, 1 << 20, integer=True)
        check_range("suffix_tokens", self.suffix_tokens, 1, self.block_size - 1, integer=True)
        check_range("max_tokens", self.max_tokens, self.block_size + self.suffix_tokens, 1 << 24,
                    integer=True)
        check_range("median_tokens", self.median_tokens, self.block_size, self.max_tokens, integer=True)
        check_range("sigma", self.sigma, 0.0, 3.0)
        check_range("seed", self.seed, 0, 2**32 - 1, integer=True)

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
    check_range("rate", rate_per_s, 0.0, math.inf, lo_open=True)
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


# --- the model's view -----------------------------------------------------------------------

def request_times(work: dict, *, fit: tuple[float, float, float], replay_tokens: int, bytes_per_token: float,
                  bandwidth_bytes_per_s: float, block_size: int, write_back: bool) -> dict[str, np.ndarray]:
    """Each request's isolated compute loaded (``restore_s``) and whole (``recompute_s``), its
    prefix's time on the link (``read_s``) and its write-back's (``write_s``: a miss's full
    blocks; a restore writes nothing, its blocks are on the store, recomputed or not)."""
    c, a, b = fit
    n = work["n"]
    return {"restore_s": compute_seconds(c, a, b, n, work["cached"], replay_tokens),
            "recompute_s": compute_seconds(c, a, b, n, 0 * n, replay_tokens),
            "read_s": work["cached"] * bytes_per_token / bandwidth_bytes_per_s,
            "write_s": (np.where(work["restore"], 0, work["blocks"] * block_size) * bytes_per_token
                        / bandwidth_bytes_per_s if write_back else np.zeros(n.size))}


def model_point(times: dict, work: dict, arrival_s: np.ndarray, *, cores: float, policy: str) -> dict:
    """TTFT (s) and admission decisions of the scenario's requests under the queue model whose
    streams share ``cores`` compute units (``cores`` = streams: a machine each, as
    :func:`~tiered_kv.sim.cluster.latency.simulate_queue`)."""
    r = simulate_shared(arrival_s, work["stream"], work["restore"], restore_s=times["restore_s"],
                        recompute_s=times["recompute_s"], read_s=times["read_s"], write_s=times["write_s"],
                        cores=cores, policy=policy)
    return {"ttft_s": r.ttft_s, "recomputed": r.recomputed, "start_s": r.start_s}
