"""MXFP4 / NVFP4: the Triton kernels (under TRITON_INTERPRET=1 without a GPU) against the
torch reference, and the reference against brute force and torch's own fp8 cast."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tiered_kv.kernels import fp4

from tiered_kv.keys import BLOCK, FORMATS, bytes_per_element

E2M1 = torch.tensor(fp4.E2M1_VALUES)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _rel_rmse(x: torch.Tensor, y: torch.Tensor) -> float:
    x, y = x.double(), y.double()  # 1e-30 squared underflows fp32
    return float((x - y).pow(2).mean().sqrt() / x.pow(2).mean().sqrt())


def _awkward(shape, seed=0, dtype=torch.float32):
    """N(0,1) times a per-row magnitude spread over 8 decades, with exact ties, zero blocks,
    negative zeros and saturating values mixed in."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    x = x * torch.exp(torch.randn(shape[:-1] + (1,), generator=g) * 4)
    flat = x.view(-1)
    n = flat.numel()
    flat[: min(n, 32)] = 0.0  # an all-zero block (both formats)
    idx = torch.randint(0, n, (n // 10,), generator=g)
    flat[idx] = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.0, 7.0, -5.0])[
        torch.arange(idx.numel()) % 10]
    return x.to(dtype).to(DEVICE)


# ----------------------------------------------------------------------------- Triton == torch

SHAPES = [(37, 3, 96), (2, 5, 3, 64), (64,), (7, 32), (1, 1, 1, 160)]


FAST = ["triton"] + (["numba"] if DEVICE == "cpu" else [])


@pytest.mark.parametrize("backend", FAST)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("fmt,rule", [("mxfp4", "floor"), ("mxfp4", "ceil"), ("nvfp4", "floor")])
def test_fast_paths_bit_exact_against_reference(shape, fmt, rule, backend):
    """Triton kernels (interpreted on CPU) and the fused numba CPU loops vs the reference."""
    x = _awkward(shape, seed=len(shape))
    ref = fp4.quantize(x, fmt, scale_rule=rule, backend="torch")
    tri = fp4.quantize(x, fmt, scale_rule=rule, backend=backend)
    assert tri.data.dtype == torch.uint8 and tri.data.shape == (*shape[:-1], shape[-1] // 2)
    assert tri.scales.shape == (*shape[:-1], shape[-1] // BLOCK[fmt])
    assert torch.equal(tri.data, ref.data)
    assert torch.equal(tri.scales, ref.scales)
    if fmt == "nvfp4":
        assert torch.equal(tri.global_scale, ref.global_scale)
    out_ref = fp4.dequantize(ref, backend="torch")
    out_tri = fp4.dequantize(tri, backend=backend)
    assert torch.equal(out_tri, out_ref)
    assert out_ref.shape == x.shape and not torch.isnan(out_ref).any()


@pytest.mark.parametrize("backend", FAST)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("fmt", FORMATS)
def test_half_inputs_and_outputs(dtype, fmt, backend):
    x = (torch.randn(9, 2, 64) * 3).to(dtype).to(DEVICE)
    ref = fp4.quantize(x, fmt, backend="torch")
    tri = fp4.quantize(x, fmt, backend=backend)
    assert torch.equal(tri.data, ref.data) and torch.equal(tri.scales, ref.scales)
    assert tri.dtype == dtype and tri.shape == x.shape
    assert torch.equal(fp4.dequantize(tri, dtype, backend=backend),
                       fp4.dequantize(ref, dtype, backend="torch"))


# ----------------------------------------------------------------------------- known answers


def test_mxfp4_known_bytes_ties_to_even_and_saturation():
    # amax 6 -> E8M0 code 127 (X = 1); the ties 5, 3.5, 2.5, 1.75, 1.25, 0.75, 0.25 go to
    # the even code: 4, 4, 2, 2, 1, 1, 0 -> codes 6, 6, 4, 4, 2, 2, 0.
    row = [6.0, 5.0, 3.5, 2.5, 1.75, 1.25, 0.75, 0.25, -6.0, -0.5, 4.0, 3.0, 1.5, 0.0, -0.1, 0.3]
    x = torch.tensor(row * 2)
    q = fp4.quantize(x, "mxfp4", backend="torch")
    codes = [7, 6, 6, 4, 4, 2, 2, 0, 15, 9, 6, 5, 3, 0, 8, 1]
    expect = [codes[i] | (codes[i + 1] << 4) for i in range(0, 16, 2)] * 2
    assert q.data.tolist() == expect
    assert q.scales.tolist() == [127]
    # 7.9 with amax 7.9: floor rule X = 2**(2-2) = 1 saturates to 6; ceil rule X = 2 keeps 8.
    y = torch.full((32,), 7.9)
    assert fp4.dequantize(fp4.quantize(y, "mxfp4"))[0].item() == 6.0
    q_ceil = fp4.quantize(y, "mxfp4", scale_rule="ceil")
    assert q_ceil.scales.item() == 128 and fp4.dequantize(q_ceil)[0].item() == 8.0


def _brute_e2m1(v: torch.Tensor) -> torch.Tensor:
    """Nearest E2M1 code by exhaustive distance, ties to the even code, sign from v < 0."""
    d = (v.abs()[:, None].double() - E2M1[None, :].double()).abs()
    best = d.min(dim=1, keepdim=True).values
    cand = (d == best)
    even = cand & (torch.arange(8) % 2 == 0)[None, :]
    code = torch.where(even.any(1), even.int().argmax(1), cand.int().argmax(1))
    return code | ((v < 0).int() << 3)


def test_e2m1_encoder_matches_brute_force():
    g = torch.Generator().manual_seed(1)
    v = torch.cat([torch.rand(20000, generator=g) * 14 - 7,
                   torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 7.0, 100.0])])
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    v = torch.cat([v, torch.nextafter(ties, torch.zeros(7)), torch.nextafter(ties, ties + 1)])
    v = v[v.abs() <= 6]  # beyond 6 saturation, checked separately
    got = fp4._e2m1_encode_torch(v).int()
    assert torch.equal(got, _brute_e2m1(v))
    assert (fp4._e2m1_encode_torch(torch.tensor([7.0, 1e30, -9.0])).tolist() == [7, 7, 15])


