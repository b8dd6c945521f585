"""Hit-rate curves in one pass: LRU for every capacity, TTL for every TTL, the infinite bound,
and Belady (the offline optimum) at chosen capacities.

Why one pass works
------------------
Replay a request as docs/semantics.md says: look up, then touch its blocks in order. Within a request
the chained ids are distinct, and a block that is present at lookup is only touched (never
inserted), so touching the leading hits evicts nothing. Hence "block k is among the request's
leading present blocks at lookup" equals "blocks 0..k all hit when the request's accesses are
replayed one by one": prefix hits are a property of the flattened access sequence.

*LRU (Mattson et al. 1970).* An access hits an LRU cache of C blocks iff its stack distance
(distinct blocks touched since the previous access of the same block, itself included) is at
most C. Block k of a request is a leading hit iff ``max(d_0..d_k) <= C``. So one pass computes
``D_k = max(d_0..d_k)`` for every access (a Fenwick tree over access positions counts the
distinct blocks in between: O(n log n)), and the hit tokens at capacity C are the sum of token
weights over accesses with ``D_k <= C``: a sorted array and a cumulative sum answer every C.

*TTL.* With unlimited capacity a block is present iff its reuse time (now - last touch) is at
most the TTL, and every touch refreshes it; so block k is a leading hit iff
``max(r_0..r_k) <= TTL``: the same construction over reuse times answers every TTL.

*Infinite bound.* A block hits iff it was ever touched before (D_k finite).

Belady is an upper bound on prefix hits
---------------------------------------
:class:`~tiered_kv.sim.policies.Belady` is MIN with bypass on the flattened access sequence:
on overflow it evicts the cached block whose next access is farthest (possibly the block just
inserted), and among blocks never used again it evicts the *deepest* first.

*Lemma (prefix closure).* If block b (depth k >= 1) has parent a (depth k-1, the block before
it in every request that contains b), then every access of b is immediately preceded by an
access of a, so at any time ``next(a) < next(b)`` whenever ``next(b)`` is finite, and when both
are infinite the deeper b is preferred for eviction. So MIN never evicts a while b is cached.
Insertion keeps closure too: a request inserts its blocks in order, so b's parent was touched
just before; if the parent was bypassed, it was the farthest of cache + itself, and b, needed
even later (or equally never, but deeper), is bypassed as well. By induction the cache is
prefix-closed at every lookup: the present blocks of a request form a prefix of it, so
Belady's prefix hits equal its block hits.

*Bound.* Take any policy P with capacity C under the same replay. Its prefix hits are block
hits of the flattened sequence for a policy P' that keeps P's lookup-time contents until the
request's hit prefix has been touched (same contents, same capacity). MIN with bypass maximises
block hits over all policies with capacity C (Belady 1966; Mattson et al. 1970), so
``prefix_hits(P) <= block_hits(P') <= block_hits(MIN) = prefix_hits(Belady)``.

The bound is on hit *blocks* and therefore on hit tokens whenever every block carries the same
weight (``clamp_to_input=False``, or ``full_blocks_only``). With the clamp a reused *partial*
tail block weighs less than a full one, and a policy could in principle trade one for the
other; the tests check the bound in blocks and in unclamped tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
from numba import njit

from tiered_kv.sim.policies.belady import Belady, belady_stack, next_use
from tiered_kv.sim.trace_replay import CompiledTrace

#: Key of an access that can never hit (first touch of its block): above every capacity.
COLD = np.int64(2**62)


@njit(cache=True)
def _stack_distances(offsets, blocks, n_unique, prefix_max):  # pragma: no cover - compiled
    """LRU stack distance of every access (COLD when the block is new), with ``prefix_max`` its
    running maximum over the request's accesses so far."""
    m = blocks.shape[0]
    n = offsets.shape[0] - 1
    tree = np.zeros(m + 1, np.int32)  # Fenwick tree over access positions (1-based; int32: half the memory)
    last = np.full(n_unique, -1, np.int64)
    out = np.empty(m, np.int64)
    cold = np.int64(2**62)
    for r in range(n):
        run = np.int64(0)
        for i in range(offsets[r], offsets[r + 1]):
            b = blocks[i]
            lp = last[b]
            if lp >= 0:
                # distinct blocks touched after lp and before i = marks in (lp, i)
                s = np.int64(0)
                j = i  # prefix sum over positions 1..i (0-based ..i-1)
                while j > 0:
                    s += tree[j]
                    j -= j & (-j)
                j = lp + 1
                while j > 0:
                    s -= tree[j]
                    j -= j & (-j)
                d = s + 1
                j = lp + 1
                while j <= m:
                    tree[j] -= 1
                    j += j & (-j)
            else:
                d = cold
            j = i + 1
            while j <= m:
                tree[j] += 1
                j += j & (-j)
            last[b] = i
            if d > run:
                run = d
            out[i] = run if prefix_max else d
    return out


