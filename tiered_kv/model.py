"""A small YOCO-style encoder-decoder transformer whose caches map onto the three tiers.

Why this shape: the encoder's L_e sliding-window layers produce *one* global K/V per token
(projected from the encoder's final, normed hidden state) which every decoder layer
cross-attends to. That global KV is what goes to the SSD tier (FP4, prefix-keyed). Each
sliding-window layer (encoder and decoder) also has a window cache of its last W-1 keys and
values; those are small, per machine, and live in the host tier. When they are missing they
are rebuilt by *bounded replay*: running the stack over the last R tokens from empty windows.

Design choices worth knowing:

- The decoder's input is the token embedding, not the encoder's output. The decoder then
  needs only tokens and the global KV to run, never the encoder's hidden states, so a
  decoder replay over [N-R, N) is possible from the SSD tier alone.
- Rotary embeddings at absolute positions: a replayed segment sits at its true positions, and
  global keys are stored already rotated (their position never changes for a given prefix).
- A query at absolute position t sees window keys at positions p with t-W < p <= t; the
  inference, CPU cross-attention and batched training forms of attention are
  :mod:`tiered_kv.attention`'s, and compute the same function (tests check they all agree).
- Copying from far back is what makes a long context worth keeping, and a model trained for an
  hour on a CPU does not learn it unaided (``data/checkpoints/induction_toy.md``). The small
  preset turns on options that help attention learn it (the fields of :class:`ModelConfig`).
  The model reads its context only through the KV the tiers hold: there is no path from
  earlier token ids to the output except the global KV and the window caches, so what FP4 or
  bounded replay does to that KV is what the model's answers feel.
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from tiered_kv import DATA_DIR
from tiered_kv.attention import rope, windowed_attention

BOS = 256  #: start of a document (every file in the training corpus starts with it)
EOS = 257  #: end of a document
VOCAB_SIZE = 258


def need(cfg, cond: bool, setting: str, allowed: str) -> None:
    """The one form of a config's check: ``<Config>.<setting>: must be <allowed>, got <value>``."""
    if not cond:
        raise ValueError(f"{type(cfg).__name__}.{setting}: must be {allowed}, got {getattr(cfg, setting)!r}")


