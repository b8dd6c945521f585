"""Time to first token and cost of a prefill that reuses cached KV.

A request of ``n`` input tokens whose first ``h`` tokens are cached pays

    TTFT = queueing + load(h) + prefill(h -> n) + replay(R)

* **load**: the prefix's KV bytes over the SSD tier's read bandwidth. All restores of a
  simulation share one FIFO read queue, and so do the write-backs of misses (``write_back``).
* **prefill**: tokens ``[h, n)`` cost ``a*(n-h) + b*(n^2-h^2)`` machine-seconds, the increment of
  a whole-prompt cost ``a*n + b*n^2`` (linear: weights; quadratic: causal attention), plus an
  optional fixed ``prefill_fixed_s`` (0 in the presets; ``tiered-kv bench contention`` fits a
  measured engine's).
* **replay**: when the request's window state is on no machine, the last ``R`` prefix tokens are
  run again to rebuild it, priced as prefilling ``[h-R, h)``.

Defaults (preset ``deepseek-v3``) and where each number comes from:

* ``a`` and ``b``: DeepSeek-V3's FLOPs (37B active parameters; MLA attention with 128 heads, q/k
  dim 192, v dim 128, 61 layers) over one machine's effective FLOP/s, **calibrated** so that a
  128K-token miss takes 13 s (DeepSeek's figure): about 4.0 PFLOP/s, an 8-GPU H800 node at
  about half its dense BF16 peak.
* ``kv_bytes_per_token``: DeepSeek-V3's MLA cache in BF16, 61 layers * (512 + 64) * 2 bytes =
  70,272 B; preset ``deepseek-v3-fp4`` uses the 890 B/token FP4 cache instead.
* ``read_bandwidth``: 40 GiB/s, the peak KVCache read throughput 3FS reports for its clients
  (deepseek-ai/3FS README, "KVCache" section).
* ``R`` = 128 tokens (DeepSeek: only the last 128 tokens are recomputed), priced conservatively
  as prefilling them through the whole model.

With these, a 128K prompt whose last 512-token block is new and whose window state must be
replayed lands at about 0.33 s (not tuned: it follows from the numbers above), against the
published 0.5 s, which includes serving overheads this model leaves out (scheduling, decode
step, network): ours is a lower bound, and figures/REPORT.md states the difference.

Admission control (``admission=True`` in :func:`simulate_queue`): at arrival, a request with a
cached prefix recomputes the whole prompt on its machine when that is predicted sooner than
loading (read-queue wait + transfer, then the compute queue, then suffix and replay). The
prediction uses only the queue state at arrival; it never looks ahead.

Cost: a hit token is priced ``hit_price_ratio`` (1/50) of a miss token (:func:`cost_per_mtok`).
Everything is deterministic: simulated clock, seeded workloads, events ordered by
(time, kind, request index).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from numba import njit

from tiered_kv.sim.heap import heap_pop, heap_push

GIB = 2**30

# DeepSeek-V3 architecture numbers (config.json of deepseek-ai/DeepSeek-V3).
V3_LAYERS = 61
V3_ACTIVE_PARAMS = 37e9
V3_HEADS = 128
V3_QK_DIM = 128 + 64  # qk_nope_head_dim + qk_rope_head_dim
V3_V_DIM = 128
V3_KV_LORA_RANK = 512
V3_ROPE_DIM = 64
#: DeepSeek's published FP4 KV cache size per token.
FP4_KV_BYTES_PER_TOKEN = 890
#: 3FS: peak KVCache read throughput of its clients (deepseek-ai/3FS README).
THREEFS_READ_BANDWIDTH = 40 * GIB
#: DeepSeek's calibration points: a 128K-token miss in about 13 s, a hit in about 0.5 s.
CALIBRATION_TOKENS = 128 * 1024
CALIBRATION_MISS_S = 13.0
PUBLISHED_HIT_S = 0.5
#: A hit prompt's newly typed suffix in the hit calibration scenario (one 512-token block).
HIT_SCENARIO_NEW_TOKENS = 512


def check_fields(obj: object, checks: list[tuple[str, bool, str]]) -> None:
    """Raise a ``ValueError`` naming the first field of the config ``obj`` whose check fails (or is
    NaN): ``checks`` are ``(field, ok, what it must be)``."""
    for name, ok, allowed in checks:
        value = getattr(obj, name)
        if not ok or (isinstance(value, float) and math.isnan(value)):
            raise ValueError(f"{type(obj).__name__}.{name}: must be {allowed}, got {value!r}")


def mla_kv_bytes_per_token() -> float:
    """DeepSeek-V3's MLA KV per token in BF16: one compressed latent plus a RoPE key per layer,
    layers*(rank+rope)*2 bytes. The formula of ``tiered_kv.arch.DEEPSEEK_V3.bytes_per_token`` (a
    test pins them together), not imported from there because :mod:`tiered_kv.arch` loads torch."""
    return float(V3_LAYERS * (V3_KV_LORA_RANK + V3_ROPE_DIM) * 2.0)


def prefill_flops() -> tuple[float, float]:
    """(FLOP per token, FLOP per token^2) of a DeepSeek-V3 prefill, cost(n) = a*n + b*n^2: half of
    the n^2 query-key pairs count under a causal mask."""
    return 2 * V3_ACTIVE_PARAMS, 2 * V3_HEADS * (V3_QK_DIM + V3_V_DIM) * V3_LAYERS / 2.0


def calibrate_machine_flops() -> float:
    """Effective FLOP/s of one machine so that a miss of :data:`CALIBRATION_TOKENS` takes
    :data:`CALIBRATION_MISS_S` (DeepSeek's 13 s for 128K tokens)."""
    fa, fb = prefill_flops()
    return (fa * CALIBRATION_TOKENS + fb * CALIBRATION_TOKENS**2) / CALIBRATION_MISS_S


@dataclass(frozen=True)
class LatencyConfig:
    """Latency and cost model of one prefill; see the module docstring for the defaults."""

    kv_bytes_per_token: float
    read_bandwidth_bytes_per_s: float
    prefill_a_s_per_token: float
    prefill_b_s_per_token2: float
    replay_tokens: int = 128
    write_back: bool = True
    hit_price_ratio: float = 1 / 50
    miss_price_per_mtok: float = 1.0
    #: seconds every prefill costs whatever its length (launch, sampling, a decoder pass over R
    #: tokens); see the module docstring.
    prefill_fixed_s: float = 0.0

    def __post_init__(self) -> None:
        check_fields(self, [
            ("kv_bytes_per_token", self.kv_bytes_per_token > 0, "> 0 bytes"),
            ("read_bandwidth_bytes_per_s", self.read_bandwidth_bytes_per_s > 0, "> 0 bytes/s"),
            ("prefill_a_s_per_token", self.prefill_a_s_per_token >= 0, ">= 0 s/token"),
            ("prefill_b_s_per_token2", self.prefill_b_s_per_token2 >= 0, ">= 0 s/token^2"),
            ("replay_tokens", self.replay_tokens >= 0, ">= 0 tokens"),
            ("hit_price_ratio", 0 <= self.hit_price_ratio <= 1, "in [0, 1]"),
            ("miss_price_per_mtok", self.miss_price_per_mtok >= 0, ">= 0"),
            ("prefill_fixed_s", self.prefill_fixed_s >= 0, ">= 0 s"),
        ])
        if self.prefill_a_s_per_token == 0 and self.prefill_b_s_per_token2 == 0 and self.prefill_fixed_s == 0:
            raise ValueError("LatencyConfig: prefill_a_s_per_token and prefill_b_s_per_token2 "
                             "cannot both be 0 (prefill would be free)")

    def with_(self, **changes) -> LatencyConfig:
        return replace(self, **changes)


PRESETS = ("deepseek-v3", "deepseek-v3-fp4")


def preset(name: str = "deepseek-v3") -> LatencyConfig:
    """Named configurations: ``deepseek-v3`` (BF16 MLA KV) and ``deepseek-v3-fp4`` (890 B/token)."""
    if name not in PRESETS:
        raise ValueError(f"latency preset: unknown {name!r}; choose deepseek-v3 or deepseek-v3-fp4")
    flops = calibrate_machine_flops()
    fa, fb = prefill_flops()
    kv = mla_kv_bytes_per_token() if name == "deepseek-v3" else float(FP4_KV_BYTES_PER_TOKEN)
    return LatencyConfig(kv_bytes_per_token=kv, read_bandwidth_bytes_per_s=float(THREEFS_READ_BANDWIDTH),
                         prefill_a_s_per_token=fa / flops, prefill_b_s_per_token2=fb / flops)


# --- one request, no contention -------------------------------------------------------------

def prefill_seconds(cfg: LatencyConfig, start, end):
    """Machine-seconds to compute tokens [start, end) given the KV of [0, start)."""
    start = np.asarray(start, dtype=np.float64)
    end = np.asarray(end, dtype=np.float64)
    return cfg.prefill_a_s_per_token * (end - start) + cfg.prefill_b_s_per_token2 * (end**2 - start**2)


def replay_seconds(cfg: LatencyConfig, depth):
    """Rebuild the window state at ``depth`` by replaying its last R (or fewer) tokens."""
    depth = np.asarray(depth, dtype=np.float64)
    return prefill_seconds(cfg, np.maximum(depth - cfg.replay_tokens, 0.0), depth)


def load_seconds(cfg: LatencyConfig, tokens):
    """Transfer time of ``tokens`` tokens of KV at the full read bandwidth."""
    return np.asarray(tokens, dtype=np.float64) * cfg.kv_bytes_per_token / cfg.read_bandwidth_bytes_per_s


def prefill_replay_seconds(cfg: LatencyConfig, cached, n, window_present):
    """(prefill, replay) machine-seconds of a request of ``n`` tokens whose first ``cached`` are on
    the machine: the prefill of [cached, n) plus the fixed cost, and the replay, paid when a prefix
    is cached but its window state is not (``window_present`` false)."""
    prefill = prefill_seconds(cfg, cached, n) + cfg.prefill_fixed_s
    replay = np.where((cached > 0) & ~np.asarray(window_present, dtype=bool), replay_seconds(cfg, cached), 0.0)
    return prefill, replay


def ttft_components(cfg: LatencyConfig, n, loaded=0, local=0, window_present=False) -> dict:
    """TTFT parts of a request alone on an idle machine (no queueing), vectorised over arrays.

    ``n`` input tokens; ``local`` leading tokens already on the machine (GPU tier, no load);
    ``loaded`` further tokens read from the SSD tier; the rest is prefilled, and the replay paid as
    :func:`prefill_replay_seconds` says.
    """
    n = np.asarray(n, dtype=np.float64)
    cached = np.asarray(local, dtype=np.float64) + np.asarray(loaded, dtype=np.float64)
    if np.any(cached > n):
        raise ValueError("ttft_components: cached tokens (local + loaded) exceed the input length")
    load = load_seconds(cfg, loaded)
    prefill, replay = prefill_replay_seconds(cfg, cached, n, window_present)
    return {"load_s": load, "prefill_s": prefill, "replay_s": replay,
            "ttft_s": load + prefill + replay}


def miss_ttft(cfg: LatencyConfig, n):
    return ttft_components(cfg, n)["ttft_s"]


def hit_ttft(cfg: LatencyConfig, n):
    """The hit scenario: ``n`` tokens, the last 512 new, the prefix loaded from SSD and replayed."""
    n = np.asarray(n, dtype=np.float64)
    return ttft_components(cfg, n, loaded=np.maximum(n - HIT_SCENARIO_NEW_TOKENS, 0.0))["ttft_s"]


def hit_miss_compute_ratio(cfg: LatencyConfig, n):
    """Machine (GPU) seconds of a miss over those of :func:`hit_ttft`'s hit: the cost gap."""
    n = np.asarray(n, dtype=np.float64)
    cached = np.maximum(n - HIT_SCENARIO_NEW_TOKENS, 0.0)
    return prefill_seconds(cfg, 0.0, n) / (prefill_seconds(cfg, cached, n) + replay_seconds(cfg, cached))


def recompute_crossover_tokens(cfg: LatencyConfig, hi: float = float(1 << 24)) -> float:
    """Prompt length below which recomputing it is as fast as loading its KV from the SSD tier.

    Loading all ``n`` tokens costs ``load(n) + replay(n)`` (the bounded replay rebuilds the
    window state); recomputing costs ``prefill(0, n)``. Up to ``R`` tokens the replay *is* the
    whole prefill, so loading never wins there; above it the gap grows with ``n``, and the
    crossover is found by bisection (tokens, fractional).
    """
    def gain(n: float) -> float:
        return float(prefill_seconds(cfg, 0.0, n) - load_seconds(cfg, n) - replay_seconds(cfg, n))

    lo = float(cfg.replay_tokens)
    if gain(hi) <= 0:
        return math.inf
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if gain(mid) <= 0 else (lo, mid)
    return hi


def measured_crossover_tokens(lengths, miss_ms, hit_ms) -> float:
    """Crossover from measurements: where ``miss_ms - hit_ms`` changes sign, interpolated linearly in
    log length between the measured lengths (the first length when a hit already wins there;
    ``inf`` when it never does)."""
    n = np.asarray(lengths, dtype=np.float64)
    d = np.asarray(miss_ms, dtype=np.float64) - np.asarray(hit_ms, dtype=np.float64)
    order = np.argsort(n)
    n, d = n[order], d[order]
    wins = np.flatnonzero(d > 0)
    if wins.size == 0:
        return math.inf
    i = int(wins[0])
    if i == 0:
        return float(n[0])
    x0, x1 = math.log(n[i - 1]), math.log(n[i])
    return float(math.exp(x0 + (x1 - x0) * (0 - d[i - 1]) / (d[i] - d[i - 1])))


# --- cost -------------------------------------------------------------------------------------

def cost_per_mtok(cfg: LatencyConfig, hit_tokens, input_tokens):
    """Price of a million input tokens when a hit token costs ``hit_price_ratio`` of a miss token."""
    hit_tokens = np.asarray(hit_tokens, dtype=np.float64)
    input_tokens = np.asarray(input_tokens, dtype=np.float64)
    hit_rate = np.divide(hit_tokens, input_tokens, out=np.zeros_like(hit_tokens * 1.0),
                         where=input_tokens > 0)
    return cfg.miss_price_per_mtok * (1.0 - hit_rate * (1.0 - cfg.hit_price_ratio))


# --- many requests: shared read queue, per-machine compute queues, admission ------------------

_LOAD_DONE, _WRITE_DONE, _ARRIVAL = 0, 1, 2  # event kinds; ties at equal time break by kind


@dataclass(frozen=True)
class QueueResult:
    """Per-request outcome of :func:`simulate_queue` (arrays aligned with the input)."""

    ttft_s: np.ndarray
    queue_s: np.ndarray  # read-queue wait + compute-queue wait
    load_s: np.ndarray
    compute_s: np.ndarray  # prefill + replay
    recomputed: np.ndarray  # bool: admission chose recompute over load


def simulate_queue(cfg: LatencyConfig, arrival_s, machine, n, loaded, local=None,
                   window_present=None, admission: bool = False) -> QueueResult:
    """Replay requests through one shared FIFO read queue and one FIFO compute queue per machine.

    A request's load enters the read queue at arrival; its prefill enters its machine's compute
    queue when the load is done (at arrival when nothing is loaded); a miss's write-back (module
    docstring) enters the read queue after its prefill.
    """
    arrival_s = np.asarray(arrival_s, dtype=np.float64)
    count = arrival_s.size
    machine = np.asarray(machine, dtype=np.int64)
    n = np.asarray(n, dtype=np.float64)
    loaded = np.asarray(loaded, dtype=np.float64)
    local = np.zeros(count) if local is None else np.asarray(local, dtype=np.float64)
    window_present = (np.zeros(count, dtype=bool) if window_present is None
                      else np.asarray(window_present, dtype=bool))
    if not (machine.size == n.size == loaded.size == local.size == window_present.size == count):
        raise ValueError("simulate_queue: all per-request arrays must have the same length")
    if count and (np.any(np.diff(arrival_s) < 0)):
        raise ValueError("simulate_queue: arrival_s must be sorted")
    if count and machine.min() < 0:
        raise ValueError("simulate_queue: machine ids must be >= 0")
    machines = int(machine.max()) + 1 if count else 0

    xfer = load_seconds(cfg, loaded)
    hit_compute = np.add(*prefill_replay_seconds(cfg, local + loaded, n, window_present))
    miss_compute = np.add(*prefill_replay_seconds(cfg, local, n, window_present))
    write_s = load_seconds(cfg, np.maximum(n - local - loaded, 0.0)) if cfg.write_back else np.zeros(count)

    done, load_time, compute_time, recomputed = _queue_kernel(
        arrival_s, machine, machines, xfer, hit_compute, miss_compute, write_s, loaded > 0, bool(admission))
    ttft = done - arrival_s
    return QueueResult(ttft_s=ttft, queue_s=ttft - load_time - compute_time, load_s=load_time,
                       compute_s=compute_time, recomputed=recomputed)


@njit(cache=True)
def _queue_kernel(arrival, machine, machines, xfer, hit_compute, miss_compute, write_s, loads, admission):
    """Event loop of :func:`simulate_queue`. Three event sources merged in (time, kind, request)
    order: load completions (a FIFO: the read queue serves in order, so they come out sorted),
    write-backs entering the read queue (a heap keyed by (time, request): a request writes back
    at most once, so its index is the tie-break and the payload), and arrivals (sorted)."""
    n = arrival.size
    done = np.zeros(n)
    load_time = np.zeros(n)
    compute_time = np.zeros(n)
    recomputed = np.zeros(n, dtype=np.bool_)
    compute_free = np.zeros(machines)
    link_free = 0.0
    fifo = np.empty(n, dtype=np.int64)
    fifo_t = np.empty(n)
    f_head, f_tail = 0, 0
    ht = np.empty(n)  # write-backs: (time, request) -> request
    hreq = np.empty(n, dtype=np.int64)
    h_size = 0
    a = 0
    while a < n or f_head < f_tail or h_size > 0:
        # pick the smallest (time, kind, request): kinds load-done 0 < write 1 < arrival 2
        kind = -1
        best_t = np.inf
        if f_head < f_tail:
            kind, best_t = 0, fifo_t[f_head]
        if h_size > 0 and ht[0] < best_t:
            kind, best_t = 1, ht[0]
        if a < n and arrival[a] < best_t:
            kind, best_t = 2, arrival[a]
        t = best_t
        if kind == 2:
            i = a
            a += 1
            if not loads[i]:
                work = hit_compute[i]
            else:
                load_ready = max(link_free, t) + xfer[i]
                m = machine[i]
                if admission and max(compute_free[m], t) + miss_compute[i] < max(compute_free[m], load_ready) + hit_compute[i]:
                    recomputed[i] = True
                    work = miss_compute[i]
                else:
                    link_free = load_ready
                    load_time[i] = xfer[i]
                    fifo[f_tail] = i
                    fifo_t[f_tail] = load_ready
                    f_tail += 1
                    continue
        elif kind == 0:
            i = fifo[f_head]
            f_head += 1
            work = hit_compute[i]
        else:
            w = hreq[0]
            h_size = heap_pop(ht, hreq, hreq, h_size)
            link_free = max(link_free, t) + write_s[w]
            continue
        m = machine[i]
        begin = max(compute_free[m], t)
        compute_free[m] = begin + work
        done[i] = begin + work
        compute_time[i] = work
        if write_s[i] > 0:
            h_size = heap_push(ht, hreq, hreq, h_size, done[i], i, i)
    return done, load_time, compute_time, recomputed


def percentiles(values) -> dict[str, float]:
    """p50, p90 and p99 of ``values`` (NaN when there are none)."""
    values = np.asarray(values, dtype=np.float64)
    return {f"p{q}": float(np.percentile(values, q)) if values.size else math.nan for q in (50, 90, 99)}


@dataclass(frozen=True)
class MixConfig:
    """A fixed mix of restores and misses for admission experiments (token lengths lognormal)."""

    machines: int = 32  # machines sharing one read queue (one slice of the storage pool)
    rate_per_machine_s: float = 4.0  # requests per second per machine (the load knob)
    duration_s: float = 600.0
    hit_fraction: float = 0.6  # requests whose prefix is on the SSD tier
    cached_fraction: float = 0.9  # share of a restore's prompt that is cached
    median_tokens: int = 8192
    sigma: float = 1.0
    max_tokens: int = 131072
    seed: int = 0

    def __post_init__(self) -> None:
        check_fields(self, [
            ("machines", self.machines >= 1, ">= 1"),
            ("rate_per_machine_s", self.rate_per_machine_s > 0, "> 0 requests/s"),
            ("duration_s", self.duration_s > 0, "> 0 s"),
            ("hit_fraction", 0 <= self.hit_fraction <= 1, "in [0, 1]"),
            ("cached_fraction", 0 <= self.cached_fraction <= 1, "in [0, 1]"),
            ("median_tokens", self.median_tokens >= 1, ">= 1 token"),
            ("sigma", self.sigma >= 0, ">= 0"),
            ("max_tokens", self.max_tokens >= self.median_tokens, ">= median_tokens"),
        ])


def mixed_workload(mix: MixConfig) -> dict[str, np.ndarray]:
    """Poisson arrivals, random machines, lognormal prompts; restores load a cached prefix."""
    rng = np.random.default_rng(mix.seed)
    rate = mix.rate_per_machine_s * mix.machines
    count = max(1, int(rng.poisson(rate * mix.duration_s)))
    arrival = np.sort(rng.uniform(0.0, mix.duration_s, count))
    n = np.clip(np.round(rng.lognormal(math.log(mix.median_tokens), mix.sigma, count)), 1, mix.max_tokens)
    hit = rng.random(count) < mix.hit_fraction
    loaded = np.where(hit, np.floor(n * mix.cached_fraction), 0.0)
    return {"arrival_s": arrival, "machine": rng.integers(0, mix.machines, count), "n": n,
            "loaded": loaded, "restore": hit}


def admission_table(cfg: LatencyConfig, mixes: list[MixConfig]) -> list[dict]:
    """p50/p90/p99 TTFT of restores and misses, with and without admission, for each mix."""
    rows = []
    for mix in mixes:
        w = mixed_workload(mix)
        for admission in (False, True):
            r = simulate_queue(cfg, w["arrival_s"], w["machine"], w["n"], w["loaded"], admission=admission)
            for cls, mask in (("all", np.ones_like(w["restore"])), ("restore", w["restore"]),
                              ("miss", ~w["restore"])):
                rows.append({"rate_per_machine_s": mix.rate_per_machine_s, "admission": admission, "class": cls,
                             **{f"ttft_{k}_s": v for k, v in percentiles(r.ttft_s[mask]).items()},
                             "recomputed_fraction": float(r.recomputed[mask].mean()) if mask.any() else 0.0,
                             "requests": int(mask.sum())})
    return rows