def lru_keys(trace: CompiledTrace) -> np.ndarray:
    """int64 [m]: prefix-max stack distance (blocks) per access; COLD for first touches."""
    return _stack_distances(trace.offsets, trace.blocks, trace.n_unique, True)


def ttl_keys(trace: CompiledTrace, nxt: np.ndarray | None = None) -> np.ndarray:
    """float64 [m]: prefix-max reuse time (s) per access; inf for first touches.

    Plain numpy, so a first run has no kernel to compile for it. The previous access of a block
    comes from ``nxt`` (:func:`~tiered_kv.sim.policies.belady.next_use`); reuse times below zero
    (``order="file"``) or NaN count as 0, as a running maximum from 0 does, and ``+ 0.0`` turns a
    ``-0.0`` into ``0.0``, so the keys are the same floats as a scalar loop's.
    """
    m = trace.n_accesses
    nxt = next_use(trace) if nxt is None else nxt
    last = np.full(m, -np.inf)
    again = nxt < m
    last[nxt[again]] = trace.access_time[again]
    return segmented_prefix_max(np.fmax(trace.access_time - last, 0.0) + 0.0, trace.offsets)


def segmented_prefix_max(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Running max of ``values`` (along axis 0) restarting at each ``offsets`` boundary (one per request).

    Shifted maxima, ``log2(longest request)`` numpy passes: max is exact, so the result is the
    same floats as a scalar loop's.
    """
    out = np.array(values, dtype=np.float64, copy=True)
    lengths = np.diff(offsets)
    m = out.shape[0]
    pos = np.arange(m) - np.repeat(offsets[:-1], lengths)  # index of each row in its request
    shift = 1
    longest = int(lengths.max()) if lengths.size else 0
    while shift < longest:
        back = np.full_like(out, -np.inf)
        back[shift:] = out[:-shift]
        back[pos < shift] = -np.inf
        np.maximum(out, back, out=out)
        shift *= 2
    return out


@dataclass
class Curve:
    """Hit tokens at every point ``x`` (capacity in tokens, or TTL in seconds), overall and per class."""

    x: np.ndarray
    hit_tokens: np.ndarray
    input_tokens: int
    by_class_hit_tokens: dict[str, np.ndarray] = field(default_factory=dict)
    by_class_input_tokens: dict[str, int] = field(default_factory=dict)
    #: tokens written to the cache at each point (SSD wear), where the curve counts them
    written_tokens: np.ndarray | None = None

    @property
    def token_hit_rate(self) -> np.ndarray:
        return self.hit_tokens / self.input_tokens if self.input_tokens else np.zeros(len(self.x))

    @classmethod
    def of(cls, trace: CompiledTrace, x, per_class: np.ndarray, written_tokens: np.ndarray | None = None) -> Curve:
        """The curve of hit tokens ``per_class`` [class, point], with the trace's counted input tokens."""
        names = trace.class_names
        return cls(x=np.asarray(x), hit_tokens=per_class.sum(axis=0),
                   input_tokens=int(trace.input_length[trace.counted].sum()),
                   by_class_hit_tokens={n: per_class[c] for c, n in enumerate(names)},
                   by_class_input_tokens={n: int(trace.input_length[trace.counted & (trace.class_codes == c)].sum())
                                          for c, n in enumerate(names)}, written_tokens=written_tokens)

    def class_rate(self, name: str) -> np.ndarray:
        inp = self.by_class_input_tokens[name]
        return self.by_class_hit_tokens[name] / inp if inp else np.zeros(len(self.x))


def _capacity_blocks(trace: CompiledTrace, capacities_tokens) -> tuple[np.ndarray, np.ndarray]:
    """(capacities in tokens as float64, the same in whole blocks: ``floor(C / block_size)``, and
    one more than the trace's distinct blocks for an unlimited ``inf``); negative or NaN raises."""
    caps = np.asarray(capacities_tokens, dtype=np.float64)
    if np.any(caps < 0) or np.any(np.isnan(caps)):
        raise ValueError("capacities: must be >= 0 tokens")
    finite = np.where(np.isinf(caps), 0.0, caps)
    blocks = np.where(np.isinf(caps), float(trace.n_unique + 1), np.floor(finite / trace.uniform_block_size))
    return caps, blocks.astype(np.int64)


def _evaluate(trace: CompiledTrace, keys: np.ndarray, thresholds: np.ndarray, x: np.ndarray) -> Curve:
    """Hit tokens at each threshold: token weights of counted accesses with key <= threshold.

    Each access falls in the bucket of the first threshold it fits under (a binary search over the
    k thresholds, O(n log k)); per-class bucket sums (one bincount) and a cumulative sum give every
    point. Sums stay below 2**53, so the float64 bincount is exact.
    """
    thresholds = np.asarray(thresholds)
    order = np.argsort(thresholds, kind="stable")
    k = len(thresholds)
    n_cls = len(trace.class_names)
    counted = trace.counted[trace.access_request]
    classes = trace.class_codes[trace.access_request].astype(np.int64)
    bucket = np.searchsorted(thresholds[order], keys, side="left")  # k = never within any threshold
    flat = np.where(counted, classes * (k + 1) + bucket, n_cls * (k + 1))
    sums = np.bincount(flat, weights=trace.tokens, minlength=n_cls * (k + 1) + 1)[: n_cls * (k + 1)]
    per_class = np.empty((n_cls, k), dtype=np.int64)
    per_class[:, order] = np.rint(np.cumsum(sums.reshape(n_cls, k + 1)[:, :k], axis=1))
    return Curve.of(trace, x, per_class)


def lru_curve(trace: CompiledTrace, capacities_tokens, keys: np.ndarray | None = None) -> Curve:
    """LRU hit tokens at every capacity (tokens; ``floor(C / block_size)`` blocks) in one pass."""
    caps, blocks = _capacity_blocks(trace, capacities_tokens)
    keys = lru_keys(trace) if keys is None else keys
    return _evaluate(trace, keys, blocks, caps)


def ttl_curve(trace: CompiledTrace, ttls_seconds, keys: np.ndarray | None = None,
              nxt: np.ndarray | None = None) -> Curve:
    """TTL hit tokens (unlimited capacity) at every TTL in seconds, in one pass."""
    ttls = np.asarray(ttls_seconds, dtype=np.float64)
    if np.any(ttls < 0) or np.any(np.isnan(ttls)):
        raise ValueError("ttls: must be >= 0 seconds")
    keys = ttl_keys(trace, nxt) if keys is None else keys
    # a first touch has reuse time inf: it never hits, even with an infinite TTL
    return _evaluate(trace, keys, np.minimum(ttls, np.finfo(np.float64).max), ttls)


def infinite_bound(trace: CompiledTrace, keys: np.ndarray | None = None) -> Curve:
    """Hit tokens of an unlimited cache that never forgets (every reuse hits)."""
    keys = lru_keys(trace) if keys is None else keys
    return _evaluate(trace, keys, np.array([COLD - 1]), np.array([math.inf]))


def belady_curve(trace: CompiledTrace, capacities_tokens, progress: bool = False,
                 nxt: np.ndarray | None = None) -> Curve:
    """Belady (MIN with bypass) hit tokens and tokens written at each capacity, in one stack pass.

    :func:`~tiered_kv.sim.policies.belady.belady_stack` gives every capacity at once; a
    trace whose ids are not chained falls back to one O(n log n) replay per capacity
    (``progress`` shows a bar for those). ``nxt``: :func:`~tiered_kv.sim.policies.belady.next_use`
    of the trace, when the caller has it.
    """
    caps, blocks = _capacity_blocks(trace, capacities_tokens)
    nxt = next_use(trace) if nxt is None else nxt
    stacked = belady_stack(trace, blocks, nxt)
    if stacked is None:
        per_class, written = _belady_replays(trace, caps, nxt, progress)
    else:
        per_class, written = stacked
    return Curve.of(trace, caps, per_class, written)


def _belady_replays(trace: CompiledTrace, caps: np.ndarray, nxt: np.ndarray, progress: bool
                    ) -> tuple[np.ndarray, np.ndarray]:
    """(hit tokens [class, capacity], tokens written [capacity]) from one :class:`Belady` replay per capacity."""
    from tqdm import tqdm

    it = tqdm(caps, desc="belady", unit="capacity", leave=False, delay=2, disable=not progress)
    out = np.zeros((len(trace.class_names), len(caps)), dtype=np.int64)
    written = np.zeros(len(caps), dtype=np.int64)
    for j, c in enumerate(it):
        run = Belady(capacity_tokens=None if math.isinf(c) else int(c)).run(trace, nxt=nxt)
        hit = trace.hit_tokens_from_blocks(run.hit_blocks)
        written[j] = run.extra["tokens_written"]
        out[:, j] = np.bincount(trace.class_codes[trace.counted], weights=hit[trace.counted],
                                minlength=len(out))
    return out, written


def default_capacities(trace: CompiledTrace, n: int = 100) -> np.ndarray:
    """``n`` log-spaced capacities in tokens (whole blocks) from one block to the trace's footprint."""
    bs = trace.uniform_block_size
    top = max(trace.n_unique, 2)
    k = n
    while True:  # rounding merges the smallest capacities: sample finer until n distinct
        blocks = np.unique(np.round(np.geomspace(1, top, k)).astype(np.int64))
        if blocks.size >= min(n, top) or k > 64 * n:
            break
        k += n
    if blocks.size > n:  # keep n of them, evenly spread in log space
        blocks = np.unique(blocks[np.round(np.linspace(0, blocks.size - 1, n)).astype(np.int64)])
    return blocks * bs


def default_ttls(trace: CompiledTrace, n: int = 100) -> np.ndarray:
    """``n`` log-spaced TTLs in seconds from 1 s to the trace's time span (at least 10 s)."""
    span = max(float(np.ptp(trace.timestamps)) if trace.n_requests else 0.0, 10.0)
    return np.geomspace(1.0, span, n)


# --- every registered policy at every capacity: hit tokens and SSD writes ---------------------


def lru_written_tokens(trace: CompiledTrace, capacities_tokens) -> np.ndarray:
    """Tokens written to the cache by LRU (every miss written) at every capacity, in one pass.

    An access is written iff it misses, i.e. its own stack distance exceeds the capacity in
    blocks (a present non-leading block is only touched); the chunk tokens of those accesses are
    what :func:`tiered_kv.sim.policies.wear` counts for a replay.
    """
    _, blocks = _capacity_blocks(trace, capacities_tokens)
    d = _stack_distances(trace.offsets, trace.blocks, trace.n_unique, False)
    order = np.argsort(d, kind="stable")
    ds = d[order]
    cum = np.concatenate([[0], np.cumsum(trace.chunk_tokens[order])])
    total = int(cum[-1])
    hits_upto = cum[np.searchsorted(ds, blocks, side="right")]  # tokens of accesses with d <= C
    return (total - hits_upto).astype(np.int64)


#: Set only inside a pool worker, by its initializer: the one way a forked worker gets its trace
#: (the arguments :func:`_replay_point` shares between its replays).
_POOL_POINTS: tuple | None = None


def _pool_init(trace: CompiledTrace, bytes_per_token: float) -> None:
    global _POOL_POINTS
    _POOL_POINTS = (trace, bytes_per_token, {})


def _pool_point(*point) -> tuple[int, int | None, int]:
    return _replay_point(*_POOL_POINTS, *point)


def _make_point_policy(spec: str, capacity_tokens: int | None, admission: str, bpt: float,
                       footprint_tokens: int = 0):
    """The policy object of ``spec`` at one capacity (what each replay of :func:`policy_curves` runs).

    A policy sized in bytes (``watermark``'s ``capacity_bytes``) gets the capacity at ``bpt``
    bytes per token; unlimited (None) is ``footprint_tokens`` (every distinct block) for it.
    """
    from tiered_kv.sim.policies import make_policy, parse_policy_spec
    from tiered_kv.sim.policies.plugin import policy_class

    _, known = policy_class(parse_policy_spec(spec)[0])
    fixed = {"capacity_tokens": capacity_tokens}
    if "capacity_bytes" in known and "capacity_tokens" not in known:
        tokens = footprint_tokens if capacity_tokens is None else capacity_tokens
        fixed = {"capacity_bytes": int(tokens * bpt)}
    if "bytes_per_token" in known:
        fixed["bytes_per_token"] = bpt
    if admission != "all":
        fixed["admission"] = admission
    return make_policy(spec, **fixed)


def _replay_point(trace: CompiledTrace, bpt: float, masks: dict, spec: str, capacity_tokens: int | None,
                  admission: str) -> tuple[int, int | None, int]:
    """(counted hit tokens, tokens written or None, block hits or None) of one policy at one capacity.

    The policy's own run counts what it wrote (the zoo's through ``blockwise.wear_extra``) and,
    for the zoo, its block hits; kvcache.ai's trie policies count neither. ``masks`` keeps each
    admission filter's write points, computed once per process, not per replay.
    """
    pol = _make_point_policy(spec, capacity_tokens, admission, bpt,
                             footprint_tokens=trace.n_unique * trace.uniform_block_size)
    if hasattr(pol, "block_run") and admission != "all":  # one mask per process, not per replay
        from tiered_kv.sim.policies import WritePoints

        if admission not in masks:
            masks[admission] = pol.admission.mask(trace)
        pol = replace(pol, admission=WritePoints(is_write_point=masks[admission]))
    run = pol.run(trace)
    written, block_hits = run.extra.get("tokens_written"), run.extra.get("block_hits")
    return (int(trace.hit_tokens_from_blocks(np.asarray(run.hit_blocks))[trace.counted].sum()),
            None if written is None else int(written), None if block_hits is None else int(block_hits))


def _wear_fields(trace: CompiledTrace, caps: np.ndarray, hit_tokens, written_tokens, bpt: float) -> dict:
    """Each point's :func:`~tiered_kv.sim.policies.blockwise.wear` as columns; None where a
    policy's run does not count the tokens it writes."""
    from tiered_kv.sim.policies.blockwise import capacity_slots, simulated_days, wear

    out = {"ssd_bytes_written": [], "bytes_written_per_hit_byte": [], "drive_writes_per_day": []}
    for h, w, c in zip(hit_tokens, written_tokens, caps, strict=True):
        fields = {} if w is None else wear(trace, w, h, capacity_slots(trace, None if math.isinf(c) else c), bpt)
        for k in out:
            out[k].append(fields.get(k))
    out["simulated_days"] = simulated_days(trace)
    return out


def policy_curves(trace: CompiledTrace, specs, capacities_tokens, *, admission: str = "all",
                  bytes_per_token: float | None = None, workers: int = 2, progress: bool = False) -> dict:
    """Hit tokens, hit rate and SSD writes of every policy spec at every capacity: ``{spec: {...}}``.

    ``specs``: registered names, plug-in files (``path.py:Class``) or ``name:key=value``.
    ``lru`` under admit-all and ``belady`` (the bound, which bypasses: admission does not apply)
    come from one pass; ``lru`` under a filter is replayed as ``class-lru`` with equal weights;
    every other policy once per capacity, in a pool of ``workers`` processes (1: this one).
    The wear fields are None only for a policy whose run does not report ``tokens_written``
    (kvcache.ai's trie policies).
    """
    from tiered_kv.sim.policies import get_admission, parse_policy_spec
    from tiered_kv.units import DEFAULT_BYTES_PER_TOKEN

    if admission not in ("all", "second-sighting"):
        get_admission(admission)  # raises, naming the filters
    bpt = float(bytes_per_token or DEFAULT_BYTES_PER_TOKEN)
    caps = np.asarray(capacities_tokens, dtype=np.float64)
    inp = int(trace.input_length[trace.counted].sum())
    out: dict[str, dict] = {}
    replay: list[str] = []
    for spec in specs:
        name, params = parse_policy_spec(spec)  # loads plug-ins, checks the syntax
        if name == "lru" and not params and admission == "all":
            hits, written = lru_curve(trace, caps).hit_tokens, lru_written_tokens(trace, caps)
        elif name == "belady" and not params:
            bel = belady_curve(trace, caps, progress=progress)
            hits, written = bel.hit_tokens, bel.written_tokens
        else:
            replay.append(spec)
            continue
        out[spec] = {"method": "one-pass", "hit_tokens": hits.tolist(), "written_tokens": written.tolist(),
                     "block_hits": None}
    out.update(_replay_curves(trace, replay, caps, admission, bpt, workers, progress))
    ordered = {}
    for spec in specs:
        d = out[spec]
        d["token_hit_rate"] = [h / inp if inp else 0.0 for h in d["hit_tokens"]]
        d.update(_wear_fields(trace, caps, d["hit_tokens"], d.pop("written_tokens"), bpt))
        d["admission"] = "n/a (bound)" if d["method"] == "one-pass" and parse_policy_spec(spec)[0] == "belady" \
            else admission
        ordered[spec] = d
    return ordered


def _replay_curves(trace: CompiledTrace, replay: list[str], caps: np.ndarray, admission: str, bpt: float,
                   workers: int, progress: bool) -> dict[str, dict]:
    """The specs with no one-pass curve, each replayed once per capacity (:func:`policy_curves`);
    every spec's parameters are checked first."""
    from tiered_kv.sim.policies import parse_policy_spec

    caps_arg = [None if math.isinf(c) else int(c) for c in caps]
    tasks = [(s, j) for j in range(len(caps)) for s in replay]  # interleaved: the bar moves evenly
    if not tasks:
        return {}
    run_spec = {s: ("class-lru" if parse_policy_spec(s) == ("lru", {}) else s) for s in replay}
    for s in replay:  # bad parameters fail here, before any replay or worker starts
        _make_point_policy(run_spec[s], None, admission, bpt)
    points = [(run_spec[s], caps_arg[j], admission) for s, j in tasks]
    results = dict(zip(tasks, _replay_points(trace, points, bpt, workers, progress), strict=True))
    out = {}
    for s in replay:
        rows = [results[(s, j)] for j in range(len(caps))]
        hits, written, block_hits = (list(col) for col in zip(*rows, strict=True))
        out[s] = {"method": "replay", "hit_tokens": hits, "written_tokens": written, "block_hits": block_hits}
        if run_spec[s] != s:
            out[s]["replayed_as"] = run_spec[s]
    return out


def _replay_points(trace: CompiledTrace, points: list[tuple], bpt: float, workers: int,
                   progress: bool) -> list:
    """``_replay_point(*point)`` for every point, in this process or a pool of ``workers`` forked
    processes (each holding the trace once, from its initializer: :data:`_POOL_POINTS`); results in the points' order."""
    from tqdm import tqdm

    results: list = [None] * len(points)
    with tqdm(total=len(points), desc="policies", unit="replay", leave=False, disable=not progress) as bar:
        if workers <= 1 or len(points) < 2:
            masks: dict = {}
            for i, point in enumerate(points):
                results[i] = _replay_point(trace, bpt, masks, *point)
                bar.update(1)
            return results
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed

        ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
        with ProcessPoolExecutor(max_workers=int(workers), mp_context=ctx, initializer=_pool_init,
                                 initargs=(trace, bpt)) as pool:
            futs = {pool.submit(_pool_point, *point): i for i, point in enumerate(points)}
            for f in as_completed(futs):
                results[futs[f]] = f.result()
                bar.update(1)
    return results
