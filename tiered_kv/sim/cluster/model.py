"""A cluster of machines with three KV tiers, replayed request by request.

Each of ``nodes`` machines has

* a **GPU tier**: an LRU prefix cache of global-KV blocks in HBM (``gpu_capacity_tokens``);
  its hits need no load;
* a **host window tier**: an LRU of sliding-window states (``host_capacity_bytes``, one state of
  ``window_state_bytes`` per request, stored at the request's last full block). A request whose
  cached prefix ends at a boundary whose window state is on its machine skips the replay;
  otherwise it pays a bounded replay of ``replay_tokens`` tokens;

and the **SSD tier** holds global KV either in one pool shared by every machine
(``ssd="shared"``) or as one cache per machine (``ssd="per-machine"``, for comparison).

Per request, in timestamp order: route it to a machine; its GPU hit is the number of leading
blocks in that machine's GPU tier, its SSD hit the number of leading blocks in the SSD tier it
sees; the request is served from the longer of the two prefixes (GPU first, the rest loaded from
SSD), the rest is recomputed. Then every block is touched or inserted, in order, in the
machine's GPU tier and in its SSD tier, and its window state is stored in the host tier. With
one machine, no GPU tier and an LRU SSD tier this is exactly the single-cache replay of
:mod:`tiered_kv.sim.trace_replay` (tested).

SSD retention. A shared pool sees every request whatever the routing, so its contents do not
depend on routing: any part-1 policy (:mod:`tiered_kv.sim.policies`: ``ttl`` per class,
``watermark``, ``belady``...) is replayed once with :func:`tiered_kv.sim.trace_replay.replay` and
its per-request hit blocks are used here. The capacity-LRU pool (the default) and per-machine
caches run inside the compiled loop (:mod:`tiered_kv.sim.cluster.lru_tiers`), which also records
each evicted block's idle age by the class that touched it last: the *effective retention* one
LRU watermark gives each class.

Routing: ``random`` (seeded), ``round-robin``, ``cache-aware`` (the machine holding the longest
prefix in its GPU tier or per-machine SSD cache, or the deepest window state of the prompt,
among machines whose load, routed input tokens decayed with ``load_half_life_s``, is at most
``(1 + load_slack)`` times the mean; ties go to the least loaded machine).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
from numba import njit

from tiered_kv.sim.cluster.latency import check_fields, mla_kv_bytes_per_token
from tiered_kv.sim.cluster.lru_tiers import new_tier, touch_arrays
from tiered_kv.units import HOUR_S

#: DeepSeek-V3 MLA KV in BF16 (70,272 B/token), the default chunk size per token.
V3_KV_BYTES_PER_TOKEN = mla_kv_bytes_per_token()

#: Tokens a window state spans: the sliding window W of the workbench's model
#: (``tiered_kv.model.ModelConfig().window``, kept equal by a test; not imported here so the
#: simulator does not load torch). A window state is the last W-1 keys of every sliding-window
#: layer, priced here as W tokens of the model's KV.
WINDOW_TOKENS = 512

ROUTINGS = ("random", "round-robin", "cache-aware")
SSD_MODES = ("shared", "per-machine")
_RET_BINS = 910  # idle-age histogram: log-spaced bins from 1 s, factor 1.02 (2% resolution, ~2 years)
_RET_FACTOR = 1.02


@dataclass(frozen=True)
class ClusterConfig:
    """Machines, tiers and routing. Capacities in tokens (blocks = floor(tokens/block_size))."""

    nodes: int = 10
    routing: str = "random"
    gpu_capacity_tokens: int = 0  # per machine
    host_capacity_bytes: int = 0  # per machine
    window_state_bytes: int = int(V3_KV_BYTES_PER_TOKEN * WINDOW_TOKENS)  # one window state: W tokens of KV
    ssd: str = "shared"
    ssd_capacity_tokens: float = math.inf  # total (shared) or per machine (per-machine)
    replay_tokens: int = 128
    load_slack: float = 0.25
    load_half_life_s: float = 60.0
    kv_bytes_per_token: float = V3_KV_BYTES_PER_TOKEN
    seed: int = 0

    def __post_init__(self) -> None:
        check_fields(self, [
            ("nodes", 1 <= self.nodes <= 64, "an integer in [1, 64]"),
            ("routing", self.routing in ROUTINGS, f"one of {list(ROUTINGS)}"),
            ("gpu_capacity_tokens", self.gpu_capacity_tokens >= 0, ">= 0 tokens"),
            ("host_capacity_bytes", self.host_capacity_bytes >= 0, ">= 0 bytes"),
            ("window_state_bytes", self.window_state_bytes > 0, "> 0 bytes"),
            ("ssd", self.ssd in SSD_MODES, f"one of {list(SSD_MODES)}"),
            ("ssd_capacity_tokens", self.ssd_capacity_tokens >= 0, ">= 0 tokens (inf: unlimited)"),
            ("replay_tokens", self.replay_tokens >= 0, ">= 0 tokens"),
            ("load_slack", self.load_slack >= 0, ">= 0"),
            ("load_half_life_s", self.load_half_life_s > 0, "> 0 s"),
            ("kv_bytes_per_token", self.kv_bytes_per_token > 0, "> 0 bytes"),
        ])


@dataclass
class ClusterResult:
    """Per-request outcome (replay order) plus summaries; see :meth:`summary`."""

    config: ClusterConfig
    requests: pl.DataFrame  # one row per request
    evictions_ssd: int
    evictions_gpu: int
    evictions_host: int
    retention: pl.DataFrame  # per class: idle age at SSD eviction (LRU pool only)
    ssd_policy: str
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return summarize(self.requests, self)

    def over_time(self, bin_s: float = HOUR_S) -> pl.DataFrame:
        return over_time(self.requests, bin_s)


# --- the compiled loop ------------------------------------------------------------------------

@njit(cache=True, inline="always")
def _leading(mask, bit, blocks, s0, s1):
    """How many leading blocks of ``blocks[s0:s1]`` have ``bit`` set in ``mask`` (a lookup)."""
    p = 0
    for j in range(s0, s1):
        if not mask[blocks[j]] & bit:
            break
        p += 1
    return p


@njit(cache=True, inline="always")
def _raise_scores(score, mask, depth):
    """``score[m] = max(score[m], depth)`` for every machine ``m`` whose bit is set in ``mask``."""
    while mask:
        m = 0
        while not (mask >> np.uint64(m)) & np.uint64(1):
            m += 1
        if depth > score[m]:
            score[m] = depth
        mask &= ~(np.uint64(1) << np.uint64(m))


@njit(cache=True)
def _cache_aware_machine(load, slack, score, blocks, s0, s1, gmask, smask, hmask, ssd_mode):
    """The cache-aware machine for ``blocks[s0:s1]`` (the module docstring's rule); ``score`` is scratch."""
    nodes = load.shape[0]
    mean = load.sum() / nodes
    eligible = np.uint64(0)
    for m in range(nodes):
        if load[m] <= (1.0 + slack) * mean:
            eligible |= np.uint64(1) << np.uint64(m)
    alive = eligible
    for m in range(nodes):
        score[m] = 0
    depth = 0
    for j in range(s0, s1):
        b = blocks[j]
        held = gmask[b]
        if ssd_mode == 2:
            held |= smask[b]
        nxt = alive & held
        _raise_scores(score, alive & ~nxt, depth)  # their prefix ends here
        alive = nxt
        depth += 1
        _raise_scores(score, hmask[b] & eligible, depth)  # window state at this depth
    _raise_scores(score, alive, depth)
    m_sel = -1
    for m in range(nodes):
        if not (eligible >> np.uint64(m)) & np.uint64(1):
            continue
        if m_sel < 0 or score[m] > score[m_sel] or (score[m] == score[m_sel] and load[m] < load[m_sel]):
            m_sel = m
    return m_sel


@njit(cache=True)
def _run(offsets, blocks, ts, n_input, cls, window_idx, nodes, routing, rand_machine,
         gpu, host, ssd, ssd_mode, ext_p, slack, half_life, hist, r0, r1, out, state, last_cls):
    """Requests [r0, r1); ``out`` (per-request results) and ``state`` (machine loads) carry over
    between calls, so the driver can run in chunks and show progress."""
    machine, p_gpu, p_all, win_hit, ssd_used, ssd_ev = out
    load, load_t = state[0], state[1]
    score = np.zeros(nodes, dtype=np.int64)
    # unpack each tier once: numba pays reference counting per array on every unpack
    g_tk, g_tv, g_bits, g_sk, g_prv, g_nxt, g_base, g_cap, g_used, gmask, g_ev, g_parts, g_total, g_last = gpu
    h_tk, h_tv, h_bits, h_sk, h_prv, h_nxt, h_base, h_cap, h_used, hmask, h_ev, h_parts, h_total, h_last = host
    s_tk, s_tv, s_bits, s_sk, s_prv, s_nxt, s_base, s_cap, s_used, smask, s_ev, s_parts, s_total, last_touch = ssd
    gpu_on = g_cap.sum() > 0
    log_f = math.log(_RET_FACTOR)
    for r in range(r0, r1):
        t = ts[r]
        s0, s1 = offsets[r], offsets[r + 1]
        # decay machine loads to now
        for m in range(nodes):
            load[m] *= 0.5 ** ((t - load_t[m]) / half_life)
            load_t[m] = t
        if routing == 0:
            m_sel = rand_machine[r]
        elif routing == 1:
            m_sel = r % nodes
        else:
            m_sel = _cache_aware_machine(load, slack, score, blocks, s0, s1, gmask, smask, hmask, ssd_mode)
        bit = np.uint64(1) << np.uint64(m_sel)
        machine[r] = m_sel
        # lookups: leading blocks in the machine's GPU tier and in the SSD tier it sees
        pg = _leading(gmask, bit, blocks, s0, s1)
        if ssd_mode == 0:
            ps = ext_p[r]
        else:
            ps = _leading(smask, np.uint64(1) if ssd_mode == 1 else bit, blocks, s0, s1)
        p = max(pg, ps)
        p_gpu[r] = pg
        p_all[r] = p
        if p > 0:
            win_hit[r] = (hmask[blocks[s0 + p - 1]] & bit) != 0
        # updates: touch / insert every block in order, then store the window state
        for j in range(s0, s1):
            b = blocks[j]
            if gpu_on:
                touch_arrays(g_tk, g_tv, g_bits, g_sk, g_prv, g_nxt, g_base, g_cap, g_used, gmask, g_ev,
                             g_parts, g_total, g_last, m_sel, b, t)
            if ssd_mode == 1:
                v = touch_arrays(s_tk, s_tv, s_bits, s_sk, s_prv, s_nxt, s_base, s_cap, s_used, smask, s_ev,
                                 s_parts, s_total, last_touch, 0, b, t)
                if v >= 0:
                    idle = t - last_touch[v]
                    k = 0 if idle < 1.0 else min(int(math.log(idle) / log_f) + 1, hist.shape[1] - 1)
                    hist[last_cls[v], k] += 1
                last_cls[b] = cls[r]
            elif ssd_mode == 2:
                touch_arrays(s_tk, s_tv, s_bits, s_sk, s_prv, s_nxt, s_base, s_cap, s_used, smask, s_ev,
                             s_parts, s_total, last_touch, m_sel, b, t)
        if window_idx[r] >= 0 and h_cap[m_sel] > 0:
            touch_arrays(h_tk, h_tv, h_bits, h_sk, h_prv, h_nxt, h_base, h_cap, h_used, hmask, h_ev,
                         h_parts, h_total, h_last, m_sel, blocks[window_idx[r]], t)
        load[m_sel] += n_input[r]
        ssd_used[r] = s_used.sum()
        ssd_ev[r] = s_ev.sum()
    return r1


# --- driver -----------------------------------------------------------------------------------

def simulate_cluster(trace, config: ClusterConfig, ssd_policy: Any = None,
                     progress: bool | None = None) -> ClusterResult:
    """Replay ``trace`` (a frame or a :class:`~tiered_kv.sim.trace_replay.CompiledTrace`) on a cluster.

    ``ssd_policy``: ``None`` for a capacity-LRU SSD tier (``config.ssd_capacity_tokens``), or a
    part-1 policy object (``tiered_kv.sim.policies``) for the shared pool, replayed once.
    ``progress``: a progress bar on runs over two seconds (``False`` turns it off).
    """
    from tiered_kv.sim.trace_replay import CompiledTrace, compile_trace

    t = trace if isinstance(trace, CompiledTrace) else compile_trace(trace)
    if t.n_requests == 0:
        raise ValueError("simulate_cluster: the trace has no requests")
    c = config

    def cap_blocks(tokens: float) -> int:  # never more than all accesses (unlimited: all of them)
        return t.n_accesses if math.isinf(tokens) else min(int(tokens // t.uniform_block_size), t.n_accesses)

    gpu = new_tier(c.nodes, cap_blocks(c.gpu_capacity_tokens), t.n_unique)
    windows = min(int(c.host_capacity_bytes // c.window_state_bytes), t.n_requests)
    host = new_tier(c.nodes, windows, t.n_unique)
    ssd, mode, ext_p, policy_name, extra = _ssd_pool(t, c, ssd_policy, cap_blocks(c.ssd_capacity_tokens))
    hist = np.zeros((max(len(t.class_names), 1), _RET_BINS), dtype=np.int64)
    out = _drive(t, c, (gpu, host, ssd), mode, ext_p, hist, progress)
    return ClusterResult(config=c, requests=_requests_frame(t, c, out, mode),
                         evictions_ssd=int(ssd[10].sum()) if mode else int(extra.get("evictions", 0)),
                         evictions_gpu=int(gpu[10].sum()), evictions_host=int(host[10].sum()),
                         retention=_retention_frame(hist, t.class_names) if mode == 1 else pl.DataFrame(),
                         ssd_policy=policy_name, extra=extra)


def _ssd_pool(t, c: ClusterConfig, ssd_policy: Any,
              capacity_blocks: int) -> tuple[tuple, int, np.ndarray, str, dict]:
    """The SSD tier the loop runs (mode 1: one shared LRU pool, 2: one per machine) or, for a part-1
    policy (mode 0), an empty one and the policy's hit blocks per request from its own replay."""
    from tiered_kv.sim.trace_replay import replay

    if ssd_policy is None:
        parts = 1 if c.ssd == "shared" else c.nodes
        return (new_tier(parts, capacity_blocks, t.n_unique), 1 if c.ssd == "shared" else 2,
                np.zeros(t.n_requests, dtype=np.int64), "lru", {})
    if c.ssd != "shared":
        raise ValueError("simulate_cluster: a part-1 SSD policy needs ssd='shared'")
    res = replay(t, ssd_policy)
    return (new_tier(1, 0, t.n_unique), 0, np.asarray(res.hit_blocks_per_request, dtype=np.int64),
            getattr(ssd_policy, "name", type(ssd_policy).__name__), dict(res.extra))


def _drive(t, c: ClusterConfig, tiers: tuple, mode: int, ext_p: np.ndarray, hist: np.ndarray,
           progress: bool | None) -> tuple:
    """Run the compiled loop over the trace in about 50 chunks of accesses, for the progress bar;
    returns its per-request arrays (machine, GPU and total prefix hit, window hit, SSD use)."""
    from tqdm import tqdm

    gpu, host, ssd = tiers
    n, n_acc = t.n_requests, t.n_accesses
    rand_machine = np.random.default_rng(c.seed).integers(0, c.nodes, n).astype(np.int64)
    nfull = np.minimum(t.input_length // t.block_size, np.diff(t.offsets))
    window_idx = np.where(nfull > 0, t.offsets[:-1] + nfull - 1, -1).astype(np.int64)
    out = tuple(np.zeros(n, dtype=d) for d in (np.int64, np.int64, np.int64, np.bool_, np.int64, np.int64))
    state = np.zeros((2, c.nodes))
    last_cls = np.zeros(t.n_unique, dtype=np.int32)
    blocks = t.blocks.astype(np.int64)
    chunks = np.unique(np.searchsorted(t.offsets, np.linspace(0, n_acc, 51)[1:-1]).clip(0, n))
    bounds = [0, *[int(x) for x in chunks if 0 < x < n], n]
    with tqdm(total=n_acc, unit="access", unit_scale=True, desc="cluster", delay=2, disable=progress is False) as bar:
        for r0, r1 in zip(bounds[:-1], bounds[1:], strict=True):
            _run(t.offsets, blocks, t.timestamps, t.input_length, t.class_codes, window_idx, c.nodes,
                 ROUTINGS.index(c.routing), rand_machine, gpu, host, ssd, mode, ext_p, float(c.load_slack),
                 float(c.load_half_life_s), hist, r0, r1, out, state, last_cls)
            bar.update(int(t.offsets[r1] - t.offsets[r0]))
    return out


def _requests_frame(t, c: ClusterConfig, out: tuple, mode: int) -> pl.DataFrame:
    """One row per request: where it ran and where each of its input tokens came from."""
    machine, p_gpu, p_all, win_hit, ssd_used, ssd_ev = out
    n = t.n_requests
    gpu_tok = t.hit_tokens_from_blocks(p_gpu)
    hit_tok = t.hit_tokens_from_blocks(p_all)
    replay_tok = np.where((hit_tok > 0) & ~win_hit, np.minimum(hit_tok, c.replay_tokens), 0)
    return pl.DataFrame({
        "request_id": t.request_id, "timestamp_s": t.timestamps,
        "traffic_class": np.asarray(t.class_names, dtype=object)[t.class_codes].astype(str),
        "machine": machine, "input_tokens": t.input_length, "gpu_tokens": gpu_tok,
        "ssd_tokens": hit_tok - gpu_tok, "recomputed_tokens": t.input_length - hit_tok,
        "window_hit": win_hit, "replay_tokens": replay_tok, "counted": t.counted,
        # a part-1 policy replays outside this loop: its occupancy is not tracked here (NaN)
        "ssd_bytes_used": (ssd_used * t.uniform_block_size * c.kv_bytes_per_token).astype(np.float64) if mode
        else np.full(n, np.nan),
        "ssd_evictions": ssd_ev if mode else np.full(n, np.nan),
    })


def _retention_frame(hist: np.ndarray, names) -> pl.DataFrame:
    """Quantiles of idle age at eviction per class from the log-spaced histogram (bin upper edge)."""
    edges = np.concatenate([[1.0], _RET_FACTOR ** np.arange(1, hist.shape[1])])
    rows = []
    for code, name in enumerate(names):
        h = hist[code]
        total = int(h.sum())
        row = {"traffic_class": name, "evictions": total}
        cum = np.cumsum(h)
        for q in (50, 90, 99):
            row[f"idle_at_eviction_p{q}_s"] = float(edges[np.searchsorted(cum, q / 100 * total)]) if total else math.nan
        rows.append(row)
    return pl.DataFrame(rows)


_SUMS = ["input_tokens", "gpu_tokens", "ssd_tokens", "recomputed_tokens", "replay_tokens"]


def _rates(df: pl.DataFrame) -> dict[str, float]:
    s = {k: int(df[k].sum()) for k in _SUMS}
    inp = max(s["input_tokens"], 1)
    hits = df.filter(pl.col("gpu_tokens") + pl.col("ssd_tokens") > 0)
    return {
        "requests": df.height, **s,
        "hit_tokens": s["gpu_tokens"] + s["ssd_tokens"],
        "token_hit_rate": (s["gpu_tokens"] + s["ssd_tokens"]) / inp,
        "gpu_token_hit_rate": s["gpu_tokens"] / inp,
        "ssd_token_hit_rate": s["ssd_tokens"] / inp,
        "disk_token_fraction": s["ssd_tokens"] / inp,
        "window_hit_rate": float(hits["window_hit"].mean()) if hits.height else 0.0,
    }


def summarize(requests: pl.DataFrame, result: ClusterResult | None = None) -> dict[str, Any]:
    """Totals, per class and per machine load, over counted requests."""
    df = requests.filter(pl.col("counted"))
    out = _rates(df)
    out["by_class"] = {name: _rates(g) for (name,), g in sorted(df.group_by("traffic_class"), key=lambda x: x[0])}
    per_machine = df.group_by("machine").agg(pl.col("input_tokens").sum())["input_tokens"].to_numpy()
    out["machine_load_imbalance"] = float(per_machine.max() / per_machine.mean()) if per_machine.size else 0.0
    used = requests["ssd_bytes_used"].fill_nan(None).max()
    out["ssd_bytes_used_max"] = None if used is None else float(used)
    if result is not None:
        out.update(ssd_policy=result.ssd_policy, evictions_ssd=result.evictions_ssd,
                   evictions_gpu=result.evictions_gpu, evictions_host=result.evictions_host)
        if result.retention.height:
            out["effective_retention"] = {r["traffic_class"]: {k: v for k, v in r.items() if k != "traffic_class"}
                                          for r in result.retention.to_dicts()}
    return out


def over_time(requests: pl.DataFrame, bin_s: float = HOUR_S) -> pl.DataFrame:
    """Per time bin and class: token hit rate per tier, disk token fraction, SSD bytes, evictions."""
    if bin_s <= 0:
        raise ValueError(f"over_time: bin_s must be > 0 seconds, got {bin_s}")
    df = requests.with_columns((pl.col("timestamp_s") // bin_s * bin_s).alias("bin_start_s"))
    agg = [pl.col(k).sum() for k in _SUMS] + [pl.col("ssd_bytes_used").last(), pl.col("ssd_evictions").last()]
    per_class = df.group_by(["bin_start_s", "traffic_class"]).agg(agg)
    every = df.group_by("bin_start_s").agg(agg).with_columns(pl.lit("all").alias("traffic_class"))
    return per_class.vstack(every.select(per_class.columns)).with_columns(
        ((pl.col("gpu_tokens") + pl.col("ssd_tokens")) / pl.col("input_tokens")).alias("token_hit_rate"),
        (pl.col("gpu_tokens") / pl.col("input_tokens")).alias("gpu_token_hit_rate"),
        (pl.col("ssd_tokens") / pl.col("input_tokens")).alias("disk_token_fraction"),
    ).sort(["bin_start_s", "traffic_class"])


def latency_of(result: ClusterResult, admission: bool = False) -> dict[str, Any]:
    """TTFT percentiles (per class) and cost of a cluster run through :mod:`tiered_kv.sim.cluster.latency`."""
    from tiered_kv.sim.cluster import latency as lat

    cfg = lat.preset().with_(kv_bytes_per_token=result.config.kv_bytes_per_token,
                             replay_tokens=result.config.replay_tokens)
    df = result.requests
    q = lat.simulate_queue(cfg, df["timestamp_s"].to_numpy(), df["machine"].to_numpy(),
                           df["input_tokens"].to_numpy(), df["ssd_tokens"].to_numpy(),
                           local=df["gpu_tokens"].to_numpy(), window_present=df["window_hit"].to_numpy(),
                           admission=admission)
    counted = df["counted"].to_numpy()
    out: dict[str, Any] = {f"ttft_{k}_s": v for k, v in lat.percentiles(q.ttft_s[counted]).items()}
    hit = (df["gpu_tokens"] + df["ssd_tokens"]).to_numpy()
    out["cost_per_mtok"] = float(lat.cost_per_mtok(cfg, hit[counted].sum(), df["input_tokens"].to_numpy()[counted].sum()))
    out["recomputed_by_admission"] = int(q.recomputed[counted].sum())
    classes = df["traffic_class"].to_numpy()
    out["ttft_by_class"] = {str(k): lat.percentiles(q.ttft_s[counted & (classes == k)])
                            for k in np.unique(classes[counted])}
    return out


def cluster_run(trace, cfg: ClusterConfig, *, ssd_policy: Any = None, admission: bool = False,
                progress: bool | None = None) -> tuple[ClusterResult, dict[str, Any]]:
    """:func:`simulate_cluster` and its summary with the latency model's TTFT and cost (the
    DeepSeek-V3 preset at the run's bytes per token): what ``simulate`` prints in cluster mode
    and a sweep point records."""
    res = simulate_cluster(trace, cfg, ssd_policy=ssd_policy, progress=progress)
    return res, {**res.summary(), **latency_of(res, admission=admission)}
