"""Attention for the encoder-decoder: sliding-window, cross-attention and rotary embeddings.

Why a module of its own: the model needs the same attention function in three forms that
must agree to the last bit of their contract: the inference path (one sequence, any start,
keys from window caches; chunked so a 32K prefill never builds a 32K x 32K score matrix), the
CPU cross-attention path (torch's flash kernel for everything a chunk can see, the causal
square masked by hand), and the batched training path (block-banded sliding-window SDPA, causal
flash for cross-attention). :mod:`tiered_kv.model` composes them into layers; the tests check
that all paths compute the same function.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tiered_kv.kernels.swa import sliding_window_attention

#: Query-chunk size for inference attention; bounds the score matrix per call.
_MAX_SCORES = 1 << 24


def band_mask(q_pos: torch.Tensor, k_pos: torch.Tensor, window: int) -> torch.Tensor:
    """[Tq, Tk] bool: query at t sees key at p when t - window < p <= t."""
    diff = q_pos[:, None] - k_pos[None, :]
    return (diff >= 0) & (diff < window)


def _sdpa(q, k, v, mask=None, *, is_causal: bool = False) -> torch.Tensor:
    """SDPA over [..., T, H, D] tensors (heads moved before positions and back), GQA by broadcast."""
    out = F.scaled_dot_product_attention(q.transpose(-3, -2), k.transpose(-3, -2), v.transpose(-3, -2),
                                         attn_mask=mask, is_causal=is_causal, enable_gqa=True)
    return out.transpose(-3, -2)


def _swa_reference(q, k, v, window, q_offset, *, k_offset=0):
    """Masked-SDPA sliding-window attention, called as the kernels' function is."""
    mask = band_mask(torch.arange(q.shape[0], device=q.device) + q_offset,
                     torch.arange(k.shape[0], device=q.device) + k_offset, window)
    return _sdpa(q, k, v, mask)


