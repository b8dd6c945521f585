"""Multi-day, two-class synthetic workload (chatbot and agent) in the trace frame schema.

Why a generator: retention is decided in days (DeepSeek keeps agent KV 3 days and chatbot KV
7 days) while the public traces cover one hour of one service. This module draws weeks of
traffic whose one-hour slices look like the real traces, so TTL questions can be asked of it.

Model, per traffic class (all parameters in :class:`ClassConfig`):

* Sessions arrive as a Poisson process whose rate follows a daily cosine cycle
  (``daily_amplitude``, ``peak_hour``). Sessions that began up to ``warmup_days`` before t=0
  are simulated too and only their later requests kept, so the trace starts in steady state
  (returning sessions and long prompts already present) like a slice of a live service.
* A session is one growing prompt. Its first prompt is the class system prompt, then with
  probability ``prefix_probability`` a shared prefix (popular document, tool definitions)
  drawn from ``n_prefixes`` items with Zipf(``prefix_zipf``) popularity, then the session's
  own first message. Every later turn's prompt is the previous prompt + the previous output +
  a new message (user text or tool result), so it extends the previous prompt exactly.
* Turns come in visits: ``turns_per_visit_mean`` turns (geometric) separated by think times
  (lognormal: chatbot about two minutes, agent a few seconds of tool loop). After a visit the
  session returns with probability ``return_probability`` after a lognormal gap (heavy tail,
  clipped at ``return_max_days``): these returns are what a 3-day vs 7-day TTL decides.
* A session ends when its prompt would exceed ``max_input_tokens`` (the context window).
* One-shot calls (``call_fraction`` of the requests, agent class): the class system prompt +
  a shared prefix (tool definitions, Zipf over the catalogue) + a short unique suffix, one
  request each, arriving in bursts of ``call_burst_mean`` calls (geometric) at one instant
  with one prefix (parallel tool calls). The bursts are what let a cache of 20 blocks serve
  17 % of agent tokens: under independent arrivals two same-prefix calls are rarely adjacent.

Block ids are chained (equal id <=> equal whole prefix) and dense: full system-prompt blocks
are shared by the class, full shared-prefix blocks by every session using that prefix, full
session blocks by the session's turns, and a trailing partial block is unique to its request
(its content is a truncation nobody else sends). Everything is drawn with numpy in whole
arrays from one explicit seed; there is no global state and no wall clock.

Calibration: the chatbot class against the real Mooncake conversation trace (one-hour slice
at the mean rate, cold cache) and DeepSeek's 7-day vs 3-day TTL effect (14-day run); the agent
class against the published Mooncake Tool&Agent statistics and its LRU curve (FAST'25 Fig. 9,
figure ``13_agent_curve``). Targets, tolerances and sources are
:data:`tiered_kv.sim.workload.calibration.TARGETS`; achieved values per seed are in
``benchmarks/results/synth.md``. Defaults were tuned by hand on these numbers, so matching them
is a calibration, not a reproduction. The agent structure that fits the curve: 40 % of the
requests are one-shot calls on six ~6.1K-token shared prefixes (system prompt + tool
definitions, Zipf 2); the rest are tool-loop sessions (30 % of them on the same prefixes)
whose turns come minutes apart, which is the reuse between 1e6 and 1e7 tokens.
Known bias: chatbot p25 input length runs 6-10 % high, p75 and p90 4-9 % low.
"""

from __future__ import annotations

import math
import numbers
import zlib
from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from tiered_kv.units import DAY_S, HOUR_S


def _check(name: str, value: float, lo: float, hi: float = math.inf, *, lo_open: bool = False,
           hi_open: bool = False) -> None:
    """Raise a ValueError naming the setting and its allowed range when value is outside it."""
    number = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    ok = number and (value > lo if lo_open else value >= lo) and (value < hi if hi_open else value <= hi)
    if not ok:
        left = "(" if lo_open else "["
        right = ")" if hi_open or hi == math.inf else "]"
        raise ValueError(f"{name}: must be in {left}{lo:g}, {hi:g}{right}, got {value!r}")


_POSITIVE = (0, math.inf, True, False)
_FRACTION = (0, 1, False, False)
_SIGMA = (0, 5, False, False)
#: Allowed range of each numeric ClassConfig setting: (low, high, low open, high open); a high
#: that is a name is that setting's value.
_RANGES = tuple((name, *bounds) for name, bounds in (
    ("requests_per_hour", _POSITIVE), ("daily_amplitude", (0, 1, False, True)), ("peak_hour", (0, 24, False, True)),
    ("system_prompt_tokens", (1, "max_input_tokens", False, False)), ("n_prefixes", (1, 10**8, False, False)),
    ("prefix_probability", _FRACTION), ("short_first_probability", _FRACTION), ("prefix_zipf", (0, 10, False, False)),
    *((n, _POSITIVE) for n in ("prefix_tokens_median", "first_tokens_median", "short_first_tokens_median",
                               "turn_tokens_median", "output_tokens_mean", "output_tokens_shape", "think_median_s",
                               "return_median_s", "return_max_days")),
    *((n, _SIGMA) for n in ("prefix_tokens_sigma", "first_tokens_sigma", "turn_tokens_sigma", "think_sigma",
                            "return_sigma")),
    ("turns_per_visit_mean", (1, 10_000, False, False)), ("return_probability", (0, 0.99, False, False)),
    ("max_input_tokens", (2, 10**8, False, False)), ("call_fraction", (0, 1, False, True)),
    ("call_burst_mean", (1, 10_000, False, False)), ("call_suffix_tokens_median", _POSITIVE),
    ("call_suffix_tokens_sigma", _SIGMA), ("volatile_fraction", _FRACTION)))


