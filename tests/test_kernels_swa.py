"""Sliding-window attention: the torch reference against a brute-force loop, the Triton kernel
(under TRITON_INTERPRET=1 without a GPU) against the reference, and the replay property the
engine relies on."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tiered_kv.kernels.swa import (
    sliding_window_attention,
    sliding_window_attention_triton,
    visible_pairs,
)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _qkv(Tq, Tk, Hq, Hkv, D, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(s, generator=g) for s in ((Tq, Hq, D), (Tk, Hkv, D), (Tk, Hkv, D)))
    return (t.to(dtype).to(DEVICE) for t in (q, k, v))


def _brute(q, k, v, window, q_offset, k_offset=0):
    """Per query and head: softmax over the keys with t - window < p <= t, in float64."""
    Tq, Hq, D = q.shape
    Tk, Hkv, _ = k.shape
    out = torch.zeros(Tq, Hq, D, dtype=torch.float64)
    q, k, v = q.double().cpu(), k.double().cpu(), v.double().cpu()
    for i in range(Tq):
        t = q_offset + i
        js = [j for j in range(Tk) if t - window < k_offset + j <= t]
        if not js:
            continue
        for h in range(Hq):
            kh = h // (Hq // Hkv)
            s = torch.stack([q[i, h] @ k[j, kh] for j in js]) / math.sqrt(D)
            out[i, h] = torch.softmax(s, 0) @ v[js, kh]
    return out


@pytest.mark.parametrize("Tq,Tk,Hq,Hkv,D,W,qo,ko", [
    (9, 9, 4, 2, 8, 3, 0, 0),
    (4, 12, 3, 1, 16, 5, 8, 0),
    (5, 6, 2, 2, 8, 4, 10, 6),   # keys start after position 0
    (3, 4, 2, 1, 8, 2, 20, 0),   # window entirely past the keys: zeros
])
def test_reference_matches_brute_force(Tq, Tk, Hq, Hkv, D, W, qo, ko):
    q, k, v = _qkv(Tq, Tk, Hq, Hkv, D, seed=Tq)
    got = sliding_window_attention(q, k, v, W, qo, k_offset=ko, backend="torch")
    assert torch.allclose(got.double().cpu(), _brute(q, k, v, W, qo, ko), atol=1e-5)


CASES = [  # Tq, Tk, Hq, Hkv, D, window, q_offset, k_offset
    (37, 37, 4, 4, 64, 7, 0, 0),       # prefill, MHA, partial block
    (37, 37, 6, 2, 96, 128, 0, 0),     # window larger than the sequence, D not a power of 2
    (70, 70, 8, 1, 32, 1, 0, 0),       # window 1: each query sees only itself (MQA)
    (5, 133, 4, 2, 64, 128, 128, 0),   # bounded replay: 5 queries at the end of 133 keys
    (20, 40, 6, 3, 48, 7, 60, 35),     # keys sliced from position 35
    (3, 10, 2, 1, 16, 4, 100, 0),      # no query sees a key: zeros, not NaN
]


@pytest.mark.parametrize("case", CASES, ids=[str(c) for c in CASES])
def test_triton_matches_reference(case):
    Tq, Tk, Hq, Hkv, D, W, qo, ko = case
    q, k, v = _qkv(Tq, Tk, Hq, Hkv, D, seed=Tk)
    ref = sliding_window_attention(q, k, v, W, qo, k_offset=ko, backend="torch")
    tri = sliding_window_attention(q, k, v, W, qo, k_offset=ko, backend="triton")
    assert tri.shape == (Tq, Hq, D) and tri.dtype == q.dtype
    assert not torch.isnan(tri).any()
    assert (tri - ref).abs().max().item() < 1e-5


def test_window_one_returns_own_value():
    q, k, v = _qkv(11, 11, 4, 2, 16, seed=3)
    for backend in ("torch", "triton"):
        out = sliding_window_attention(q, k, v, 1, 0, backend=backend)
        assert torch.allclose(out, v.repeat_interleave(2, dim=1), atol=1e-6)


def test_no_visible_key_gives_zeros():
    q, k, v = _qkv(4, 6, 2, 1, 16, seed=4)
    for backend in ("torch", "triton"):
        # Keys at 50..55, queries at 0..3: nothing visible.
        out = sliding_window_attention(q, k, v, 8, 0, k_offset=50, backend=backend)
        assert torch.equal(out, torch.zeros_like(out))
        # Queries at 100..103 with window 8 see 93..103, keys end at 5: nothing visible.
        out = sliding_window_attention(q, k, v, 8, 100, backend=backend)
        assert torch.equal(out, torch.zeros_like(out))


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_replayed_segment_equals_full_prefill_rows(backend):
    """Bounded replay: the last R queries against the last R + W - 1 keys give the same rows
    as attention over the whole sequence."""
    N, R, W = 90, 13, 16
    q, k, v = _qkv(N, N, 4, 2, 32, seed=5)
    full = sliding_window_attention(q, k, v, W, 0, backend=backend)
    seg = sliding_window_attention(q[N - R:], k, v, W, N - R, backend=backend)
    lo = N - R - W + 1
    cut = sliding_window_attention(q[N - R:], k[lo:], v[lo:], W, N - R, k_offset=lo,
                                   backend=backend)
    assert (seg - full[N - R:]).abs().max().item() < 1e-6
    assert (cut - full[N - R:]).abs().max().item() < 1e-6


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_inputs(dtype):
    q, k, v = _qkv(33, 33, 4, 2, 64, seed=6, dtype=dtype)
    ref = sliding_window_attention(q, k, v, 9, 0, backend="torch")
    tri = sliding_window_attention(q, k, v, 9, 0, backend="triton")
    assert tri.dtype == dtype
    assert (tri.float() - ref.float()).abs().max().item() < 2e-2


def test_sixteen_bit_dot_path():
    """The GPU's path (16-bit dots, fp32 accumulation), run on fp16 so the interpreter can."""
    q, k, v = _qkv(40, 40, 4, 2, 32, seed=7, dtype=torch.float16)
    ref = sliding_window_attention(q, k, v, 9, 0, backend="torch")
    out = sliding_window_attention_triton(q, k, v, 9, 0, upcast=False)
    assert out.dtype == torch.float16
    assert (out.float() - ref.float()).abs().max().item() < 2e-2


def test_visible_pairs_counts_the_mask():
    for Tq, Tk, W, qo, ko in [(37, 37, 7, 0, 0), (5, 133, 128, 128, 0), (3, 10, 4, 100, 0),
                              (20, 40, 7, 60, 35)]:
        t = qo + torch.arange(Tq)[:, None]
        p = ko + torch.arange(Tk)[None, :]
        assert visible_pairs(Tq, Tk, W, qo, ko) == int(((p <= t) & (p > t - W)).sum())


@settings(max_examples=40, deadline=None)
@given(Tq=st.integers(1, 6), extra=st.integers(0, 6), hkv=st.integers(1, 2),
       group=st.integers(1, 3), window=st.integers(1, 9), qo=st.integers(0, 12),
       ko=st.integers(0, 8), seed=st.integers(0, 2**16))
def test_reference_property_against_brute_force(Tq, extra, hkv, group, window, qo, ko, seed):
    q, k, v = _qkv(Tq, Tq + extra, hkv * group, hkv, 8, seed=seed)
    got = sliding_window_attention(q, k, v, window, qo, k_offset=ko, backend="torch")
    assert torch.allclose(got.double().cpu(), _brute(q, k, v, window, qo, ko), atol=1e-5)


@pytest.mark.parametrize("make,match", [
    (lambda q, k, v: sliding_window_attention(q[0], k, v, 4, 0), r"\[T, H, D\]"),
    (lambda q, k, v: sliding_window_attention(q[:, :3], k, v, 4, 0), "multiple"),
    (lambda q, k, v: sliding_window_attention(q[..., :8], k, v, 4, 0), "head dim"),
    (lambda q, k, v: sliding_window_attention(q, k, v[:5], 4, 0), "same shape"),
    (lambda q, k, v: sliding_window_attention(q.double(), k, v, 4, 0), "float32"),
    (lambda q, k, v: sliding_window_attention(q.half(), k, v, 4, 0), "share a dtype"),
    (lambda q, k, v: sliding_window_attention(q, k, v, 0, 0), "window"),
    (lambda q, k, v: sliding_window_attention(q, k, v, 2.5, 0), "window"),
    (lambda q, k, v: sliding_window_attention(q, k, v, 4, 1.0), "q_offset"),
    (lambda q, k, v: sliding_window_attention(q, k, v, 4, 0, backend="cuda"), "backend"),
])
def test_bad_input_raises_clear_error(make, match):
    q, k, v = _qkv(6, 6, 4, 2, 16)
    with pytest.raises(ValueError, match=match):
        make(q, k, v)