def test_e4m3_encoder_matches_torch_float8_cast():
    """Every E4M3 code and the midpoints between them, against torch's RNE fp8 cast."""
    codes = torch.arange(0, 127, dtype=torch.uint8)
    vals = codes.view(torch.float8_e4m3fn).float()
    mids = (vals[:-1] + vals[1:]) / 2
    rnd = torch.rand(5000, generator=torch.Generator().manual_seed(2)) * 448
    tiny = torch.rand(500, generator=torch.Generator().manual_seed(3)) * 2.0 ** -6
    s = torch.cat([vals, mids, torch.nextafter(mids, vals[1:]), torch.nextafter(mids, vals[:-1]),
                   rnd, tiny])
    s = s.clamp(max=448.0)
    expect = s.to(torch.float8_e4m3fn).view(torch.uint8).int()
    assert torch.equal(fp4._e4m3_encode_torch(s).int(), expect)
    assert torch.equal(fp4._e4m3_value_torch(codes.int()), vals)


@pytest.mark.parametrize("rule", fp4.SCALE_RULES)
def test_e8m0_scale_rule(rule):
    g = torch.Generator().manual_seed(4)
    amax = torch.exp(torch.randn(3000, generator=g) * 20).float()
    amax = torch.cat([amax, torch.tensor([1.0, 1.5, 1.5000001, 6.0, 7.0, 8.0, 2.0 ** -130])])
    codes = fp4._e8m0_code_torch(amax, rule)
    for a, c in zip(amax.tolist(), codes.tolist(), strict=True):
        if rule == "floor":
            e = math.frexp(a)[1] - 1 - 2  # floor(log2 a) - 2
        else:
            e = math.ceil(math.log2(a / 6.0))
            while a > 6.0 * 2.0 ** e:
                e += 1
            while e > -127 and a <= 6.0 * 2.0 ** (e - 1):
                e -= 1
        assert c == max(e + 127, 0), (a, c, e)


# ----------------------------------------------------------------------------- accuracy


