"""Prefill across the three tiers: key -> look up -> load -> compute the suffix -> replay -> first token.

One prefill of N tokens, with P = the tokens whose global KV the SSD tier holds (whole blocks),
in stages that are methods over one small state object (:class:`_Prefill`):

1. key: chained block keys of the prompt (:func:`tiered_kv.keys.block_keys`), computed once:
   the SSD lookup and write and the host-tier entry all take them (:class:`PrefixTier`).
2. lookup (``_lookup``): this machine's host tier, for window caches at a block boundary Q <= P.
3. load (``_lookup``): the SSD tier's longest stored prefix (reads and verifies the chunks).
4. dequantize (``_restore``): FP4 chunks -> global KV [P, 2, Hkv, D].
5. replay (``_restore``): the encoder windows at P. From the host tier when Q = P (or when
   running the encoder over [Q, P) costs no more than R tokens); otherwise rebuilt by *bounded
   replay* of the last R prefix tokens from empty windows (exact when R >= L_e*(W-1)).
6. encoder (``_encode``): over the suffix [P, N), producing the global KV of the new tokens.
7. decode (``_decode``): the decoder over the last R tokens [N-R, N) from empty windows
   (bounded replay), cross-attending to the global KV of all N tokens: the first token's logits.

TTFT is the sum of these stages. Then ``_store`` (reported separately: a server does it off the
critical path) writes new full blocks to the SSD tier with the request's traffic class and the
encoder (and, with ``reuse_decoder_windows``, decoder) windows at the last block boundary to
this machine's host tier.

The SSD tier is keyed by exact token prefix, so what it holds must be what an uncached
prefill of that prefix computes. When the encoder windows at P came from a bounded replay
shorter than L_e*(W-1) tokens they are approximate, and so is the global KV of the new blocks
computed from them. ``ssd_writes`` decides what happens then:

- ``"exact"`` (default): off the critical path, the encoder windows at P are rebuilt by an
  *exact* replay (L_e*(W-1) tokens) and the new blocks are recomputed from them before they
  are written; the first token still used the fast approximate state. Cost: the catch-up
  tokens, reported in ``computed_tokens["store_catch_up"]`` and in ``store_s``.
- ``"skip"``: blocks from an approximate state are not written (the prefix stops growing on
  this machine until a host-tier hit or an exact replay).
- ``"approximate"``: write them anyway (kept for the drift experiment: later hits on every
  machine then inherit the approximation).

Host-tier entries are only ever exact (from position 0, from the host tier, or from an exact
replay), so a host-tier hit never carries a replay's approximation forward.

Exactness: every global KV the decoder sees has been through the same FP4 round trip as the
SSD tier applies (the blocks are quantized exactly as :func:`tiered_kv.codec.quantize_blocks`
does), so a hit and a miss see identical numbers; with the host tier's windows present, a
cached prefill equals an uncached one. The decoder's prefill semantics is bounded replay
whatever is cached, so its cost is L_d*R, not L_d*N. With ``reuse_decoder_windows=True`` the
decoder instead continues from the host tier's decoder windows at Q whenever they are there
(N-Q decoder tokens instead of R; the result is then exact, equal to an uncached pass). Those
windows are computed exactly off the critical path at every block boundary stored, whatever
the block size and R (an exact decoder replay of L_d*(W-1) tokens when the first-token pass
did not already produce them).

Several engines may share one SSD tier (the global KV is position- and machine-independent);
each has its own host tier, as a machine would.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

import torch

from tiered_kv import codec
from tiered_kv.keys import DEFAULT_FORMAT, Namespace, block_keys
from tiered_kv.model import EncoderDecoder, WindowState, check_tokens
from tiered_kv.tiers.gpu import GPUTier, InFlight
from tiered_kv.tiers.host import HostEntry, HostTier
from tiered_kv.tiers.ssd import Hit

STAGES = ("key", "lookup", "load", "dequantize", "replay", "encoder", "decode")
SSD_WRITES = ("exact", "skip", "approximate")


class PrefixTier(Protocol):
    """What the engine needs of an SSD tier: lookups and writes by block keys it computed once
    (:class:`tiered_kv.tiers.ssd.SSDTier` is one; a benchmark may put a view of one in between)."""

    namespace: Namespace

    def get_prefix_keys(self, keys: list[bytes], traffic_class: str | None = None) -> Hit: ...

    def put_keys(self, keys: list[bytes], kv: torch.Tensor, traffic_class: str = "default", *,
                 kv_offset: int = 0) -> int: ...


@dataclass
class PrefillResult:
    """First-token logits, where the prefix came from, and how long each stage took."""

    request_id: str
    logits: torch.Tensor  # [vocab]
    n_tokens: int
    hit_tokens: dict[str, int]  # {"ssd": P, "host": Q}
    computed_tokens: dict[str, int]  # encoder suffix, encoder replay, decoder replay tokens
    timings_s: dict[str, float] = field(default_factory=dict)
    stored_blocks: int = 0
    store_s: float = 0.0
    decoder_from_host: bool = False
    encoder_exact: bool = True

    @property
    def ttft_s(self) -> float:
        return sum(self.timings_s.get(s, 0.0) for s in STAGES)

    @property
    def next_token(self) -> int:
        return int(self.logits.argmax())


def fp4_roundtrip(kv: torch.Tensor, namespace: Namespace) -> torch.Tensor:
    """The global KV as the SSD tier would return it: full blocks chunk by chunk, the tail alone."""
    kv = kv.detach()  # FP4 storage is not differentiable
    if namespace.fmt in ("bf16", "fp32"):  # unquantized ablation: only the cast the store applies
        return kv.to(codec.raw_dtype(namespace.fmt)).to(kv.dtype)
    bs = namespace.block_size
    full = (kv.shape[0] // bs) * bs
    parts = []
    if full:
        parts.append(codec.dequantize_chunks(codec.quantize_blocks(kv[:full].contiguous(), namespace), kv.dtype))
    if full < kv.shape[0]:
        from tiered_kv.kernels import fp4

        parts.append(fp4.dequantize(fp4.quantize(kv[full:].contiguous(), namespace.fmt), kv.dtype))
    return torch.cat(parts) if len(parts) > 1 else parts[0]


def namespace_for(model: EncoderDecoder, fmt: str = DEFAULT_FORMAT, block_size: int = 64, tag: str = "") -> Namespace:
    """The SSD namespace of a model: its config (and an optional weights tag) fingerprint it."""
    c = model.cfg
    name = f"tiered-kv/{c.name}/d{c.d_model}-e{c.enc_layers}-d{c.dec_layers}-h{c.kv_heads}x{c.head_dim}{tag}"
    return Namespace(model=name, fmt=fmt, block_size=block_size, kv_heads=c.kv_heads, head_dim=c.head_dim)


def encode_blocks(model: EncoderDecoder, tokens: torch.Tensor, start: int, state: WindowState | None,
                  block: int) -> tuple[torch.Tensor, WindowState, WindowState | None]:
    """``model.encode`` in calls that end on multiples of ``block``: the global KV, the windows at
    the end and those at the last multiple of ``block`` passed (None if none).

    Why: the same function computed in a differently shaped call can differ in its last float
    bits, and near an FP4 rounding boundary that changes a stored byte. Encoding block by block
    gives every stored block a call of the same shape whatever the prompt or the path (a miss,
    a host hit's suffix, an exact catch-up), so its bytes are a function of the prefix alone.
    """
    outs, at_block, a, end = [], None, start, start + tokens.shape[0]
    while a < end:
        b = min(end, (a // block + 1) * block)
        kv, state = model.encode(tokens[a - start:b - start], a, state)
        outs.append(kv)
        at_block = state if b % block == 0 else at_block
        a = b
    return (torch.cat(outs) if len(outs) > 1 else outs[0]), state, at_block


@dataclass
class _Prefill:
    """One prefill as it moves through the stages; each stage fills in its part (see the module
    docstring for P, Q and the boundary)."""

    tokens: torch.Tensor
    keys: list[bytes]  # the prompt's block keys, computed once
    traffic_class: str
    timings: dict[str, float] = field(default_factory=dict)
    # lookup
    hit: Hit | None = None
    entry: HostEntry | None = None  # this machine's host-tier windows at Q
    q: int = 0
    # restore
    prefix_kv: torch.Tensor | None = None  # the SSD tier's global KV of [0, P)
    enc_state: WindowState | None = None  # encoder windows at P
    enc_replayed: int = 0
    host_used: int = 0  # Q when the encoder windows came from the host tier, else 0
    state_exact: bool = True  # the windows at P are what an uncached prefill computes
    # encode
    computed: torch.Tensor | None = None  # the encoder's global KV of [P, N)
    boundary_state: WindowState | None = None  # encoder windows at the last block boundary
    end_state: WindowState | None = None  # encoder windows at N
    global_kv: torch.Tensor | None = None  # [0, N), through the FP4 round trip
    # decode
    logits: torch.Tensor | None = None
    dec_state: WindowState | None = None
    dec_tokens: int = 0
    dec_from_host: bool = False
    dec_at_boundary: WindowState | None = None  # exact decoder windows at the boundary, if known

    @property
    def n(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def p(self) -> int:
        return self.hit.hit_tokens if self.hit is not None else 0

    @contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        t0 = time.perf_counter()
        yield
        self.timings[stage] = time.perf_counter() - t0


class Engine:
    """One machine: a model, its own host tier and GPU tier, and a (possibly shared) SSD tier."""

    _ids = itertools.count()

    def __init__(self, model: EncoderDecoder, ssd_tier: PrefixTier, host_tier: HostTier | None = None, *,
                 gpu_tier: GPUTier | None = None, replay: int | None = None,
                 reuse_decoder_windows: bool = False, ssd_writes: str = "exact", name: str = "engine0") -> None:
        ns = ssd_tier.namespace
        if (ns.kv_heads, ns.head_dim) != (model.cfg.kv_heads, model.cfg.head_dim):
            raise ValueError(f"ssd_tier namespace KV shape {ns.kv_shape} does not match the model "
                             f"(kv_heads={model.cfg.kv_heads}, head_dim={model.cfg.head_dim})")
        r = model.cfg.replay if replay is None else replay
        if not isinstance(r, int) or r < 1:
            raise ValueError(f"replay: must be an integer >= 1 token, got {replay!r}")
        if ssd_writes not in SSD_WRITES:
            raise ValueError(f"ssd_writes: must be one of {list(SSD_WRITES)}, got {ssd_writes!r}")
        self.ssd_writes = ssd_writes
        self.model = model.eval()
        self.ssd = ssd_tier
        self.host = host_tier if host_tier is not None else HostTier()
        self.gpu = gpu_tier if gpu_tier is not None else GPUTier()
        self.replay = r
        self.reuse_decoder_windows = reuse_decoder_windows
        self.name = name
        self.namespace = ns

    # ------------------------------------------------------------------ prefill

    @torch.no_grad()
    def prefill(self, tokens, traffic_class: str = "default", *, request_id: str | None = None,
                keep_running: bool = False, store: bool = True) -> PrefillResult:
        """Prefill ``tokens`` (1-D ids) and return the first token's logits and the stage timings.

        ``keep_running`` leaves the request in the GPU tier (for decoding) under ``request_id``
        (default ``<engine name>-<n>``); otherwise it is released at once. ``store=False`` writes nothing to the SSD and host tiers (a benchmark
        that measures several cases against the same cached state uses it).
        """
        device = self.model.embed.weight.device  # CPU here; the same code runs on a CUDA model
        tokens = torch.as_tensor(tokens, dtype=torch.long).to(device)
        check_tokens(tokens, self.model.cfg, what="prompt")
        t0 = time.perf_counter()
        st = _Prefill(tokens, block_keys(tokens.cpu(), self.namespace), traffic_class)
        st.timings["key"] = time.perf_counter() - t0
        self._lookup(st)
        self._restore(st)
        self._encode(st)
        self._decode(st)
        t0 = time.perf_counter()
        stored, catch_up = self._store(st) if store else (0, 0)
        store_s = time.perf_counter() - t0
        rid = request_id or f"{self.name}-{next(self._ids)}"
        if keep_running:
            self.gpu.admit(InFlight(rid, tokens, st.global_kv, st.end_state, st.dec_state, traffic_class))
        return PrefillResult(
            request_id=rid, logits=st.logits[-1], n_tokens=st.n,
            hit_tokens={"ssd": st.p, "host": st.host_used},
            computed_tokens={"encoder_suffix": st.n - st.p, "encoder_replay": st.enc_replayed,
                             "decoder": st.dec_tokens, "store_catch_up": catch_up},
            timings_s=st.timings, stored_blocks=stored, store_s=store_s, decoder_from_host=st.dec_from_host,
            encoder_exact=st.state_exact)

    def _lookup(self, st: _Prefill) -> None:
        """The SSD tier's longest stored prefix P, then this machine's host windows at Q <= P."""
        with st.timed("load"):
            st.hit = self.ssd.get_prefix_keys(st.keys, st.traffic_class)
        with st.timed("lookup"):
            if st.p:
                st.q, st.entry = self.host.lookup(st.keys[: st.p // self.namespace.block_size],
                                                  self.namespace.block_size)

    def _restore(self, st: _Prefill) -> None:
        """The prefix's global KV, dequantized, and the encoder windows at P: from the host tier
        (continued exactly over [Q, P) when that costs no more than R tokens) or a bounded replay."""
        device = str(st.tokens.device)
        with st.timed("dequantize"):
            st.prefix_kv = st.hit.kv(torch.float32, device=device) if st.p else None
        with st.timed("replay"):
            p, q, cfg = st.p, st.q, self.model.cfg
            if p and st.entry is not None and p - q <= self.replay:
                st.enc_state, st.host_used = st.entry.encoder, q
                if q < p:  # exact continuation over [Q, P); its global KV is discarded (SSD's is kept)
                    _, st.enc_state, _ = encode_blocks(self.model, st.tokens[q:p], q, st.enc_state,
                                                       self.namespace.block_size)
                    st.enc_replayed = p - q
            elif p:
                st.enc_state = self.model.replay_encoder(st.tokens, p, self.replay)
                st.enc_replayed = min(p, self.replay)
                st.state_exact = p <= self.replay or self.replay >= cfg.enc_layers * (cfg.window - 1)

    def _encode(self, st: _Prefill) -> None:
        """The encoder over the suffix [P, N), in block-aligned calls, keeping the windows at the
        last block boundary; everything the decoder sees goes through the FP4 round trip."""
        with st.timed("encoder"):
            bs = self.namespace.block_size
            st.boundary_state = st.enc_state if st.n // bs * bs == st.p else None
            st.end_state, st.global_kv = st.enc_state, st.prefix_kv
            if st.n > st.p:
                st.computed, st.end_state, at_block = encode_blocks(self.model, st.tokens[st.p:], st.p,
                                                                    st.enc_state, bs)
                st.boundary_state = at_block if at_block is not None else st.boundary_state
                computed_rt = fp4_roundtrip(st.computed, self.namespace)
                st.global_kv = computed_rt if st.prefix_kv is None else torch.cat([st.prefix_kv, computed_rt])

    def _decode(self, st: _Prefill) -> None:
        """The first token: a bounded replay of the last R tokens, or (``reuse_decoder_windows``)
        the decoder continued from the host tier's exact windows at Q."""
        with st.timed("decode"):
            n, q, entry = st.n, st.q, st.entry
            boundary = (n // self.namespace.block_size) * self.namespace.block_size
            st.dec_from_host = (self.reuse_decoder_windows and entry is not None and entry.decoder is not None
                                and entry.decoder.end == q and q == st.host_used and q < n)
            if st.dec_from_host:
                start, windows = q, entry.decoder
                if q < boundary < n:  # split at the boundary: its windows come for free (and exact)
                    _, st.dec_at_boundary = self.model.decode(st.tokens[q:boundary], q, st.global_kv, windows)
                    start, windows = boundary, st.dec_at_boundary
                st.logits, st.dec_state = self.model.decode(st.tokens[start:], start, st.global_kv, windows)
                st.dec_tokens = n - q
            else:
                st.logits, st.dec_state = self.model.first_token_logits(st.tokens, st.global_kv, self.replay)
                st.dec_tokens = min(n, self.replay)
            if st.dec_state.end == boundary and (st.dec_from_host or n <= self.replay):
                st.dec_at_boundary = st.dec_state

    def _store(self, st: _Prefill) -> tuple[int, int]:
        """Off the critical path: new full blocks to the SSD tier (only exact ones, unless
        ``ssd_writes="approximate"``), exact windows at the last boundary to the host tier.
        Returns (blocks written, catch-up tokens computed)."""
        bs, p = self.namespace.block_size, st.p
        boundary = (st.n // bs) * bs
        exact, stored, catch_up, new_blocks = st.state_exact, 0, 0, None
        if st.computed is not None and boundary > p:
            new_blocks = st.computed[: boundary - p]
            if not exact and self.ssd_writes == "exact":
                new_blocks, catch_up = self._catch_up(st, boundary)
                exact = True
            if exact or self.ssd_writes == "approximate":
                stored = self.ssd.put_keys(st.keys[: boundary // bs], new_blocks, st.traffic_class, kv_offset=p)
        if boundary and st.boundary_state is not None and exact and (boundary > st.q or st.entry is None):
            if self.reuse_decoder_windows and st.dec_at_boundary is None:
                exact_kv = st.global_kv if catch_up == 0 else torch.cat(
                    [st.global_kv[:p], fp4_roundtrip(new_blocks, self.namespace)])
                reach = self.model.cfg.decoder_reach  # a decoder replay long enough to be exact
                _, st.dec_at_boundary = self.model.first_token_logits(st.tokens[:boundary], exact_kv, reach)
                catch_up += min(boundary, reach)
            self.host.put(st.keys[boundary // bs - 1], HostEntry(st.boundary_state, st.dec_at_boundary))
        return stored, catch_up

    def _catch_up(self, st: _Prefill, boundary: int) -> tuple[torch.Tensor, int]:
        """Exact windows at P, then the new blocks recomputed from them (``ssd_writes="exact"``).

        Block-aligned calls from a block boundary far enough back that, from P on, every call has
        the shape and inputs of an uncached prefill's: byte-identical blocks. Sets the windows at
        the boundary; returns the new blocks and the tokens computed."""
        bs, p, cfg = self.namespace.block_size, st.p, self.model.cfg
        s0 = max(0, (p - cfg.enc_layers * (cfg.window - 1 + bs)) // bs * bs)
        _, exact_state, _ = encode_blocks(self.model, st.tokens[s0:p], s0, None, bs)
        new_blocks, st.boundary_state, _ = encode_blocks(self.model, st.tokens[p:boundary], p, exact_state, bs)
        return new_blocks, (p - s0) + (boundary - p)

    # ------------------------------------------------------------------ decoding

    @torch.no_grad()
    def decode_step(self, request_id: str, token: int) -> torch.Tensor:
        """Append one token to a running request; return the next token's logits."""
        st = self.gpu.get(request_id)
        old = st.nbytes
        pos = st.tokens.shape[0]
        tok = torch.tensor([token], dtype=torch.long, device=st.tokens.device)
        kv, st.encoder = self.model.encode(tok, pos, st.encoder)
        st.global_kv = torch.cat([st.global_kv, fp4_roundtrip(kv, self.namespace)])
        logits, st.decoder = self.model.decode(tok, pos, st.global_kv, st.decoder)
        st.tokens = torch.cat([st.tokens, tok])
        self.gpu.update(st, old)
        return logits[-1]

    def release(self, request_id: str) -> InFlight:
        """Finish a running request (its GPU-tier KV is freed)."""
        return self.gpu.release(request_id)
