"""MXFP4 and NVFP4: 4-bit floating-point KV, packed two values a byte.

Why FP4 for the global KV tier: the SSD tier is bandwidth- and capacity-bound, and FP4 cuts
bf16 KV 3.5-3.8x. Hopper has no FP4 math, so these kernels only move bytes; they are
memory-bound and judged in GB/s against the roofline.

Element format (both formats): E2M1, codes 0..7 = 0, 0.5, 1, 1.5, 2, 3, 4, 6 and bit 3 the
sign. A scaled value is rounded to the nearest code, ties to the even code, and saturates at 6.
The sign bit is set when the input is < 0, so a small negative value that rounds to zero is
stored as -0 (code 8). Element 2i of a row sits in the low nibble of byte i, element 2i+1 in
the high nibble: ``data`` has shape ``[..., D // 2]``.

MXFP4 (OCP MX v1.0): 32 consecutive elements of the last axis share an E8M0 scale
``X = 2 ** (code - 127)``. Rule ``"floor"`` (the spec) picks ``X = 2 ** (floor(log2 amax) - 2)``
(values above 6 X then saturate); rule ``"ceil"`` picks the smallest power of two with
``amax <= 6 X`` (never saturates, coarser step). An all-zero block gets code 0. Both rules
are computed from the exponent bits of ``amax``, exactly. 4.25 bits/element.

NVFP4: 16 elements share an E4M3 (fn: max 448, no inf) scale, times an FP32 ``global_scale``.
One FP32 scale per whole tensor underflows block scales when magnitudes spread widely across
tokens or heads, so here it is per chunk *and head*:

* input ``[..., H, D]`` with ``ndim >= 3``: ``global_scale`` has shape ``[H]`` and
  ``global_scale[h] = amax(|x[..., h, :]|) / (448 * 6)``, the amax reduced over every axis
  except the head axis (-2). A chunk of KV ``[T, H, D]`` thus gets one FP32 scale per head.
* input ``[D]`` or ``[T, D]`` (``ndim <= 2``): one 0-d ``global_scale`` over the whole tensor.

An all-zero head gets global scale 1. The block scale is ``e4m3(amax_block / (6 * gs))`` and an
element is encoded as ``e2m1(x / (e4m3_value * gs))``; dequantization multiplies back.
4.5 bits/element plus 4 bytes per head.

Layout: this file holds the plain-torch references (with their memory traffic) and the
wrappers that check inputs and build the grid; the Triton kernels are in ``fp4_triton``, the
fused CPU loops (byte-identical to the reference, several times faster) in ``fp4_cpu``, which
``backend="auto"`` runs for CPU tensors of at least ``NUMBA_MIN_ELEMENTS`` elements.
"""

from __future__ import annotations

import functools
import math
import sys
from dataclasses import dataclass

import torch
from tiered_kv.kernels import interpreting, resolve_backend, triton

from tiered_kv.keys import BLOCK, DEFAULT_FORMAT, check_fp4_format

SCALE_RULES = ("floor", "ceil")
BACKENDS = ("auto", "torch", "triton", "numba")

#: E2M1 magnitudes by code 0..7.
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
E4M3_MAX = 448.0
E2M1_MAX = 6.0
_NV_GLOBAL_DIV = E4M3_MAX * E2M1_MAX  # 2688: maps a head's amax to the top of both ranges
_TINY = 2.0 ** -149  # smallest fp32 subnormal: floor for a global scale that would underflow
_INPUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