@pytest.mark.parametrize("fmt", FORMATS)
def test_exact_round_trip_of_representable_values(fmt):
    g = torch.Generator().manual_seed(5)
    block = BLOCK[fmt]
    T, H, D = 6, 3, 64
    codes = torch.randint(0, 16, (T, H, D), generator=g)
    codes[..., ::block] = 7  # every block holds +6 times its scale
    vals = E2M1[codes & 7] * torch.where(codes >= 8, -1.0, 1.0)
    nb = D // block
    if fmt == "mxfp4":
        scale = 2.0 ** torch.randint(-40, 40, (T, H, nb, 1), generator=g).float()
    else:
        # Per head: global scale a power of two, block scales any E4M3 value, one block at 448.
        e4m3 = torch.arange(8, 127, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
        s = e4m3[torch.randint(0, e4m3.numel(), (T, H, nb, 1), generator=g)]
        s[0, :, 0, 0] = 448.0
        gs = 2.0 ** torch.randint(-20, 20, (1, H, 1, 1), generator=g).float()
        scale = s * gs
    x = (vals.view(T, H, nb, block) * scale).view(T, H, D).to(DEVICE)
    for backend in ["torch"] + FAST:
        q = fp4.quantize(x, fmt, backend=backend)
        assert torch.equal(fp4.dequantize(q, backend=backend), x)


@pytest.mark.parametrize("fmt,bound", [("mxfp4", 0.12), ("nvfp4", 0.10)])
def test_relative_rmse_on_gaussian(fmt, bound):
    x = torch.randn(256, 4, 128, generator=torch.Generator().manual_seed(6))
    err = _rel_rmse(x, fp4.dequantize(fp4.quantize(x, fmt)))
    assert 0.05 < err <= bound  # ~0.115 / ~0.095 expected; 0 would mean no quantization


@pytest.mark.parametrize("fmt", FORMATS)
def test_all_zero_blocks(fmt):
    x = torch.zeros(3, 2, 64, device=DEVICE)
    x[1, 1, 5] = 3.0  # one non-zero block among zeros
    for backend in ["torch"] + FAST:
        q = fp4.quantize(x, fmt, backend=backend)
        y = fp4.dequantize(q, backend=backend)
        assert torch.equal(y, x)
        assert int(q.scales[0, 0, 0]) == 0
    q = fp4.quantize(torch.zeros(4, 3, 32), fmt)  # whole tensor zero: global scale 1, no NaN
    assert torch.equal(fp4.dequantize(q), torch.zeros(4, 3, 32))


def test_nvfp4_per_head_global_scale_keeps_tiny_and_huge_heads():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(16, 2, 64, generator=g)
    x[:, 0] *= 1e-30
    x[:, 1] *= 1e30
    q = fp4.quantize(x, "nvfp4")
    assert q.global_scale.shape == (2,)
    y = fp4.dequantize(q)
    for h in range(2):
        assert _rel_rmse(x[:, h], y[:, h]) <= 0.10
    # One scale for the whole tensor (2-D input) underflows the tiny head's block scales.
    flat = fp4.quantize(x.reshape(32, 64), "nvfp4")
    assert flat.global_scale.ndim == 0
    assert torch.count_nonzero(fp4.dequantize(flat).reshape(16, 2, 64)[:, 0]) == 0


@pytest.mark.parametrize("rule", fp4.SCALE_RULES)
def test_mxfp4_extreme_magnitudes(rule):
    g = torch.Generator().manual_seed(8)
    x = torch.randn(4, 2, 32, generator=g)
    x[0] *= 1e-35
    x[1] *= 1e35
    x[2] *= 2.0 ** -140  # subnormal fp32 inputs
    y = fp4.dequantize(fp4.quantize(x, "mxfp4", scale_rule=rule))
    for i in (0, 1, 3):
        assert _rel_rmse(x[i], y[i]) <= 0.15
    assert torch.isfinite(y).all()


# ----------------------------------------------------------------------------- properties

_floats = st.floats(min_value=-(2.0 ** 100), max_value=2.0 ** 100, allow_nan=False, allow_infinity=False,
                    width=32)


@settings(max_examples=60, deadline=None)
@given(st.lists(_floats, min_size=32, max_size=32), st.sampled_from(FORMATS))
def test_dequantized_value_is_nearest_grid_point(values, fmt):
    """Each element decodes to the nearest point of its block's grid {+-c * scale} (the
    grid's end when it saturates), with the input's sign."""
    x = torch.tensor(values, dtype=torch.float32)
    q = fp4.quantize(x, fmt, backend="torch")
    y = fp4.dequantize(q).double()
    block = BLOCK[fmt]
    if fmt == "mxfp4":
        scale = fp4._e8m0_value_torch(q.scales.int()).double()
    else:
        scale = fp4._e4m3_value_torch(q.scales.int()).double() * float(q.global_scale)
    scale = scale.repeat_interleave(block)
    grid = E2M1.double()[None, :] * scale[:, None]
    dist = (x.double().abs()[:, None] - grid).abs().min(dim=1).values
    err = (x.double() - y).abs()
    # Up to one fp32 rounding of the decoded product (the grid is built in float64 here).
    assert torch.all(err <= dist * (1 + 1e-6) + y.abs() * 2.0 ** -23 + 1e-300)
    assert torch.all((y == 0) | (torch.sign(y) == torch.sign(x.double())))


# ----------------------------------------------------------------------------- metadata & errors


def test_fp4tensor_metadata_and_sizes():
    x = torch.randn(2, 8, 4, 64)
    mx = fp4.quantize(x, "mxfp4")
    nv = fp4.quantize(x.bfloat16(), "nvfp4")
    assert (mx.fmt, mx.block, mx.shape, mx.dtype) == ("mxfp4", 32, x.shape, torch.float32)
    assert mx.global_scale is None and mx.nbytes == x.numel() // 2 + x.numel() // 32
    assert mx.bits_per_element == 4.25 and bytes_per_element("mxfp4") == 0.53125
    assert nv.dtype == torch.bfloat16 and nv.global_scale.shape == (4,)
    assert nv.global_scale.dtype == torch.float32
    assert nv.nbytes == x.numel() // 2 + x.numel() // 16 + 4 * 4
    assert bytes_per_element("nvfp4") == 0.5625
    assert fp4.quantize(torch.randn(16), "nvfp4").global_scale.ndim == 0


@pytest.mark.parametrize("make,match", [
    (lambda: fp4.quantize(torch.arange(32), "mxfp4"), "float tensor"),
    (lambda: fp4.quantize(torch.randn(4, 33), "mxfp4"), "multiple of 32"),
    (lambda: fp4.quantize(torch.randn(4, 48), "mxfp4"), "multiple of 32"),
    (lambda: fp4.quantize(torch.randn(4, 24), "nvfp4"), "multiple of 16"),
    (lambda: fp4.quantize(torch.tensor(1.0), "mxfp4"), "0-d"),
    (lambda: fp4.quantize(torch.randn(4, 32), "fp8"), "unknown FP4 format"),
    (lambda: fp4.quantize(torch.randn(4, 32), "mxfp4", scale_rule="round"), "scale_rule"),
    (lambda: fp4.quantize(torch.randn(4, 32), "mxfp4", backend="cuda"), "backend"),
    (lambda: fp4.quantize(torch.randn(4, 32), "mxfp4", backend="cpu"), "backend"),
    (lambda: fp4.dequantize(torch.randn(4, 32)), "FP4Tensor"),
])
def test_bad_input_raises_clear_error(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("backend", ["torch"] + FAST)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_nan_and_inf_rejected(fmt, backend, bad):
    x = torch.randn(3, 2, 64, device=DEVICE)
    x[2, 1, 40] = bad
    with pytest.raises(ValueError, match="NaN or Inf"):
        fp4.quantize(x, fmt, backend=backend)


def test_auto_backend_dispatch():
    cpu = torch.device("cpu")
    assert fp4._resolve_backend("auto", cpu, 1024) == "torch"
    assert fp4._resolve_backend("auto", cpu, fp4.NUMBA_MIN_ELEMENTS) == "numba"
    x = torch.randn(fp4.NUMBA_MIN_ELEMENTS // 64, 2, 32)  # the auto path equals the reference
    for fmt in FORMATS:
        a, r = fp4.quantize(x, fmt), fp4.quantize(x, fmt, backend="torch")
        assert torch.equal(a.data, r.data) and torch.equal(a.scales, r.scales)


def test_error_stats_table():
    from tiered_kv.kernels.fp4_error import error_stats

    rows = error_stats(seed=0, n=1 << 14)
    keys = {(r["format"], r["scale_rule"]) for r in rows}
    assert keys == {("mxfp4", "floor"), ("mxfp4", "ceil"), ("nvfp4", "-")}
    by = {(r["format"], r["scale_rule"]): r for r in rows}
    assert 0.10 < by[("mxfp4", "floor")]["rel_rmse_gaussian"] < 0.125
    assert 0.08 < by[("nvfp4", "-")]["rel_rmse_gaussian"] < 0.105
    assert by[("mxfp4", "floor")]["bits_per_element"] == 4.25
    assert all(r["rel_rmse_heavy_tailed"] > 0 for r in rows)


@pytest.mark.parametrize("fmt", ["mxfp4", "nvfp4"])
def test_numba_path_leaves_torch_thread_count_alone(fmt):
    """Numba's OpenMP layer set the thread's OpenMP count to its own: torch.set_num_threads(1)
    silently became 2 after the first CPU quantize (found by tiered-kv bench contention)."""
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        a = torch.randn(256, 256)
        (a @ a).sum()  # torch's OpenMP runtime running first is what lets numba's layer change it
        q = fp4.quantize(torch.randn(256, 4, 64), fmt, backend="numba")
        fp4.dequantize(q, backend="numba")
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(old)
