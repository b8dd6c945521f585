"""One event-replay engine for every policy, curve and the cluster model.

A trace frame (:mod:`tiered_kv.sim.traces`) is compiled once into a :class:`CompiledTrace`:
flat numpy arrays (block ids remapped to dense ints, per-request offsets, timestamps, class
codes, per-access token weights). Policies, the one-pass curves and the cluster model all read
those arrays, so a trace is parsed and hashed once however many capacities are asked for.

Replay semantics (docs/semantics.md): requests in timestamp order, stable for ties; a request's hit
tokens are ``min(p * block_size, input_length)`` where ``p`` is its number of *leading* blocks
present at lookup; after the lookup every block of the request is touched or inserted, in order.

Other tools count differently; :class:`ReplayOptions` expresses those differences as options of
this one engine rather than as copies of it (presets in :mod:`tiered_kv.sim.peers.semantics`):

- ``warmup_fraction``: the first fraction of requests (in replay order) warm the cache but are
  not counted (kvcache.ai's simulator counts the last 50% only);
- ``clamp_to_input``: ``min(p*bs, L)`` (True) or ``p*bs`` (False, LMCache);
- ``full_blocks_only``: a partial last block is neither looked up nor stored (a real server logs
  complete chunks only);
- ``order``: ``"timestamp"`` (stable) or ``"file"`` (``request_id`` order, which is file order).

The split of work: options that change the event stream or the counting live here; a policy only
decides which blocks are present (:mod:`tiered_kv.sim.policies`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

if TYPE_CHECKING:  # polars is imported where a frame is compiled: a cached trace needs only numpy
    import polars as pl


@dataclass(frozen=True)
class ReplayOptions:
    """How a trace is replayed and counted (see the module docstring)."""

    warmup_fraction: float = 0.0
    clamp_to_input: bool = True
    full_blocks_only: bool = False
    order: Literal["timestamp", "file"] = "timestamp"

    def __post_init__(self) -> None:
        if not (0.0 <= float(self.warmup_fraction) < 1.0):
            raise ValueError(f"ReplayOptions.warmup_fraction: must be in [0, 1), got {self.warmup_fraction!r}")
        if self.order not in ("timestamp", "file"):
            raise ValueError(f"ReplayOptions.order: must be 'timestamp' or 'file', got {self.order!r}")
        for name in ("clamp_to_input", "full_blocks_only"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"ReplayOptions.{name}: must be True or False")


@dataclass(frozen=True, eq=False)
class CompiledTrace:
    """A trace as flat arrays, in replay order. Build with :func:`compile_trace`.

    Request ``r`` accesses ``blocks[offsets[r]:offsets[r+1]]`` (dense ids ``0..n_unique-1``);
    ``tokens`` holds each access's token weight, so the hit tokens of a request whose first ``p``
    blocks hit are ``tokens[offsets[r]:offsets[r]+p].sum()``. ``counted[r]`` is False for
    warm-up requests.
    """

    request_id: np.ndarray  # int64 [n]
    timestamps: np.ndarray  # float64 [n], seconds, non-decreasing in timestamp order
    input_length: np.ndarray  # int64 [n]
    block_size: np.ndarray  # int64 [n]
    class_codes: np.ndarray  # int32 [n], index into class_names
    class_names: tuple[str, ...]
    offsets: np.ndarray  # int64 [n+1]
    blocks: np.ndarray  # int32 [m], dense block ids
    depth: np.ndarray  # int32 [m], position of the block in its request (0 = first)
    tokens: np.ndarray  # int64 [m], tokens this access contributes when it hits
    chunk_tokens: np.ndarray  # int64 [m], tokens stored in the block (for byte sizes)
    block_keys: np.ndarray  # uint64 [n_unique], the original chained id of each dense id
    counted: np.ndarray  # bool [n]

    @property
    def n_requests(self) -> int:
        return int(self.request_id.shape[0])

    @property
    def n_accesses(self) -> int:
        return int(self.blocks.shape[0])

    @property
    def n_unique(self) -> int:
        return int(self.block_keys.shape[0])

    @cached_property
    def uniform_block_size(self) -> int:
        """The trace's block size; capacities in tokens need one."""
        sizes = np.unique(self.block_size)
        if sizes.size != 1:
            raise ValueError(f"trace mixes block sizes {sizes.tolist()}; capacities in tokens need one")
        return int(sizes[0])

    @cached_property
    def access_request(self) -> np.ndarray:
        """int64 [m]: the request index of every access."""
        return np.repeat(np.arange(self.n_requests, dtype=np.int64), np.diff(self.offsets))

    @cached_property
    def access_time(self) -> np.ndarray:
        """float64 [m]: the timestamp of every access."""
        return self.timestamps[self.access_request]

    @cached_property
    def token_cumsum(self) -> np.ndarray:
        """int64 [m+1]: prefix sums of ``tokens`` (hit tokens from leading hit blocks)."""
        return np.concatenate([[0], np.cumsum(self.tokens, dtype=np.int64)])

    def hit_tokens_from_blocks(self, hit_blocks: np.ndarray) -> np.ndarray:
        """Per-request hit tokens from per-request leading hit blocks ``p``."""
        start = self.offsets[:-1]
        return self.token_cumsum[start + hit_blocks] - self.token_cumsum[start]

    def with_options(self, options: ReplayOptions) -> CompiledTrace:
        """The same trace reordered / trimmed / re-weighted for ``options`` (cheap numpy)."""
        t = self
        key = t.request_id if options.order == "file" else t.timestamps
        perm = np.argsort(key, kind="stable")
        if not np.array_equal(perm, np.arange(t.n_requests)):
            lengths = np.diff(t.offsets)[perm]
            offsets = _offsets(lengths)
            # access index of every access of the permuted requests, in their new order
            idx = np.repeat(t.offsets[:-1][perm] - offsets[:-1], lengths) + np.arange(offsets[-1])
            t = replace(t, offsets=offsets, **{f: getattr(t, f)[perm] for f in _PER_REQUEST},
                        **{f: getattr(t, f)[idx] for f in _PER_ACCESS})
        blocks, depth, chunk, offsets = t.blocks, t.depth, t.chunk_tokens, t.offsets
        bs_a = t.block_size[t.access_request]
        if options.full_blocks_only:
            keep = chunk == bs_a
            blocks, depth, chunk, bs_a = blocks[keep], depth[keep], chunk[keep], bs_a[keep]
            offsets = _offsets(np.bincount(t.access_request[keep], minlength=t.n_requests))
        tokens = chunk if options.clamp_to_input else bs_a.astype(np.int64)
        counted = np.ones(t.n_requests, dtype=bool)
        counted[: int(t.n_requests * options.warmup_fraction)] = False
        return replace(t, offsets=offsets, blocks=blocks, depth=depth, tokens=np.ascontiguousarray(tokens),
                       chunk_tokens=np.ascontiguousarray(chunk), counted=counted)


