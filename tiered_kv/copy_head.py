"""A copy head: the model's output can copy a byte from anywhere in the prefix.

Why: copying from far back is what makes a long context worth keeping, and a few-million-
parameter model trained for an hour on a CPU learns it only weakly through attention alone:
stage 1 of the small checkpoint (``small-base.pt``) gained 0.10-0.23 nats/byte on a 128-byte
span repeated 256-2,048 bytes later, where a copy would save about 1, and its loss rose with
context beyond 1-2K bytes. A pointer (Vinyals et al. 2015; the pointer-sentinel mixture of
Merity et al. 2016; the neural cache of Grave et al. 2017) turns attention weights straight
into output probability, so "the byte that followed this context before" is one step from the
output instead of one that must pass through a value, an output projection and a softmax.

What a pointer score is made of, for a query at t and the earlier position j it might copy
(the byte at j, which followed the context ending at j-1):

- an **exact context match** on the prefix's tokens: a*n + b*n^2 when the last 2, 4, 8, 16 bytes
  before j equal those ending at t for n of those orders (a, b learned). This is the part that
  works from the first step: with the initial weights and no training it already lowered the
  loss of long-context targets by more than a third (``scripts/probe_checkpoint.py``);
- a **learned match on the stored global KV**: the query from the decoder's hidden state, the
  key a projection of the global KV at j-1 (the encoder's summary of the context there), QK-
  normed with a learned scale; it can add what exact bytes miss (an identifier after a
  different prefix);
- a learned slope on log(1 + distance), to prefer recent occurrences among look-alikes.

Both inputs are what every path of the engine has: the global KV (the SSD tier) and the
prefix's token ids (the cache's key). A hit, a replay and a full prefill give the head the same
inputs, so the replay bound and the exact-prefix guarantees are unchanged. Because the exact
match reads tokens, not the KV, FP4 error in the global KV reaches the head only through its
learned part; figure 09's FP4 rows measure the whole model as served.

The output is the mixture ``g * softmax(logits) + (1 - g) * pointer``, returned as log
probabilities (a valid input to softmax, log_softmax and cross-entropy, which all callers use).
The gate ``g`` reads the decoder's hidden state and the score of the longest exact match, so a
long match can take over the output and a weak one cannot.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import nn

#: The gate's bias at initialization: with no exact match the pointer starts with
#: sigmoid(-2.5) = 7.6% of the mass; a 16-byte match (score 40, gate weight -0.1) gives it 82%.
GATE_INIT = 2.5
#: Masked scores: finite, so a row without any key (position 0) stays free of NaNs.
_MASKED = -1e4
#: Context lengths (bytes) whose exact match adds a learned weight to a pointer score.
ORDERS = (2, 4, 8, 16)
#: A key matching n of the orders scores a*n + b*n^2, learned from (2, 2): 4, 12, 24, 40 for
#: matches of 2, 4, 8, 16 bytes (about 2.5 per byte matched; float ops only, no gather).
_LEVEL_INIT = (2.0, 2.0)
_BASE = 263  # > vocabulary (258) and the pad; codes of up to 7 tokens are exact, longer ones hashed in int64
_PAD = 262


def context_codes(tokens: torch.Tensor) -> torch.Tensor:
    """Codes [..., T, len(ORDERS)] of the last k tokens ending at each position, one per order k.

    Two positions share a code when the k tokens ending there are equal (exactly for k <= 7;
    a 64-bit polynomial hash beyond, where a false match is a 2^-64 event). Positions with
    fewer than k tokens before them are padded with a value no token takes.
    """
    x = tokens.long()
    code = torch.zeros_like(x)
    out = []
    for k in range(1, ORDERS[-1] + 1):
        prev = torch.full_like(x, _PAD)
        prev[..., k - 1:] = x[..., : x.shape[-1] - k + 1]
        code = code * _BASE + prev
        if k in ORDERS:
            out.append(code)
    return torch.stack(out, -1)


def match_levels(qcodes: torch.Tensor, kcodes: torch.Tensor) -> torch.Tensor:
    """How many of :data:`ORDERS` match between each query and key context: float [..., Q, K]."""
    level = (qcodes[..., :, None, 0] == kcodes[..., None, :, 0]).to(torch.float32)
    for o in range(1, len(ORDERS)):
        level += qcodes[..., :, None, o] == kcodes[..., None, :, o]
    return level


def _fp32(device_type: str):
    """Autocast off (the pointer's softmax runs over thousands of keys: fp32); the meta device
    (FLOP counting) has no autocast to turn off."""
    if device_type in ("cpu", "cuda", "xpu", "mps"):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()


class CopyHead(nn.Module):
    """The pointer, its scores and its gate; :meth:`mix` for a batch, :meth:`decode_mix` for inference."""

    def __init__(self, d_model: int, kv_dim: int, dim: int, vocab_size: int, eps: float, scale: float = 0.5):
        super().__init__()
        self.dim, self.vocab_size = dim, vocab_size
        self.wq = nn.Linear(d_model, dim, bias=False)
        self.wk = nn.Linear(kv_dim, dim, bias=False)
        self.q_norm = nn.RMSNorm(dim, eps=eps)
        self.k_norm = nn.RMSNorm(dim, eps=eps)
        #: log of the logit multiplier (log space: Adam moves it by a factor)
        self.log_scale = nn.Parameter(torch.tensor(math.log(scale)))
        #: slope of the penalty on log(1 + distance); 0: no preference for recent occurrences
        self.recency = nn.Parameter(torch.zeros(()))
        #: (a, b): a key matching n of ORDERS scores a*n + b*n^2
        self.level_weight = nn.Parameter(torch.tensor(_LEVEL_INIT))
        self.gate = nn.Linear(d_model, 1)
        #: weight of the best match score in the gate (negative: a long match opens the pointer)
        self.gate_match = nn.Parameter(torch.tensor(-0.1))
        with torch.no_grad():
            self.gate.bias.fill_(GATE_INIT)

    def keys(self, global_kv: torch.Tensor) -> torch.Tensor:
        """Keys [..., T, dim] from global KV [..., T, 2, Hkv, D]: row j keys the copy of position j+1."""
        with _fp32(global_kv.device.type):
            return self.k_norm(self.wk(global_kv.flatten(-3).float()))

    def mix(self, logits: torch.Tensor, h: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
            qpos: torch.Tensor, qcodes: torch.Tensor, kcodes: torch.Tensor) -> torch.Tensor:
        """Log probabilities [..., Q, V] of the mixture.

        ``logits`` [..., Q, V] and ``h`` [..., Q, d] (the normed final hidden state) at query
        positions ``qpos`` [Q]; ``keys`` [..., K, dim] (row j from the global KV at j) and
        ``values`` [..., K] (the token at j+1) for copy positions 1..K. A query at t may copy
        positions 1..t (the token at t is known when t is the input). ``qcodes`` [..., Q, O]
        and ``kcodes`` [..., K, O] are :func:`context_codes` at the query positions and at the
        positions whose global KV makes each key (the context the copied byte followed).
        """
        with _fp32(h.device.type):
            return self._mix(logits, h, keys.float(), values, qpos, qcodes, kcodes)

    def _scores(self, h, keys, qpos, qcodes, kcodes):
        """Match scores [..., Q, K], whether each query has a key, and the gate's logit [..., Q]."""
        q = self.q_norm(self.wq(h.float()))
        s = (q @ keys.transpose(-1, -2)) * (self.log_scale.exp() / math.sqrt(self.dim))
        # exact context matches: a key matching n of the orders scores a*n + b*n^2
        level = match_levels(qcodes, kcodes)
        a, b = self.level_weight[0], self.level_weight[1]
        s = s + level * (a + b * level)
        cpos = torch.arange(1, keys.shape[-2] + 1, device=q.device, dtype=s.dtype)
        dist = qpos.to(q.device, s.dtype)[:, None] - cpos[None, :]
        s = s - self.recency * torch.log1p(dist.clamp_min(0))
        s = s.masked_fill(dist < 0, _MASKED)
        has = (qpos >= 1).to(q.device)
        # the gate sees the longest exact match among the keys a query may copy
        best = level.masked_fill(dist < 0, 0).amax(-1) if level.shape[-1] else level.new_zeros(level.shape[:-1])
        gate = self.gate(h.float()).squeeze(-1) + self.gate_match * best * (a + b * best)
        gate = torch.where(has, gate, torch.full_like(gate, 30.0))  # nothing to copy: all vocabulary
        return s, has, gate

    def _mix(self, logits, h, keys, values, qpos, qcodes, kcodes):
        s, has, gate = self._scores(h, keys, qpos, qcodes, kcodes)
        onehot = torch.zeros(*values.shape, self.vocab_size, device=s.device).scatter_(
            -1, values.long().unsqueeze(-1), 1.0)
        ptr = torch.softmax(s, -1) @ onehot
        lv = F.logsigmoid(gate)[..., None] + F.log_softmax(logits.float(), -1)
        lp = F.logsigmoid(-gate)[..., None] + ptr.clamp_min(1e-30).log()
        lp = torch.where(has[:, None], lp, torch.full_like(lp, float("-inf")))
        return torch.logaddexp(lv, lp)

    def target_logprob(self, logits: torch.Tensor, h: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                       qpos: torch.Tensor, qcodes: torch.Tensor, kcodes: torch.Tensor,
                       targets: torch.Tensor) -> torch.Tensor:
        """:meth:`mix` at the ``targets`` [..., Q] only: log p [..., Q], without the [Q, V] pointer.

        Training needs only the target's probability; the pointer's share of it is the
        attention on positions holding that byte, an elementwise sum instead of a product
        with a one-hot [K, V] table (which cost a third of a training step).
        """
        with _fp32(h.device.type):
            s, has, gate = self._scores(h, keys.float(), qpos, qcodes, kcodes)
            same = values.unsqueeze(-2) == targets.unsqueeze(-1)  # [..., Q, K]
            p_copy = (torch.softmax(s, -1) * same).sum(-1)
            lv = F.logsigmoid(gate) + F.log_softmax(logits.float(), -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
            lp = F.logsigmoid(-gate) + p_copy.clamp_min(1e-30).log()
            lp = torch.where(has, lp, torch.full_like(lp, float("-inf")))
            return torch.logaddexp(lv, lp)

    def decode_mix(self, logits: torch.Tensor, h: torch.Tensor, global_kv: torch.Tensor,
                   all_tokens: torch.Tensor, end: int, chunk: int = 1024) -> torch.Tensor:
        """:meth:`mix` for one sequence (inference): the rows of ``logits``/``h`` are positions
        [end - Q, end); queries go in chunks, each over the keys it can see. Positions are
        Python ints, so this also runs on the meta device (FLOP counting)."""
        if end <= 1:  # only position 0: nothing before it to copy
            return F.log_softmax(logits.float(), -1)
        keys = self.keys(global_kv[: end - 1])
        values = all_tokens[1:end]
        codes = context_codes(all_tokens[:end])
        q0, outs = end - logits.shape[0], []
        for a in range(0, logits.shape[0], chunk):
            b = min(logits.shape[0], a + chunk)
            k_end = max(1, q0 + b - 1)  # copy positions 1..t for t < q0+b: key rows [0, q0+b-1)
            qpos = torch.arange(q0 + a, q0 + b, device=logits.device)
            outs.append(self.mix(logits[a:b], h[a:b], keys[:k_end], values[:k_end], qpos, codes[q0 + a:q0 + b],
                                 codes[:k_end]))
        return torch.cat(outs) if len(outs) > 1 else outs[0]
