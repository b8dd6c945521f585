"""Prefill across the three tiers: key -> look up -> load -> compute the suffix -> replay -> first token.

One prefill of N tokens, with P = the tokens whose global KV the SSD tier holds (whole blocks):

1. key: chained block keys of the prompt (:func:`tiered_kv.keys.block_keys`).
2. lookup: this machine's host tier, for window caches at a block boundary Q <= P.
3. load: the SSD tier's longest stored prefix (reads and verifies the chunks).
4. dequantize: FP4 chunks -> global KV [P, 2, Hkv, D].
5. replay: the encoder windows at P. From the host tier when Q = P (or when running the
   encoder over [Q, P) costs no more than R tokens); otherwise rebuilt by *bounded replay* of
   the last R prefix tokens from empty windows (exact when R >= L_e*(W-1)).
6. encoder: over the suffix [P, N), producing the global KV of the new tokens.
7. decode: the decoder over the last R tokens [N-R, N) from empty windows (bounded replay),
   cross-attending to the global KV of all N tokens; yields the first token's logits.

TTFT is the sum of these stages. After the first token, new full blocks go to the SSD tier
with the request's traffic class and the encoder (and, with ``reuse_decoder_windows``, decoder)
windows at the last block boundary go to this machine's host tier ("store", reported
separately: a server does it off the critical path).

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
- ``"approximate"``: write them anyway (the pre-fix behaviour, kept for the drift experiment:
  later hits on every machine then inherit the approximation).

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
from dataclasses import dataclass, field

import torch

from tiered_kv import codec
from tiered_kv.keys import Namespace, block_keys
from tiered_kv.model import EncoderDecoder, WindowState, _check_tokens
from tiered_kv.tiers.gpu import GPUTier, InFlight
from tiered_kv.tiers.host import HostEntry, HostTier

STAGES = ("key", "lookup", "load", "dequantize", "replay", "encoder", "decode")
SSD_WRITES = ("exact", "skip", "approximate")


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
        return kv.to(codec._raw_dtype(namespace.fmt)).to(kv.dtype)
    bs = namespace.block_size
    full = (kv.shape[0] // bs) * bs
    parts = []
    if full:
        parts.append(codec.dequantize_chunks(codec.quantize_blocks(kv[:full].contiguous(), namespace), kv.dtype))
    if full < kv.shape[0]:
        from tiered_kv.kernels import fp4

        parts.append(fp4.dequantize(fp4.quantize(kv[full:].contiguous(), namespace.fmt), kv.dtype))
    return torch.cat(parts) if len(parts) > 1 else parts[0]


def namespace_for(model: EncoderDecoder, fmt: str = "mxfp4", block_size: int = 64, tag: str = "") -> Namespace:
    """The SSD namespace of a model: its config (and an optional weights tag) fingerprint it."""
    c = model.cfg
    name = f"tiered-kv/{c.name}/d{c.d_model}-e{c.enc_layers}-d{c.dec_layers}-h{c.kv_heads}x{c.head_dim}{tag}"
    return Namespace(model=name, fmt=fmt, block_size=block_size, kv_heads=c.kv_heads, head_dim=c.head_dim)


def encode_blocks(model: EncoderDecoder, tokens: torch.Tensor, start: int, state: WindowState | None,
                  block: int) -> tuple[torch.Tensor, WindowState]:
    """``model.encode`` in calls that end on multiples of ``block``.

    Why: the same function computed in a differently shaped call can differ in its last float
    bits, and near an FP4 rounding boundary that changes a stored byte. Encoding block by block
    gives every stored block a call of the same shape whatever the prompt or the path (a miss,
    a host hit's suffix, an exact catch-up), so its bytes are a function of the prefix alone.
    """
    outs, a, end = [], start, start + tokens.shape[0]
    while a < end:
        b = min(end, (a // block + 1) * block)
        kv, state = model.encode(tokens[a - start:b - start], a, state)
        outs.append(kv)
        a = b
    if not outs:
        return model.encode(tokens, start, state)
    return (torch.cat(outs) if len(outs) > 1 else outs[0]), state


class Engine:
    """One machine: a model, its own host tier and GPU tier, and a (possibly shared) SSD tier."""

    _ids = itertools.count()

    def __init__(self, model: EncoderDecoder, ssd_tier, host_tier: HostTier | None = None, *,
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

        ``keep_running`` leaves the request in the GPU tier (for decoding); otherwise it is
        released at once. ``store=False`` writes nothing to the SSD and host tiers (a benchmark
        that measures several cases against the same cached state uses it).
        """
        device = self.model.embed.weight.device  # CPU here; the same code runs on a CUDA model
        tokens = torch.as_tensor(tokens, dtype=torch.long).to(device)
        cfg = self.model.cfg
        _check_tokens(tokens, cfg, what="prompt", end=int(tokens.shape[0]) if tokens.ndim == 1 else None)
        n, bs, R = tokens.shape[0], self.namespace.block_size, self.replay
        t = {}
        clock = time.perf_counter

        t0 = clock()
        keys = block_keys(tokens.cpu(), self.namespace)
        t["key"] = clock() - t0

        t0 = clock()
        hit = self.ssd.get_prefix(tokens.cpu(), traffic_class)
        t["load"] = clock() - t0
        p = hit.hit_tokens

        t0 = clock()
        q, entry = self.host.lookup(keys[: p // bs], bs) if p else (0, None)
        t["lookup"] = clock() - t0

        t0 = clock()
        prefix_kv = hit.kv(torch.float32, device=str(device)) if p else None
        t["dequantize"] = clock() - t0

        # Encoder windows at P: host tier (exact) or bounded replay.
        t0 = clock()
        enc_state, enc_replayed, host_used = None, 0, 0
        enc_exact = True  # host entries are exact; a replay is exact when it reaches back far enough
        if p and entry is not None and p - q <= R:
            enc_state = entry.encoder
            host_used = q
            if q < p:  # exact continuation over [Q, P); its global KV is discarded (SSD's is kept)
                _, enc_state = encode_blocks(self.model, tokens[q:p], q, enc_state, bs)
                enc_replayed = p - q
        elif p:
            enc_state = self.model.replay_encoder(tokens, p, R)
            enc_replayed = min(p, R)
            enc_exact = p <= R or R >= cfg.enc_layers * (cfg.window - 1)
        enc_state_exact = enc_exact
        t["replay"] = clock() - t0

        # Encoder over the suffix, snapshotting the windows at the last block boundary.
        t0 = clock()
        boundary = (n // bs) * bs
        new_kv, state = [], enc_state
        boundary_state = enc_state if boundary == p else None
        if boundary > p:
            kv_a, state = encode_blocks(self.model, tokens[p:boundary], p, state, bs)
            new_kv.append(kv_a)
            boundary_state = state
        if n > max(p, boundary):
            start = max(p, boundary)
            kv_b, state = encode_blocks(self.model, tokens[start:n], start, state, bs)
            new_kv.append(kv_b)
        computed = torch.cat(new_kv) if new_kv else None
        # Everything the decoder sees goes through the SSD tier's FP4 round trip.
        computed_rt = fp4_roundtrip(computed, self.namespace) if computed is not None else None
        parts = [x for x in (prefix_kv, computed_rt) if x is not None]
        global_kv = torch.cat(parts) if len(parts) > 1 else parts[0]
        t["encoder"] = clock() - t0

        # Decoder: bounded replay over the last R tokens (or continue from host windows).
        t0 = clock()
        dec_from_host = (self.reuse_decoder_windows and entry is not None and entry.decoder is not None
                         and entry.decoder.end == q and q == host_used and q < n)
        dec_at_boundary = None
        if dec_from_host:
            if q < boundary < n:  # split at the boundary: its windows come for free (and exact)
                _, dec_at_boundary = self.model.decode(tokens[q:boundary], q, global_kv, entry.decoder,
                                                       history=tokens)
                logits, dec_state = self.model.decode(tokens[boundary:], boundary, global_kv, dec_at_boundary,
                                                      history=tokens)
            else:
                logits, dec_state = self.model.decode(tokens[q:], q, global_kv, entry.decoder, history=tokens)
            dec_tokens = n - q
        else:
            logits, dec_state = self.model.first_token_logits(tokens, global_kv, R)
            dec_tokens = min(n, R)
        if dec_state.end == boundary and (dec_from_host or n <= R):
            dec_at_boundary = dec_state
        t["decode"] = clock() - t0

        # Off the critical path: new full blocks to SSD, windows at the boundary to host.
        t0 = clock()
        stored, catch_up = 0, 0
        if store and computed is not None and boundary > p:
            new_blocks = computed[: boundary - p]
            if not enc_exact and self.ssd_writes == "exact":
                # Exact catch-up: exact windows at P, then the new blocks recomputed from them.
                # Block-aligned calls from a block boundary far enough back that, from P on, every
                # call has the shape and inputs of an uncached prefill's: byte-identical blocks.
                s0 = max(0, (p - cfg.enc_layers * (cfg.window - 1 + bs)) // bs * bs)
                _, exact_state = encode_blocks(self.model, tokens[s0:p], s0, None, bs)
                new_blocks, boundary_state = encode_blocks(self.model, tokens[p:boundary], p, exact_state, bs)
                catch_up = (p - s0) + (boundary - p)
                enc_exact = True
            if enc_exact or self.ssd_writes == "approximate":
                stored = self.ssd.put(tokens[:boundary].cpu(), new_blocks, traffic_class, kv_offset=p)
        if store and boundary and boundary_state is not None and enc_exact and (boundary > q or entry is None):
            if self.reuse_decoder_windows and dec_at_boundary is None:
                # Exact decoder windows at the boundary: a decoder replay long enough to be exact.
                s0 = max(0, boundary - cfg.dec_layers * (cfg.window - 1))
                exact_kv = global_kv if enc_exact and catch_up == 0 else torch.cat(
                    [global_kv[:p], fp4_roundtrip(new_blocks, self.namespace)])
                _, dec_at_boundary = self.model.decode(tokens[s0:boundary], s0, exact_kv, history=tokens)
                catch_up += boundary - s0
            self.host.put(keys[boundary // bs - 1], HostEntry(boundary_state, dec_at_boundary))
        store_s = clock() - t0

        rid = request_id or f"{self.name}-{next(self._ids)}"
        if keep_running:
            self.gpu.admit(InFlight(rid, tokens, global_kv, state if state is not None else enc_state,
                                    dec_state, traffic_class))
        return PrefillResult(
            request_id=rid, logits=logits[-1], n_tokens=n,
            hit_tokens={"ssd": p, "host": host_used},
            computed_tokens={"encoder_suffix": n - p, "encoder_replay": enc_replayed, "decoder": dec_tokens,
                             "store_catch_up": catch_up},
            timings_s=t, stored_blocks=stored, store_s=store_s, decoder_from_host=dec_from_host,
            encoder_exact=enc_state_exact)

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
        logits, st.decoder = self.model.decode(tok, pos, st.global_kv, st.decoder, history=st.tokens)
        st.tokens = torch.cat([st.tokens, tok])
        self.gpu.update(st, old)
        return logits[-1]

    def release(self, request_id: str) -> InFlight:
        """Finish a running request (its GPU-tier KV is freed)."""
        return self.gpu.release(request_id)
