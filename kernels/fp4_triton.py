"""The Triton device code of the FP4 formats: E2M1/E4M3 codecs and the (de)quantize kernels.

Why a module of its own: this is the code that runs on the GPU (or under ``TRITON_INTERPRET=1``),
written against Triton's language only; :mod:`tiered_kv.kernels.fp4` (formats, byte layout, the
host side) imports it only when triton is installed. E4M3 and E8M0 are encoded with integer
operations only, because the interpreter's float-to-fp8 casts are wrong.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _e2m1_encode(v):
    """fp32 scaled values -> int32 E2M1 codes (nearest-even, saturating, sign bit 3)."""
    a = tl.abs(v)
    code = (a > 0.25).to(tl.int32) + (a >= 0.75).to(tl.int32) + (a > 1.25).to(tl.int32)
    code += (a >= 1.75).to(tl.int32) + (a > 2.5).to(tl.int32) + (a >= 3.5).to(tl.int32)
    code += (a > 5.0).to(tl.int32)
    return code | ((v < 0).to(tl.int32) << 3)

@triton.jit
def _e2m1_value(c):
    """int32 E2M1 code -> fp32 value, built from bits."""
    m = c & 7
    e = m >> 1
    mt = m & 1
    normal = (((e + 126) << 23) | (mt << 22)).to(tl.float32, bitcast=True)
    mag = tl.where(e == 0, mt.to(tl.float32) * 0.5, normal)
    return tl.where((c & 8) != 0, -mag, mag)

@triton.jit
def _e4m3_encode(s):
    """fp32 in [0, 448] -> int32 E4M3 code, nearest-even, integer ops only."""
    bits = s.to(tl.int32, bitcast=True)
    normal = ((bits + 0x7FFFF + ((bits >> 20) & 1)) >> 20) - 960
    sub = (s * 512.0 + 8388608.0).to(tl.int32, bitcast=True) - 0x4B000000
    return tl.where(s < 0.015625, sub, normal)

@triton.jit
def _e4m3_value(code):
    """int32 E4M3 code -> fp32 value, exact."""
    e = code >> 3
    m = code & 7
    normal = (((e + 120) << 23) | (m << 20)).to(tl.float32, bitcast=True)
    return tl.where(e == 0, m.to(tl.float32) * 0.001953125, normal)

@triton.jit
def _quantize_kernel(
    x_ptr,  # *f32|f16|bf16 [n_blocks * BLOCK], contiguous input, read once
    data_ptr,  # *u8 [n_blocks * BLOCK // 2], packed E2M1 output (2i low nibble)
    scale_ptr,  # *u8 [n_blocks], E8M0 (mxfp4) or E4M3 (nvfp4) scale codes output
    gs_ptr,  # *f32 [n_heads], NVFP4 per-head global scales (unused for mxfp4)
    n_blocks,  # number of scale blocks in the whole input
    blocks_per_row,  # D // BLOCK: block index -> row index
    n_heads,  # H: row index -> head index (row % H); 1 for a scalar global scale
    BLOCK: tl.constexpr,  # 32 (mxfp4) or 16 (nvfp4) elements per scale
    BLOCKS_PER_PROG: tl.constexpr,  # scale blocks handled by one program
    IS_NV: tl.constexpr,  # NVFP4 (E4M3 x global) instead of MXFP4 (E8M0)
    CEIL: tl.constexpr,  # MXFP4 scale rule: ceil instead of the spec's floor
):
    pid = tl.program_id(0)
    blk = pid * BLOCKS_PER_PROG + tl.arange(0, BLOCKS_PER_PROG)
    bmask = blk < n_blocks
    half = tl.arange(0, BLOCK // 2)
    offs = blk.to(tl.int64)[:, None] * BLOCK + 2 * half[None, :]
    even = tl.load(x_ptr + offs, mask=bmask[:, None], other=0.0).to(tl.float32)
    odd = tl.load(x_ptr + offs + 1, mask=bmask[:, None], other=0.0).to(tl.float32)
    amax = tl.maximum(tl.max(tl.abs(even), axis=1), tl.max(tl.abs(odd), axis=1))
    if IS_NV:
        head = (blk // blocks_per_row) % n_heads
        gs = tl.load(gs_ptr + head, mask=bmask, other=1.0)
        s = tl.minimum(tl.math.div_rn(amax, gs * 6.0), 448.0)
        code = _e4m3_encode(s)
        scale = _e4m3_value(code) * gs
        pos = scale > 0
        denom = tl.where(pos, scale, 1.0)[:, None]
        v_even = tl.where(pos[:, None], tl.math.div_rn(even, denom), 0.0)
        v_odd = tl.where(pos[:, None], tl.math.div_rn(odd, denom), 0.0)
    else:
        bad = (even != even) | (tl.abs(even) == float("inf"))
        bad = bad | (odd != odd) | (tl.abs(odd) == float("inf"))
        bad_blk = tl.max(bad.to(tl.int32), axis=1) > 0
        bits = amax.to(tl.int32, bitcast=True)
        code = ((bits >> 23) & 0xFF) - 2
        if CEIL:
            code += ((bits & 0x7FFFFF) > 0x400000).to(tl.int32)
        code = tl.minimum(tl.maximum(code, 0), 253)
        inv = ((254 - code) << 23).to(tl.float32, bitcast=True)[:, None]
        v_even = even * inv
        v_odd = odd * inv
        code = tl.where(bad_blk, 255, code)
    packed = _e2m1_encode(v_even) | (_e2m1_encode(v_odd) << 4)
    out_offs = blk.to(tl.int64)[:, None] * (BLOCK // 2) + half[None, :]
    tl.store(data_ptr + out_offs, packed.to(tl.uint8), mask=bmask[:, None])
    tl.store(scale_ptr + blk, code.to(tl.uint8), mask=bmask)

@triton.jit
def _dequantize_kernel(
    data_ptr,  # *u8 [n_blocks * BLOCK // 2], packed E2M1 codes
    scale_ptr,  # *u8 [n_blocks], E8M0 / E4M3 scale codes
    gs_ptr,  # *f32 [n_heads], NVFP4 per-head global scales (unused for mxfp4)
    out_ptr,  # *f32|f16|bf16 [n_blocks * BLOCK], output, written once
    n_blocks,  # number of scale blocks
    blocks_per_row,  # D // BLOCK
    n_heads,  # H (1 for a scalar global scale)
    BLOCK: tl.constexpr,
    BLOCKS_PER_PROG: tl.constexpr,
    IS_NV: tl.constexpr,
):
    pid = tl.program_id(0)
    blk = pid * BLOCKS_PER_PROG + tl.arange(0, BLOCKS_PER_PROG)
    bmask = blk < n_blocks
    half = tl.arange(0, BLOCK // 2)
    in_offs = blk.to(tl.int64)[:, None] * (BLOCK // 2) + half[None, :]
    byte = tl.load(data_ptr + in_offs, mask=bmask[:, None], other=0).to(tl.int32)
    code = tl.load(scale_ptr + blk, mask=bmask, other=0).to(tl.int32)
    if IS_NV:
        head = (blk // blocks_per_row) % n_heads
        gs = tl.load(gs_ptr + head, mask=bmask, other=1.0)
        scale = _e4m3_value(code) * gs
    else:
        scale = tl.where(code == 0, 0x400000, code << 23).to(tl.float32, bitcast=True)
    lo = _e2m1_value(byte & 15) * scale[:, None]
    hi = _e2m1_value(byte >> 4) * scale[:, None]
    out_offs = blk.to(tl.int64)[:, None] * BLOCK + 2 * half[None, :]
    out_ty = out_ptr.dtype.element_ty
    tl.store(out_ptr + out_offs, lo.to(out_ty), mask=bmask[:, None])
    tl.store(out_ptr + out_offs + 1, hi.to(out_ty), mask=bmask[:, None])
