"""Causal sliding-window attention over a replay segment, with grouped-query heads.

Why: the host tier keeps each layer's last-W-token window; when it is missing, the engine
rebuilds it by *bounded replay*: it runs only the last R tokens of the prefix through the
sliding-window layers. Each replayed query needs keys from at most W positions back, so the
kernel is handed a segment of queries that starts at absolute position ``q_offset`` and keys
that start at ``k_offset`` (0 by default: the whole prefix).

Semantics: ``q [Tq, Hq, D]``, ``k, v [Tk, Hkv, D]`` with ``Hq`` a multiple of ``Hkv``; query
head ``h`` reads key/value head ``h // (Hq // Hkv)``. Query ``i`` sits at absolute position
``t = q_offset + i``; key ``j`` at ``p = k_offset + j``; the query sees the keys with
``t - window < p <= t`` (itself and the ``window - 1`` before it). Scores are scaled by
``scale`` (default ``D ** -0.5``); softmax and accumulation run in fp32 and the output
``[Tq, Hq, D]`` has q's dtype. A query that sees no key (its window lies outside the given
keys) gets an all-zero output row, never NaN.

The torch reference (SDPA with an explicit boolean mask, on the slice of keys any query can
see) and the Triton kernel (flash-attention-style online softmax, one program per block of
queries and query head, looping only over the key blocks inside the window) sit side by side.
Memory traffic of both: read q once and, per query block, ``BLOCK_M + window`` keys and
values; write the output once.
"""

from __future__ import annotations

import torch
from tiered_kv.kernels import interpreting, resolve_backend, triton

if triton is not None:
    import triton.language as tl