@dataclass(frozen=True)
class ClassConfig:
    """Behaviour of one traffic class; tokens are model tokens, times are seconds."""

    name: str
    requests_per_hour: float  # daily mean request rate (all turns, all visits)
    daily_amplitude: float = 0.5  # rate(t) = mean * (1 + amplitude * cos(2 pi (hour - peak)/24))
    peak_hour: float = 14.0
    system_prompt_tokens: int = 512  # shared by every request of the class
    n_prefixes: int = 1_000  # shared documents / tool-definition sets
    prefix_probability: float = 0.1  # fraction of sessions that start with a shared prefix
    prefix_zipf: float = 1.0  # popularity of prefix k is proportional to k**-prefix_zipf
    prefix_tokens_median: float = 4_000.0
    prefix_tokens_sigma: float = 1.0  # lognormal sigma of prefix lengths
    first_tokens_median: float = 8_000.0  # session's own first message
    first_tokens_sigma: float = 1.0
    short_first_probability: float = 0.3  # sessions opening with a short question instead
    short_first_tokens_median: float = 300.0  # (lognormal, sigma 1)
    turn_tokens_median: float = 200.0  # new message (user text / tool result) per later turn
    turn_tokens_sigma: float = 1.8
    output_tokens_mean: float = 343.0  # gamma-distributed output length
    output_tokens_shape: float = 1.5
    turns_per_visit_mean: float = 1.5  # geometric, >= 1
    think_median_s: float = 140.0  # lognormal time between turns of one visit
    think_sigma: float = 1.0
    return_probability: float = 0.25  # chance of another visit after each visit
    return_median_s: float = 8 * HOUR_S  # lognormal gap between visits
    return_sigma: float = 2.0
    return_max_days: float = 30.0
    max_input_tokens: int = 128_000  # context window: the session ends beyond it
    scale_prefixes: bool = True  # False: a fixed catalogue (tool definitions) kept by `scaled`
    call_fraction: float = 0.0  # share of requests that are one-shot calls (see the module notes)
    call_burst_mean: float = 1.0  # calls per burst (geometric, >= 1): same time, same shared prefix
    call_suffix_tokens_median: float = 300.0  # a call's own suffix after the shared prefix
    call_suffix_tokens_sigma: float = 1.0
    # Prompt layout: a volatile per-call line (timestamp, request id) in a fraction of requests.
    # Negative: none. Otherwise its token depth from the top of the prompt (0: above the system
    # prompt; inf: at the end), or from the end of the stable prefix (system prompt + the
    # request's shared prefix) when volatile_below_prefix is True. See
    # tiered_kv.sim.traces.transforms.insert_volatile_block.
    volatile_depth_tokens: float = -1.0
    volatile_below_prefix: bool = False
    volatile_fraction: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name: must be a non-empty string, got {self.name!r}")
        for name, lo, hi, lo_open, hi_open in _RANGES:
            hi = getattr(self, hi) if isinstance(hi, str) else hi
            _check(f"{self.name}.{name}", getattr(self, name), lo, hi, lo_open=lo_open, hi_open=hi_open)
        d = self.volatile_depth_tokens
        if not (isinstance(d, numbers.Real) and not isinstance(d, bool) and (d < 0 or d == math.inf)):
            _check(f"{self.name}.volatile_depth_tokens", d, 0, 1e12)
        for name in ("volatile_below_prefix", "scale_prefixes"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{self.name}.{name}: must be True or False, got {getattr(self, name)!r}")
        for name in ("system_prompt_tokens", "n_prefixes", "max_input_tokens"):
            if not isinstance(getattr(self, name), (int, np.integer)):
                raise ValueError(f"{self.name}.{name}: must be an integer, got {getattr(self, name)!r}")

    @property
    def requests_per_session(self) -> float:
        """Expected requests per (multi-turn) session before the context-window cut: visits x turns."""
        return self.turns_per_visit_mean / (1.0 - self.return_probability)

    def scaled(self, factor: float) -> ClassConfig:
        """Same behaviour at ``factor`` x the traffic: rate and number of shared prefixes scale
        together, so each prefix sees the same request rate (its reuse times are unchanged).
        A fixed catalogue (``scale_prefixes=False``: a service's few tool-definition prompts)
        keeps its size, so each prefix sees ``factor`` x the requests."""
        _check(f"{self.name}.scale", factor, 0, lo_open=True)
        n = max(1, round(self.n_prefixes * factor)) if self.scale_prefixes else self.n_prefixes
        return replace(self, requests_per_hour=self.requests_per_hour * factor, n_prefixes=n)


#: Calibrated chatbot class (Mooncake conversation trace, DeepSeek 7 d -> 3 d loss).
CHATBOT = ClassConfig(name="chatbot", requests_per_hour=12_031.0)

#: Calibrated agent class: Mooncake Tool&Agent statistics (Table 2) and LRU curve (Fig. 9).
AGENT = ClassConfig(
    name="agent", requests_per_hour=23_608.0, peak_hour=11.0, daily_amplitude=0.3,
    system_prompt_tokens=512, n_prefixes=6, prefix_zipf=2.0, scale_prefixes=False,
    prefix_tokens_median=5_600.0, prefix_tokens_sigma=0.1, prefix_probability=0.3,
    call_fraction=0.4, call_burst_mean=1.4, call_suffix_tokens_median=300.0, call_suffix_tokens_sigma=0.8,
    first_tokens_median=4_100.0, first_tokens_sigma=0.8, short_first_probability=0.0,
    turn_tokens_median=1_500.0, turn_tokens_sigma=1.2,
    output_tokens_mean=182.0, output_tokens_shape=1.2,
    turns_per_visit_mean=1.5, think_median_s=150.0, think_sigma=0.6,
    return_probability=0.1, return_median_s=1 * HOUR_S, return_sigma=1.5, return_max_days=10.0,
)


@dataclass(frozen=True)
class SynthConfig:
    """A workload: one or more traffic classes sharing a block size."""

    classes: tuple[ClassConfig, ...] = field(default_factory=lambda: (CHATBOT, AGENT))
    block_size: int = 512  # tokens per block (Mooncake uses 512)
    warmup_days: float = 7.0  # sessions may start this long before t=0 (steady state at t=0)

    def __post_init__(self) -> None:
        if isinstance(self.classes, ClassConfig):
            object.__setattr__(self, "classes", (self.classes,))
        elif isinstance(self.classes, list):
            object.__setattr__(self, "classes", tuple(self.classes))
        if not self.classes or not all(isinstance(c, ClassConfig) for c in self.classes):
            raise ValueError("classes: must be a non-empty tuple of ClassConfig")
        names = [c.name for c in self.classes]
        if len(set(names)) != len(names):
            raise ValueError(f"classes: class names must be unique, got {names}")
        if not isinstance(self.block_size, (int, np.integer)):
            raise ValueError(f"block_size: must be an integer number of tokens, got {self.block_size!r}")
        _check("block_size", self.block_size, 1, 1 << 20)
        _check("warmup_days", self.warmup_days, 0, 365)

    def scaled(self, factor: float) -> SynthConfig:
        """Every class at ``factor`` x its traffic (see :meth:`ClassConfig.scaled`)."""
        return replace(self, classes=tuple(c.scaled(factor) for c in self.classes))

    def only(self, name: str) -> SynthConfig:
        """The same workload restricted to one class."""
        keep = tuple(c for c in self.classes if c.name == name)
        if not keep:
            raise ValueError(f"class: must be one of {[c.name for c in self.classes]}, got {name!r}")
        return replace(self, classes=keep)


#: Named presets. Full-rate presets match the Mooncake request rates; ``mixed`` is both classes
#: at 1/16 of them (a 14-day run is about 15 million block accesses); ``ci`` is tiny.
PRESETS: dict[str, SynthConfig] = {
    "chatbot": SynthConfig(classes=(CHATBOT,)),
    "agent": SynthConfig(classes=(AGENT,)),
    "mixed": SynthConfig(classes=(CHATBOT, AGENT)).scaled(1 / 16),
    "ci": SynthConfig(classes=(CHATBOT, AGENT), warmup_days=3.0).scaled(1 / 200),
}


def get_config(config: SynthConfig | ClassConfig | str) -> SynthConfig:
    """A SynthConfig from itself, a single ClassConfig or a preset name."""
    if isinstance(config, SynthConfig):
        return config
    if isinstance(config, ClassConfig):
        return SynthConfig(classes=(config,))
    if isinstance(config, str) and config in PRESETS:
        return PRESETS[config]
    raise ValueError(f"preset: must be one of {sorted(PRESETS)} (or a SynthConfig), got {config!r}")


# --- drawing one class ----------------------------------------------------------------------------

def _lognormal(rng: np.random.Generator, median: float, sigma: float, n: int) -> np.ndarray:
    return median * np.exp(sigma * rng.standard_normal(n))


def _output_tokens(rng: np.random.Generator, c: ClassConfig, n: int) -> np.ndarray:
    """Gamma-distributed output lengths (at least one token)."""
    return np.maximum(1, np.rint(rng.gamma(c.output_tokens_shape, c.output_tokens_mean / c.output_tokens_shape,
                                           n))).astype(np.int64)


def _session_starts(rng: np.random.Generator, c: ClassConfig, t0: float, t1: float,
                    mean_rate: float) -> np.ndarray:
    """Poisson arrivals (``mean_rate`` per second on the daily mean) on [t0, t1) with the
    class's daily cycle, by inverting the rate integral."""
    grid = np.linspace(t0, t1, max(2, int((t1 - t0) / 300.0) + 2))
    hour = (grid / HOUR_S) % 24.0
    rate = mean_rate * (1.0 + c.daily_amplitude * np.cos(2 * np.pi * (hour - c.peak_hour) / 24.0))
    cum = np.concatenate([[0.0], np.cumsum(0.5 * (rate[1:] + rate[:-1]) * np.diff(grid))])
    n = rng.poisson(cum[-1])
    return np.interp(np.sort(rng.uniform(0.0, cum[-1], n)), cum, grid)


def _segment_cumsum(values: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Cumulative sum restarting at every index where ``first`` is True (first[0] must be True)."""
    total = np.cumsum(values)
    starts = np.flatnonzero(first)
    base = total[starts] - values[starts]
    return total - np.repeat(base, np.diff(np.append(starts, len(values))))


@dataclass
class _ClassDraw:
    """Per-request arrays of one class (kept requests only) plus id layout inputs."""

    time: np.ndarray
    input_length: np.ndarray
    output_length: np.ndarray
    session: np.ndarray  # dense session index within the class
    turn: np.ndarray
    prefix: np.ndarray  # -1 = no shared prefix
    prefix_tokens: np.ndarray  # per prefix
    session_blocks: np.ndarray  # per session: full blocks needed for its longest kept prompt


def _draw_class(rng: np.random.Generator, c: ClassConfig, horizon_s: float, warmup_s: float,
                block_size: int) -> _ClassDraw:
    per_s = c.requests_per_hour * (1.0 - c.call_fraction) / HOUR_S / c.requests_per_session
    starts = _session_starts(rng, c, -warmup_s, horizon_s, per_s)
    n_s = len(starts)
    # shared prefix per session (Zipf over a finite catalogue) and per-prefix lengths
    weights = np.arange(1, c.n_prefixes + 1, dtype=np.float64) ** -c.prefix_zipf
    prefix_tokens = np.maximum(1, _lognormal(rng, c.prefix_tokens_median, c.prefix_tokens_sigma,
                                             c.n_prefixes)).astype(np.int64)
    uses = rng.random(n_s) < c.prefix_probability
    prefix = np.where(uses, rng.choice(c.n_prefixes, n_s, p=weights / weights.sum()), -1)
    first_msg = np.where(rng.random(n_s) < c.short_first_probability,
                         _lognormal(rng, c.short_first_tokens_median, 1.0, n_s),
                         _lognormal(rng, c.first_tokens_median, c.first_tokens_sigma, n_s))
    first_msg = np.maximum(1.0, first_msg)
    # visits per session and turns per visit (both geometric), then one row per request
    visits = rng.geometric(1.0 - c.return_probability, n_s)
    visit_session = np.repeat(np.arange(n_s), visits)
    turns = rng.geometric(1.0 / c.turns_per_visit_mean, len(visit_session))
    req_visit = np.repeat(np.arange(len(visit_session)), turns)
    session = visit_session[req_visit]
    n_r = len(session)
    first_of_session = np.ones(n_r, dtype=bool)
    first_of_session[1:] = session[1:] != session[:-1]
    first_of_visit = np.ones(n_r, dtype=bool)
    first_of_visit[1:] = req_visit[1:] != req_visit[:-1]
    # times: session start + think times within a visit + return gaps between visits
    gap = _lognormal(rng, c.think_median_s, c.think_sigma, n_r)
    ret = np.minimum(_lognormal(rng, c.return_median_s, c.return_sigma, n_r), c.return_max_days * DAY_S)
    gap = np.where(first_of_visit, ret, gap)
    gap[first_of_session] = 0.0
    time = starts[session] + _segment_cumsum(gap, first_of_session)
    # tokens: first prompt = system + shared prefix + first message; then + output + new message
    output = _output_tokens(rng, c, n_r)
    new_msg = np.maximum(1, _lognormal(rng, c.turn_tokens_median, c.turn_tokens_sigma, n_r))
    shared = c.system_prompt_tokens + np.where(prefix >= 0, prefix_tokens[np.maximum(prefix, 0)], 0)
    prev_out = np.concatenate([[0], output[:-1]])
    inc = np.where(first_of_session, (shared + first_msg)[session], prev_out + new_msg)
    input_length = _segment_cumsum(np.rint(inc).astype(np.int64), first_of_session)
    turn = (np.arange(n_r) - np.repeat(np.flatnonzero(first_of_session), np.bincount(session, minlength=n_s)))
    keep = (time >= 0.0) & (time < horizon_s) & (input_length <= c.max_input_tokens)
    # a session ends at the context window: drop its requests after the first one beyond it
    over = np.maximum.accumulate(np.where(input_length > c.max_input_tokens, session, -1))
    keep &= over != session
    session_blocks = np.zeros(n_s, dtype=np.int64)
    np.maximum.at(session_blocks, session[keep], input_length[keep] // block_size)
    d = _ClassDraw(time=time[keep], input_length=input_length[keep], output_length=output[keep],
                   session=session[keep], turn=turn[keep].astype(np.int32), prefix=prefix[session[keep]],
                   prefix_tokens=prefix_tokens, session_blocks=session_blocks)
    if c.call_fraction > 0:  # drawn after the sessions: a class without calls draws the same sessions
        d = _add_calls(rng, c, d, weights / weights.sum(), horizon_s, block_size)
    return d


def _add_calls(rng: np.random.Generator, c: ClassConfig, d: _ClassDraw, popularity: np.ndarray,
               horizon_s: float, block_size: int) -> _ClassDraw:
    """One-shot calls (module docstring); each call is a session of one request (its suffix
    blocks are its own). Bursts follow the class's daily cycle."""
    bursts = _session_starts(rng, c, 0.0, horizon_s,
                             c.requests_per_hour * c.call_fraction / HOUR_S / c.call_burst_mean)
    size = rng.geometric(1.0 / c.call_burst_mean, len(bursts))
    burst_prefix = rng.choice(c.n_prefixes, len(bursts), p=popularity)
    time, prefix = np.repeat(bursts, size), np.repeat(burst_prefix, size)
    n = len(time)
    suffix = np.maximum(1.0, _lognormal(rng, c.call_suffix_tokens_median, c.call_suffix_tokens_sigma, n))
    length = c.system_prompt_tokens + d.prefix_tokens[prefix] + np.rint(suffix).astype(np.int64)
    output = _output_tokens(rng, c, n)
    keep = length <= c.max_input_tokens
    calls = {"time": time, "input_length": length, "output_length": output,
             "session": len(d.session_blocks) + np.cumsum(keep) - 1, "turn": np.zeros(n, dtype=np.int32),
             "prefix": prefix, "session_blocks": length // block_size}
    return _ClassDraw(prefix_tokens=d.prefix_tokens,
                      **{k: np.concatenate([getattr(d, k), v[keep]]) for k, v in calls.items()})


# --- block ids ------------------------------------------------------------------------------------

@dataclass
class _Layout:
    """Per-request parameters from which block j's chained id follows (see :func:`_chunk_ids`)."""

    sys_base: np.ndarray  # id of system-prompt block 0 of the request's class
    n_sys: np.ndarray  # full system-prompt blocks
    pre_base: np.ndarray  # id of block 0 of the request's shared prefix (ids n_sys.. are used)
    n_shared: np.ndarray  # full blocks shared with other sessions (system prompt + prefix)
    sess_base: np.ndarray  # id of block 0 of the request's session (ids n_shared.. are used)
    partial_id: np.ndarray  # id of the trailing partial block, if any
    length: np.ndarray  # input tokens


def _class_layout(d: _ClassDraw, c: ClassConfig, block_size: int, next_id: int) -> tuple[dict, int]:
    """Dense id ranges of one class from ``next_id``: system prompt, prefixes, sessions."""
    n_sys = c.system_prompt_tokens // block_size
    n_pre = (c.system_prompt_tokens + d.prefix_tokens) // block_size  # full shared blocks per prefix
    pre_base = next_id + n_sys + np.concatenate([[0], np.cumsum(n_pre)[:-1]]) - n_sys
    sess_start = next_id + n_sys + int(n_pre.sum())
    sess_base = sess_start + np.concatenate([[0], np.cumsum(d.session_blocks)[:-1]])
    has = d.prefix >= 0
    pre = np.maximum(d.prefix, 0)
    n_r = len(d.time)
    per_request = {
        "sys_base": np.full(n_r, next_id, dtype=np.int64),
        "n_sys": np.full(n_r, n_sys, dtype=np.int64),
        "pre_base": np.where(has, pre_base[pre], 0),
        "n_shared": np.where(has, n_pre[pre], n_sys),
        "sess_base": sess_base[d.session],
    }
    return per_request, sess_start + int(d.session_blocks.sum())


def _chunk_ids(lay: _Layout, lo: int, hi: int, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Flat ids of requests [lo, hi) and the request index (relative to lo) of each id.

    A request's ids are four runs of consecutive integers: system prompt ``sys_base + [0,
    n_sys)``, shared prefix ``pre_base + [n_sys, n_shared)``, session ``sess_base + [n_shared,
    n_full)`` and the partial block. Runs expand with one repeat and one arange.
    """
    sl = slice(lo, hi)
    n_full = lay.length[sl] // block_size
    lens = np.stack([lay.n_sys[sl], lay.n_shared[sl] - lay.n_sys[sl], n_full - lay.n_shared[sl],
                     (lay.length[sl] % block_size != 0).astype(np.int64)], axis=1).ravel()
    starts = np.stack([lay.sys_base[sl], lay.pre_base[sl] + lay.n_sys[sl],
                       lay.sess_base[sl] + lay.n_shared[sl], lay.partial_id[sl]], axis=1).ravel()
    run_pos = np.cumsum(lens) - lens  # flat position where each run begins
    ids = np.arange(int(lens.sum()), dtype=np.int64) + np.repeat(starts - run_pos, lens)
    nb = lens.reshape(-1, 4).sum(axis=1)
    return ids.astype(np.uint64), np.repeat(np.arange(hi - lo, dtype=np.int64), nb)


def _list_column(lay: _Layout, block_size: int, chunk_blocks: int = 1_000_000) -> pl.Series:
    """The List(UInt64) ``block_ids`` column, built in chunks of about ``chunk_blocks`` ids."""
    nb = -(-lay.length // block_size)
    cum = np.cumsum(nb)
    parts, lo = [], 0
    while lo < len(nb):
        hi = max(lo + 1, int(np.searchsorted(cum, (cum[lo - 1] if lo else 0) + chunk_blocks, side="right")))
        ids, r = _chunk_ids(lay, lo, hi, block_size)
        # rows are sorted: telling polars so makes the group-by a linear scan
        frame = pl.DataFrame({"r": pl.Series(r).set_sorted(), "block_ids": ids})
        parts.append(frame.group_by("r", maintain_order=True).agg("block_ids")["block_ids"])
        lo = hi
    return pl.concat(parts).alias("block_ids")


# --- public entry point ---------------------------------------------------------------------------

def generate(config: SynthConfig | ClassConfig | str, days: float, seed: int) -> pl.DataFrame:
    """Draw ``days`` of traffic into the trace frame schema (:data:`tiered_kv.sim.traces.SCHEMA`).

    ``config`` is a :class:`SynthConfig`, a single :class:`ClassConfig` or a preset name
    (:data:`PRESETS`). The same ``(config, days, seed)`` always gives the same frame; each class
    draws from its own stream (``SeedSequence([seed, crc32(class name)])``), so its requests do
    not depend on which other classes are generated beside it, nor on their order. Requests are sorted by time (stable;
    class order breaks ties); ``session_id`` is ``"<class>-<n>"`` and ``turn`` counts from 0.
    """
    from tiered_kv.sim.traces import SCHEMA, validate_frame

    cfg = get_config(config)
    _check("days", days, 0, 3650, lo_open=True)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed: must be an integer >= 0, got {seed!r}")
    horizon, warmup, bs = days * DAY_S, cfg.warmup_days * DAY_S, cfg.block_size
    draws, layouts, next_id = [], [], 0
    for c in cfg.classes:
        stream = np.random.SeedSequence([int(seed), zlib.crc32(c.name.encode())])
        d = _draw_class(np.random.default_rng(stream), c, horizon, warmup, bs)
        lay, next_id = _class_layout(d, c, bs, next_id)
        draws.append(d)
        layouts.append(lay)
    times = np.concatenate([d.time for d in draws])
    if len(times) == 0:
        raise ValueError(f"days: {days} days of this workload hold no request; generate more days")
    order = np.argsort(times, kind="stable")
    n = len(order)

    def merged(parts: list[np.ndarray]) -> np.ndarray:  # one array per class -> one in time order
        return np.concatenate(parts)[order]

    length = merged([d.input_length for d in draws])
    partial_id = np.where(length % bs != 0, next_id + np.arange(n, dtype=np.int64), 0)
    lay = _Layout(**{key: merged([per[key] for per in layouts]) for key in layouts[0]},
                  partial_id=partial_id, length=length)
    cls = merged([np.full(len(d.time), k, dtype=np.int64) for k, d in enumerate(draws)])
    names = np.array([c.name for c in cfg.classes])
    frame = pl.DataFrame({
        "request_id": np.arange(n, dtype=np.int64),
        "timestamp_s": times[order],
        "input_length": length,
        "output_length": merged([d.output_length for d in draws]),
        "block_size": np.full(n, bs, dtype=np.int32),
        "traffic_class": names[cls],
        "session_id": merged([d.session for d in draws]),
        "turn": merged([d.turn for d in draws]),
    })
    frame = frame.with_columns(
        (pl.col("traffic_class") + pl.lit("-") + pl.col("session_id").cast(pl.Utf8)).alias("session_id"),
        _list_column(lay, bs),
    )
    frame = _volatile_layout(frame, cfg, cls, lay.n_shared * bs, seed)
    return validate_frame(frame.select([pl.col(k).cast(t) for k, t in SCHEMA.items()]),
                          source=f"synth({days:g} days, seed {seed})")


def _volatile_layout(frame: pl.DataFrame, cfg: SynthConfig, cls: np.ndarray, shared_tokens: np.ndarray,
                     seed: int) -> pl.DataFrame:
    """Each class's volatile per-call line (:attr:`ClassConfig.volatile_depth_tokens`), drawn from
    its own stream so the rest of the workload is the same with or without it."""
    from tiered_kv.sim.traces.transforms import insert_volatile_block

    for k, c in enumerate(cfg.classes):
        if c.volatile_depth_tokens < 0:
            continue
        rng = np.random.default_rng(np.random.SeedSequence([int(seed), zlib.crc32(c.name.encode()), 1]))
        mask = (cls == k) & (rng.random(len(cls)) < c.volatile_fraction)
        depth = c.volatile_depth_tokens + (shared_tokens if c.volatile_below_prefix else 0)
        frame = insert_volatile_block(frame, depth, mask=mask)
    return frame


def main(argv: list[str] | None = None) -> None:
    """Write a synthetic trace to Parquet (readable by ``load_trace`` and ``tiered-kv simulate``):
    ``python -m tiered_kv.sim.workload.synth --preset mixed --days 14 --seed 0 --out synth.parquet``."""
    import argparse
    import time

    from tiered_kv.units import format_bytes, parse_duration

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--preset", default="mixed", choices=sorted(PRESETS))
    parser.add_argument("--days", default="14d", help="length, e.g. 14d or 6h (a bare number is days)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="Parquet file to write (default: print a summary)")
    args = parser.parse_args(argv)
    text = args.days.strip()
    days = float(text) if text.replace(".", "", 1).isdigit() else parse_duration(text, name="--days") / DAY_S
    t0 = time.perf_counter()
    df = generate(args.preset, days, args.seed)
    elapsed = time.perf_counter() - t0
    print(df.group_by("traffic_class").agg(pl.len().alias("requests"),
                                           pl.col("input_length").mean().alias("avg_input_tokens"),
                                           pl.col("block_ids").list.len().sum().alias("block_accesses"))
          .sort("traffic_class"))
    print(f"{df.height:,} requests over {days:g} days generated in {elapsed:.1f} s "
          f"({format_bytes(df.estimated_size())} in memory)")
    if args.out:
        df.write_parquet(args.out)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