@dataclass(frozen=True)
class FP4Tensor:
    """A quantized tensor: packed E2M1 codes, per-block scale codes, and for NVFP4 the
    per-head FP32 global scale. ``shape``/``dtype`` are those of the original input."""

    data: torch.Tensor  # uint8 [..., D // 2], element 2i in the low nibble
    scales: torch.Tensor  # uint8 [..., D // block]: E8M0 (mxfp4) or E4M3 (nvfp4) codes
    global_scale: torch.Tensor | None  # float32 [H] or 0-d (nvfp4); None (mxfp4)
    fmt: str
    shape: torch.Size
    dtype: torch.dtype

    @property
    def block(self) -> int:
        return BLOCK[self.fmt]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes stored: payload + block scales + global scales."""
        extra = 0 if self.global_scale is None else 4 * self.global_scale.numel()
        return self.data.numel() + self.scales.numel() + extra

    @property
    def bits_per_element(self) -> float:
        """Actual bits per element, global scales included."""
        return 8.0 * self.nbytes / max(self.numel, 1)

    @property
    def device(self) -> torch.device:
        return self.data.device


# ----------------------------------------------------------------------------- validation


def _has_numba() -> bool:
    """Whether the numba CPU path (fp4_cpu, numba is a dependency) applies: it packs pairs as uint16."""
    return sys.byteorder == "little"


#: On the CPU, ``backend="auto"`` uses the fused numba loops from this many elements up; below
#: it the torch reference is as fast, and a process that only quantizes small tensors (most
#: tests) never waits for numba to compile or load its cache.
NUMBA_MIN_ELEMENTS = 1 << 16


def _resolve_backend(backend: str, device: torch.device, numel: int = NUMBA_MIN_ELEMENTS) -> str:
    fused = device.type == "cpu" and numel >= NUMBA_MIN_ELEMENTS and _has_numba()
    which = resolve_backend(backend, BACKENDS, device, "numba" if fused else "torch")
    if backend == "numba":
        if device.type != "cpu":
            raise ValueError(f"backend='numba' runs on CPU tensors only (got {device.type})")
        if not _has_numba():
            raise ValueError("backend='numba' needs the numba package, which is not installed")
    return which


def _check_input(x: torch.Tensor, fmt: str, scale_rule: str) -> None:
    check_fp4_format(fmt)
    if scale_rule not in SCALE_RULES:
        raise ValueError(f"unknown scale_rule {scale_rule!r}; allowed: {', '.join(SCALE_RULES)}")
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"quantize expects a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _INPUT_DTYPES:
        raise ValueError(f"quantize needs a float tensor (float32/float16/bfloat16/float64), "
                         f"got dtype {x.dtype}")
    if x.ndim == 0:
        raise ValueError("quantize needs at least one dimension [..., D]; got a 0-d tensor")
    block = BLOCK[fmt]
    if x.shape[-1] % block != 0 or x.shape[-1] == 0:
        raise ValueError(f"{fmt} needs the last dimension D to be a positive multiple of "
                         f"{block}; got D={x.shape[-1]} (shape {tuple(x.shape)})")


def _nonfinite_error(fmt: str) -> ValueError:
    return ValueError(f"{fmt} quantize: input contains NaN or Inf; FP4 cannot encode them")


# ----------------------------------------------------------------------------- torch reference
#
# Memory traffic of the references (and of the kernels), per element of a [..., D] input:
#   quantize:   read in_bytes, write 0.5 + 1/block           (NVFP4: + in_bytes for the
#               per-head amax pass that makes the global scale)
#   dequantize: read 0.5 + 1/block, write out_bytes
# The references process a few hundred KiB at a time so their temporaries stay in cache.

_CHUNK_BLOCKS = 8192  # blocks per chunk of the reference: 256 KiB-1 MiB of fp32 input
_CHUNK_BLOCKS_CUDA = 1 << 22  # on a GPU, chunks only bound the temporaries' memory


def _spans(n: int, device: torch.device):
    """The [lo, hi) ranges of ``n`` blocks, a chunk at a time."""
    step = _CHUNK_BLOCKS_CUDA if device.type == "cuda" else _CHUNK_BLOCKS
    return ((lo, min(lo + step, n)) for lo in range(0, n, step))


def _e2m1_encode_torch(v: torch.Tensor) -> torch.Tensor:
    """Scaled fp32 values -> E2M1 codes (uint8, sign in bit 3), nearest-even, saturating.

    The code grid is |v| with step 0.5 below 2, step 1 below 4 and step 2 above, so
    ``code = min(rne(2|v|), rne(|v|) + 2, rne(|v|/2) + 4, 7)``: each piece is an exact scaling
    and one round-half-even (an even multiple of the step is an even code), and rounding
    commutes with the min. It equals counting the rounding thresholds 0.25, 0.75, 1.25, 1.75,
    2.5, 3.5, 5 below |v| (strict where ties go down, inclusive where they go up), which is
    what the Triton kernel does; the tests check both against a brute-force nearest search.
    Float arithmetic instead of seven comparisons: about half the passes over memory.
    """
    a = v.abs()
    code = a.mul(2.0).round_()
    tmp = a.round()
    torch.minimum(code, tmp.add_(2.0), out=code)
    torch.mul(a, 0.5, out=tmp)
    torch.minimum(code, tmp.round_().add_(4.0), out=code)
    code = code.clamp_(max=7.0).to(torch.uint8)
    code |= (v < 0).view(torch.uint8) << 3
    return code


def _e8m0_code_torch(amax: torch.Tensor, scale_rule: str) -> torch.Tensor:
    """Block amax (fp32, >= 0) -> E8M0 code as int32; 255 (E8M0 NaN) flags NaN/Inf."""
    bits = amax.view(torch.int32)
    bexp = (bits >> 23) & 0xFF
    code = bexp - 2
    if scale_rule == "ceil":
        code = code + ((bits & 0x7FFFFF) > 0x400000).to(torch.int32)
    code = code.clamp(0, 254)
    return torch.where(bexp == 255, 255, code)


def _e8m0_inverse_torch(code: torch.Tensor) -> torch.Tensor:
    """E8M0 code -> 1/X = 2 ** (127 - code), exact (codes <= 253 by construction)."""
    return ((254 - code.clamp(max=253)) << 23).to(torch.int32).view(torch.float32)


def _e8m0_value_torch(code: torch.Tensor) -> torch.Tensor:
    """E8M0 code -> X = 2 ** (code - 127); code 0 is the subnormal 2 ** -127."""
    code = code.to(torch.int32)
    bits = torch.where(code == 0, 0x400000, code << 23)
    return bits.to(torch.int32).view(torch.float32)


def _e4m3_encode_torch(s: torch.Tensor) -> torch.Tensor:
    """Non-negative fp32 in [0, 448] -> E4M3 (fn) code, nearest-even, with integer ops."""
    bits = s.view(torch.int32)
    normal = ((bits + 0x7FFFF + ((bits >> 20) & 1)) >> 20) - ((127 - 7) << 3)
    sub = (s * 512.0 + 8388608.0).view(torch.int32) - 0x4B000000  # round(s * 2**9), ties to even
    return torch.where(s < 2.0 ** -6, sub, normal)


def _e4m3_value_torch(code: torch.Tensor) -> torch.Tensor:
    """E4M3 code -> fp32 value, exact."""
    code = code.to(torch.int32)
    e, m = code >> 3, code & 7
    normal = (((e + 120) << 23) | (m << 20)).to(torch.int32).view(torch.float32)
    return torch.where(e == 0, m.to(torch.float32) * 2.0 ** -9, normal)


def _pack_torch(codes: torch.Tensor) -> torch.Tensor:
    """[n, block] codes -> [n, block/2] bytes: each (2i, 2i+1) pair read as one little-endian
    int16, low byte to the low nibble, high byte to the high nibble."""
    if sys.byteorder != "little":  # pragma: no cover - x86 and Arm are little-endian
        return codes[:, 0::2] | (codes[:, 1::2] << 4)
    pairs = codes.view(torch.int16)
    return ((pairs & 0x0F) | ((pairs >> 4) & 0xF0)).to(torch.uint8)


def _nv_global_scale(x: torch.Tensor, fused: bool) -> torch.Tensor:
    """Per-head (ndim >= 3) or per-tensor FP32 global scale: amax / (448 * 6).

    ``fused``: a per-head amax in fp4_cpu's one read of ``x`` (fp32) instead of torch's reduction."""
    if fused and x.ndim >= 3:
        from tiered_kv.kernels import fp4_cpu

        amax = fp4_cpu.per_head_amax(x)
    else:  # over every axis but the head axis (-2), or over all of a 1-D/2-D input
        amax = x.abs().amax(dim=[d for d in range(x.ndim) if d != x.ndim - 2] if x.ndim >= 3 else [])
    amax = amax.to(torch.float32)
    if not bool(torch.isfinite(amax).all()):
        raise _nonfinite_error("nvfp4")
    gs = amax / _NV_GLOBAL_DIV
    gs = torch.where(amax == 0, 1.0, gs)
    return torch.clamp(gs, min=_TINY)


def _block_gs(gs: torch.Tensor, shape: torch.Size, block: int) -> torch.Tensor:
    """Global scale of every block of a flattened [..., D] input (head = row % H)."""
    nb_row = shape[-1] // block
    rows = math.prod(shape[:-1])
    if gs.ndim == 0:
        return gs.reshape(1).expand(rows * nb_row)
    heads = shape[-2]
    return gs.repeat(rows // heads).repeat_interleave(nb_row)


def _quantize_blocks_torch(xb: torch.Tensor, fmt: str, scale_rule: str,
                           gsb: torch.Tensor | None):
    """One chunk of blocks [n, block] (any float dtype) -> (packed [n, block/2], scale codes)."""
    xb = xb.to(torch.float32)
    amax = xb.abs().amax(dim=1)
    if fmt == "mxfp4":
        code = _e8m0_code_torch(amax, scale_rule)
        v = xb * _e8m0_inverse_torch(code)[:, None]
    else:
        s = torch.clamp(amax / (gsb * 6.0), max=E4M3_MAX)
        code = _e4m3_encode_torch(s)
        scale = _e4m3_value_torch(code) * gsb
        v = torch.where(scale[:, None] > 0, xb / scale[:, None], 0.0)
    return _pack_torch(_e2m1_encode_torch(v)), code.to(torch.uint8)


def _quantize_torch(blocks: torch.Tensor, fmt: str, scale_rule: str, gs: torch.Tensor | None,
                    shape: torch.Size) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference: blocks [nb, block] -> (packed [nb, block/2], scale codes [nb]), in cache-sized chunks."""
    nb, block = blocks.shape
    gs_blocks = _block_gs(gs, shape, block) if gs is not None else None
    data = torch.empty((nb, block // 2), dtype=torch.uint8, device=blocks.device)
    scales = torch.empty((nb,), dtype=torch.uint8, device=blocks.device)
    for lo, hi in _spans(nb, blocks.device):
        gsb = gs_blocks[lo:hi] if gs_blocks is not None else None
        data[lo:hi], scales[lo:hi] = _quantize_blocks_torch(blocks[lo:hi], fmt, scale_rule, gsb)
    return data, scales


def _e2m1_pair_table(device: torch.device) -> torch.Tensor:
    """[256, 2] fp32: byte -> (low-nibble value, high-nibble value)."""
    vals = torch.tensor(E2M1_VALUES + tuple(-v for v in E2M1_VALUES), dtype=torch.float32)
    byte = torch.arange(256)
    return torch.stack([vals[byte & 15], vals[byte >> 4]], dim=1).to(device)


def _dequantize_torch(q: FP4Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Reference: one table gather per byte, times scale."""
    block = q.block
    packed = q.data.reshape(-1, block // 2)
    codes = q.scales.reshape(-1)
    nb = packed.shape[0]
    table = _e2m1_pair_table(q.device)
    gs_blocks = _block_gs(q.global_scale, q.shape, block) if q.fmt == "nvfp4" else None
    out = torch.empty((nb, block), dtype=dtype, device=q.device)
    for lo, hi in _spans(nb, q.device):
        vals = torch.nn.functional.embedding(packed[lo:hi].long(), table).reshape(hi - lo, block)
        if q.fmt == "mxfp4":
            scale = _e8m0_value_torch(codes[lo:hi])
        else:
            scale = _e4m3_value_torch(codes[lo:hi]) * gs_blocks[lo:hi]
        out[lo:hi] = vals * scale[:, None]
    return out.reshape(q.shape)


# ----------------------------------------------------------------------------- fast paths
# Launches of fp4_triton's kernels and fp4_cpu's loops on the blocks :func:`quantize` prepared.

if triton is not None:
    from tiered_kv.kernels.fp4_triton import _dequantize_kernel, _quantize_kernel


def _gs_heads(gs: torch.Tensor | None, shape: torch.Size, device) -> tuple[torch.Tensor, int]:
    """NVFP4's global scales as the kernels read them, fp32 [H] (ones(1) for MXFP4), and H."""
    if gs is None:
        return torch.ones(1, dtype=torch.float32, device=device), 1
    return gs.reshape(-1).to(torch.float32).contiguous(), shape[-2] if gs.ndim == 1 else 1


def _launch(kernel, fmt: str, gs: torch.Tensor | None, shape: torch.Size, device, **tensors) -> None:
    """``kernel`` over the scale blocks of a ``shape`` input, ~4K elements a program on a GPU (more
    under the slow interpreter); ``tensors``: its data pointers (and CEIL)."""
    block = BLOCK[fmt]
    nb = math.prod(shape) // block
    if nb:
        bpp = (16384 if interpreting() else 4096) // block
        gs_arg, n_heads = _gs_heads(gs, shape, device)
        kernel[(triton.cdiv(nb, bpp),)](gs_ptr=gs_arg, n_blocks=nb, blocks_per_row=shape[-1] // block,
                                        n_heads=n_heads, BLOCK=block, BLOCKS_PER_PROG=bpp,
                                        IS_NV=fmt == "nvfp4", **tensors)


def _quantize_triton(blocks: torch.Tensor, fmt: str, scale_rule: str, gs: torch.Tensor | None,
                     shape: torch.Size) -> tuple[torch.Tensor, torch.Tensor]:
    nb, block = blocks.shape
    data = torch.empty((nb, block // 2), dtype=torch.uint8, device=blocks.device)
    scales = torch.empty((nb,), dtype=torch.uint8, device=blocks.device)
    _launch(_quantize_kernel, fmt, gs, shape, blocks.device, x_ptr=blocks, data_ptr=data, scale_ptr=scales,
            CEIL=scale_rule == "ceil")
    return data, scales


def _dequantize_triton(q: FP4Tensor, dtype: torch.dtype) -> torch.Tensor:
    # The interpreter's fp32 -> bf16/fp16 casts truncate: write fp32 there, round in torch.
    out = torch.empty(q.shape, dtype=torch.float32 if interpreting() else dtype, device=q.device)
    _launch(_dequantize_kernel, q.fmt, q.global_scale, q.shape, q.device, data_ptr=q.data.contiguous(),
            scale_ptr=q.scales.contiguous(), out_ptr=out)
    return out


def _quantize_numba(blocks: torch.Tensor, fmt: str, scale_rule: str, gs: torch.Tensor | None,
                    shape: torch.Size) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused CPU loops (``fp4_cpu``): one read per element; bytes identical to the reference."""
    from tiered_kv.kernels import fp4_cpu

    return fp4_cpu.quantize_blocks(blocks, fmt, scale_rule, _gs_heads(gs, shape, blocks.device)[0],
                                   shape[-1] // BLOCK[fmt])


@functools.lru_cache(maxsize=2)
def scale_table(fmt: str):
    """Scale value by code 0..255 (fp32 numpy, exact), from this module's own decoders."""
    codes = torch.arange(256, dtype=torch.int32)
    decode = _e8m0_value_torch if fmt == "mxfp4" else _e4m3_value_torch
    return decode(codes).numpy().copy()


def _dequantize_numba(q: FP4Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Fused CPU loop: one pass, scales decoded by table."""
    from tiered_kv.kernels import fp4_cpu

    out = fp4_cpu.dequantize_blocks(q.data.reshape(-1, q.block // 2).contiguous(), q.scales.reshape(-1).contiguous(),
                                    scale_table(q.fmt), _gs_heads(q.global_scale, q.shape, q.device)[0],
                                    q.shape[-1] // q.block)
    return out.reshape(q.shape)


_QUANTIZE = {"torch": _quantize_torch, "triton": _quantize_triton, "numba": _quantize_numba}
_DEQUANTIZE = {"torch": _dequantize_torch, "triton": _dequantize_triton, "numba": _dequantize_numba}


# ----------------------------------------------------------------------------- public API


def quantize(x: torch.Tensor, fmt: str = DEFAULT_FORMAT, *, scale_rule: str = "floor",
             backend: str = "auto") -> FP4Tensor:
    """Quantize ``x [..., D]`` to MXFP4 or NVFP4 (see the module docstring for the formats).

    ``scale_rule`` ("floor" | "ceil") applies to MXFP4. ``backend``: "auto" (Triton on CUDA,
    the fused numba path on CPU), "torch" (the reference), "triton" or "numba". Raises
    ``ValueError`` for an unknown format, rule or backend, a non-float dtype, D not a multiple
    of the block, or NaN/Inf.
    """
    _check_input(x, fmt, scale_rule)
    which = _resolve_backend(backend, x.device, x.numel())
    shape, dtype, block = x.shape, x.dtype, BLOCK[fmt]
    # the numba loops read fp32; the reference and the Triton kernel read 16-bit inputs as they are
    x = (x.to(torch.float32) if which == "numba" or dtype == torch.float64 else x).contiguous()
    gs = _nv_global_scale(x, which == "numba") if fmt == "nvfp4" else None
    data, scales = _QUANTIZE[which](x.reshape(-1, block), fmt, scale_rule, gs, shape)
    if fmt == "mxfp4" and scales.numel() and bool((scales == 255).any()):
        raise _nonfinite_error(fmt)
    return FP4Tensor(data.reshape(*shape[:-1], shape[-1] // 2),
                     scales.reshape(*shape[:-1], shape[-1] // block), gs, fmt, shape, dtype)


def dequantize(q: FP4Tensor, dtype: torch.dtype = torch.float32, *,
               backend: str = "auto") -> torch.Tensor:
    """Decode an :class:`FP4Tensor` back to a dense tensor of ``q.shape`` in ``dtype``."""
    if not isinstance(q, FP4Tensor):
        raise ValueError(f"dequantize expects an FP4Tensor, got {type(q).__name__}")
    check_fp4_format(q.fmt)
    if not dtype.is_floating_point:
        raise ValueError(f"dequantize needs a float output dtype, got {dtype}")
    out = _DEQUANTIZE[_resolve_backend(backend, q.device, q.numel)](q, dtype)
    return out if out.dtype == dtype else out.to(dtype)