def compile_trace(df: pl.DataFrame, options: ReplayOptions | None = None) -> CompiledTrace:
    """Flatten a validated trace frame into a :class:`CompiledTrace` for ``options``."""
    import polars as pl

    options = options or ReplayOptions()
    n = df.height
    lengths = df["block_ids"].list.len().cast(pl.Int64).to_numpy()
    offsets = _offsets(lengths)
    flat = df["block_ids"].explode().to_numpy().astype(np.uint64, copy=False)
    if flat.shape[0] != offsets[-1]:  # explode yields a null for an empty list
        flat = df["block_ids"].list.explode(keep_nulls=False).to_numpy().astype(np.uint64)
    keys, dense = np.unique(flat, return_inverse=True)
    input_length = df["input_length"].to_numpy().astype(np.int64)
    block_size = df["block_size"].cast(pl.Int64).to_numpy()
    req = np.repeat(np.arange(n, dtype=np.int64), lengths)
    depth = (np.arange(flat.shape[0], dtype=np.int64) - offsets[:-1][req]).astype(np.int32)
    bs_a = block_size[req]
    chunk = np.clip(input_length[req] - depth.astype(np.int64) * bs_a, 1, bs_a)
    classes = df["traffic_class"]
    names = tuple(sorted(classes.unique().to_list()))
    codes = classes.replace_strict({c: i for i, c in enumerate(names)}, return_dtype=pl.Int32).to_numpy()
    base = CompiledTrace(
        request_id=df["request_id"].to_numpy().astype(np.int64),
        timestamps=df["timestamp_s"].to_numpy().astype(np.float64), input_length=input_length,
        block_size=block_size, class_codes=codes.astype(np.int32), class_names=names, offsets=offsets,
        blocks=dense.astype(np.int32).reshape(-1), depth=depth, tokens=chunk.astype(np.int64),
        chunk_tokens=chunk.astype(np.int64), block_keys=keys, counted=np.ones(n, dtype=bool))
    return base.with_options(options)