def need_ints(cfg, settings: tuple[str, ...]) -> None:
    """Each of ``settings`` an integer >= 1 (not a bool)."""
    for name in settings:
        value = getattr(cfg, name)
        need(cfg, isinstance(value, int) and not isinstance(value, bool) and value >= 1, name, "an integer >= 1")


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the encoder-decoder. ``window`` (W) and ``replay`` (R) are settings, not weights."""

    name: str = "custom"
    vocab_size: int = VOCAB_SIZE
    d_model: int = 192
    n_heads: int = 6
    kv_heads: int = 2
    head_dim: int = 32
    enc_layers: int = 3
    dec_layers: int = 3
    mlp_hidden: int = 512
    window: int = 512
    replay: int = 128
    max_seq_len: int = 65536
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    #: Rotary positions on the cross-attention to the global KV. Off (no positional encoding
    #: there; causality comes from the mask, locality from the sliding-window layers) leaves
    #: every dimension of a 32-dim head free for matching content thousands of positions back,
    #: where rotary phases leave only the few slowest frequencies usable. Checkpoints saved
    #: before the setting existed load with it on, as they were trained.
    cross_rope: bool = True
    #: Smeared keys on the cross-attention (Olsson et al. 2022): each decoder layer's key for
    #: global position j is a learned per-head mix of the stored global keys at j and j-1, so
    #: a query for "the token I see now" matches the position *after* an earlier occurrence of
    #: it: copying becomes a one-layer circuit (``induction_toy.md``). The stored global KV is
    #: unchanged; the decoder applies the mix. Off for checkpoints saved before it existed.
    cross_smear: bool = False
    #: QK-norm (as in OLMo 2 and Gemma 3): queries and keys RMS-normed per head with a learned
    #: gain, so logits start O(1) instead of ~0.03 and content matching is learnt early. Keys
    #: are normed where used (window caches hold normed keys; each decoder layer norms the
    #: stored global keys), so the tiers' contents keep their meaning. Off for old checkpoints.
    qk_norm: bool = False
    #: Learnable per-head multiplier on the cross-attention logits, starting at this value
    #: (0: none). With QK-norm a logit is at most sqrt(head_dim) times the norms' gains: 5.7
    #: at head_dim 32, too flat to pick one position out of thousands, so the scale is a
    #: parameter of its own (in log space: Adam moves it by a factor, not a step) instead of
    #: waiting for 32 per-dimension gains to grow.
    cross_logit_scale: float = 0.0
    #: A separate output projection instead of the transposed token embedding. Tying the two
    #: (and starting the table at std 0.02) kept a copy mechanism from forming on the toy copy
    #: task within its budget; an untied head lets the input table keep a large, distinct
    #: code per byte while the output learns its own. Off for checkpoints saved before it.
    untied_output: bool = False
    #: Standard deviation of the token embedding at initialization (0.02 as GPT-2; 1.0 as
    #: PyTorch's default, which gives the residual stream a token code of norm sqrt(d_model)).
    embed_init_std: float = 0.02
    #: A learned per-head linear distance penalty on the cross-attention (ALiBi), from 0: look-
    #: alike keys far back dilute it (cutting it at 512 keys *raised* the first copy-head
    #: checkpoint's vocabulary-only long-context gain by 0.035). Off for older checkpoints.
    cross_recency: bool = False

    def __post_init__(self) -> None:
        need_ints(self, ("vocab_size", "d_model", "n_heads", "kv_heads", "head_dim", "mlp_hidden", "window", "replay",
                         "max_seq_len", "enc_layers", "dec_layers"))
        need(self, self.vocab_size >= VOCAB_SIZE, "vocab_size", f">= {VOCAB_SIZE} (256 bytes + BOS + EOS)")
        need(self, self.n_heads % self.kv_heads == 0, "n_heads", f"a multiple of kv_heads={self.kv_heads}")
        need(self, self.head_dim % 2 == 0, "head_dim", "even (rotary pairs)")
        need(self, self.window >= 2, "window", ">= 2 tokens")
        need(self, self.replay <= self.max_seq_len, "replay", f"<= max_seq_len={self.max_seq_len}")
        need(self, self.rope_theta > 1, "rope_theta", "> 1")
        need(self, 0 < self.norm_eps < 1, "norm_eps", "in (0, 1)")
        need(self, 0 < self.embed_init_std <= 10, "embed_init_std", "in (0, 10]")
        need(self, 0 <= self.cross_logit_scale <= 100, "cross_logit_scale", "in [0, 100] (0: no scale)")

    @property
    def exact_replay_tokens(self) -> int:
        """Replay length from which replay through the deeper stack is exact: L*(W-1)+1."""
        return max(self.enc_layers, self.dec_layers) * (self.window - 1) + 1

    @property
    def decoder_reach(self) -> int:
        """Positions before a token that the decoder's windows can carry into its output: L_d*(W-1)."""
        return self.dec_layers * (self.window - 1)

    def to_dict(self) -> dict:
        return asdict(self)


PRESETS: dict[str, ModelConfig] = {
    # For tests: trains in seconds, windows small enough that replay exactness is cheap to hit.
    "tiny": ModelConfig(name="tiny", d_model=64, n_heads=2, kv_heads=1, head_dim=32, enc_layers=2,
                        dec_layers=2, mlp_hidden=128, window=16, replay=8, max_seq_len=2048),
    # For measurements: a few million parameters, W=512, R=128, with the options that help a
    # copy mechanism through the global KV form in a CPU-sized run (see the fields' comments).
    # The default checkpoint is trained in two stages, the first without the distance penalty
    # (tiered_kv.train.TRAIN_PRESETS).
    "small": ModelConfig(name="small", d_model=192, n_heads=6, kv_heads=2, head_dim=32, enc_layers=3,
                         dec_layers=3, mlp_hidden=512, window=512, replay=128, max_seq_len=65536,
                         cross_rope=False, cross_smear=True, qk_norm=True, cross_logit_scale=2.0,
                         untied_output=True, embed_init_std=1.0, cross_recency=True),
}