BACKENDS = ("auto", "torch", "triton")
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, q_offset: int,
           k_offset: int, backend: str) -> str:
    """Validate the inputs; return the concrete backend ("torch" or "triton")."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.ndim != 3:
            raise ValueError(f"{name} must be [T, H, D]; got shape {tuple(t.shape)}")
        if t.dtype not in _DTYPES:
            raise ValueError(f"{name} must be float32/float16/bfloat16; got {t.dtype}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape; got {tuple(k.shape)} and "
                         f"{tuple(v.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v must share a dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError("q, k, v must be on the same device")
    if q.shape[2] != k.shape[2]:
        raise ValueError(f"head dim mismatch: q has D={q.shape[2]}, k has D={k.shape[2]}")
    if k.shape[1] == 0 or q.shape[1] % k.shape[1] != 0:
        raise ValueError(f"query heads Hq={q.shape[1]} must be a multiple of key/value heads "
                         f"Hkv={k.shape[1]}")
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be an int >= 1; got {window!r}")
    for name, off in (("q_offset", q_offset), ("k_offset", k_offset)):
        if isinstance(off, bool) or not isinstance(off, int):
            raise ValueError(f"{name} must be an int; got {off!r}")
    return resolve_backend(backend, BACKENDS, q.device)


def _visible_keys(Tq: int, Tk: int, window: int, q_offset: int, k_offset: int) -> tuple[int, int]:
    """Key index range [lo, hi) that any query of the segment can see (may be empty)."""
    lo = max(q_offset - window + 1 - k_offset, 0)
    hi = min(q_offset + Tq - k_offset, Tk)
    return lo, max(lo, hi)


# ----------------------------------------------------------------------------- torch reference


def sliding_window_attention_torch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                   window: int, q_offset: int, k_offset: int = 0,
                                   scale: float | None = None) -> torch.Tensor:
    """Reference: fp32 SDPA with an explicit boolean window mask over the visible keys."""
    Tq, Hq, D = q.shape
    Tk, Hkv, _ = k.shape
    scale = D ** -0.5 if scale is None else float(scale)
    lo, hi = _visible_keys(Tq, Tk, window, q_offset, k_offset)
    out = torch.zeros((Hq, Tq, D), dtype=torch.float32, device=q.device)
    if Tq and hi > lo:
        group = Hq // Hkv
        qf = q.float().transpose(0, 1)
        kf = k[lo:hi].float().repeat_interleave(group, dim=1).transpose(0, 1)
        vf = v[lo:hi].float().repeat_interleave(group, dim=1).transpose(0, 1)
        t = q_offset + torch.arange(Tq, device=q.device)
        p = k_offset + torch.arange(lo, hi, device=q.device)
        mask = (p[None, :] <= t[:, None]) & (p[None, :] > t[:, None] - window)
        att = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, attn_mask=mask,
                                                               scale=scale)
        out = torch.where(mask.any(dim=1)[None, :, None], att, out)
    return out.transpose(0, 1).to(q.dtype)


# ----------------------------------------------------------------------------- Triton kernel

if triton is not None:

    @triton.jit
    def _dot(a, b, UPCAST: tl.constexpr):
        """``a @ b``: in fp32 with exact (IEEE) products when UPCAST, else on the tensor cores in
        b's dtype (a is cast to it: the probabilities of the second product are fp32)."""
        if UPCAST:
            out = tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
        else:
            out = tl.dot(a.to(b.dtype), b)
        return out

    @triton.jit
    def _swa_kernel(
        q_ptr,  # *T [Tq, Hq, D] queries
        k_ptr,  # *T [Tk, Hkv, D] keys (key j at absolute position k_offset + j)
        v_ptr,  # *T [Tk, Hkv, D] values
        o_ptr,  # *T or *f32 [Tq, Hq, D] output, written once
        stride_qt, stride_qh,  # q strides (elements) over tokens and heads; D is contiguous
        stride_kt, stride_kh,  # k strides
        stride_vt, stride_vh,  # v strides
        stride_ot, stride_oh,  # output strides
        Tq, Tk, D,  # sizes
        q_offset, k_offset, window,  # absolute positions of q[0], k[0]; window length
        group,  # Hq // Hkv: query heads per key/value head
        sm_scale,  # softmax scale
        BLOCK_M: tl.constexpr,  # queries per program
        BLOCK_N: tl.constexpr,  # keys per inner step
        BLOCK_D: tl.constexpr,  # head dim padded to a power of two (>= 16)
        UPCAST: tl.constexpr,  # run both dots in fp32 (fp32 inputs, or the interpreter)
    ):
        pid_m = tl.program_id(0)
        h = tl.program_id(1)
        kvh = h // group
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, BLOCK_D)
        d_mask = offs_d < D
        q = tl.load(q_ptr + offs_m[:, None] * stride_qt + h * stride_qh + offs_d[None, :],
                    mask=(offs_m < Tq)[:, None] & d_mask[None, :], other=0.0)
        if UPCAST:
            q = q.to(tl.float32)
        t = q_offset + offs_m  # absolute query positions
        # Keys any query of this block can see: [j_lo, j_hi).
        t_first = q_offset + pid_m * BLOCK_M
        t_last = tl.minimum(t_first + BLOCK_M, q_offset + Tq) - 1
        j_lo = tl.maximum(t_first - window + 1 - k_offset, 0)
        j_hi = tl.minimum(t_last - k_offset + 1, Tk)
        m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
        l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
        acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
        for start_n in range((j_lo // BLOCK_N) * BLOCK_N, j_hi, BLOCK_N):
            offs_n = start_n + tl.arange(0, BLOCK_N)
            n_mask = offs_n < Tk
            kt = tl.load(k_ptr + offs_n[None, :] * stride_kt + kvh * stride_kh + offs_d[:, None],
                         mask=n_mask[None, :] & d_mask[:, None], other=0.0)
            vv = tl.load(v_ptr + offs_n[:, None] * stride_vt + kvh * stride_vh + offs_d[None, :],
                         mask=n_mask[:, None] & d_mask[None, :], other=0.0)
            s = _dot(q, kt, UPCAST) * sm_scale
            p_abs = k_offset + offs_n
            vis = (p_abs[None, :] <= t[:, None]) & (p_abs[None, :] > t[:, None] - window)
            s = tl.where(vis & n_mask[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.exp(s - m_safe[:, None])
            alpha = tl.exp(m_i - m_safe)
            l_i = l_i * alpha + tl.sum(p, axis=1)
            acc = acc * alpha[:, None] + _dot(p, vv, UPCAST)
            m_i = m_new
        out = tl.where(l_i[:, None] > 0, acc / tl.where(l_i > 0, l_i, 1.0)[:, None], 0.0)
        tl.store(o_ptr + offs_m[:, None] * stride_ot + h * stride_oh + offs_d[None, :],
                 out.to(o_ptr.dtype.element_ty),
                 mask=(offs_m < Tq)[:, None] & d_mask[None, :])


def sliding_window_attention_triton(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                    window: int, q_offset: int, k_offset: int = 0,
                                    scale: float | None = None, *,
                                    upcast: bool | None = None) -> torch.Tensor:
    """Triton path (CUDA, or CPU under TRITON_INTERPRET=1).

    ``upcast`` (default: for fp32 inputs and under the interpreter) runs both dots in fp32;
    otherwise they take the 16-bit inputs with fp32 accumulation, as on a GPU. The tests force
    ``upcast=False`` with fp16 under the interpreter (whose bf16 dot is broken) to exercise
    the GPU's code path on the CPU."""
    Tq, Hq, D = q.shape
    Tk, Hkv, _ = k.shape
    scale = D ** -0.5 if scale is None else float(scale)
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    interp = interpreting()
    # The interpreter's fp32 -> bf16/fp16 casts truncate: write fp32 there, round in torch.
    out = torch.empty((Tq, Hq, D), dtype=torch.float32 if interp else q.dtype, device=q.device)
    lo, hi = _visible_keys(Tq, Tk, window, q_offset, k_offset)
    if Tq == 0 or hi <= lo:
        return out.zero_().to(q.dtype)
    block_d = max(16, triton.next_power_of_2(D))
    block_m = 64 if interp or block_d <= 64 else 32
    block_n = 64 if interp else 32
    grid = (triton.cdiv(Tq, block_m), Hq)
    _swa_kernel[grid](q, k, v, out,
                      q.stride(0), q.stride(1), k.stride(0), k.stride(1),
                      v.stride(0), v.stride(1), out.stride(0), out.stride(1),
                      Tq, Tk, D, q_offset, k_offset, window, Hq // Hkv, scale,
                      BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d,
                      UPCAST=(interp if upcast is None else upcast) or q.dtype == torch.float32)
    return out if out.dtype == q.dtype else out.to(q.dtype)


# ----------------------------------------------------------------------------- public API


def sliding_window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int,
                             q_offset: int, *, k_offset: int = 0, scale: float | None = None,
                             backend: str = "auto") -> torch.Tensor:
    """Causal sliding-window attention of a query segment (see the module docstring).

    ``backend``: "auto" (Triton on CUDA, torch reference on CPU), "torch" or "triton".
    Raises ``ValueError`` on bad shapes, dtypes, head groupings, window or backend.
    """
    which = _check(q, k, v, window, q_offset, k_offset, backend)
    if which == "triton":
        return sliding_window_attention_triton(q, k, v, window, q_offset, k_offset, scale)
    return sliding_window_attention_torch(q, k, v, window, q_offset, k_offset, scale)


def visible_pairs(Tq: int, Tk: int, window: int, q_offset: int, k_offset: int = 0) -> int:
    """Number of (query, key) pairs the window lets through, per head: the work the kernel
    must do (a benchmark divides 4 * pairs * D * Hq FLOPs by time)."""
    t = q_offset + torch.arange(Tq, dtype=torch.int64)
    lo = torch.clamp(t - window + 1, min=k_offset)
    hi = torch.clamp(t, max=k_offset + Tk - 1)
    return int(torch.clamp(hi - lo + 1, min=0).sum())