#: The per-request and the per-access arrays of a :class:`CompiledTrace`.
_PER_REQUEST = ("request_id", "timestamps", "input_length", "block_size", "class_codes", "counted")
_PER_ACCESS = ("blocks", "depth", "tokens", "chunk_tokens")


def _offsets(lengths: np.ndarray) -> np.ndarray:
    offsets = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


# --- results ----------------------------------------------------------------------------------


@dataclass
class ReplayResult:
    """Token hit rates of one replay, overall and per traffic class.

    ``hit_tokens_per_request`` and ``request_ids`` are in replay order; warm-up requests have
    their hit tokens listed but are excluded from every total.
    """

    policy: str
    requests: int
    input_tokens: int
    hit_tokens: int
    by_class: dict[str, dict[str, float]]
    hit_tokens_per_request: np.ndarray
    hit_blocks_per_request: np.ndarray
    request_ids: np.ndarray
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def token_hit_rate(self) -> float:
        return self.hit_tokens / self.input_tokens if self.input_tokens else 0.0

    def to_dict(self) -> dict[str, Any]:
        """The JSON fields of ``tiered-kv simulate --json`` (docs/semantics.md)."""
        return {"policy": self.policy, "requests": self.requests, "input_tokens": self.input_tokens,
                "hit_tokens": self.hit_tokens, "token_hit_rate": self.token_hit_rate,
                "by_class": self.by_class, **self.extra}


def summarize(trace: CompiledTrace, hit_tokens: np.ndarray) -> tuple[int, int, int, dict[str, dict]]:
    """(requests, input_tokens, hit_tokens, by_class) over counted requests."""
    c = trace.counted
    by_class: dict[str, dict] = {}
    for code, name in enumerate(trace.class_names):
        sel = c & (trace.class_codes == code)
        inp, hit = int(trace.input_length[sel].sum()), int(hit_tokens[sel].sum())
        by_class[name] = {"requests": int(sel.sum()), "input_tokens": inp, "hit_tokens": hit,
                          "token_hit_rate": hit / inp if inp else 0.0}
    return int(c.sum()), int(trace.input_length[c].sum()), int(hit_tokens[c].sum()), by_class


def replay(trace: CompiledTrace | pl.DataFrame, policy: Any, options: ReplayOptions | None = None
           ) -> ReplayResult:
    """Replay ``trace`` through ``policy`` (a registered policy object, :mod:`tiered_kv.sim.policies`).

    ``trace`` may be a frame (compiled here for ``options``) or an already compiled trace (then
    ``options``, if given, re-applies ordering/trimming/weights/warm-up to it).
    """
    if not isinstance(trace, CompiledTrace):  # a trace frame
        trace = compile_trace(trace, options)
    elif options is not None:
        trace = trace.with_options(options)
    run = policy.run(trace)
    hit_blocks = np.asarray(run.hit_blocks, dtype=np.int64)
    hit_tokens = trace.hit_tokens_from_blocks(hit_blocks)
    requests, inp, hit, by_class = summarize(trace, hit_tokens)
    return ReplayResult(policy=policy.name, requests=requests, input_tokens=inp, hit_tokens=hit,
                        by_class=by_class, hit_tokens_per_request=hit_tokens,
                        hit_blocks_per_request=hit_blocks, request_ids=trace.request_id,
                        extra=dict(run.extra))