def preset(name: str, **overrides) -> ModelConfig:
    """A named preset, optionally with settings replaced (e.g. ``window=256``)."""
    if name not in PRESETS:
        raise ValueError(f"model preset: must be one of {sorted(PRESETS)}, got {name!r}")
    return replace(PRESETS[name], **overrides)


# --------------------------------------------------------------------------- window state

@dataclass
class LayerWindow:
    """Keys (rotated) and values of the last <= W-1 positions before ``end`` for one layer."""

    k: torch.Tensor  # [n, Hkv, D]
    v: torch.Tensor

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes


@dataclass
class WindowState:
    """Window caches of a stack of sliding-window layers, valid for continuing at ``end``."""

    end: int
    layers: list[LayerWindow]

    @property
    def nbytes(self) -> int:
        return sum(layer.nbytes for layer in self.layers)

    def clone(self) -> WindowState:
        return WindowState(self.end, [LayerWindow(w.k.clone(), w.v.clone()) for w in self.layers])


# --------------------------------------------------------------------------- layers

class SelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        d, h, hk, hd = cfg.d_model, cfg.n_heads, cfg.kv_heads, cfg.head_dim
        self.wq = nn.Linear(d, h * hd, bias=False)
        self.wk = nn.Linear(d, hk * hd, bias=False)
        self.wv = nn.Linear(d, hk * hd, bias=False)
        self.wo = nn.Linear(h * hd, d, bias=False)
        self.q_norm = nn.RMSNorm(hd, eps=cfg.norm_eps) if cfg.qk_norm else None
        self.k_norm = nn.RMSNorm(hd, eps=cfg.norm_eps) if cfg.qk_norm else None

    def _qkv(self, x, start: int):
        c = self.cfg
        q = self.wq(x).unflatten(-1, (c.n_heads, c.head_dim))
        k = self.wk(x).unflatten(-1, (c.kv_heads, c.head_dim))
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        v = self.wv(x).unflatten(-1, (c.kv_heads, c.head_dim))
        return rope(q, start, c.rope_theta), rope(k, start, c.rope_theta), v

    def forward(self, x: torch.Tensor, start: int, cache: LayerWindow | None, window: int,
                keep: int) -> tuple[torch.Tensor, LayerWindow]:
        """x [T,d] at positions [start, start+T) continuing ``cache``, or a batch [B,T,d] from empty
        windows; returns the output and the last ``keep`` K/V (one sequence)."""
        q, k, v = self._qkv(x, start)
        if cache is not None and cache.k.shape[0]:
            k = torch.cat([cache.k, k], 0)
            v = torch.cat([cache.v, v], 0)
        out = windowed_attention(q, k, v, window, start, start + x.shape[-2] - k.shape[-3])
        return self.wo(out.flatten(-2)), LayerWindow(k[-keep:] if keep else k[:0], v[-keep:] if keep else v[:0])


class CrossAttention(nn.Module):
    """Causal attention to the shared global KV (query at t sees global positions <= t)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.wq = nn.Linear(cfg.d_model, cfg.n_heads * cfg.head_dim, bias=False)
        self.wo = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.d_model, bias=False)
        #: logit of the weight on the previous position's key, per KV head (0: an even mix)
        self.smear = nn.Parameter(torch.zeros(cfg.kv_heads)) if cfg.cross_smear else None
        self.q_norm = nn.RMSNorm(cfg.head_dim, eps=cfg.norm_eps) if cfg.qk_norm else None
        self.k_norm = nn.RMSNorm(cfg.head_dim, eps=cfg.norm_eps) if cfg.qk_norm else None
        #: log of the per-query-head logit multiplier (None: plain 1/sqrt(head_dim) scaling)
        self.log_scale = (nn.Parameter(torch.full((cfg.n_heads,), math.log(cfg.cross_logit_scale)))
                          if cfg.cross_logit_scale else None)
        #: per-query-head penalty, nats per 1,000 positions of distance (None: no penalty)
        self.recency = nn.Parameter(torch.zeros(cfg.n_heads)) if cfg.cross_recency else None

    def _k(self, gk: torch.Tensor) -> torch.Tensor:
        """Keys this layer matches against: the stored global keys, smeared when configured.

        ``gk`` [..., T, Hkv, D] holds the keys of positions [0, T); position 0 has no
        predecessor and mixes with zeros.
        """
        if self.smear is not None:
            s = torch.sigmoid(self.smear).to(gk.dtype)[:, None]  # [Hkv, 1]
            prev = torch.cat([torch.zeros_like(gk[..., :1, :, :]), gk[..., :-1, :, :]], dim=-3)
            gk = gk * (1 - s) + prev * s
        gk = gk if self.k_norm is None else self.k_norm(gk)
        if self.recency is None:
            return gk
        # ALiBi as one more key channel: -m (t - j) = m j + (a constant per query, which the
        # softmax ignores); centred, so bf16 training on 4K sequences holds it to 8 positions.
        pos = torch.arange(gk.shape[-3], device=gk.device, dtype=torch.float32) - gk.shape[-3] // 2
        return torch.cat([gk, pos.to(gk.dtype)[:, None, None].expand(*gk.shape[:-1], 1)], -1)

    def _v(self, gv: torch.Tensor) -> torch.Tensor:
        """Values, with a zero channel when keys carry the position one (SDPA wants equal widths)."""
        return gv if self.recency is None else F.pad(gv, (0, 1))

    def _q(self, x, start: int):
        q = self.wq(x).unflatten(-1, (self.cfg.n_heads, self.cfg.head_dim))
        if self.q_norm is not None:
            q = self.q_norm(q)
        if self.log_scale is not None:  # scaling the queries scales every logit of the head
            q = q * self.log_scale.exp().to(q.dtype)[:, None]
        q = rope(q, start, self.cfg.rope_theta) if self.cfg.cross_rope else q
        if self.recency is None:
            return q
        d = self.cfg.head_dim  # attention scales by 1/sqrt(d+1) now: undo that on the content part
        slope = (self.recency * 1e-3 * math.sqrt(d + 1)).to(q.dtype)
        return torch.cat([q * math.sqrt((d + 1) / d), slope[:, None].expand(*q.shape[:-1], 1)], -1)

    def forward(self, x, start, gk, gv):
        """x [..., T, d] at [start, start+T) over the global keys/values [..., >= start+T, Hkv, D]."""
        q = self._q(x, start)
        end = start + x.shape[-2]
        out = windowed_attention(q, self._k(gk[..., :end, :, :]), self._v(gv[..., :end, :, :]), None, start, 0)
        return self.wo(out[..., : self.cfg.head_dim].flatten(-2))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate = nn.Linear(cfg.d_model, cfg.mlp_hidden, bias=False)
        self.up = nn.Linear(cfg.d_model, cfg.mlp_hidden, bias=False)
        self.down = nn.Linear(cfg.mlp_hidden, cfg.d_model, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class SWALayer(nn.Module):
    """Pre-norm block: sliding-window self-attention, optional cross-attention, MLP."""

    def __init__(self, cfg: ModelConfig, cross: bool):
        super().__init__()
        self.norm1 = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.attn = SelfAttention(cfg)
        self.cross = CrossAttention(cfg) if cross else None
        self.norm_c = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps) if cross else None
        self.norm2 = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, start, cache, window, keep, gk=None, gv=None):
        a, new_cache = self.attn(self.norm1(x), start, cache, window, keep)
        x = x + a
        if self.cross is not None:
            x = x + self.cross(self.norm_c(x), start, gk, gv)
        return x + self.mlp(self.norm2(x)), new_cache


# --------------------------------------------------------------------------- models

def check_tokens(tokens: torch.Tensor, cfg: ModelConfig, start: int = 0, *, what: str = "tokens") -> None:
    """1-D ids of the vocabulary, at [start, start+T) within max_seq_len."""
    if tokens.ndim != 1:
        raise ValueError(f"{what}: must be a 1-D tensor of token ids, got shape {tuple(tokens.shape)}")
    if tokens.numel() == 0:
        raise ValueError(f"{what}: must not be empty")
    if tokens.device.type != "meta":
        lo, hi = int(tokens.min()), int(tokens.max())
        if lo < 0 or hi >= cfg.vocab_size:
            raise ValueError(f"{what}: token ids must be in [0, {cfg.vocab_size}), got range [{lo}, {hi}]")
    end = start + tokens.shape[0]
    if end > cfg.max_seq_len:
        raise ValueError(f"{what}: sequence of {end} tokens exceeds the model limit max_seq_len={cfg.max_seq_len}")


class EncoderDecoder(nn.Module):
    """Encoder (SWA) -> one global K/V per token -> decoder (SWA + cross-attention)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.encoder = nn.ModuleList(SWALayer(cfg, cross=False) for _ in range(cfg.enc_layers))
        self.enc_norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.kv_proj = nn.Linear(cfg.d_model, 2 * cfg.kv_heads * cfg.head_dim, bias=False)
        self.decoder = nn.ModuleList(SWALayer(cfg, cross=True) for _ in range(cfg.dec_layers))
        self.dec_norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False) if cfg.untied_output else None
        self.apply(self._init)

    def _init(self, m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=self.cfg.embed_init_std)

    @property
    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def with_settings(self, **settings) -> EncoderDecoder:
        """A view of this model with other window/replay settings (shares weights)."""
        new = copy.copy(self)  # shares sub-modules; layers read W and R from the top-level cfg
        new.cfg = replace(self.cfg, **settings)
        return new

    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        weight = self.embed.weight if self.head is None else self.head.weight
        return F.linear(self.dec_norm(h), weight)

    def _stack(self, layers: nn.ModuleList, tokens: torch.Tensor, start: int, state: WindowState | None,
               gk=None, gv=None) -> tuple[torch.Tensor, WindowState]:
        """Hidden states of ``layers`` over ``tokens`` at [start, start+T) from ``state`` (None: empty
        windows), and for one sequence the windows at start+T. A batch [B,T] runs the batched
        attention (banded windows, causal flash) and keeps no windows."""
        keep = self.cfg.window - 1 if tokens.ndim == 1 else 0
        x, wins = self.embed(tokens), []
        for i, layer in enumerate(layers):
            x, win = layer(x, start, state.layers[i] if state is not None else None, self.cfg.window, keep, gk, gv)
            wins.append(win)
        return x, WindowState(start + tokens.shape[-1], wins)

    def _project(self, h: torch.Tensor, start: int) -> torch.Tensor:
        c = self.cfg
        kv = self.kv_proj(self.enc_norm(h)).unflatten(-1, (2, c.kv_heads, c.head_dim))
        k = rope(kv[..., 0, :, :], start, c.rope_theta) if c.cross_rope else kv[..., 0, :, :]
        return torch.stack([k, kv[..., 1, :, :]], -3)

    # ---- training path (batched)
    def forward_batched(self, tokens: torch.Tensor, kv_roundtrip=None, last: int | None = None) -> torch.Tensor:
        """Logits [B,T,V] for a batch of sequences that start at position 0.

        ``last``: only the last ``last`` positions' logits [B,last,V]. The encoder still runs over
        everything (the global KV of every position), the decoder only over those positions and
        their :attr:`~ModelConfig.decoder_reach`: the same logits as a decode from position 0.
        """
        kv = self.global_kv_batched(tokens)
        if kv_roundtrip is not None:
            kv = kv_roundtrip(kv)
        start = 0 if last is None else max(0, tokens.shape[1] - last - self.cfg.decoder_reach)
        logits = self.decode_batched(tokens[:, start:], start, kv)
        return logits if last is None else logits[:, -last:]

    def global_kv_batched(self, tokens: torch.Tensor, start: int = 0) -> torch.Tensor:
        """The global KV [B,T,2,Hkv,D] of a batch of sequences at [start, start+T), encoded
        from empty windows (exact from position 0; from ``start`` > 0 it is a bounded replay of
        the encoder): what the SSD tier would hold for them (before FP4)."""
        return self._project(self._stack(self.encoder, tokens, start, None)[0], start)

    def decode_batched(self, tokens: torch.Tensor, start: int, global_kv: torch.Tensor) -> torch.Tensor:
        """Decoder logits [B,T,V] for tokens [B,T] at [start, start+T), from empty windows,
        cross-attending to ``global_kv`` [B, >=start+T, 2, Hkv, D].

        From ``start`` > 0 this is the batched form of a bounded decoder replay: outputs at
        positions >= start + L_d*(W-1) equal the full decode's (their windows never reach
        before ``start``), so scoring a long sequence's tail needs the decoder over that tail only.
        """
        y, _ = self._stack(self.decoder, tokens, start, None, global_kv[..., 0, :, :], global_kv[..., 1, :, :])
        return self._logits(y)

    # ---- inference path (one sequence, any start, window caches)
    def encode(self, tokens: torch.Tensor, start: int, state: WindowState | None = None,
               ) -> tuple[torch.Tensor, WindowState]:
        """Run the encoder over ``tokens`` at [start, start+T) continuing from ``state``.

        Returns the global KV [T,2,Hkv,D] of these tokens and the encoder window state at
        start+T. ``state`` None means empty windows: exact only when start == 0.
        """
        self._check(tokens, start, state, "encoder")
        x, state = self._stack(self.encoder, tokens, start, state)
        return self._project(x, start), state

    def decode(self, tokens: torch.Tensor, start: int, global_kv: torch.Tensor,
               state: WindowState | None = None, *, all_logits: bool = False) -> tuple[torch.Tensor, WindowState]:
        """Run the decoder over ``tokens`` at [start, start+T) with cross-attention to
        ``global_kv`` (>= start+T tokens). Returns logits (last position, or all) and the
        decoder window state at start+T. Earlier token ids are not an input: the context
        reaches the decoder only through ``global_kv`` and ``state``.
        """
        self._check(tokens, start, state, "decoder")
        end = start + tokens.shape[0]
        if global_kv.shape[0] < end:
            raise ValueError(f"global_kv: needs >= {end} tokens for positions [{start}, {end}), got {global_kv.shape[0]}")
        y, state = self._stack(self.decoder, tokens, start, state, global_kv[:, 0], global_kv[:, 1])
        return self._logits(y if all_logits else y[-1:]), state

    def forward(self, tokens: torch.Tensor, kv_roundtrip=None) -> torch.Tensor:
        """Full uncached forward of one sequence from position 0: logits [T, V]."""
        kv, _ = self.encode(tokens, 0)
        if kv_roundtrip is not None:
            kv = kv_roundtrip(kv)
        return self.decode(tokens, 0, kv, all_logits=True)[0]

    def replay_encoder(self, tokens: torch.Tensor, end: int, replay: int) -> WindowState:
        """Rebuild the encoder windows at ``end`` by replaying ``tokens[end-R:end]`` from empty
        windows. Exact when R >= L_e*(W-1) (or when the replay reaches position 0)."""
        if end == 0:
            empty = torch.zeros(0, self.cfg.kv_heads, self.cfg.head_dim, device=tokens.device)
            return WindowState(0, [LayerWindow(empty, empty.clone()) for _ in self.encoder])
        s = max(0, end - replay)
        return self.encode(tokens[s:end], s)[1]

    def first_token_logits(self, tokens: torch.Tensor, global_kv: torch.Tensor, replay: int,
                           ) -> tuple[torch.Tensor, WindowState]:
        """Bounded replay of the decoder: run it over the last R tokens only, from empty windows."""
        s = max(0, tokens.shape[0] - replay)
        return self.decode(tokens[s:], s, global_kv)

    def _check(self, tokens: torch.Tensor, start: int, state: WindowState | None, stack: str) -> None:
        check_tokens(tokens, self.cfg, start)
        if state is not None and state.end != start:
            raise ValueError(f"{stack} state: windows end at position {state.end}, "
                             f"cannot continue at {start}")