def windowed_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, q_offset: int,
                       k_offset: int) -> torch.Tensor:
    """Causal attention of ``q`` [Tq,Hq,D] (from ``q_offset``) over keys from ``k_offset``.

    ``window`` = None means unbounded (full causal, used by cross-attention). Queries are
    processed in chunks, each seeing only the keys its window can reach, so memory stays
    bounded and the work is O(Tq * min(W, Tk)). A batch ``q`` [B,T,Hq,D] takes the training
    path (:func:`_batched_attention`: windowed keys start at ``q_offset``, global ones at 0).
    """
    if q.ndim == 4:
        return _batched_attention(q, k, v, window, q_offset)
    tq, hq, _ = q.shape
    if window is None and k_offset == 0 and q.device.type == "cpu" and _FLASH_CPU is not None:
        return _cross_attention_cpu(q, k, v, q_offset)
    if window is not None:
        chunk = min(tq, max(window, 256))
    elif q.device.type == "meta":  # FLOP counting only: no memory is touched, few large chunks
        chunk = min(tq, 4096)
    else:
        chunk = min(tq, max(16, _MAX_SCORES // max(1, hq * (k_offset + k.shape[0]))))
    # Cross-attention (window=None) is a window wide enough to reach position 0.
    win = window if window is not None else q_offset + tq + 1
    fn = _swa_reference if window is None or q.device.type == "meta" else sliding_window_attention
    outs = []
    for a in range(0, tq, chunk):
        b = min(tq, a + chunk)
        qa = q_offset + a
        lo = max(k_offset, qa - win + 1)
        hi = min(k_offset + k.shape[0], q_offset + b)
        ks, ke = lo - k_offset, hi - k_offset
        outs.append(fn(q[a:b], k[ks:ke], v[ks:ke], win, qa, k_offset=lo))
    return torch.cat(outs, 0) if len(outs) > 1 else outs[0]


_FLASH_CPU = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def _cross_attention_cpu(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_offset: int,
                         chunk: int = 1024) -> torch.Tensor:
    """Causal cross-attention of q [Tq,Hq,D] at [q_offset, q_offset+Tq) over keys [0, q_offset+Tq).

    Why a special path: every query of a chunk [a, b) sees *all* keys before a, so that part
    needs no mask and runs in torch's CPU flash kernel (no score matrix in memory), with the
    query heads of a KV group folded into the query axis (GQA without copying K/V). Only the
    small causal square [a, b) x [a, b) is masked; the two parts are merged by log-sum-exp.
    This is what makes a bounded replay over 32K global keys cheap.
    """
    tq, hq, d = q.shape
    hkv = k.shape[1]
    g = hq // hkv
    scale = d ** -0.5
    outs = []
    for a0 in range(0, tq, chunk):
        b0 = min(tq, a0 + chunk)
        a, b, n = q_offset + a0, q_offset + b0, b0 - a0
        qc = q[a0:b0]
        qh = qc.permute(1, 0, 2)  # [Hq, n, D]
        kb = k[a:b].permute(1, 0, 2).repeat_interleave(g, 0)
        vb = v[a:b].permute(1, 0, 2).repeat_interleave(g, 0)
        sb = (qh @ kb.transpose(1, 2)) * scale
        sb = sb.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
        lse_b = torch.logsumexp(sb, -1)
        out_b = torch.softmax(sb, -1) @ vb  # [Hq, n, D]
        if a == 0:
            outs.append(out_b.permute(1, 0, 2))
            continue
        qa = qc.reshape(n, hkv, g, d).permute(1, 2, 0, 3).reshape(1, hkv, g * n, d)
        ka = k[:a].permute(1, 0, 2).unsqueeze(0).contiguous()
        va = v[:a].permute(1, 0, 2).unsqueeze(0).contiguous()
        out_a, lse_a = _FLASH_CPU(qa.contiguous(), ka, va, scale=scale)[:2]
        out_a = out_a.reshape(hkv, g, n, d).reshape(hq, n, d)
        lse_a = lse_a.reshape(hkv, g, n).reshape(hq, n)
        m = torch.maximum(lse_a, lse_b)
        wa, wb = (lse_a - m).exp()[..., None], (lse_b - m).exp()[..., None]
        outs.append(((out_a * wa + out_b * wb) / (wa + wb)).permute(1, 0, 2))
    return torch.cat(outs, 0) if len(outs) > 1 else outs[0]


def _batched_attention(q, k, v, window: int | None, q_offset: int = 0) -> torch.Tensor:
    """Training path: q [B,T,Hq,D], k/v [B,T,Hkv,D] at the same positions, or (``window`` None,
    the cross-attention) queries at [q_offset, q_offset+T) over keys [0, q_offset+T).

    Full causal attention goes to SDPA's causal flash kernel, which skips the masked half.
    Sliding-window attention over a long sequence is computed block-banded
    (:func:`_banded_attention`): O(T*2W) instead of O(T^2) work, which is what makes training
    on sequences several times W affordable on a CPU.
    """
    t = q.shape[1]
    if window is None:  # causal; from q_offset > 0 the mask is offset, so it is written out
        mask = band_mask(q_offset + torch.arange(t, device=q.device), torch.arange(k.shape[1], device=q.device),
                         q_offset + t + 1) if q_offset else None
        return _sdpa(q, k, v, mask, is_causal=not q_offset)
    if t > 2 * window:
        return _banded_attention(q, k, v, window)
    pos = torch.arange(t, device=q.device)
    return _sdpa(q, k, v, band_mask(pos, pos, window))


def _banded_attention(q, k, v, window: int) -> torch.Tensor:
    """Sliding-window attention in blocks of W queries, each over its own and the previous block.

    A query at t sees keys t-W < p <= t, all inside [block start - W, block end), so each block
    of W queries needs only 2W keys; the first block's missing predecessor is masked out.
    """
    b, t, h, d = q.shape
    hk, c = k.shape[2], window
    n = -(-t // c)
    pad = n * c - t
    if pad:
        q, k, v = (F.pad(x, (0, 0, 0, 0, 0, pad)) for x in (q, k, v))
    # each block's keys: the previous block's (zeros before the first) followed by its own
    kk, vv = (torch.cat([torch.cat([torch.zeros_like(x[:, :1]), x[:, :-1]], 1), x], 2)
              for x in (k.view(b, n, c, hk, d), v.view(b, n, c, hk, d)))
    mask = band_mask(torch.arange(c, device=q.device) + c, torch.arange(2 * c, device=q.device), window)
    mask = mask.expand(n, c, 2 * c).clone()
    mask[0, :, :c] = False
    out = _sdpa(q.reshape(b * n, c, h, d), kk.reshape(b * n, 2 * c, hk, d), vv.reshape(b * n, 2 * c, hk, d),
                mask.repeat(b, 1, 1)[:, None])
    return out.reshape(b, n * c, h, d)[:, :t]


def rope(x: torch.Tensor, start: int, theta: float) -> torch.Tensor:
    """Rotary embedding of x [..., T, H, D] at absolute positions [start, start+T) (rotate-half form)."""
    d = x.shape[-1]
    inv = theta ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)
    positions = torch.arange(start, start + x.shape[-3], device=x.device)
    ang = positions.to(torch.float32)[:, None] * inv[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :].to(x.dtype)
    sin = torch.cat([ang.sin(), ang.sin()], -1)[:, None, :].to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin
