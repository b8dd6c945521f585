"""A fused CPU path for MXFP4 / NVFP4, bit-exact with the torch reference in ``fp4.py``.

Why a third implementation: the torch reference makes about fifteen elementwise passes over
every element (roundings, minima, shifts, packing), which on a CPU tops out near a twentieth
of ``torch.clone`` bandwidth. These numba loops read each input block once (NVFP4: twice, the
per-head amax first), write one code byte per element to a small scratch, and pack it, in
parallel over scale blocks, the way the Triton kernels work on a GPU. They follow the
reference's arithmetic (same E2M1 rounding formula, same integer scale rules, fp32 products
and correctly rounded quotients), and the tests check every byte against it.

What makes the loops vectorize (found by timing variants of them): float32/int32
typed constants (a float64 literal widens every lane), a balanced tree for the block amax
(an integer max over the sign-cleared bits, whose order is that of |x|), and a separate pack
loop reading each pair of codes as one little-endian uint16.

Compiled on first use and cached on disk (numba ``cache=True``). Inputs are ``float32`` (the
caller converts other dtypes); when ``fp4`` picks this path is in its module docstring.
"""

from __future__ import annotations

import contextlib
import functools

import numpy as np
import torch
from numba import njit, prange

_E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                  -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float32)

# Typed constants: a float64 literal would widen every lane and stop LLVM vectorizing.
_F0, _F05, _F2, _F4, _F6, _F7 = (np.float32(v) for v in (0.0, 0.5, 2.0, 4.0, 6.0, 7.0))
_F448, _F512 = np.float32(448.0), np.float32(512.0)
_F2M6, _F2M9 = np.float32(2.0 ** -6), np.float32(2.0 ** -9)
_U3, _U4 = np.uint8(3), np.uint8(4)
_LO, _HI = np.uint16(0x000F), np.uint16(0x00F0)


@njit(cache=True, inline="always")
def _e2m1(v):
    """fp32 scaled value -> E2M1 code, sign in bit 3 (set when v < 0): the reference's
    ``min(rne(2a), rne(a) + 2, rne(a/2) + 4, 7)`` (``fp4._e2m1_encode_torch`` says why)."""
    a = abs(v)
    c = min(np.rint(a * _F2), np.rint(a) + _F2, np.rint(a * _F05) + _F4, _F7)
    return np.uint8(c) | (np.uint8(v < _F0) << _U3)


_ABS = np.int32(0x7FFFFFFF)


@njit(cache=True, inline="always")
def _amax8(r, o):
    """Bits of max |x| over r[o:o+8] (int32 view, sign cleared): a balanced tree of maxima,
    which LLVM turns into vector ops where a running max stays scalar."""
    m0 = max(r[o] & _ABS, r[o + 4] & _ABS)
    m1 = max(r[o + 1] & _ABS, r[o + 5] & _ABS)
    m2 = max(r[o + 2] & _ABS, r[o + 6] & _ABS)
    m3 = max(r[o + 3] & _ABS, r[o + 7] & _ABS)
    return max(max(m0, m2), max(m1, m3))


@njit(cache=True, inline="always")
def _amax16(r):
    return max(_amax8(r, 0), _amax8(r, 8))


@njit(cache=True, inline="always")
def _amax32(r):
    return max(max(_amax8(r, 0), _amax8(r, 8)), max(_amax8(r, 16), _amax8(r, 24)))


@njit(cache=True, inline="always")
def _pack(codes, data):
    """Codes [nb, block] (one per byte) -> nibbles: byte j = codes[2j] | codes[2j+1] << 4,
    read as one little-endian uint16 per pair."""
    pairs = codes.reshape(-1).view(np.uint16)
    out = data.reshape(-1)
    for j in prange(out.size):
        w = pairs[j]
        out[j] = np.uint8((w & _LO) | ((w >> _U4) & _HI))


@njit(cache=True, parallel=True)
def _quantize_mx(xi, xf, codes, data, scales, inv_table, ceil):  # pragma: no cover - compiled
    """xi/xf: the same fp32 blocks [nb, 32] viewed as int32 and float32."""
    nb = xf.shape[0]
    for b in prange(nb):
        amax_bits = _amax32(xi[b])  # int order of the bits == order of |x|
        bexp = amax_bits >> 23
        code = bexp - 2
        if ceil and (amax_bits & 0x7FFFFF) > 0x400000:
            code += 1
        code = min(max(code, 0), 253)
        inv = inv_table[code]
        for i in range(32):
            codes[b, i] = _e2m1(xf[b, i] * inv)
        scales[b] = 255 if bexp == 255 else code
    _pack(codes, data)


@njit(cache=True, parallel=True)
def head_amax_bits(xi3):  # pragma: no cover - compiled
    """Bits of max |x| per head of fp32 [rows, H, D] (viewed as int32) -> int32 [H].

    Integer max of the bits with the sign cleared: the same order as |x| for finite values,
    and NaN/Inf come out >= 0x7F800000, so the caller sees them. Integer max vectorizes;
    a NaN-aware float max would not."""
    rows, heads, dim = xi3.shape
    out = np.zeros(heads, dtype=np.int32)
    for h in prange(heads):
        m = 0
        for r in range(rows):
            for d in range(dim):
                m = max(m, xi3[r, h, d] & 0x7FFFFFFF)
        out[h] = m
    return out


@njit(cache=True, parallel=True)
def _quantize_nv(xi, xf, codes, data, scales, gs_heads, blocks_per_row):  # pragma: no cover
    """NVFP4 blocks [nb, 16] in flat passes, each of which vectorizes: block amax; block
    scale s; its E4M3 code (the reference's integer rule on the bits of s, read through an
    int32 view in a separate pass: numba has no scalar bitcast); decoded scale; elements /
    scale -> E2M1; pack."""
    nb = xf.shape[0]
    heads = gs_heads.size
    fbuf = np.empty(nb, dtype=np.float32)
    ibuf = fbuf.view(np.int32)
    gsb = np.empty(nb, dtype=np.float32)
    for b in prange(nb):
        ibuf[b] = _amax16(xi[b])
    for rh in prange(nb // blocks_per_row):  # one (row, head): its blocks share a scale
        gs = gs_heads[rh % heads]
        for j in range(blocks_per_row):
            b = rh * blocks_per_row + j
            gsb[b] = gs
            fbuf[b] = min(np.float32(fbuf[b] / np.float32(gs * _F6)), _F448)
    code = np.empty(nb, dtype=np.int32)
    scale = np.empty(nb, dtype=np.float32)
    pow2 = np.empty(16, dtype=np.float32)
    for e in range(16):
        pow2[e] = np.float32(2.0 ** (e - 10))
    for b in prange(nb):
        sb = ibuf[b]
        normal = ((sb + 0x7FFFF + ((sb >> 20) & 1)) >> 20) - 960
        sub = np.int32(np.rint(fbuf[b] * _F512))
        code[b] = sub if fbuf[b] < _F2M6 else normal
    for b in prange(nb):
        c = code[b]
        e = c >> 3
        m = c & 7
        # E4M3 value: (8 + m) * 2**(e - 10) for e > 0, m * 2**-9 for e = 0 (exact products).
        val = np.float32(8 + m) * pow2[e] if e > 0 else np.float32(m) * _F2M9
        scale[b] = np.float32(val * gsb[b])
        scales[b] = np.uint8(c)
    for b in prange(nb):
        sc = scale[b]
        if sc > _F0:
            for i in range(16):
                codes[b, i] = _e2m1(np.float32(xf[b, i] / sc))
        else:  # zero block (or an underflowed scale): the reference encodes +0
            for i in range(16):
                codes[b, i] = 0
    _pack(codes, data)


@njit(cache=True, parallel=True)
def _dequantize(data, codes, table, gs_heads, blocks_per_row, out):  # pragma: no cover
    """data [nb, half] uint8 and scale codes [nb] -> out [nb, 2 * half] fp32; a block's scale
    is ``table[code] * gs`` with gs the global scale of its (row, head) (1 for MXFP4)."""
    nb, half = data.shape
    heads = gs_heads.size
    for rh in prange(nb // blocks_per_row):
        g = gs_heads[rh % heads]
        for j in range(blocks_per_row):
            b = rh * blocks_per_row + j
            s = np.float32(table[codes[b]] * g)
            for i in range(half):
                byte = data[b, i]
                out[b, 2 * i] = _E2M1[byte & 15] * s
                out[b, 2 * i + 1] = _E2M1[byte >> 4] * s


@contextlib.contextmanager
def _torch_threads_kept():
    """Numba's OpenMP threading layer sets the calling thread's OpenMP thread count to numba's
    when a parallel loop runs, and torch's CPU ops in that thread then use that many threads
    (``torch.set_num_threads(1)`` silently became 2 after the first FP4 quantize); put it back."""
    n = torch.get_num_threads()
    try:
        yield
    finally:
        if torch.get_num_threads() != n:
            torch.set_num_threads(n)


def quantize_blocks(x32: torch.Tensor, fmt: str, scale_rule: str, gs_heads: torch.Tensor,
                    blocks_per_row: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Contiguous fp32 blocks ``[nb, block]`` -> (packed ``[nb, block/2]``, scale codes ``[nb]``).

    NVFP4 reads the global scales ``gs_heads [H]``: block b belongs to head
    ``(b // blocks_per_row) % H`` (H = 1 for one scale over the whole tensor)."""
    nb, block = x32.shape
    xf = x32.numpy()
    xi = xf.view(np.int32)
    data = np.empty((nb, block // 2), dtype=np.uint8)
    codes = np.empty((nb, block), dtype=np.uint8)  # one code per byte before packing
    scales = np.empty((nb,), dtype=np.uint8)
    if nb:
        with _torch_threads_kept():
            if fmt == "mxfp4":
                _quantize_mx(xi, xf, codes, data, scales, _inv_table(), scale_rule == "ceil")
            else:
                _quantize_nv(xi, xf, codes, data, scales, gs_heads.numpy(), blocks_per_row)
    return torch.from_numpy(data), torch.from_numpy(scales)


def per_head_amax(x32: torch.Tensor) -> torch.Tensor:
    """fp32 ``[..., H, D]`` (ndim >= 3) -> max |x| per head ``[H]``, one read of x."""
    h, d = x32.shape[-2], x32.shape[-1]
    with _torch_threads_kept():
        bits = head_amax_bits(x32.reshape(-1, h, d).numpy().view(np.int32))
    return torch.from_numpy(bits).view(torch.float32)


def dequantize_blocks(packed: torch.Tensor, codes: torch.Tensor, scale_table: np.ndarray,
                      gs_heads: torch.Tensor, blocks_per_row: int) -> torch.Tensor:
    """Packed ``[nb, block/2]`` and scale codes ``[nb]`` -> fp32 ``[nb, block]``, with the global
    scales ``gs_heads [H]`` as in :func:`quantize_blocks` (ones(1) for MXFP4). ``scale_table``
    maps each scale code 0..255 to its fp32 value (``fp4.scale_table``: the reference's own
    decoders, so this module never imports the reference)."""
    nb, half = packed.shape
    out = np.empty((nb, 2 * half), dtype=np.float32)
    if nb:
        with _torch_threads_kept():
            _dequantize(packed.numpy(), codes.numpy(), np.ascontiguousarray(scale_table, dtype=np.float32),
                        gs_heads.numpy(), blocks_per_row, out)
    return torch.from_numpy(out)


@functools.lru_cache(maxsize=1)
def _inv_table() -> np.ndarray:
    """1/X = 2 ** (127 - code) for E8M0 codes 0..253 (fp32, exact), built from bits."""
    codes = np.arange(254, dtype=np.int32)
    return ((254 - codes) << 23).astype(np.int32).view(np.float32).copy()