class DecoderOnly(nn.Module):
    """The baseline of :mod:`tiered_kv.flops`: a plain decoder-only stack of the same depth
    (L_e+L_d sliding-window layers built from the same blocks, each with its own KV)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(SWALayer(cfg, cross=False) for _ in range(cfg.enc_layers + cfg.dec_layers))
        self.norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Prefill of all N tokens; returns the last position's logits."""
        x = self.embed(tokens)
        for layer in self.layers:
            x, _ = layer(x, 0, None, self.cfg.window, 0)
        return F.linear(self.norm(x[-1:]), self.embed.weight)


# --------------------------------------------------------------------------- checkpoints

def save_checkpoint(model: EncoderDecoder, path, meta: dict | None = None, dtype=torch.bfloat16) -> None:
    state = {k: v.to(dtype) for k, v in model.state_dict().items()}
    torch.save({"config": model.cfg.to_dict(), "state_dict": state, "meta": meta or {}}, path)


def load_checkpoint(path, expect_preset: str | None = None, **settings) -> tuple[EncoderDecoder, dict]:
    """Load a checkpoint (weights in fp32 for inference); ``settings`` override W, R, ...

    A missing, truncated or foreign file, a checkpoint of another preset than
    ``expect_preset``, or weights that do not fit the recorded config get one clear error
    naming the file and what differs.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path}: no such file")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # truncated zip, pickle garbage, wrong format
        raise ValueError(f"checkpoint {path}: not a readable tiered-kv checkpoint (truncated or corrupt: "
                         f"{type(exc).__name__})") from None
    if not isinstance(blob, dict) or "config" not in blob or "state_dict" not in blob:
        raise ValueError(f"checkpoint {path}: not a tiered-kv checkpoint (needs 'config' and 'state_dict')")
    unknown = sorted(set(blob["config"]) - set(ModelConfig.__dataclass_fields__))
    if unknown:
        raise ValueError(f"checkpoint {path}: config has settings this version does not know: {unknown}")
    cfg = replace(ModelConfig(**blob["config"]), **settings)
    if expect_preset is not None and cfg.name != expect_preset:
        raise ValueError(f"checkpoint {path}: is preset {cfg.name!r}, expected {expect_preset!r}")
    model = EncoderDecoder(cfg)
    want, got = model.state_dict(), blob["state_dict"]
    problems = {"missing": sorted(set(want) - set(got)), "unexpected": sorted(set(got) - set(want)),
                "shape": [f"{k}: {tuple(got[k].shape)} vs {tuple(want[k].shape)}" for k in want
                          if k in got and tuple(got[k].shape) != tuple(want[k].shape)]}
    if any(problems.values()):
        detail = "; ".join(f"{kind} {names[:3]}" for kind, names in problems.items() if names)
        raise ValueError(f"checkpoint {path}: weights do not match its config ({cfg.name}): {detail}")
    model.load_state_dict({k: v.float() for k, v in got.items()})
    model.eval()
    return model, blob.get("meta", {})


def default_checkpoint(preset_name: str = "small"):
    return DATA_DIR / "checkpoints" / f"{preset_name}.pt"
